/*
 * tests/integration/fabric_strict.c — strict mode (verbs semantics) between two processes over a
 * real provider: `fabric_strict <tcp|sockets>`. The driver runs each case twice, against a
 * fab_peer spawned plain and spawned with TW_FAB_STRICT=verbs, its own fab plain and with
 * cfg.strict = TW_FAB_STRICT_VERBS, and checks that every mistake that only verbs would catch
 * goes unnoticed in plain mode and fails in strict mode:
 *   - a local buffer whose descriptor belongs to another domain's registration (fi_writemsg);
 *   - a read into a registration the provider may not write into (fi_readmsg);
 *   - a registration of memory without pages behind it (FI_MR_ALLOCATED, fi_mr_reg);
 *   - an offset where the target expects a virtual address (FI_MR_VIRT_ADDR);
 *   - a key the peer requested where the provider picks the keys (FI_MR_PROV_KEY; the peer
 *     commits that mistake with `--fault reqkey`, a table of registration rules of its own:
 *     tests/lib/fab_rules.h).
 * Then bursts of writes and of messages: in strict mode they meet -FI_EAGAIN and full CQs and
 * every one of them still lands (peer checksum, every echo back), without a busy spin (the
 * retries are bounded by the completions and the milliseconds waited; CPU time is printed).
 * Last, TW_FAB_STRICT=verbs in the environment aborts a process at its first violation.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/util.h"
#include "fab_events.h"
#include "fab_op.h"
#include "fab_pattern.h"
#include "fab_rules.h"
#include "fabric/fabric.h"
#include "proc.h"
#include "child.h"
#include "tap.h"

#define BUF_LEN (8u * 1024 * 1024 + 65536) /* fab_peer's buffer */
#define SRC_LEN (8u * 1024 * 1024)

static const char *prov;
static char self_path[4096];
static struct fab_rec R; /* R.only: the current channel */

/* A fab, strict or not, with the registration mistake `fault` (tests/lib/fab_rules.h) or none
 * (NULL). */
static struct tw_fab *open_fab_with(bool strict, const char *fault)
{
	static struct tw_fab_mr_rules rules;
	struct tw_fab_config cfg;
	struct tw_fab_events ev = fab_rec_events(&R);
	struct tw_fab *f = NULL;
	int rc;

	tw__fab_config_init(&cfg);
	cfg.provider = prov;
	cfg.strict = strict ? TW_FAB_STRICT_VERBS : TW_FAB_STRICT_OFF;
	if (fault) {
		if (!fab_rules_fault(&rules, fault))
			TAP_FATAL("no registration fault '%s'", fault);
		cfg.mr_rules = &rules;
	}
	rc = tw__fab_open(&cfg, &ev, &f);
	if (rc < 0)
		tap_diag("open %s%s: %s (%s)", prov, strict ? " strict" : "", tw_strerror(rc),
			 tw__fab_errmsg(NULL));
	return f;
}

static struct tw_fab *open_fab(bool strict)
{
	return open_fab_with(strict, NULL);
}

/* fab_peer, strict or not, optionally with the registration mistake "reqkey" (--fault). */
static struct proc *start_peer(bool strict, bool reqkey, char *addr, size_t len)
{
	static char a_listen[] = "--listen", a_prov[] = "--provider", a_fault[] = "--fault";
	static char a_reqkey[] = "reqkey";
	static char e_strict[] = "TW_FAB_STRICT=verbs";
	char path[4096], pv[64];
	char *argv[] = {path, a_listen, a_prov, pv, reqkey ? a_fault : NULL, a_reqkey, NULL};
	char *env[2] = {NULL, NULL};
	int n = 0;

	snprintf(pv, sizeof(pv), "%s", prov);
	if (strict)
		env[n++] = e_strict;
	if (proc_find_tool("tests/integration/fab_peer", path, sizeof(path)) < 0)
		return NULL;
	return child_ready(argv, env, 10000, addr, len, NULL);
}

/* Connect and read the RKEY the peer sends on accept. */
static struct tw_chan *connect_peer(const char *addr, struct tw_rkey *rk)
{
	struct tw_chan *ch = NULL;
	int before = R.recvs, rc;

	R.only = NULL;
	rc = tw__fab_connect(R.fab, addr, &ch);
	if (rc < 0) {
		tap_diag("connect %s: %s (%s)", addr, tw_strerror(rc), tw__fab_errmsg(R.fab));
		return NULL;
	}
	R.only = ch;
	if (!fab_peer_rkey(&R, before, rk, 10000)) {
		tap_diag("no RKEY from the peer");
		tw__chan_close(ch);
		return R.only = NULL;
	}
	return ch;
}

/* One write; returns the call's error, or the completion's status (1: never completed). */
static int write_once(struct tw_chan *ch, const void *src, size_t len, struct tw_mr *mr,
		      const struct tw_rkey *rk, uint64_t off)
{
	struct opres r;
	int rc;

	op_init(&r);
	rc = tw__chan_write(ch, &r.op, src, len, mr, rk, off);
	if (rc < 0)
		return rc;
	fab_progress_until(R.fab, &r.calls, 1, 20000);
	return r.calls ? r.status : 1;
}

static bool errmsg_has_in(struct tw_fab *f, const char *a, const char *b)
{
	const char *m = tw__fab_errmsg(f);
	bool yes = strstr(m, a) && strstr(m, b);

	if (!yes)
		tap_diag("message: %s", m);
	return yes;
}

static bool errmsg_has(const char *a, const char *b)
{
	return errmsg_has_in(R.fab, a, b);
}

/* Percentage of the pages of [p, p + len) in memory now (mincore(2)); -1 if it cannot tell. */
static int resident_pct(void *p, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg, in = 0;
	unsigned char *vec = calloc(n, 1);

	if (!vec || mincore(p, len, vec) < 0) {
		free(vec);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	return (int)(in * 100 / n);
}

/* The local checks: a descriptor of another domain, a read destination without local write, a
 * registration of unbacked memory. Fail in strict mode only. */
static void local_checks(bool strict, struct tw_chan *ch, const struct tw_rkey *rk,
			 unsigned char *src, struct tw_mr *src_mr)
{
	const char *mode = strict ? "strict" : "plain";
	struct tw_fab *other = open_fab(strict);
	struct tw_mr *omr = NULL, *ro = NULL, *mr = NULL;
	void *unbacked;
	int rc;

	TAP_REQUIRE(other && tw__mr_reg(other, src, 65536, TW_MR_WRITE_SRC, &omr) == 0,
		    "a second fab and a registration there");
	fab_pattern(src, 65536, 11);
	rc = write_once(ch, src, 65536, omr, rk, 0);
	if (strict)
		ok(rc == -EFAULT && errmsg_has("fi_writemsg", "not a live registration of this domain"),
		   "%s: a descriptor of another domain's registration fails fi_writemsg (%s)", mode,
		   tw_strerror(rc));
	else
		ok(rc == 0 && fab_peer_sum(&R, ch, 0, 65536) == fab_fnv1a(src, 65536),
		   "%s: a descriptor of another domain goes unnoticed (%s)", mode, tw_strerror(rc));
	tw__mr_close(omr);
	tw__fab_close(other);

	TAP_REQUIRE(tw__mr_reg(R.fab, src + SRC_LEN - 65536, 65536, TW_MR_WRITE_SRC, &ro) == 0, "reg");
	{
		struct opres r;

		op_init(&r);
		rc = tw__chan_read(ch, &r.op, src + SRC_LEN - 65536, 4096, ro, rk, 0);
		if (rc == 0) {
			fab_progress_until(R.fab, &r.calls, 1, 20000);
			rc = r.calls ? r.status : 1;
		}
	}
	if (strict)
		ok(rc == -EFAULT && errmsg_has("fi_readmsg", "does not let the provider write"),
		   "%s: a read into a registration without local write fails fi_readmsg (%s)", mode,
		   tw_strerror(rc));
	else
		ok(rc == 0, "%s: a read into a registration without local write goes unnoticed (%s)",
		   mode, tw_strerror(rc));
	tw__mr_close(ro);

	/* FI_MR_ALLOCATED: strict mode asks for it, so the layer backs the pages as it registers
	 * them; plain tcp/sockets do not, and the pages stay untouched (no cost where no provider
	 * needs it). With the fault "noback" the layer forgets, and the check catches it. */
	unbacked = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TAP_REQUIRE(unbacked != MAP_FAILED, "mmap");
	rc = tw__mr_reg(R.fab, unbacked, 1 << 20, TW_MR_REMOTE_WRITE, &mr);
	ok(rc == 0 && resident_pct(unbacked, 1 << 20) == (strict ? 100 : 0),
	   "%s: untouched memory registers, %s (%s, %d %% of its pages resident)", mode,
	   strict ? "backed by the layer first" : "and stays untouched", tw_strerror(rc),
	   resident_pct(unbacked, 1 << 20));
	tw__mr_close(mr);
	munmap(unbacked, 1 << 20);
	if (strict) {
		struct tw_fab *nb;

		nb = open_fab_with(true, "noback");
		TAP_REQUIRE(nb, "a strict fab whose registrations skip the backing (noback)");
		unbacked = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
		TAP_REQUIRE(unbacked != MAP_FAILED, "mmap");
		mr = NULL;
		rc = tw__mr_reg(nb, unbacked, 1 << 20, TW_MR_REMOTE_WRITE, &mr);
		ok(rc == -EFAULT && errmsg_has_in(nb, "fi_mr_reg", "FI_MR_ALLOCATED"),
		   "strict: registering memory the layer did not back fails (%s)", tw_strerror(rc));
		tw__mr_close(mr);
		munmap(unbacked, 1 << 20);
		tw__fab_close(nb);
	}
	(void)src_mr;
}

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/*
 * Everything posted back to back: 512 writes of 16 KiB, then 256 messages of 1 KiB that the
 * peer echoes. Strict mode's queues (TW_FAB_STRICT_SQ) are far smaller, so posts return
 * -FI_EAGAIN and the layer progresses and retries. A retry follows either completions handled
 * or a blocking wait of up to 1 ms, so a busy spin would show as retries far above those.
 */
static void bursts(bool strict, struct tw_chan *ch, const struct tw_rkey *rk, unsigned char *src,
		   struct tw_mr *src_mr)
{
	enum { NW = 512, WLEN = 16384, NM = 256, MLEN = 1024 };
	static struct opres ops[NW];
	const char *mode = strict ? "strict" : "plain";
	struct tw_fab_stats s0, s1;
	unsigned posted = 0, good = 0;
	uint64_t t0, wall_ms;
	double c0, cpu;
	int before, sent = 0, echoed = 0;
	unsigned char msg[MLEN];

	fab_pattern(src, SRC_LEN, strict ? 21 : 22);
	tw__fab_get_stats(R.fab, &s0);
	t0 = tw_now_ns();
	c0 = cpu_ms();
	for (unsigned i = 0; i < NW; i++) {
		op_init(&ops[i]);
		if (tw__chan_write(ch, &ops[i].op, src + (size_t)i * WLEN, WLEN, src_mr, rk,
				   (uint64_t)i * WLEN) == 0)
			posted++;
	}
	for (unsigned i = 0; i < NW; i++)
		if (fab_progress_until(R.fab, &ops[i].calls, 1, 20000) && ops[i].calls == 1 &&
		    !ops[i].status)
			good++;
	wall_ms = (tw_now_ns() - t0) / 1000000u;
	cpu = cpu_ms() - c0;
	tw__fab_get_stats(R.fab, &s1);
	is_int(good, NW, "%s: %u of %u writes posted back to back completed once, successfully",
	       mode, good, posted);
	ok(fab_peer_sum(&R, ch, 0, SRC_LEN) == fab_fnv1a(src, SRC_LEN),
	   "%s: the peer holds every byte of the burst", mode);
	tap_diag("%s writes: %" PRIu64 " ms wall, %.0f ms CPU, %" PRIu64 " -FI_EAGAIN (%" PRIu64
		 " with the CQ full), %" PRIu64 " completions read", mode, wall_ms, cpu,
		 s1.eagain_retries - s0.eagain_retries, s1.cq_full - s0.cq_full,
		 s1.cq_entries - s0.cq_entries);
	if (strict)
		ok(s1.eagain_retries > s0.eagain_retries && s1.cq_full > s0.cq_full,
		   "strict: fi_writemsg met -FI_EAGAIN and full CQs");
	ok(s1.eagain_retries - s0.eagain_retries <= 2 * (s1.cq_entries - s0.cq_entries) + 2 * wall_ms + 64,
	   "%s: no busy spin: %" PRIu64 " retries for %" PRIu64 " completions in %" PRIu64 " ms", mode,
	   s1.eagain_retries - s0.eagain_retries, s1.cq_entries - s0.cq_entries, wall_ms);

	memcpy(msg, "ECHO", 4);
	tw__fab_get_stats(R.fab, &s0);
	t0 = tw_now_ns();
	c0 = cpu_ms();
	before = R.recvs;
	for (int i = 0; i < NM; i++) {
		fab_pattern(msg + 4, MLEN - 4, (uint64_t)i);
		if (tw__chan_send(ch, msg, MLEN) == 0)
			sent++;
	}
	fab_progress_until(R.fab, &R.recvs, before + sent, 20000);
	echoed = R.recvs - before;
	wall_ms = (tw_now_ns() - t0) / 1000000u;
	cpu = cpu_ms() - c0;
	tw__fab_get_stats(R.fab, &s1);
	ok(sent == NM && echoed == NM, "%s: %d messages sent back to back, %d echoed", mode, sent,
	   echoed);
	tap_diag("%s sends: %" PRIu64 " ms wall, %.0f ms CPU, %" PRIu64 " -FI_EAGAIN (%" PRIu64
		 " with the CQ full)", mode, wall_ms, cpu, s1.eagain_retries - s0.eagain_retries,
		 s1.cq_full - s0.cq_full);
	if (strict)
		ok(s1.eagain_retries > s0.eagain_retries, "strict: fi_send met -FI_EAGAIN");
}

/* A write that the target's provider refuses in strict mode and places in plain mode; then the
 * channel is closed and the peer stopped (it must exit cleanly). */
static void target_case(bool strict, struct tw_chan *ch, struct proc *peer, const struct tw_rkey *rk,
			uint64_t off, unsigned char *src, struct tw_mr *src_mr, const char *what)
{
	const char *mode = strict ? "strict" : "plain";
	int rc;

	fab_pattern(src, 4096, off + 3);
	rc = write_once(ch, src, 4096, src_mr, rk, off);
	if (strict)
		ok(rc < 0 && rc != -EFAULT, "strict: %s fails at the target (%s)", what, tw_strerror(rc));
	else
		ok(rc == 0 && fab_peer_sum(&R, ch, off, 4096) == fab_fnv1a(src, 4096), "plain: %s lands",
		   what);
	tw__chan_close(ch);
	is_int(child_stop(peer, SIGTERM, 10000), 0, "%s: the peer exited cleanly", mode);
}

static void run_mode(bool strict)
{
	const char *mode = strict ? "strict" : "plain";
	char addr[TW_ADDR_MAX];
	struct proc *peer;
	struct tw_chan *ch;
	struct tw_rkey rk, forged;
	unsigned char *src = tw__fab_alloc(SRC_LEN);
	struct tw_mr *src_mr = NULL;

	R.fab = open_fab(strict);
	TAP_REQUIRE(R.fab && src, "%s: fab open", mode);
	TAP_REQUIRE(tw__mr_reg(R.fab, src, SRC_LEN, TW_MR_WRITE_SRC | TW_MR_READ_DST, &src_mr) == 0,
		    "%s: register the source", mode);
	peer = start_peer(strict, false, addr, sizeof(addr));
	TAP_REQUIRE(peer, "%s: fab_peer started", mode);
	ch = connect_peer(addr, &rk);
	TAP_REQUIRE(ch, "%s: connected", mode);
	tap_diag("%s: the peer's rkey: addr 0x%" PRIx64 " key 0x%" PRIx64, mode, rk.addr, rk.key);
	ok(strict ? rk.addr != 0 : rk.addr == 0, "%s: remote addresses are %s", mode,
	   strict ? "virtual addresses (FI_MR_VIRT_ADDR)" : "offsets");
	fab_pattern(src, 65536, 1);
	ok(write_once(ch, src, 65536, src_mr, &rk, 4096) == 0 &&
	   fab_peer_sum(&R, ch, 4096, 65536) == fab_fnv1a(src, 65536), "%s: a correct write lands", mode);

	local_checks(strict, ch, &rk, src, src_mr);
	bursts(strict, ch, &rk, src, src_mr);

	/* An offset where a virtual address is expected: the target's provider refuses it. */
	forged = rk;
	forged.addr = 0;
	target_case(strict, ch, peer, &forged, 8192, src, src_mr,
		    "a write to an offset instead of a virtual address");

	/* The peer hands out the key it requested instead of the provider's. */
	peer = start_peer(strict, true, addr, sizeof(addr));
	TAP_REQUIRE(peer, "%s: fab_peer (--fault reqkey) started", mode);
	ch = connect_peer(addr, &rk);
	TAP_REQUIRE(ch, "%s: connected", mode);
	target_case(strict, ch, peer, &rk, 0, src, src_mr,
		    "a write with the key the peer requested instead of the provider's");

	{
		struct tw_fab_stats st;

		tw__fab_get_stats(R.fab, &st);
		is_int(st.strict_violations, strict ? 2 : 0, "%s: the fab counted %" PRIu64
		       " violations in %" PRIu64 " checks", mode, st.strict_violations,
		       st.strict_checks);
	}
	tw__mr_close(src_mr);
	tw__fab_close(R.fab);
	R.fab = NULL;
	tw__fab_free(src, SRC_LEN);
}

/* Child of the last check: TW_FAB_STRICT=verbs is in its environment and its registrations
 * skip the backing (noback), so its registration of untouched memory is a violation. */
static int abort_child(void)
{
	struct tw_fab *f = open_fab_with(false, "noback");
	void *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct tw_mr *mr = NULL;

	if (!f || p == MAP_FAILED)
		return 2;
	tw__mr_reg(f, p, 65536, TW_MR_REMOTE_WRITE, &mr);
	return 3; /* not reached in strict mode */
}

int main(int argc, char **argv)
{
	prov = argc > 1 ? argv[1] : "tcp";
	if (argc > 2 && !strcmp(argv[2], "abort-child"))
		return abort_child();
	unsetenv("TW_FAB_STRICT"); /* this test chooses the mode of every fab itself */
	if (!realpath("/proc/self/exe", self_path))
		TAP_FATAL("realpath: %s", strerror(errno));
	run_mode(false);
	run_mode(true);

	{
		static char e_strict[] = "TW_FAB_STRICT=verbs";
		static char a_abort[] = "abort-child";
		char pv[64];
		char *av[] = {self_path, pv, a_abort, NULL};
		char *env[] = {e_strict, NULL};
		struct proc *p;
		int st;

		snprintf(pv, sizeof(pv), "%s", prov);
		p = proc_spawn(av, env);
		TAP_REQUIRE(p, "spawn the abort child");
		st = proc_wait(p, 20000);
		ok(proc_signaled(p) && st == 128 + SIGABRT,
		   "TW_FAB_STRICT=verbs: a process aborts at its first violation (status %d)", st);
		proc_free(p);
	}
	tap_done_testing();
	return tap_exit();
}
