/*
 * tests/lib/zkserver.c — a real ZooKeeper server for tests (zkserver.h).
 */
#include "zkserver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "coord/coord.h"
#include "proc.h"
#include "rmtree.h"
#include "tap.h"

#define JAVA "/usr/bin/java"
#define ZK_JAR "/usr/share/java/zookeeper.jar"

static struct zkserver *live; /* stopped at exit */
int zkserver_tick_ms = 500;

bool zkserver_available(char *why, size_t len)
{
	if (access(JAVA, X_OK) || access(ZK_JAR, R_OK)) {
		snprintf(why, len, "no ZooKeeper server here (%s or %s missing): run .ci/install-deps "
			 "(zookeeper, default-jre-headless)", JAVA, ZK_JAR);
		return false;
	}
	return true;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &al) == 0)
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void show_log(const struct zkserver *zk)
{
	char path[300], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/zk.log", zk->dir);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "# zk: %s", line);
	fclose(f);
}

static void stop_at_exit(void)
{
	if (live)
		zkserver_stop(live);
}

void zkserver_start_on(struct zkserver *zk, const char *bind_ip, const char *url_host)
{
	static bool hooked;
	char cfg[300], cmd[1024];
	FILE *f;

	memset(zk, 0, sizeof(*zk));
	snprintf(zk->dir, sizeof(zk->dir), "/tmp/tw-zk-XXXXXX");
	TAP_REQUIRE(mkdtemp(zk->dir), "mkdtemp: %s", strerror(errno));
	if (!hooked) {
		atexit(stop_at_exit);
		hooked = true;
	}
	live = zk;
	for (int attempt = 0; attempt < 3; attempt++) {
		double t0 = now_s();
		char sh[] = "/bin/sh", dash_c[] = "-c", err[512];
		char *argv[] = { sh, dash_c, cmd, NULL };
		struct tw_coord *c;
		int rc;

		zk->port = free_port();
		TAP_REQUIRE(zk->port > 0, "no free port: %s", strerror(errno));
		snprintf(zk->hosts, sizeof(zk->hosts), "%s:%d", url_host, zk->port);
		snprintf(zk->url, sizeof(zk->url), "zk://%s/tw-test", zk->hosts);
		snprintf(cfg, sizeof(cfg), "%s/zoo.cfg", zk->dir);
		f = fopen(cfg, "w");
		TAP_REQUIRE(f, "%s: %s", cfg, strerror(errno));
		fprintf(f, "tickTime=%d\ndataDir=%s/data\nclientPort=%d\nclientPortAddress=%s\n"
			"admin.enableServer=false\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
			"maxClientCnxns=0\n",
			zkserver_tick_ms, zk->dir, zk->port, bind_ip);
		fclose(f);
		/* exec: the pid we hold is the JVM's. Small heap, quick JIT: tests are tiny.
		 * setpriv --pdeathsig: the JVM dies with the test even when the test crashes
		 * (atexit covers only normal exits). */
		snprintf(cmd, sizeof(cmd),
			 "exec %s" JAVA " -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
			 "-Dzookeeper.admin.enableServer=false -cp " ZK_JAR
			 " org.apache.zookeeper.server.ZooKeeperServerMain %s >>%s/zk.log 2>&1",
			 access("/usr/bin/setpriv", X_OK) ? "" : "/usr/bin/setpriv --pdeathsig KILL ",
			 cfg, zk->dir);
		zk->proc = proc_spawn_opts(argv, NULL, &(struct proc_opts){ .unlisted = true });
		TAP_REQUIRE(zk->proc, "cannot start ZooKeeper: %s", strerror(errno));
		/* Ready: a client session connects. The client retries by itself while the JVM
		 * starts and we wait for its session event (no polling); the refused connects
		 * meanwhile are logged at info level, at most one line a second. */
		rc = tw__coord_open(zk->url, 30000, &c, err, sizeof(err));
		if (rc == 0) {
			tw__coord_close(c);
			zk->start_s = now_s() - t0;
			tap_diag("ZooKeeper at %s answered %.2f s after its start", zk->hosts,
				 zk->start_s);
			return;
		}
		fprintf(stderr, "# ZooKeeper on port %d did not answer (attempt %d): %s\n", zk->port,
			attempt + 1, err);
		show_log(zk);
		proc_free(zk->proc);
		zk->proc = NULL;
	}
	TAP_FATAL("ZooKeeper did not start (log above)");
}

void zkserver_require(void)
{
	char why[512];

	if (!zkserver_available(why, sizeof(why)))
		tap_plan_skip_all("%s", why);
}

void zkserver_start(struct zkserver *zk)
{
	zkserver_start_on(zk, "127.0.0.1", "127.0.0.1");
}

void zkserver_stop(struct zkserver *zk)
{
	if (zk->proc) {
		proc_kill(zk->proc, SIGTERM);
		if (proc_wait(zk->proc, 5000) < 0)
			proc_kill(zk->proc, SIGKILL);
		proc_free(zk->proc);
		zk->proc = NULL;
	}
	if (zk->dir[0]) {
		rm_tree(zk->dir);
		zk->dir[0] = '\0';
	}
	if (live == zk)
		live = NULL;
}
