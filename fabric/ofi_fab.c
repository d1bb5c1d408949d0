/*
 * fabric/ofi_fab.c — libfabric backend: provider names, hints, fi_getinfo read-back, fabric and
 * domain, the EQ (MSG) or the shared endpoint (RDM), wait-object set-up, close.
 *
 * Hints follow docs/fabric.md and the 1.17 notes: caps MSG|RMA (+ the explicit directions),
 * mode CONTEXT|RX_CQ_DATA, mr_mode LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY, no DELIVERY_COMPLETE in
 * op_flags (filters out verbs), no progress requirement (shm refuses AUTO), no ordering (shm
 * would leave its fast path and VIRT_ADDR). Whatever comes back is read and obeyed.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fabric/ofi_int.h"

int tw__ofi_errno(int rc)
{
	/* libfabric returns -errno for the classic codes and -FI_E* (256+) for its own. */
	if (rc >= 0)
		return rc;
	if (rc == -FI_ETIMEDOUT)
		return -ETIMEDOUT;
	if (rc == -FI_ECONNREFUSED)
		return -ECONNREFUSED;
	return rc;
}

/* "tcp" → (tcp, MSG), "shm" → (shm, RDM). (";ofi_rxm" names are refused before this.) */
static void parse_prov(const char *want, char *name, size_t len, enum fi_ep_type *type)
{
	size_t n = strnlen(want, len - 1);

	memcpy(name, want, n); /* not snprintf: gcc 12 -O1 -fsanitize=address sees a NULL "%s" */
	name[n] = '\0';
	if (!strcmp(want, "shm"))
		*type = FI_EP_RDM;
	else
		*type = FI_EP_MSG;
}

/* "tcp, sockets, shm, ..." — what fi_getinfo offers without a provider filter. */
static void list_providers(char *out, size_t len)
{
	struct fi_info *all = NULL;
	size_t used = 0;

	out[0] = '\0';
	if (fi_getinfo(OFI_VERSION, NULL, NULL, 0, NULL, &all) || !all) {
		const char *env = tw__env_get(TW__ENV_FI_PROVIDER);

		/* libfabric applies $FI_PROVIDER as a filter to every fi_getinfo of the process. */
		if (env && *env)
			snprintf(out, len, "(none visible: FI_PROVIDER=%s in the environment hides "
				 "every other provider from libfabric; unset it to see them)", env);
		else
			snprintf(out, len, "(none)");
		return;
	}
	for (struct fi_info *i = all; i; i = i->next) {
		const char *n = i->fabric_attr->prov_name;
		bool seen = false;

		for (struct fi_info *j = all; j != i; j = j->next)
			if (!strcmp(j->fabric_attr->prov_name, n))
				seen = true;
		if (seen)
			continue;
		int w = snprintf(out + used, len - used, "%s%s", used ? ", " : "", n);
		if (w < 0 || (size_t)w >= len - used)
			break;
		used += (size_t)w;
	}
	fi_freeinfo(all);
}

static struct fi_info *make_hints(const char *prov, enum fi_ep_type type, bool strict)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->ep_attr->type = type;
	h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND |
		  FI_RECV;
	h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_DOMAIN; /* one thread drives a fab (fabric.h) */
	h->tx_attr->op_flags = 0;  /* not DELIVERY_COMPLETE: verbs would drop out */
	h->tx_attr->msg_order = 0; /* shm: no ordering, keeps the fast path and VIRT_ADDR */
	h->fabric_attr->prov_name = strdup(prov);
	if (type == FI_EP_RDM)
		h->domain_attr->av_type = FI_AV_TABLE;
	/* shm: a counter of remote writes, so that a target serving one-sided writes (which give
	 * it no completion) keeps polling fast (ofi_cq.c, tw__ofi_wait). Not asked of others. */
	if (type == FI_EP_RDM && !strcmp(prov, "shm"))
		h->caps |= FI_RMA_EVENT;
	if (strict)
		tw__strict_hints(h);
	return h;
}

static void read_back(struct ofi_fab *of)
{
	struct fi_info *i = of->info;
	uint64_t mm = i->domain_attr->mr_mode;

	of->virt_addr = !!(mm & (FI_MR_VIRT_ADDR | FI_MR_BASIC));
	of->prov_key = !!(mm & (FI_MR_PROV_KEY | FI_MR_BASIC));
	of->mr_local = !!(mm & FI_MR_LOCAL);
	of->mr_allocated = !!(mm & (FI_MR_ALLOCATED | FI_MR_BASIC));
	of->inject_size = i->tx_attr->inject_size;
	of->tx_size = i->tx_attr->size ? i->tx_attr->size : 256;
	of->rx_size = i->rx_attr->size ? i->rx_attr->size : 256;
	of->rma_iov_limit = i->tx_attr->rma_iov_limit;
	of->max_msg_size = i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : SIZE_MAX;
	of->cq_data_size = i->domain_attr->cq_data_size;
	of->mr_key_size = i->domain_attr->mr_key_size ? i->domain_attr->mr_key_size : 8;
	of->addr_str = i->addr_format == FI_ADDR_STR;
	of->is_verbs = strstr(i->fabric_attr->prov_name, "verbs") != NULL;
	/* The strongest completion each provider offers in 1.17 (docs/fabric.md, F4). */
	of->write_flags = FI_COMPLETION | (of->is_verbs ? FI_TRANSMIT_COMPLETE : FI_DELIVERY_COMPLETE);
	tw_log_debug("fabric %s: mr_mode=0x%llx inject=%zu tx=%zu rx=%zu rma_iov=%zu max_msg=%zu "
		     "cq_data=%zu key=%zu mode=0x%llx",
		     i->fabric_attr->prov_name, (unsigned long long)mm, of->inject_size, of->tx_size,
		     of->rx_size, of->rma_iov_limit, of->max_msg_size, of->cq_data_size,
		     of->mr_key_size, (unsigned long long)i->mode);
}

/*
 * Close every provider object of `of` and free what belongs to them (send ring, receive buffers,
 * op contexts). Not the ofi_fab, not the wait fds (epfd, evfd: tw__fab_wakeup may use evfd from
 * another thread at any time), not the user's registrations (their fid_mr must be closed first).
 */
static void release(struct ofi_fab *of)
{
	tw__cm_reap_all(of); /* before the domain, the send ring and the contexts they hold */
	of->closing = true;
	tw__rdm_shm_fast_fini(of);
	tw__wedge_unwatch(of); /* before the endpoint: the watchdog reads its region */
	if (of->ep)
		tw__rdm_close_ep(of); /* shm: keeps its region for peers in this process */
	if (of->rw_cntr)
		fi_close(&of->rw_cntr->fid);
	if (of->cq)
		tw__cq_close(of, of->cq, of->cq_fd);
	if (of->av)
		fi_close(&of->av->fid);
	tw__rdm_peers_free(of);
	if (of->eq)
		tw__cm_drain_eq(of);
	if (of->pep)
		fi_close(&of->pep->fid);
	if (of->eq) {
		if (of->eq_fd >= 0)
			epoll_ctl(of->epfd, EPOLL_CTL_DEL, of->eq_fd, NULL);
		fi_close(&of->eq->fid);
	}
	tw__msg_free_rx(of, &of->rx);
	tw__msg_free_slots(of);
	tw__strict_fini(of); /* after the last registration of the fab's own */
	for (size_t i = 0; i < of->nchunks; i++)
		free(of->chunks[i]);
	free(of->chunks);
	if (of->domain)
		fi_close(&of->domain->fid);
	if (of->fabric)
		fi_close(&of->fabric->fid);
	if (of->info)
		fi_freeinfo(of->info);
	if (of->hints)
		fi_freeinfo(of->hints);
}

static void tw__ofi_close(struct tw_fab *fab)
{
	struct ofi_fab *of = ofab(fab);

	release(of);
	tw__bell_destroy(of); /* with the wait fds: tw__fab_wakeup rings it */
	if (of->epfd >= 0)
		close(of->epfd);
	if (of->evfd >= 0)
		close(of->evfd);
	free(of);
}

static int tw__ofi_listen(struct tw_fab *fab, char *addr_out, size_t addr_len)
{
	return fab->rdm ? tw__rdm_listen(fab, addr_out, addr_len) : tw__cm_listen(fab, addr_out, addr_len);
}

static int tw__ofi_connect(struct tw_fab *fab, const char *addr, struct tw_chan **out)
{
	return fab->rdm ? tw__rdm_connect(fab, addr, out) : tw__cm_connect(fab, addr, out);
}

static void tw__ofi_chan_down(struct tw_chan *ch, bool closing)
{
	if (ch->is_down)
		return;
	if (ch->fab->rdm)
		tw__rdm_chan_down((struct ofi_chan *)ch, closing);
	else
		tw__cm_chan_down((struct ofi_chan *)ch, closing);
}

/* sockets: no registration is closed while a closing record's endpoint could still place a
 * write into it (the sock_pe_report_mr_completion race, docs/fabric.md "Closing a registration
 * under traffic"). Costs a wait (up to 200 ms) only while records exist. */
static void tw__ofi_mr_close(struct tw_mr *mr)
{
	struct ofi_fab *of = ofab(mr->fab);

	if (of->closing_head)
		tw__cm_reap_all(of);
	tw__ofi_mr_dereg(mr);
}

static void tw__ofi_chan_free(struct tw_chan *ch)
{
	free(ch);
}

static int tw__ofi_reset(struct tw_fab *fab);

static const struct fab_ops ofi_ops = {
	.name = "ofi",
	TW__FAB_OPS_INIT(tw__ofi)
	.chan_deadline = tw__ofi_chan_deadline,
	.wait_fd = tw__ofi_wait_fd,
};

/*
 * Open the provider objects of `of` (its generic part and wait fds already set up): fi_getinfo,
 * fabric, domain, send ring, then the EQ (MSG) or the shared endpoint (RDM). On failure the
 * caller releases what was opened.
 */
/* Why fi_getinfo found nothing for `prov` (rc): the provider missing here, or the address not
 * this machine's (asked again without it), or libfabric's own error. The error to return. */
static int getinfo_failed(struct ofi_fab *of, const char *prov, const char *node,
			  const char *service, int rc)
{
	char avail[256];

	list_providers(avail, sizeof(avail));
	if ((rc == -FI_ENODATA || !of->info) && node) {
		/* The provider may be fine and the address the problem: ask without it. */
		struct fi_info *probe = NULL;
		bool prov_ok = fi_getinfo(OFI_VERSION, NULL, NULL, 0, of->hints, &probe) == 0 &&
			       probe;

		fi_freeinfo(probe);
		if (prov_ok) {
			tw__fab_open_errmsg("provider '%s' cannot use the address '%s%s%s': not "
					"a name or address of this machine (give a local "
					"address, e.g. 127.0.0.1 or this host's IP)", prov,
					node, service ? ":" : "", service ? service : "");
			return -EADDRNOTAVAIL;
		}
	}
	if (rc == -FI_ENODATA || !of->info) {
		tw__fab_open_errmsg("provider '%s' is not available here (with the required "
				"capabilities); this machine offers: %s",
				prov, avail);
		return -TW_ENOPROV;
	}
	tw__fab_open_errmsg("fi_getinfo(%s): %s; this machine offers: %s", prov,
			fi_strerror(-rc), avail);
	return tw__ofi_errno(rc);
}

/* FI_EP_MSG: the event queue of connection requests, with a wait fd when it has one. */
static int open_msg_eq(struct ofi_fab *of)
{
	struct fi_eq_attr ea = {.size = 64, .wait_obj = FI_WAIT_FD};
	int rc;

	rc = fi_eq_open(of->fabric, &ea, &of->eq, NULL);
	if (rc) {
		ea.wait_obj = FI_WAIT_NONE;
		rc = fi_eq_open(of->fabric, &ea, &of->eq, NULL);
	}
	if (rc) {
		tw__fab_open_errmsg("fi_eq_open: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	if (ea.wait_obj == FI_WAIT_FD && fi_control(&of->eq->fid, FI_GETWAIT, &of->eq_fd) == 0 &&
	    of->eq_fd >= 0) {
		struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = of};
		epoll_ctl(of->epfd, EPOLL_CTL_ADD, of->eq_fd, &e2);
	} else {
		of->eq_fd = -1;
		of->nofd++;
	}
	return 0;
}

static int setup(struct ofi_fab *of, const char *prov)
{
	const struct tw_fab_config *cfg = &of->base.cfg;
	char name[64];
	enum fi_ep_type type;
	const char *node, *service;
	uint64_t flags;
	int rc;

	if (strstr(prov, ";ofi_rxm")) {
		/* docs/fabric.md "tcp;ofi_rxm": run by hand, three defects no test can live with. */
		tw__fab_open_errmsg("provider '%s' is not supported: through ofi_rxm a primary's "
				"one endpoint is bound to 127.0.0.1 and cannot reach backups on other "
				"hosts, a peer cannot be connected again after a provider error, and "
				"libfabric 1.17's ofi_rxm loops rejecting simultaneous connections "
				"(docs/fabric.md, \"tcp;ofi_rxm\"); use '%.*s' (FI_EP_MSG)", prov,
				(int)(strstr(prov, ";ofi_rxm") - prov), prov);
		return -ENOTSUP;
	}
	parse_prov(prov, name, sizeof(name), &type);
	of->eq_fd = of->cq_fd = -1;
	of->backoff_us = 1;
	of->base.rdm = type == FI_EP_RDM;
	of->hints = make_hints(name, type, cfg->strict != TW_FAB_STRICT_OFF);
	if (!of->hints)
		return -ENOMEM;
	/* shm names itself (fi_shm://pid:uid:idx, unique per endpoint) when given no address;
	 * given a service (a backup's configured port or name), its endpoint is named after it,
	 * fi_ns://SERVICE, the same in every process that opens it, so that a restarted backup
	 * keeps its address (docs/fabric.md "Named shm endpoints"). The node plays no part: shm
	 * reaches this host only. */
	if (!strcmp(name, "shm")) {
		node = NULL;
		service = cfg->service && strcmp(cfg->service, "0") ? cfg->service : NULL;
		flags = service ? FI_SOURCE : 0;
		if (service && (rc = tw__rdm_shm_name_ok(service)) < 0)
			return rc;
		of->named = service != NULL;
	} else {
		node = cfg->node ? cfg->node : "127.0.0.1"; /* never the first interface (docs/fabric.md, F6) */
		service = cfg->service && strcmp(cfg->service, "0") ? cfg->service : NULL;
		flags = FI_SOURCE;
	}
	/* The sockets provider completes transfers in its own thread, which may still use an
	 * endpoint's transmit context after fi_close() returned (tw__cm_chan_down). */
	of->drain_close = !strcmp(name, "sockets");
	/* sockets 1.17: fi_shutdown closes the connection's socket by number, which the provider's
	 * CM thread may have closed already (docs/fabric.md, F10). fi_close alone closes it once,
	 * under the provider's lock, and the peer still sees FI_SHUTDOWN (at end of file). */
	of->no_shutdown = !strcmp(name, "sockets");
	/* shm 1.17: a write to a peer that never answers blocks the completion of every later
	 * write of the endpoint, to every peer (tw__fab_loss_blocks_others, docs/fabric.md
	 * "Resetting after a peer loss"). */
	of->base.loss_blocks = !strcmp(name, "shm");
	rc = fi_getinfo(OFI_VERSION, node, service, flags, of->hints, &of->info);
	if (rc || !of->info)
		return getinfo_failed(of, prov, node, service, rc);
	read_back(of);
	if (cfg->strict != TW_FAB_STRICT_OFF && (rc = tw__strict_read_back(of)) < 0)
		return rc;
	/* The fab's own buffers follow the rules; the caller's table (a test that breaks one)
	 * applies from the end of the open or reset on (user_mr_rules). */
	of->mr_rules = &tw__fab_mr_rules;
	if (of->is_verbs) {
		/* verbs pins every registration: 8 MiB segments, the send ring and the receive
		 * buffers must fit RLIMIT_MEMLOCK (Debian's default 8 MiB fits one segment). */
		struct rlimit rl;
		if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur < (rlim_t)256 << 20)
			tw_log_warn("fabric %s: RLIMIT_MEMLOCK is %llu KiB; registrations may fail "
				    "(raise it, e.g. LimitMEMLOCK=infinity)",
				    prov, (unsigned long long)rl.rlim_cur / 1024);
	}
	if (cfg->max_msg_size + RDM_HDR_LEN > of->max_msg_size) {
		tw__fab_open_errmsg("max_msg_size %zu exceeds the provider's %zu", cfg->max_msg_size,
				of->max_msg_size);
		return -EINVAL;
	}
	rc = fi_fabric(of->info->fabric_attr, &of->fabric, NULL);
	if (rc) {
		tw__fab_open_errmsg("fi_fabric: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	rc = fi_domain(of->fabric, of->info, &of->domain, NULL);
	if (rc) {
		tw__fab_open_errmsg("fi_domain: %s", fi_strerror(-rc));
		return tw__ofi_errno(rc);
	}
	rc = tw__msg_alloc_slots(of);
	if (rc < 0) {
		tw__fab_open_errmsg("send buffers: %s", tw_strerror(rc));
		return rc;
	}
	if (of->base.rdm)
		return tw__rdm_open_ep(of);
	return open_msg_eq(of);
}

/*
 * The sockets provider's progress thread spins FI_SOCKETS_PE_WAITTIME ms (libfabric's default
 * 10) after every wake-up; 0 suits us (docs/fabric.md, "Provider environment defaults"). The
 * library cannot set it: libfabric reads it once, at the process's first fi_getinfo, from the
 * environment, and no fi_info attribute carries it; setenv() here would race the program's
 * other threads. Programs set it at the start of main (TW_ENV_PROGRAM rows of
 * tw_env_describe()); a process that did not is told once, at info level.
 */
static void note_pe_waittime(void)
{
	if (!tw__env_get(TW__ENV_FI_SOCKETS_PE_WAITTIME))
		tw_log_info("fabric sockets: FI_SOCKETS_PE_WAITTIME is unset: libfabric's progress "
			    "thread spins 10 ms after every wake-up; a program sets it to 0 before "
			    "its first thread (docs/fabric.md, \"Provider environment defaults\")");
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* The registrations of the caller's from here on follow cfg.mr_rules where it gave some. */
static void user_mr_rules(struct ofi_fab *of)
{
	if (of->base.cfg.mr_rules)
		of->mr_rules = of->base.cfg.mr_rules;
}

int tw__ofi_fab_open(const struct tw_fab_config *cfg, const struct tw_fab_events *ev, const char *prov,
		 struct tw_fab **out)
{
	struct ofi_fab *of;
	int rc;

	if (prov && !strncmp(prov, "sockets", 7))
		pthread_once(&env_once, note_pe_waittime);

	of = calloc(1, sizeof(*of));
	if (!of)
		return -ENOMEM;
	tw__fab_init_common(&of->base, &ofi_ops, cfg, ev);
	of->eq_fd = of->cq_fd = -1;
	of->epfd = epoll_create1(EPOLL_CLOEXEC);
	of->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (of->epfd < 0 || of->evfd < 0) {
		rc = -errno;
		tw__fab_open_errmsg("epoll/eventfd: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ee = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(of->epfd, EPOLL_CTL_ADD, of->evfd, &ee);
	rc = setup(of, prov);
	if (rc < 0)
		goto fail;
	user_mr_rules(of);
	tw_log_debug("fabric %s: opened (%s, %s)", prov, of->base.rdm ? "RDM" : "MSG",
		     of->nofd ? "polling with backoff" : "wait fds");
	*out = &of->base;
	return 0;
fail:
	tw__ofi_close(&of->base);
	return rc;
}

/*
 * tw__fab_reset: every provider object closed and opened again in place (the same struct, so
 * the handle and its wait fds stay; tw__fab_wakeup from another thread stays safe), then every
 * registration of the user registered again in the new domain (same struct tw_mr, new key).
 * The caller closed every channel, so no operation refers to the old contexts.
 */
static int tw__ofi_reset(struct tw_fab *fab)
{
	struct ofi_fab *of = ofab(fab);
	int rc;

	if (of->listening) {
		tw__fab_set_errmsg(fab, "a listening fab is not reset (its peers know its address)");
		return -ENOTSUP;
	}
	tw__cm_reap_all(of); /* before the registrations (tw__ofi_mr_close) */
	for (struct tw_mr *m = fab->mrs; m; m = m->next) {
		struct ofi_mr *mr = (struct ofi_mr *)m;

		tw__mr_close_internal(of, mr->mr);
		mr->mr = NULL;
		mr->desc = NULL;
	}
	release(of);
	/* Everything but the generic part and the wait fds starts from zero, as in calloc. The
	 * two ranges skip epfd and evfd, which another thread may read (tw__ofi_wakeup). */
	memset((char *)of + sizeof(of->base), 0,
	       offsetof(struct ofi_fab, epfd) - sizeof(of->base));
	memset((char *)&of->eq_fd, 0, sizeof(*of) - offsetof(struct ofi_fab, eq_fd));
	rc = setup(of, fab->prov);
	if (rc < 0) {
		tw__fab_set_errmsg(fab, "reset: %s", tw__fab_errmsg(NULL));
		return rc;
	}
	user_mr_rules(of);
	for (struct tw_mr *m = fab->mrs; m; m = m->next) {
		struct ofi_mr *mr = (struct ofi_mr *)m;

		rc = tw__mr_reg_internal(of, m->buf, m->len, tw__mr_access_flags(m->access), &mr->mr,
				     &mr->desc);
		if (rc < 0)
			return rc;
		m->rk.addr = of->virt_addr ? (uint64_t)(uintptr_t)m->buf : 0;
		m->rk.key = of->mr_rules->publish_key(fi_mr_key(mr->mr), of->req_key);
	}
	tw_log_info("fabric %s: reset: new endpoint %s", fab->prov, of->base.rdm ? of->name : "");
	return 0;
}
