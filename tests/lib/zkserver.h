/*
 * tests/lib/zkserver.h — a real ZooKeeper server for a test: standalone, on 127.0.0.1 at a
 * probed free port, data in a fresh temporary directory, admin server off; started with the
 * JRE and Debian's /usr/share/java/zookeeper.jar, ready once a client session connects (no
 * sleep), stopped (and its directory removed) by zkserver_stop or at exit, even on failure.
 *
 *   struct zkserver zk;
 *   zkserver_require();             // or the whole test is a skip, saying what is missing
 *   zkserver_start(&zk);            // zk.url: "zk://127.0.0.1:PORT/tw-test"
 *   ...
 *   zkserver_stop(&zk);
 */
#ifndef TW_TESTS_ZKSERVER_H
#define TW_TESTS_ZKSERVER_H

#include <stdbool.h>
#include <stddef.h>

struct proc;

struct zkserver {
	struct proc *proc;
	char dir[256];
	char url[128];   /* zk://127.0.0.1:PORT/tw-test */
	char hosts[64];  /* 127.0.0.1:PORT (or the url_host of zkserver_start_on) */
	int port;
	double start_s;  /* from spawn to the first client session */
};

/* tickTime (ms) of the servers started next (default 500). ZooKeeper expires a session up to
 * one tickTime after its timeout (the expiry is rounded up to the next tick interval): a
 * test that measures failure detection lowers it. */
extern int zkserver_tick_ms;

/* Whether java and zookeeper.jar are installed (why: what is missing, and how to install). */
bool zkserver_available(char *why, size_t len);
/* The whole test skipped (tap_plan_skip_all, before the plan) unless zkserver_available. */
void zkserver_require(void);
/* Start; fails the test (TAP_FATAL) after 3 attempts (a port taken meanwhile) or 60 s. A
 * diagnostic says where it listens and how long it took to answer. */
void zkserver_start(struct zkserver *zk);
/* The same, listening on bind_ip (e.g. "0.0.0.0"), zk.url naming url_host (an address of
 * this host that the clients reach). */
void zkserver_start_on(struct zkserver *zk, const char *bind_ip, const char *url_host);
/* SIGTERM (then SIGKILL), reap, remove the directory. Again is a no-op. */
void zkserver_stop(struct zkserver *zk);

#endif
