/*
 * tests/lib/tcpproxy.h — a TCP proxy a test puts between a client and a real server, to cut
 * the network between them (a partition) without root and without a hook in the client: every
 * connection relayed through it is closed, and new ones are closed as soon as they are
 * accepted, until the test heals it. The server and the client run unchanged.
 *
 *   struct tcpproxy *px = tcpproxy_start("127.0.0.1", zk.port);   listens on 127.0.0.1:px->port
 *   ... the client connects to 127.0.0.1:<tcpproxy_port(px)> ...
 *   tcpproxy_cut(px, true);    the partition: relayed connections closed, new ones refused
 *   tcpproxy_cut(px, false);   healed
 *   tcpproxy_lose_answer(px, ZOO_MULTI_OP, NULL, 1);   the next multi applied, its answer lost
 *   tcpproxy_stop(px);
 *
 * One thread relays (poll); 64 connections at most. Fails the test (TAP_FATAL) if it cannot
 * start.
 */
#ifndef TW_TESTS_TCPPROXY_H
#define TW_TESTS_TCPPROXY_H

#include <stdbool.h>
#include <stdint.h>

struct tcpproxy;

struct tcpproxy *tcpproxy_start(const char *up_host, int up_port);
int tcpproxy_port(const struct tcpproxy *px);
/* Cut (true) or heal (false); returns once the relay thread has applied it. */
void tcpproxy_cut(struct tcpproxy *px, bool cut);
/* Connections accepted so far (each a try of the client). */
unsigned tcpproxy_accepted(struct tcpproxy *px);
/*
 * Lost answers, for a ZooKeeper client: the next `count` requests of op type zk_op (zookeeper's
 * proto.h: ZOO_MULTI_OP ...) that a client sends through the proxy reach the server, which
 * applies each; its connection is closed just before the server's answer would pass. The
 * client sees a connection loss for a request that took effect. New connections are relayed
 * as before (the client's session goes on). path_part (NULL: any) picks the request by its
 * path, the first field of a create, delete, get or set (not of a multi-op).
 */
void tcpproxy_lose_answer(struct tcpproxy *px, int32_t zk_op, const char *path_part,
			  unsigned count);
/* Answers lost so far. */
unsigned tcpproxy_answers_lost(struct tcpproxy *px);
void tcpproxy_stop(struct tcpproxy *px);

#endif /* TW_TESTS_TCPPROXY_H */
