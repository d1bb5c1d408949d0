/*
 * tests/integration/twd_hostile.c — peers that do not speak our protocol must cost only their
 * own connection (argv[1]: a FI_EP_MSG provider, tcp or sockets; shm has no connection
 * requests). A raw libfabric client connects to a real twd carrying connect data of odd sizes
 * (1 byte, 63 bytes, the provider's maximum); Tailwind itself sends none. Afterwards a normal
 * client must still be served (connect + Stats), twd must have handled every request it got
 * (the `connections` counter), and twd must still exit 0 on SIGTERM.
 *
 * Then strangers that connect and send nothing until twd has no file descriptor left (twd
 * started with RLIMIT_NOFILE 48): libfabric's listener then fails every accept and nobody can
 * connect, which twd must say in its log (it said nothing); once the strangers leave, a client
 * is served again.
 *
 * Regression: the sockets provider reports a FI_CONNREQ as fi_eq_cm_entry + the connect data
 * and refuses to hand it to a buffer that is too small (-FI_ETOOSMALL) without consuming it;
 * twd read its EQ with room for the bare entry only, so one such request stayed at the head of
 * the EQ forever and no connection was ever accepted again.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "core/util.h"
#include "proc.h"
#include "child.h"
#include "tap.h"
#include "tmpdir.h"
#include "twd_client.h"

static const char *prov;

/* "host:port" → node, service (IPv4 or [v6]). */
static void split(const char *addr, char *node, size_t nlen, char *svc, size_t slen)
{
	const char *colon = strrchr(addr, ':');
	size_t hl = colon ? (size_t)(colon - addr) : 0;
	const char *h = addr;

	TAP_REQUIRE(colon && hl > 0 && hl < nlen, "bad address %s", addr);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	memcpy(node, h, hl);
	node[hl] = '\0';
	snprintf(svc, slen, "%s", colon + 1);
}

/*
 * Connect to `addr` with `len` bytes of connect data (len == SIZE_MAX: the provider's maximum,
 * returned in *len_out). Waits up to 3 s for the outcome, which it returns as a string for the
 * diagnostics (either outcome is fine for twd: it may accept or refuse the stranger), then
 * closes everything.
 */
static const char *raw_connect(const char *addr, size_t len, size_t *len_out)
{
	char node[256], svc[32];
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_eq *eq = NULL;
	struct fid_cq *cq = NULL;
	struct fid_ep *ep = NULL;
	struct fi_eq_attr eqa = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
	uint8_t data[4096];
	const char *outcome = "no answer within 3 s";
	int rc;

	split(addr, node, sizeof(node), svc, sizeof(svc));
	TAP_REQUIRE(hints, "fi_allocinfo");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = ~0ull;
	hints->fabric_attr->prov_name = strdup(prov);
	rc = fi_getinfo(FI_VERSION(1, 17), node, svc, 0, hints, &info);
	TAP_REQUIRE(rc == 0 && info, "fi_getinfo %s %s: %s", prov, addr, fi_strerror(-rc));
	rc = fi_fabric(info->fabric_attr, &fabric, NULL);
	if (!rc)
		rc = fi_domain(fabric, info, &domain, NULL);
	if (!rc)
		rc = fi_eq_open(fabric, &eqa, &eq, NULL);
	cqa.size = info->tx_attr->size + info->rx_attr->size;
	if (!rc)
		rc = fi_cq_open(domain, &cqa, &cq, NULL);
	if (!rc)
		rc = fi_endpoint(domain, info, &ep, NULL);
	if (!rc)
		rc = fi_ep_bind(ep, &eq->fid, 0);
	if (!rc)
		rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(ep);
	TAP_REQUIRE(rc == 0, "raw endpoint: %s", fi_strerror(-rc));
	if (len == SIZE_MAX) {
		size_t max = 0, olen = sizeof(max);

		rc = fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max, &olen);
		TAP_REQUIRE(rc == 0 && max > 0, "FI_OPT_CM_DATA_SIZE: %s", fi_strerror(-rc));
		len = max < sizeof(data) ? max : sizeof(data);
	}
	*len_out = len;
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(0xA5 ^ i);
	rc = fi_connect(ep, info->dest_addr, data, len);
	TAP_REQUIRE(rc == 0, "fi_connect with %zu bytes: %s", len, fi_strerror(-rc));
	/* tcp delivers CM events only while its CQ is polled: poll both. */
	for (int i = 0; i < 300; i++) {
		struct fi_cq_entry ce;
		union {
			struct fi_eq_cm_entry e;
			uint8_t b[sizeof(struct fi_eq_cm_entry) + 4096];
		} ev;
		uint32_t event;
		ssize_t n;

		(void)fi_cq_read(cq, &ce, 1);
		n = fi_eq_sread(eq, &event, &ev, sizeof(ev), 10, 0);
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };

			(void)fi_eq_readerr(eq, &err, 0);
			outcome = "refused or failed";
			break;
		}
		if (n >= 0 && event == FI_CONNECTED) {
			outcome = "accepted";
			break;
		}
		if (n >= 0 && event == FI_SHUTDOWN) {
			outcome = "shut down";
			break;
		}
	}
	fi_close(&ep->fid);
	fi_close(&cq->fid);
	fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return outcome;
}

/* A twd whose file descriptors run out: see the header. */
static void fd_exhaustion(const char *twd_path)
{
	char dir[256], addr[256], node[128], svc[32], line[512];
	char *argv[] = { (char *)"/bin/sh", (char *)"-c",
			 (char *)"ulimit -n 48 && exec \"$0\" \"$@\" 2>&1", (char *)twd_path,
			 (char *)"-p", (char *)prov, (char *)"-d", dir, (char *)"--buffers", (char *)"2",
			 (char *)"--buffer-size", (char *)"64K", NULL };
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int socks[96], nsock = 0, rc;
	bool said = false, served = false;
	struct proc *p;

	tmpdir_make(dir, sizeof(dir), NULL, "tw-hostile");
	p = child_ready(argv, NULL, 20000, addr, sizeof(addr), NULL);
	TAP_REQUIRE(p, "twd ready");
	split(addr, node, sizeof(node), svc, sizeof(svc));
	TAP_REQUIRE(getaddrinfo(node, svc, &hints, &ai) == 0 && ai, "getaddrinfo %s", addr);
	/* More idle connections than the limit: the kernel completes them (listen backlog)
	 * whether or not the provider accepts. */
	for (int i = 0; i < 96; i++) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			break;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			close(fd);
			break;
		}
		socks[nsock++] = fd;
	}
	freeaddrinfo(ai);
	tap_diag("%d idle connections to a twd limited to 48 descriptors", nsock);
	for (uint64_t end = tw_now_ns() + 30000000000ull; !said && tw_now_ns() < end;) {
		rc = proc_wait_line(p, NULL, line, sizeof(line), 1000);
		if (rc == -EPIPE)
			break;
		said = rc >= 0 && strstr(line, "out of file descriptors") != NULL;
	}
	ok(said, "twd says it is out of file descriptors (%s)", said ? line : "no such line");
	while (nsock > 0)
		close(socks[--nsock]);
	/* The strangers are gone: the listener accepts again (each try is bounded by the
	 * connect timeout). */
	for (uint64_t end = tw_now_ns() + 30000000000ull; !served && tw_now_ns() < end;) {
		struct twc_stats st;
		struct twc c;

		if (twc_connect(&c, prov, addr) != 0)
			continue;
		served = twc_stats(&c, &st) == 0;
		twc_close(&c);
	}
	ok(served, "after the strangers left, a client is served again");
	is_int(child_stop(p, SIGTERM, 20000), 0, "that twd exits 0 on SIGTERM");
	tmpdir_remove(dir);
}

int main(int argc, char **argv)
{
	char twd_path[1024], dir[256], addr[256];
	const size_t sizes[] = { 1, 63, SIZE_MAX };
	struct twc_stats st;
	struct twc c;
	struct proc *p;
	int rc;

	prov = argc > 1 ? argv[1] : "tcp";
	child_tool("tools/twd", twd_path, sizeof(twd_path));
	tmpdir_make(dir, sizeof(dir), NULL, "tw-hostile");
	tap_plan(10);

	char *targv[] = { twd_path, (char *)"-p", (char *)prov, (char *)"-d", dir,
			  (char *)"--buffers", (char *)"2", (char *)"--buffer-size", (char *)"64K",
			  NULL };
	p = child_ready(targv, NULL, 20000, addr, sizeof(addr), NULL);
	TAP_REQUIRE(p, "twd ready");
	tap_diag("provider %s, twd at %s", prov, addr);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = 0;
		const char *outcome = raw_connect(addr, sizes[i], &len);

		tap_diag("raw connect with %zu bytes of connect data: %s", len, outcome);
		ok(proc_alive(p), "twd alive after a connect carrying %zu bytes of connect data", len);
	}

	/* A normal client is still served: connect, handshake-free Stats RPC. */
	rc = twc_connect(&c, prov, addr);
	ok(rc == 0, "a normal client still connects after the strangers (%s)", tw_strerror(rc));
	rc = rc == 0 ? twc_stats(&c, &st) : rc;
	ok(rc == 0, "and its Stats RPC is answered (%s)", tw_strerror(rc));
	/* Every request reached the daemon's accept path: strangers that got FI_CONNECTED count
	 * as connections too, and ours is among them. */
	ok(rc == 0 && st.connections >= 1, "twd counted %" PRIu64 " connection(s)",
	   rc == 0 ? st.connections : 0);
	twc_close(&c);

	/* Responsive to a signal, and clean. */
	is_int(child_stop(p, SIGTERM, 20000), 0, "twd exits 0 on SIGTERM");
	fd_exhaustion(twd_path);
	tmpdir_remove(dir);
	return tap_exit();
}
