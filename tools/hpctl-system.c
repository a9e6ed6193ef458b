/* hpctl status / pool: what the kernel offers (THP, hugetlb pools, whole
 * and per NUMA node, hugetlbfs mounts, io_uring) and resizing the hugetlb
 * pools (a node's with --node). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h" /* ring_probe, numa_node_next, prim_pool_*, prim_proc_*, thp_* */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_POOLS 8
#define MAX_THP_SIZES 16
#define MAX_NODES 64 /* shown by status; pool --node takes any that exists */

/* The number a file of /proc holds (a sysctl), -1 if unreadable. */
static long long proc_number(const char *rel)
{
	char buf[64], *end;
	long long v;

	if (prim_proc_read(rel, buf, sizeof(buf)) <= 0)
		return -1;
	v = strtoll(buf, &end, 10);
	return end == buf ? -1 : v;
}

/* ---- hugetlb pools ------------------------------------------------------ */

struct pool {
	unsigned long long kb;
	long long total, free, reserved, surplus;
};

/* The counters of node's pool of pagesize (node -1: the whole pool), as
 * the library reads them; reservations are not per node. */
static struct pool pool_of(int node, size_t pagesize)
{
	return (struct pool){
		.kb = pagesize >> 10,
		.total = prim_pool_counter(node, pagesize, "nr_hugepages"),
		.free = prim_pool_counter(node, pagesize, "free_hugepages"),
		.reserved = node < 0 ? prim_pool_counter(node, pagesize, "resv_hugepages") : -1,
		.surplus = prim_pool_counter(node, pagesize, "surplus_hugepages"),
	};
}

/* The page sizes the kernel offers, ascending, with their counters. */
static int list_pools(struct pool *pools, int max)
{
	size_t sizes[MAX_POOLS];
	int n = prim_pool_sizes(sizes, max < MAX_POOLS ? max : MAX_POOLS);

	for (int i = 0; i < n; i++)
		pools[i] = pool_of(-1, sizes[i]);
	return n > 0 ? n : 0;
}

static void size_name(unsigned long long kb, char *buf, size_t len)
{
	if (hp_format_size(kb * 1024, buf, len) != 0)
		snprintf(buf, len, "%llukB", kb);
}

/* ---- per NUMA node ------------------------------------------------------------- */

/* Pools of one node: the page sizes of the whole pool, the node's share
 * (the library reads the same counters for its per-node availability). */
struct node_pools {
	int node;
	struct pool pools[MAX_POOLS];
};

static void node_pools(int node, const struct pool *sizes, int n, struct node_pools *out)
{
	out->node = node;
	for (int i = 0; i < n; i++)
		out->pools[i] = pool_of(node, (size_t)sizes[i].kb << 10);
}

/* Every node there is (the library's list, from sysfs), at most max. */
static int list_nodes(const struct pool *sizes, int n, struct node_pools *nodes, int max)
{
	int count = 0;
	for (int node = numa_node_next(-1); node >= 0 && count < max; node = numa_node_next(node))
		node_pools(node, sizes, n, &nodes[count++]);
	return count;
}

/* ---- io_uring ------------------------------------------------------------- */

struct uring_state {
	long long sysctl;    /* kernel.io_uring_disabled, -1 if absent */
	bool available;
	char detail[160];
};

/* The library's own probe: what it says is what a process would do. */
static void probe_uring(struct uring_state *u)
{
	u->sysctl = proc_number("sys/kernel/io_uring_disabled");
	u->available = ring_probe(u->detail, sizeof(u->detail));
}

/* ---- hugetlbfs mounts ------------------------------------------------------ */

struct mount_list {
	int n;
	char path[16][256];
	char opts[16][256];
};

/* A line of /proc/mounts: "device path type options dump pass". */
static int mounts_line(char *line, void *arg)
{
	struct mount_list *m = arg;
	char dev[256], path[256], type[64], opts[256];

	if (sscanf(line, "%255s %255s %63s %255s", dev, path, type, opts) != 4 ||
	    strcmp(type, "hugetlbfs") != 0)
		return 0;
	snprintf(m->path[m->n], sizeof(m->path[0]), "%s", path);
	snprintf(m->opts[m->n], sizeof(m->opts[0]), "%s", opts);
	return ++m->n == 16;
}

static void list_hugetlbfs(struct mount_list *m)
{
	m->n = 0;
	prim_proc_lines("mounts", mounts_line, m);
}

/* ---- status ------------------------------------------------------------------ */

struct status {
	char thp_enabled[256], thp_defrag[256];
	struct thp_size thp_sizes[MAX_THP_SIZES];
	int nthp_sizes;
	struct pool pools[MAX_POOLS];
	int npools;
	struct node_pools nodes[MAX_NODES];
	int nnodes;
	struct mount_list mounts;
	struct uring_state uring;
};

/* Each page size's own setting (multi-size THP), then the ones hpalloc's
 * madvised blocks get. */
static void thp_sizes_text(const struct status *s)
{
	char size[32], served[256] = "";

	if (s->nthp_sizes <= 0)
		return;
	printf("  page sizes:");
	for (int i = 0; i < s->nthp_sizes; i++) {
		size_name(s->thp_sizes[i].size >> 10, size, sizeof(size));
		printf("%s %s %s", i ? "," : "", size, s->thp_sizes[i].enabled);
		if (s->thp_sizes[i].serves)
			snprintf(served + strlen(served), sizeof(served) - strlen(served), " %s", size);
	}
	printf("\n  hpalloc's THP blocks get:%s\n", served[0] ? served : " 4K pages only");
}

static void status_text(const struct status *s)
{
	struct hp_knob_info ki;
	char size[32];

	printf("transparent hugepages: enabled %s, defrag %s\n",
	       s->thp_enabled, s->thp_defrag);
	thp_sizes_text(s);
	printf("hugetlb pools:%s\n", s->npools ? "" : " none");
	for (int i = 0; i < s->npools; i++) {
		size_name(s->pools[i].kb, size, sizeof(size));
		printf("  %-5s total %lld  free %lld  reserved %lld  surplus %lld\n",
		       size, s->pools[i].total, s->pools[i].free,
		       s->pools[i].reserved, s->pools[i].surplus);
	}
	printf("numa nodes:%s\n", s->nnodes ? "" : " none known (hpalloc built without libnuma, or no NUMA support)");
	for (int n = 0; n < s->nnodes; n++) {
		printf("  node %d:", s->nodes[n].node);
		for (int i = 0; i < s->npools; i++) {
			const struct pool *p = &s->nodes[n].pools[i];
			size_name(p->kb, size, sizeof(size));
			printf("%s %s total %lld  free %lld  surplus %lld", i ? ";" : "", size,
			       p->total, p->free, p->surplus);
		}
		printf("%s\n", s->npools ? "" : " no hugetlb pools");
	}
	printf("hugetlbfs mounts:%s\n", s->mounts.n ? "" : " none");
	for (int i = 0; i < s->mounts.n; i++)
		printf("  %s (%s)\n", s->mounts.path[i], s->mounts.opts[i]);
	printf("io_uring: %s (kernel.io_uring_disabled=%lld; %s)\n",
	       s->uring.available ? "available for page release" :
	       "unavailable: processes release pages synchronously",
	       s->uring.sysctl, s->uring.detail);
	char why[256];
	const char *dir = ctl_dir_find(why, sizeof(why));
	printf("control directory: %s\n", dir ? dir : why); /* status needs none */
	printf("effective knobs:\n");
	for (int k = 0; k < hp_knob_count(); k++)
		if (hp_knob_info(k, &ki) == 0)
			printf("  %s=%s (%s)\n", ki.name, ki.value,
			       hp_source_name(ki.source));
}

static void status_json(const struct status *s)
{
	struct json j;
	char size[32];

	json_begin(&j, stdout);
	json_obj(&j, NULL);
	json_obj(&j, "thp");
	json_str(&j, "enabled", s->thp_enabled);
	json_str(&j, "defrag", s->thp_defrag);
	json_arr(&j, "sizes");
	for (int i = 0; i < s->nthp_sizes; i++) {
		size_name(s->thp_sizes[i].size >> 10, size, sizeof(size));
		json_obj(&j, NULL);
		json_str(&j, "pagesize", size);
		json_u64(&j, "pagesize_bytes", s->thp_sizes[i].size);
		json_str(&j, "enabled", s->thp_sizes[i].enabled);
		json_bool(&j, "serves_hpalloc", s->thp_sizes[i].serves);
		json_end_obj(&j);
	}
	json_end_arr(&j);
	json_end_obj(&j);
	json_arr(&j, "hugetlb_pools");
	for (int i = 0; i < s->npools; i++) {
		size_name(s->pools[i].kb, size, sizeof(size));
		json_obj(&j, NULL);
		json_str(&j, "pagesize", size);
		json_u64(&j, "pagesize_bytes", s->pools[i].kb * 1024);
		json_num(&j, "total", s->pools[i].total);
		json_num(&j, "free", s->pools[i].free);
		json_num(&j, "reserved", s->pools[i].reserved);
		json_num(&j, "surplus", s->pools[i].surplus);
		json_end_obj(&j);
	}
	json_end_arr(&j);
	json_arr(&j, "numa_nodes");
	for (int n = 0; n < s->nnodes; n++) {
		json_obj(&j, NULL);
		json_num(&j, "node", s->nodes[n].node);
		json_arr(&j, "hugetlb_pools");
		for (int i = 0; i < s->npools; i++) {
			const struct pool *p = &s->nodes[n].pools[i];
			size_name(p->kb, size, sizeof(size));
			json_obj(&j, NULL);
			json_str(&j, "pagesize", size);
			json_u64(&j, "pagesize_bytes", p->kb * 1024);
			json_num(&j, "total", p->total);
			json_num(&j, "free", p->free);
			json_num(&j, "surplus", p->surplus);
			json_end_obj(&j);
		}
		json_end_arr(&j);
		json_end_obj(&j);
	}
	json_end_arr(&j);
	json_arr(&j, "hugetlbfs_mounts");
	for (int i = 0; i < s->mounts.n; i++) {
		json_obj(&j, NULL);
		json_str(&j, "path", s->mounts.path[i]);
		json_str(&j, "options", s->mounts.opts[i]);
		json_end_obj(&j);
	}
	json_end_arr(&j);
	json_obj(&j, "io_uring");
	json_bool(&j, "available", s->uring.available);
	json_num(&j, "io_uring_disabled", s->uring.sysctl);
	json_str(&j, "detail", s->uring.detail);
	json_end_obj(&j);
	char why[256];
	const char *dir = ctl_dir_find(why, sizeof(why));
	if (dir)
		json_str(&j, "control_dir", dir);
	else
		json_null(&j, "control_dir");
	print_effective_knobs_json(&j, "knobs");
	json_end_obj(&j);
	json_finish(&j);
}

int cmd_status(struct hpctl *c)
{
	static struct status s;

	if (c->argc)
		die_usage("status takes no arguments");
	thp_setting("enabled", s.thp_enabled, sizeof(s.thp_enabled));
	thp_setting("defrag", s.thp_defrag, sizeof(s.thp_defrag));
	s.nthp_sizes = thp_sizes(s.thp_sizes, MAX_THP_SIZES);
	s.npools = list_pools(s.pools, MAX_POOLS);
	s.nnodes = list_nodes(s.pools, s.npools, s.nodes, MAX_NODES);
	list_hugetlbfs(&s.mounts);
	probe_uring(&s.uring);
	hp_control_reload();
	if (c->json)
		status_json(&s);
	else
		status_text(&s);
	return EXIT_OK;
}

/* ---- pool ------------------------------------------------------------------------ */

struct pool_request {
	unsigned long long kb;
	unsigned long long count;
	long long got, free;
};

static int meminfo_line(char *line, void *arg)
{
	return sscanf(line, "MemTotal: %llu kB", (unsigned long long *)arg) == 1;
}

static unsigned long long mem_total_kb(void)
{
	unsigned long long kb = 0;

	prim_proc_lines("meminfo", meminfo_line, &kb);
	return kb;
}

/* A page count: decimal digits only (no sign, no suffix). */
static int parse_count(const char *text, unsigned long long *out)
{
	char *end;

	if (!*text || strspn(text, "0123456789") != strlen(text) ||
	    strlen(text) > 12)
		return -1;
	*out = strtoull(text, &end, 10);
	return 0;
}

static void offered_sizes(char *buf, size_t len)
{
	struct pool pools[MAX_POOLS];
	int n = list_pools(pools, MAX_POOLS);
	char size[32];

	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		size_name(pools[i].kb, size, sizeof(size));
		strncat(buf, " ", len - strlen(buf) - 1);
		strncat(buf, size, len - strlen(buf) - 1);
	}
}

static bool pool_exists(unsigned long long kb)
{
	size_t sizes[MAX_POOLS];
	int n = prim_pool_sizes(sizes, MAX_POOLS);

	for (int i = 0; i < n; i++)
		if (sizes[i] == (size_t)kb << 10)
			return true;
	return false;
}

static int parse_pool_arg(const char *arg, struct pool_request *r)
{
	char sizetext[64], offered[128];
	const char *eq = strchr(arg, '=');
	uint64_t bytes;
	unsigned long long mem = mem_total_kb();

	if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(sizetext)) {
		warnx("pool: expected SIZE=COUNT (e.g. 2M=512), got '%s'", arg);
		return -1;
	}
	memcpy(sizetext, arg, (size_t)(eq - arg));
	sizetext[eq - arg] = '\0';
	offered_sizes(offered, sizeof(offered));
	if (hp_parse_size(sizetext, &bytes) != 0 || bytes % 1024 ||
	    !pool_exists(bytes / 1024)) {
		warnx("pool: page size '%s' is not offered by the kernel "
		      "(accepted:%s)", sizetext, offered[0] ? offered : " none");
		return -1;
	}
	r->kb = bytes / 1024;
	if (parse_count(eq + 1, &r->count) != 0) {
		warnx("pool: invalid page count '%s' for %s (accepted: a "
		      "non-negative decimal number of pages)", eq + 1, sizetext);
		return -1;
	}
	if (mem && r->count > mem / r->kb) {
		warnx("pool: %llu pages of %s exceed this machine's memory "
		      "(at most %llu)", r->count, sizetext, mem / r->kb);
		return -1;
	}
	return 0;
}

static int write_pool(struct pool_request *r, int node)
{
	size_t pagesize = (size_t)r->kb << 10;
	int rc = 0;

	/* the file the library reads: the whole pool's, or node's (node >= 0);
	 * ENOMEM: a short pool, which still takes effect */
	if (prim_pool_write(node, pagesize, r->count) < 0 && errno != ENOMEM) {
		char size[32], where[32] = "";
		size_name(r->kb, size, sizeof(size));
		if (node >= 0)
			snprintf(where, sizeof(where), " of node %d", node);
		warnx("pool: writing the %s pool%s: %s", size, where, strerror(errno));
		rc = -1;
	}
	r->got = prim_pool_counter(node, pagesize, "nr_hugepages");
	r->free = prim_pool_counter(node, pagesize, "free_hugepages");
	return rc;
}

static void pool_report(struct hpctl *c, struct pool_request *rs, int n)
{
	struct json j;
	char size[32], where[32] = "";

	json_begin(&j, stdout);
	if (c->json)
		json_arr(&j, NULL);
	for (int i = 0; i < n; i++) {
		size_name(rs[i].kb, size, sizeof(size));
		if (c->node_given)
			snprintf(where, sizeof(where), "node %d ", c->node);
		if (c->json) {
			json_obj(&j, NULL);
			if (c->node_given)
				json_num(&j, "node", c->node);
			json_str(&j, "pagesize", size);
			json_u64(&j, "requested", rs[i].count);
			json_num(&j, "total", rs[i].got);
			json_num(&j, "free", rs[i].free);
			json_bool(&j, "ok", rs[i].got == (long long)rs[i].count);
			json_end_obj(&j);
		} else {
			printf("%s%s: requested %llu, kernel gave %lld (free %lld)%s\n",
			       where, size, rs[i].count, rs[i].got, rs[i].free,
			       rs[i].got == (long long)rs[i].count ? "" :
			       " -- SHORT: not enough contiguous memory");
		}
	}
	if (c->json) {
		json_end_arr(&j);
		json_finish(&j);
	}
}

int cmd_pool(struct hpctl *c)
{
	struct pool_request rs[MAX_POOLS];
	int bad = 0, rc = EXIT_OK;

	if (c->argc == 0)
		die_usage("pool needs SIZE=COUNT arguments (e.g. pool 2M=512)");
	if (c->argc > MAX_POOLS)
		die_usage("pool: too many arguments");
	for (int i = 0; i < c->argc; i++) {
		bad += parse_pool_arg(c->argv[i], &rs[i]) != 0;
		for (int k = 0; k < i && !bad; k++)
			if (rs[k].kb == rs[i].kb) {
				warnx("pool: page size given more than once");
				bad++;
			}
	}
	if (c->node_given && !numa_node_exists(c->node)) {
		char nodes[128] = "";
		for (int n = numa_node_next(-1); n >= 0; n = numa_node_next(n))
			snprintf(nodes + strlen(nodes), sizeof(nodes) - strlen(nodes), " %d", n);
		warnx("pool: NUMA node %d does not exist (nodes:%s)", c->node,
		      nodes[0] ? nodes : " none known");
		bad++;
	}
	if (bad)
		return EXIT_USAGE;
	if (geteuid() != 0) {
		warnx("pool: resizing hugetlb pools needs root");
		return EXIT_RUNTIME;
	}
	for (int i = 0; i < c->argc; i++)
		if (write_pool(&rs[i], c->node_given ? c->node : -1) != 0 ||
		    rs[i].got != (long long)rs[i].count)
			rc = EXIT_RUNTIME;
	pool_report(c, rs, c->argc);
	return rc;
}
