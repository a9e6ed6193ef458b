/* NUMA placement of hpalloc's own huge mappings: the numa knob's policies
 * (grammar, canonical text), the nodes this machine has (its sysfs, read
 * through prim.c: a staged sysfs stands in for it as for the pools), which
 * hugetlb pool pages a policy may use, and applying a policy to a fresh
 * mapping before its first touch.  Never applied to libc's memory.
 *
 * Policies and the kernel's modes:
 *   default          nothing is set: the kernel's policy (the thread's,
 *                    else local allocation) -- today's behaviour, no work
 *   local            MPOL_LOCAL: the node of the thread that first touches
 *   interleave[:N]   MPOL_INTERLEAVE over N (without N: every node, which
 *                    the kernel narrows to the process's allowed nodes)
 *   bind:N           MPOL_BIND: pages only on N
 *   preferred:n      MPOL_PREFERRED: node n first, others when it is full
 *
 * Hugetlb pools are per node, but reservations are not: a mapping reserves
 * pages of the whole pool when it is made (resv_hugepages, one global
 * count), and only its first touch takes a page from a node's free list.
 * The kernel checks a reservation against the thread's policy, never the
 * mapping's, so a mapping bound to node 0 while node 0's free pages are
 * gone maps fine and raises SIGBUS on first touch.  Therefore:
 *   - "available to policy p" (numa_pool_available) is the free pages of
 *     the nodes p confines pages to, minus every outstanding reservation
 *     (a reservation can be served from any node, so all of them are
 *     counted against p's nodes: never more than is surely there).  For
 *     policies that do not confine pages (default, local, preferred,
 *     interleave over every node) it is the whole pool's free - reserved,
 *     exactly as without NUMA.  Interleave over named nodes counts those
 *     nodes: the kernel would fall back to others when they are short,
 *     which is not what the policy asked for.
 *   - a bind on hugetlb pages faults its pages in when the block is made
 *     (numa_place), so a node emptied since that look is a failed
 *     allocation, handled like a short pool, and never a SIGBUS later.
 *
 * When the placement cannot be applied (mbind refused: seccomp, a node
 * gone or without memory, outside the cpuset) the block is not handed
 * out: it is unmapped and the request goes on as if the pool were short
 * (the fallback knob decides; a THP block placed the same way, libc memory
 * with fallback=small, or NULL + ENOMEM).  Counted in numa_refused. */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBNUMA
#include <numaif.h> /* MPOL_*: the kernel's modes */
#endif

static const char *const mode_names[] = {"default", "local", "interleave", "bind", "preferred"};
#define NMODES ((int)(sizeof(mode_names) / sizeof(mode_names[0])))

/* ---- the nodes there are ------------------------------------------------------ */

/* Room for MAX_NUMNODES of distribution kernels (NODES_SHIFT 10). */
#define NODE_LIMIT 1024
#define WORD_BITS (8 * (int)sizeof(unsigned long))
#define NODE_WORDS (NODE_LIMIT / WORD_BITS)

static unsigned long node_set[NODE_WORDS]; /* nodes that exist */
static bool numa_usable;                   /* the kernel takes policies */
static pthread_once_t nodes_once = PTHREAD_ONCE_INIT;

static bool bit_isset(const unsigned long *mask, int n)
{
	return (mask[n / WORD_BITS] >> (n % WORD_BITS)) & 1;
}

#ifdef HAVE_LIBNUMA
static void bit_set(unsigned long *mask, int n)
{
	mask[n / WORD_BITS] |= 1UL << (n % WORD_BITS);
}
#endif

/* Read once, as libnuma finds them: the kernel takes policies (its
 * get_mempolicy is there and allowed) and the nodes are the node<N>
 * directories sysfs has (prim_node_ids).  A build without libnuma places
 * nothing and knows no node. */
static void find_nodes(void)
{
#ifdef HAVE_LIBNUMA
	HP_ERRNO_SAVE;
	if (prim_thread_policy(NULL, NULL, 0) == 0 || (errno != ENOSYS && errno != EPERM))
		numa_usable = prim_node_ids(node_set, NODE_LIMIT) > 0;
	HP_ERRNO_RESTORE;
#endif
}

bool numa_node_exists(int node)
{
	pthread_once(&nodes_once, find_nodes);
	return node >= 0 && node < NODE_LIMIT && bit_isset(node_set, node);
}

int numa_node_next(int after)
{
	for (int n = after < 0 ? 0 : after + 1; n < NODE_LIMIT; n++)
		if (numa_node_exists(n))
			return n;
	return -1;
}

/* "0-3,5": the kernel's node list format, ranges of 2+ nodes as a-b. */
static void format_nodes(const unsigned long *mask, int nbits, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int n = 0; n < nbits; n++) {
		if (!bit_isset(mask, n))
			continue;
		int last = n;
		while (last + 1 < nbits && bit_isset(mask, last + 1))
			last++;
		int w = last > n ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", n, last)
				 : snprintf(buf + used, len - used, "%s%d", used ? "," : "", n);
		if (w < 0 || (size_t)w >= len - used)
			return; /* truncated: only ever in messages */
		used += (size_t)w;
		n = last;
	}
}

/* ---- the knob's grammar ------------------------------------------------------------ */

/* A reason quotes a piece of the refused word, which is anyone's input (an
 * environment, a control file): bytes that are not printable ASCII become
 * '?', so messages, stats files and terminals get printable text only. */
static int refuse(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t len, const char *fmt, ...)
{
	if (why && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
		for (char *c = why; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e) /* any locale */
				*c = '?';
	}
	errno = EINVAL;
	return -1;
}

/* A node number: 1 to 4 decimal digits.  Advances *s. */
static int parse_node(const char **s, int *out, char *why, size_t len)
{
	const char *start = *s;
	int v = 0;
	while (**s >= '0' && **s <= '9' && *s - start < 5) {
		v = v * 10 + (**s - '0');
		(*s)++;
	}
	if (*s == start)
		return refuse(why, len, "expected a node number at '%.12s'", start);
	if (*s - start > 4)
		return refuse(why, len, "node number '%.12s' is too long", start);
	*out = v;
	return 0;
}

static int check_node(int n, char *why, size_t len)
{
	if (!numa_node_exists(n)) {
		char nodes[128];
		format_nodes(node_set, NODE_LIMIT, nodes, sizeof(nodes));
		return refuse(why, len, "node %d does not exist (nodes here: %s)", n, nodes);
	}
	if (n >= NUMA_NODE_BITS)
		return refuse(why, len, "node %d is above %d, the highest node a policy can name", n,
			      NUMA_NODE_BITS - 1);
	return 0;
}

/* "0", "0-3", "0,2-3": comma separated numbers and ascending ranges, the
 * kernel's list format -- the knob's nodes and sysfs's cpulist alike.
 * Each range to take(a, b, arg, why, len), which may refuse it (-1).  0,
 * or -1 + EINVAL with why saying what is wrong. */
static int parse_list(const char *s, int (*take)(int a, int b, void *arg, char *why, size_t len),
		      void *arg, char *why, size_t len)
{
	for (;;) {
		int a, b;
		if (parse_node(&s, &a, why, len) < 0)
			return -1;
		b = a;
		if (*s == '-') {
			s++;
			if (parse_node(&s, &b, why, len) < 0)
				return -1;
			if (b < a)
				return refuse(why, len, "range %d-%d is reversed", a, b);
		}
		if (take(a, b, arg, why, len) < 0)
			return -1;
		if (*s == '\0')
			return 0;
		if (*s != ',')
			return refuse(why, len, "expected ',' or '-' at '%.12s'", s);
		if (!*++s)
			return refuse(why, len, "no node after ','");
	}
}

static int take_nodes(int a, int b, void *arg, char *why, size_t len)
{
	uint32_t *mask = arg;
	for (int n = a; n <= b; n++) {
		if (check_node(n, why, len) < 0)
			return -1;
		*mask |= (uint32_t)1 << n;
	}
	return 0;
}

/* The knob's nodes: a list of nodes that exist and a policy can name. */
static int parse_nodes(const char *s, uint32_t *out, char *why, size_t len)
{
	uint32_t mask = 0;

	if (!*s)
		return refuse(why, len, "no nodes after ':'");
	if (parse_list(s, take_nodes, &mask, why, len) < 0)
		return -1;
	*out = mask;
	return 0;
}

static int mode_index(const char *word, size_t n)
{
	for (int i = 0; i < NMODES; i++)
		if (strlen(mode_names[i]) == n && strncmp(word, mode_names[i], n) == 0)
			return i;
	return -1;
}

int numa_parse(const char *word, hp_numa_t *out, char *why, size_t why_len)
{
	const char *colon = strchr(word, ':');
	size_t n = colon ? (size_t)(colon - word) : strlen(word);
	int mode = mode_index(word, n);
	uint32_t nodes = 0;

	if (mode < 0)
		return refuse(why, why_len, "unknown policy '%.*s'", (int)(n < 20 ? n : 20), word);
	if ((mode == NUMA_DEFAULT || mode == NUMA_LOCAL) && colon)
		return refuse(why, why_len, "%s takes no nodes", mode_names[mode]);
	if (mode == NUMA_DEFAULT) {
		*out = HP_NUMA_DEFAULT;
		return 0;
	}
#ifndef HAVE_LIBNUMA
	return refuse(why, why_len, "hpalloc was built without libnuma: only 'default'");
#endif
	pthread_once(&nodes_once, find_nodes);
	if (!numa_usable)
		return refuse(why, why_len, "this system takes no NUMA policies: only 'default'");
	if ((mode == NUMA_BIND || mode == NUMA_PREFERRED) && !colon)
		return refuse(why, why_len, "%s needs nodes, e.g. %s:0", mode_names[mode], mode_names[mode]);
	if (colon && parse_nodes(colon + 1, &nodes, why, why_len) < 0)
		return -1;
	if (mode == NUMA_PREFERRED && (nodes & (nodes - 1)))
		return refuse(why, why_len, "preferred takes one node");
	*out = numa_make(mode, nodes);
	return 0;
}

void numa_format(hp_numa_t p, char *buf, size_t len)
{
	int mode = numa_mode(p);
	unsigned long mask[1] = {numa_nodes(p)};
	char nodes[HP_KNOB_VALUE_MAX];

	if (mode < 0 || mode >= NMODES) {
		snprintf(buf, len, "?");
		return;
	}
	format_nodes(mask, NUMA_NODE_BITS, nodes, sizeof(nodes));
	snprintf(buf, len, "%s%s%s", mode_names[mode], nodes[0] ? ":" : "", nodes);
}

/* ---- pools ------------------------------------------------------------------------- */

/* The nodes p keeps pages on, if it confines them (bind, interleave over
 * named nodes); 0 if pages may come from any node. */
static uint32_t confining_nodes(hp_numa_t p)
{
	int mode = numa_mode(p);
	return mode == NUMA_BIND || mode == NUMA_INTERLEAVE ? numa_nodes(p) : 0;
}

long numa_pool_available(hp_numa_t p, size_t pagesize)
{
	uint32_t nodes = confining_nodes(p);
	long long free_pages = 0;

	if (!nodes)
		return os_pool_available(pagesize);
	for (int n = 0; n < NUMA_NODE_BITS; n++) {
		if (!(nodes & ((uint32_t)1 << n)))
			continue;
		long long f = prim_pool_counter(n, pagesize, "free_hugepages");
		if (f < 0)
			return -1;
		free_pages += f;
	}
	long long resv = prim_pool_counter(-1, pagesize, "resv_hugepages");
	if (resv < 0)
		return -1;
	return free_pages > resv ? (long)(free_pages - resv) : 0;
}

/* ---- placing a mapping ------------------------------------------------------------------ */

#ifdef HAVE_LIBNUMA
static int kernel_mode(int mode)
{
	switch (mode) {
	case NUMA_LOCAL: return MPOL_LOCAL;
	case NUMA_INTERLEAVE: return MPOL_INTERLEAVE;
	case NUMA_BIND: return MPOL_BIND;
	default: return MPOL_PREFERRED;
	}
}
#endif

int numa_place(struct hp_map *m, hp_numa_t p)
{
	if (p == HP_NUMA_DEFAULT)
		return 0;
#ifdef HAVE_LIBNUMA
	unsigned long mask[NODE_WORDS] = {0};
	int mode = numa_mode(p);
	bool local = mode == NUMA_LOCAL; /* takes no nodes */

	if (mode == NUMA_INTERLEAVE && !numa_nodes(p)) {
		pthread_once(&nodes_once, find_nodes);
		memcpy(mask, node_set, sizeof(mask)); /* the kernel keeps the allowed ones */
	} else {
		mask[0] = numa_nodes(p);
	}
	if (os_mbind(m, kernel_mode(mode), local ? NULL : mask, local ? 0 : NODE_LIMIT + 1) < 0)
		return -1;
	if (mode == NUMA_BIND && m->backend == HP_BACKEND_HUGETLB && os_populate(m) < 0) {
		errno = ENOMEM; /* no page on the bound nodes: a short pool */
		return -1;
	}
	m->numa = p;
	return 0;
#else
	(void)m;
	errno = ENOSYS; /* numa_parse() refuses every other policy */
	return -1;
#endif
}

/* ---- faulting for another thread (populate.c) ------------------------------------------
 * A block's pages go where its policy says, whoever faults them -- except
 * under the two policies that ask who faults: default (the faulting
 * thread's own policy, else its node) and local (its node).  A populate
 * worker faulting such a block takes on, for the job, the allocating
 * thread's policy (default and local become "preferred: its node", which
 * is what they mean for that thread) and, for local, its node's CPUs.  On
 * a machine of one node there is nothing to take on.  Where the origin
 * cannot be known or taken on, the worker must not fault: the program's
 * own faults place the pages right. */

_Static_assert(HP_NUMA_MASK_WORDS * 8 * sizeof(unsigned long) == NODE_LIMIT, "one mask size");

static bool several_nodes(void)
{
	return numa_node_next(numa_node_next(-1)) >= 0;
}

void numa_home_capture(hp_numa_t p, struct numa_home *o)
{
	int mode = numa_mode(p);

	memset(o, 0, sizeof(*o));
	o->node = o->mode = -1;
	if (!several_nodes() || (mode != NUMA_DEFAULT && mode != NUMA_LOCAL))
		return;
	o->follow = true;
	o->local = mode == NUMA_LOCAL;
#ifdef HAVE_LIBNUMA
	unsigned cpu, node;
	HP_ERRNO_SAVE;
	if (getcpu(&cpu, &node) == 0 && prim_thread_policy(&o->mode, o->nodes, NODE_LIMIT + 1) == 0)
		o->node = (int)node;
	else
		o->mode = -1;
	HP_ERRNO_RESTORE;
#endif
}

/* The worker's own state: what it took on last (a thread's alone). */
static __thread bool took_placement, took_cpus;
static __thread cpu_set_t own_cpus;

#ifdef HAVE_LIBNUMA
static int take_cpus(int a, int b, void *arg, char *why, size_t len)
{
	(void)why, (void)len;
	for (int c = a; c <= b && c < CPU_SETSIZE; c++)
		CPU_SET(c, (cpu_set_t *)arg);
	return 0;
}

/* The CPUs of node into set: its cpulist ("0-3,8-11"), through prim.c. */
static int node_cpus(int node, cpu_set_t *set)
{
	char list[4096];
	HP_ERRNO_SAVE;

	CPU_ZERO(set);
	int rc = prim_node_read(node, "cpulist", list, sizeof(list)) == 0 &&
			 parse_list(list, take_cpus, set, NULL, 0) == 0 && CPU_COUNT(set)
		 ? 0 : -1;
	HP_ERRNO_RESTORE;
	return rc;
}

static int take_on(const struct numa_home *o)
{
	unsigned long one[NODE_WORDS] = {0};
	const unsigned long *nodes = o->nodes;
	int mode = o->mode;
	cpu_set_t set;

	if (o->node < 0 || o->mode < 0)
		return -1;
	if (mode == MPOL_DEFAULT || mode == MPOL_LOCAL) {
		bit_set(one, o->node);
		nodes = one;
		mode = MPOL_PREFERRED;
	}
	if (prim_set_thread_policy(mode, nodes, NODE_LIMIT + 1) < 0)
		return -1;
	took_placement = true;
	if (!o->local)
		return 0;
	if (!took_cpus && sched_getaffinity(0, sizeof(own_cpus), &own_cpus) < 0)
		return -1;
	if (node_cpus(o->node, &set) < 0 || sched_setaffinity(0, sizeof(set), &set) < 0)
		return -1;
	took_cpus = true;
	return 0;
}
#endif

int numa_home_follow(const struct numa_home *o)
{
	if (took_placement && prim_set_thread_policy(0 /* MPOL_DEFAULT */, NULL, 0) == 0)
		took_placement = false;
	if (took_cpus && sched_setaffinity(0, sizeof(own_cpus), &own_cpus) == 0)
		took_cpus = false;
	if (!o || !o->follow)
		return took_placement || took_cpus ? -1 : 0;
#ifdef HAVE_LIBNUMA
	return take_on(o);
#else
	return -1;
#endif
}
