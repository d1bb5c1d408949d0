/*
 * tests/bench/bench_recover.c — how fast tw_recover() rebuilds a log from 3 local twd backups.
 *
 *   TW_BUILD_ROOT=$PWD tests/bench/bench_recover [-p PROVIDER] [-n OBJECTS[,OBJECTS...]]
 *       [-s OBJECT_SIZE] [-k ENTRIES_PER_WRITE] [-r RUNS] [-W WINDOW] [-P PER_BACKUP]
 *       [-C CHUNK_BYTES] [-R READS] [-B] [-j]
 *
 * -W, -P, -C, -R set tw_recover's window, segments per backup, chunk size and reads per segment
 * (struct tw_recover_config); -B busy-polls; -j prints one JSON object per run.
 *
 * Default: 1M and 10M objects of 100 bytes over tcp, 16 objects per write (as the primary batches
 * under load), 8 MiB segments. For each size the program builds the log's segments with the log
 * writer (tw_log_writer, the primary's own format code) and stores each as a flushed segment file
 * (backup/segfile.h) in every backup's directory, starts 3 twd's on those directories (each
 * rebuilds and verifies its index), then runs tw_recover() RUNS times (each fences with a new
 * epoch; every segment is a flushed copy the backup loads into a buffer for the read grant:
 * the slowest path) with a callback that checks the objects are 0, 1, 2 ... Prints the time of
 * each phase. Writing 10M objects through a live primary over tcp would take minutes here;
 * the bytes are the same.
 *
 * Needs about 3 x 1.2 GB of /tmp for 10M objects (removed afterwards; TW_KEEP=1 keeps them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tailwind/log_format.h>
#include <tailwind/recovery.h>

#include "fabric/fabric.h"
#include "core/util.h"
#include "proc.h"
#include "backup/segfile.h"
#include "rmtree.h"

#define NB 3
#define SEG_SIZE (8u << 20)
#define LOG_ID 0xbe4c

static const char *prov = "tcp";
static unsigned obj_size = 100, per_write = 16, runs = 2;
static bool json;
static struct tw_recover_config tune;

static void fill(uint8_t *p, uint64_t seq)
{
	memcpy(p, &seq, 8);
	for (unsigned i = 8; i < obj_size; i++)
		p[i] = (uint8_t)(seq + i);
}

/* The current layout (backup/segfile.h): header block, data, zeros to a whole block. Not
 * synced: the files only have to be there when the twd's start. */
static int write_file(const char *dir, const struct segfile_hdr *h, const uint8_t *data)
{
	static const uint8_t zeros[SEGFILE_BLOCK];
	char name[SEGFILE_NAME_MAX], path[1024];
	uint8_t hdr[SEGFILE_BLOCK] = { 0 };
	size_t pad = (size_t)(tw__segfile_file_size(&(struct segfile_hdr){ .version = SEGFILE_VERSION,
			.data_off = SEGFILE_DATA_OFF, .valid_len = h->valid_len }) -
			SEGFILE_DATA_OFF - h->valid_len);
	int fd;
	size_t off = 0;

	tw__segfile_name(h->log_id, h->segment_id, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	tw__segfile_hdr_encode(h, hdr);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) {
		close(fd);
		return -EIO;
	}
	while (off < h->valid_len) {
		ssize_t w = write(fd, data + off, (size_t)h->valid_len - off);

		if (w <= 0) {
			close(fd);
			return -EIO;
		}
		off += (size_t)w;
	}
	if (pad && write(fd, zeros, pad) != (ssize_t)pad) {
		close(fd);
		return -EIO;
	}
	return close(fd) ? -errno : 0;
}

/* Build the log's segments and write each to every backup directory. Returns segments. */
static uint64_t build(char dirs[NB][256], uint64_t objects, uint64_t *bytes)
{
	uint8_t *seg = tw__fab_alloc(SEG_SIZE);
	uint8_t *obj = malloc(obj_size);
	struct tw_log_writer w;
	uint64_t seq = 0, sid = 0;

	*bytes = 0;
	if (!seg || !obj) {
		fprintf(stderr, "bench_recover: out of memory\n");
		exit(1);
	}
	while (seq < objects) {
		struct segfile_hdr h;
		size_t off, len;

		memset(seg, 0, SEG_SIZE);
		tw_log_writer_init(&w, seg, SEG_SIZE);
		while (seq < objects) {
			unsigned k = 0;

			while (k < per_write && seq < objects && tw_log_writer_fits(&w, obj_size)) {
				fill(obj, seq);
				tw_log_writer_append(&w, obj, obj_size, NULL);
				seq++;
				k++;
			}
			if (k == 0)
				break;
			tw_log_writer_seal(&w, &off, &len);
		}
		memset(&h, 0, sizeof(h));
		h.log_id = LOG_ID;
		h.segment_id = sid;
		h.state = SEGFILE_CLOSED;
		h.checksum = w.last_checksum;
		h.valid_len = w.pos;
		h.entries = w.entries;
		h.buffer_size = SEG_SIZE;
		for (int b = 0; b < NB; b++) {
			int rc = write_file(dirs[b], &h, seg);

			if (rc) {
				fprintf(stderr, "bench_recover: writing a segment file in %s: %s\n",
					dirs[b], strerror(-rc));
				exit(1);
			}
		}
		*bytes += w.pos;
		sid++;
	}
	tw__fab_free(seg, SEG_SIZE);
	free(obj);
	return sid;
}

struct counter {
	uint64_t next, bad;
};

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* CPU time (user + system) of a process, from /proc/PID/stat, in milliseconds. */
static double proc_cpu_ms(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return 0;
	}
	fclose(f);
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return 0;
	return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static int count_cb(void *arg, const struct tw_recovered_entry *e)
{
	struct counter *c = arg;
	uint64_t seq;

	memcpy(&seq, e->data, 8);
	if (e->len != obj_size || seq != c->next)
		c->bad++;
	c->next++;
	return 0;
}

static void run_size(const char *twd, uint64_t objects)
{
	char root[128], dirs[NB][256], addr[NB][256], bufs[16];
	const char *addrs[NB];
	struct proc *p[NB];
	uint64_t bytes, segs, t0, t_build, t_start;

	snprintf(root, sizeof(root), "/tmp/tw-bench-rec-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		exit(1);
	}
	for (int b = 0; b < NB; b++) {
		snprintf(dirs[b], sizeof(dirs[b]), "%s/b%d", root, b);
		if (mkdir(dirs[b], 0755)) {
			perror("mkdir");
			exit(1);
		}
	}
	t0 = tw_now_ns();
	segs = build(dirs, objects, &bytes);
	t_build = tw_now_ns() - t0;
	snprintf(bufs, sizeof(bufs), "%u", 16u);
	t0 = tw_now_ns();
	for (int b = 0; b < NB; b++) {
		char *argv[] = { (char *)twd, (char *)"-p", (char *)prov, (char *)"-d", dirs[b],
				 (char *)"--buffers", bufs, (char *)"--buffer-size", (char *)"8M",
				 NULL };
		char line[512];

		p[b] = proc_spawn(argv, NULL);
		if (!p[b] || proc_wait_line(p[b], "ready ", line, sizeof(line), 120000) < 0) {
			fprintf(stderr, "bench_recover: twd did not start\n");
			exit(1);
		}
		snprintf(addr[b], sizeof(addr[b]), "%.*s", (int)sizeof(addr[b]) - 1, line + 6);
		addrs[b] = addr[b];
	}
	t_start = tw_now_ns() - t0;
	if (!json)
		fprintf(stderr, "# %" PRIu64 " objects: %" PRIu64 " segments, %.1f MB of log per "
			"backup; files written in %.2f s, 3 twd's started (index verified) in %.2f s\n",
			objects, segs, (double)bytes / 1e6, (double)t_build / 1e9,
			(double)t_start / 1e9);
	for (unsigned r = 0; r < runs; r++) {
		struct tw_recover_config cfg = tune;
		struct tw_recover_result res;
		struct counter c = { 0, 0 };
		char err[512];
		double cpu0 = cpu_ms(), cpu, bk0 = 0, bk = 0;
		int rc;

		for (int b = 0; b < NB; b++)
			bk0 += proc_cpu_ms((int)proc_pid(p[b]));

		cfg.provider = prov;
		cfg.log_id = LOG_ID;
		cfg.backups = addrs;
		cfg.n_backups = NB;
		rc = tw_recover(&cfg, count_cb, &c, &res, err, sizeof(err));
		cpu = cpu_ms() - cpu0;
		for (int b = 0; b < NB; b++)
			bk += proc_cpu_ms((int)proc_pid(p[b]));
		bk -= bk0;
		if (rc || c.bad || c.next != objects) {
			fprintf(stderr, "bench_recover: recovery failed: %s (%s); %" PRIu64
				" objects, %" PRIu64 " bad\n", tw_strerror(rc), err, c.next, c.bad);
			exit(1);
		}
#define MS(ph) ((double)res.phase_ns[TW_RECOVER_PHASE_##ph] / 1e6)
		if (json)
			printf("{\"provider\":\"%s\",\"objects\":%" PRIu64 ",\"object_size\":%u,"
			       "\"run\":%u,\"segments\":%" PRIu64 ",\"log_bytes\":%" PRIu64 ",\"ms\":{"
			       "\"connect\":%.2f,\"fence\":%.2f,\"list\":%.2f,\"fetch\":%.2f,"
			       "\"verify\":%.2f,\"deliver\":%.2f,\"record\":%.2f,\"total\":%.2f,"
			       "\"cpu\":%.2f,\"backups_cpu\":%.2f}}\n", prov, objects, obj_size, r,
			       res.segments, res.log_bytes, MS(CONNECT), MS(FENCE), MS(LIST),
			       MS(FETCH), MS(VERIFY), MS(DELIVER), MS(RECORD), MS(TOTAL), cpu, bk);
		else
			printf("%-8s %10" PRIu64 " %4u %5" PRIu64 " %9.1f %8.2f %7.2f %7.2f %8.1f %8.1f "
			       "%8.1f %7.2f %8.1f %8.1f %7.2f %8.1f %8.1f\n", prov, objects, r,
			       res.segments,
			       (double)res.log_bytes / 1e6, MS(CONNECT), MS(FENCE), MS(LIST),
			       MS(FETCH), MS(VERIFY), MS(DELIVER), MS(RECORD), MS(TOTAL),
			       MS(TOTAL) - MS(CONNECT),
			       (double)res.log_bytes / 1e9 / (MS(FETCH) / 1e3), cpu, bk);
		fflush(stdout);
	}
	for (int b = 0; b < NB; b++) {
		proc_kill(p[b], SIGTERM);
		proc_wait(p[b], 60000);
		proc_free(p[b]);
	}
	if (!getenv("TW_KEEP"))
		rm_tree(root);
}

int main(int argc, char **argv)
{
	const char *sizes = "1000000,10000000";
	char twd[1024], *dup, *save = NULL, *tok;
	int opt;

	tw_recover_config_init(&tune);
	while ((opt = getopt(argc, argv, "p:n:s:k:r:W:P:C:R:Bjh")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'n': sizes = optarg; break;
		case 's': obj_size = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'k': per_write = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'r': runs = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'W': tune.window = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P': tune.segs_per_backup = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'C': tune.chunk_size = strtoull(optarg, NULL, 0); break;
		case 'R': tune.reads_per_seg = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'j': json = true; break;
		case 'B': tune.busy_poll = true; break;
		default:
			fprintf(opt == 'h' ? stdout : stderr,
				"usage: bench_recover [-p PROVIDER] [-n N[,N...]] [-s OBJECT_SIZE] "
				"[-k ENTRIES_PER_WRITE] [-r RUNS] [-W WINDOW] [-P PER_BACKUP] "
				"[-C CHUNK_BYTES] [-R READS] [-B] [-j]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (obj_size < 8 || obj_size > 65536 || per_write == 0 || runs == 0) {
		fprintf(stderr, "bench_recover: object size 8..65536, per-write >= 1, runs >= 1\n");
		return 2;
	}
	if (proc_find_tool("tools/twd", twd, sizeof(twd)) != 0) {
		fprintf(stderr, "bench_recover: tools/twd not found: run from the build directory "
			"or set TW_BUILD_ROOT\n");
		return 1;
	}
	if (!json)
		printf("%-8s %10s %4s %5s %9s %8s %7s %7s %8s %8s %8s %7s %8s %8s %7s %8s %8s\n",
		       "PROV", "OBJECTS", "RUN", "SEGS", "LOG_MB", "CONN_MS", "FENCE", "LIST",
		       "FETCH", "VERIFY", "DELIVER", "RECORD", "TOTAL", "NO_CONN", "GB/s", "CPU_MS",
		       "BK_CPU");
	dup = strdup(sizes);
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		run_size(twd, strtoull(tok, NULL, 0));
	free(dup);
	return 0;
}
