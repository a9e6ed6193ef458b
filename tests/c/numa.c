/* The numa knob: every policy shows in /proc/self/numa_maps (read here,
 * independently of the library's reader) with its pages on the nodes it
 * allows; default leaves the kernel's policy; invalid values change
 * nothing; the cache never hands a block placed under one policy to a
 * request under another; contexts carry their own policy; shared blocks
 * are not placed (nor reported as placed); a bind on
 * hugetlb pages takes its pages from the bound node's pool when the block
 * is made.  On a machine with one node placement across nodes is checked
 * for policy only (said on stderr); with two or more, page placement too. */
#include "harness.h"
#include "numa_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BLOCK (64 * MiB)
#define MPOL_DEFAULT_ 0
#define MPOL_PREFERRED_ 1

static int nodes[NU_MAX_NODES], nnodes;

static void note_one_node(void)
{
	static bool said;
	if (nnodes < 2 && !said) {
		fprintf(stderr, "NOTE: this machine has %d NUMA node(s): multi-node placement was checked "
			"for policy only (numa_maps' policy word, pages on the allowed node); with two or "
			"more nodes these tests check where the pages go too\n", nnodes);
		said = true;
	}
}

/* THP blocks, on huge pages from their first fault: a block faulted at
 * 4 KiB first has its VMA split where its worker sampled or collapsed
 * until it settles, and one numa_maps entry per block is what these cases
 * read (the workers' faults under a placement: populate.c). */
static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("populate_pages", "2M");
}

/* The numa_maps entry of a block, after touching all of it. */
static struct nu_entry touched_entry(void *p, size_t len)
{
	struct nu_entry e;
	harness_touch(p, len);
	assert_int_equal(nu_entry_at(p, &e), 0);
	return e;
}

/* Pages only on nodes in allowed (a bit per node), all of the block. */
static void assert_pages_within(const struct nu_entry *e, uint64_t allowed, long pages)
{
	for (int n = 0; n < NU_MAX_NODES; n++)
		if (e->pages[n] && !(allowed & ((uint64_t)1 << n)))
			fail_msg("%ld pages on node %d, outside the policy's nodes", e->pages[n], n);
	assert_int_equal(e->total, pages);
}

/* The library's reader agrees with ours on the block. */
static void assert_backing_agrees(void *p, const struct nu_entry *e, const char *policy)
{
	struct hp_backing_numa b;
	assert_int_equal(hp_backing_numa((char *)p + 4096, &b), 0); /* interior pointer */
	assert_string_equal(b.policy, policy);
	assert_string_equal(b.kernel.policy, e->policy);
	assert_int_equal(b.kernel.mappings, 1);
	assert_int_equal(b.kernel.mixed, 0);
	assert_int_equal(b.kernel.page_size, (size_t)e->page_kb * KiB);
	for (int n = 0; n < HP_NUMA_NODES && n < NU_MAX_NODES; n++)
		assert_int_equal(b.kernel.node_pages[n], e->pages[n]);
}

static uint64_t all_nodes(void)
{
	uint64_t m = 0;
	for (int i = 0; i < nnodes; i++)
		m |= (uint64_t)1 << nodes[i];
	return m;
}

/* ---- parsing ------------------------------------------------------------- */

static void assert_canon(const char *in, const char *want)
{
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX] = "";
	if (hp_knob_parse("numa", in, canon, sizeof(canon), err, sizeof(err)) != 0)
		fail_msg("numa=%s refused: %s", in, err);
	assert_string_equal(canon, want);
}

static void assert_refused(const char *in, const char *reason)
{
	char canon[HP_KNOB_VALUE_MAX], before[HP_KNOB_VALUE_MAX], after[HP_KNOB_VALUE_MAX];
	char err[HP_KNOB_ERROR_MAX] = "";
	struct hp_knob_info info;

	assert_int_equal(hp_knob_parse("numa", in, canon, sizeof(canon), err, sizeof(err)), -1);
	assert_int_equal(errno, EINVAL);
	if (!strstr(err, reason) || !strstr(err, "numa:") || !strstr(err, "accepted:"))
		fail_msg("numa=%s: message '%s' lacks '%s'", in, err, reason);
	assert_true(hp_knob_get("numa", before, sizeof(before)) >= 0);
	assert_int_equal(hp_knob_set("numa", in), -1);
	assert_true(hp_knob_get("numa", after, sizeof(after)) >= 0);
	assert_string_equal(before, after); /* nothing changed */
	assert_int_equal(hp_knob_info(hp_knob_index("numa"), &info), 0);
	assert_non_null(strstr(info.rejected, reason));
}

static void test_parse(void **state)
{
	(void)state;
	assert_canon("default", "default");
	assert_canon(" local\n", "local");
	assert_canon("interleave", "interleave");
	assert_canon("interleave:0", "interleave:0");
	assert_canon("interleave:0-0", "interleave:0");
	assert_canon("bind:0", "bind:0");
	assert_canon("bind:0,0", "bind:0");
	assert_canon("preferred:0", "preferred:0");
	if (nnodes >= 2) {
		char in[32], want[32];
		snprintf(in, sizeof(in), "bind:%d,%d", nodes[1], nodes[0]);
		snprintf(want, sizeof(want), nodes[1] == nodes[0] + 1 ? "bind:%d-%d" : "bind:%d,%d",
			 nodes[0], nodes[1]);
		assert_canon(in, want);
	}
	assert_refused("bind:99", "node 99 does not exist");
	assert_refused("bind:", "no nodes after ':'");
	assert_refused("interleave:1-0", "range 1-0 is reversed");
	assert_refused("garbage", "unknown policy 'garbage'");
	assert_refused("bind", "bind needs nodes");
	assert_refused("preferred:0,0-1", nnodes >= 2 && nodes[1] == 1 ? "preferred takes one node"
								  : "node 1 does not exist");
	assert_refused("bind:0,", "no node after ','");
	assert_refused("bind:0x1", "expected ',' or '-'");
	assert_refused("local:0", "local takes no nodes");
	assert_refused("bind:0 bind:0", "numa:");
	assert_refused("Bind:0", "unknown policy");
}

/* ---- each policy in numa_maps ----------------------------------------------- */

/* The policy word numa_maps shows for a mapping nobody placed: the
 * kernel's (the thread's policy, "default" without one). */
static void kernels_word(char *buf, size_t len)
{
	struct nu_entry e;
	void *p = mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(nu_entry_at(p, &e), 0);
	snprintf(buf, len, "%s", e.policy);
	munmap(p, 2 * MiB);
}

/* A THP block under numa=value: numa_maps says want, pages within allowed. */
static struct nu_entry check_policy(const char *value, const char *want, uint64_t allowed)
{
	harness_knob("numa", value);
	void *p = hp_malloc(BLOCK);
	assert_non_null(p);
	struct nu_entry e = touched_entry(p, BLOCK);
	if (strcmp(e.policy, want) != 0)
		fail_msg("numa=%s: numa_maps says '%s', expected '%s'", value, e.policy, want);
	assert_false(e.huge);
	assert_pages_within(&e, allowed, (long)(BLOCK / 4096));
	char canon[HP_KNOB_VALUE_MAX];
	hp_knob_get("numa", canon, sizeof(canon));
	assert_backing_agrees(p, &e, canon);
	hp_free(p);
	return e;
}

static void test_policies_in_numa_maps(void **state)
{
	(void)state;
	char kernel[64], interleave_all[64] = "interleave:", word[64];
	uint64_t all = all_nodes();
	int first = nodes[0];

	thp_knobs();
	harness_knob("cache_max", "0");
	note_one_node();
	kernels_word(kernel, sizeof(kernel));
	/* every node with memory, as the kernel's node list prints them */
	for (int i = 0; i < nnodes; i++) {
		int last = i;
		while (last + 1 < nnodes && nodes[last + 1] == nodes[last] + 1)
			last++;
		snprintf(word, sizeof(word), last > i ? "%s%d-%d" : "%s%d", i ? "," : "", nodes[i], nodes[last]);
		strncat(interleave_all, word, sizeof(interleave_all) - strlen(interleave_all) - 1);
		i = last;
	}
	check_policy("default", kernel, all);
	check_policy("local", "local", all);
	check_policy("interleave", interleave_all, all);
	snprintf(word, sizeof(word), "interleave:%d", first);
	check_policy(word, word, (uint64_t)1 << first);
	snprintf(word, sizeof(word), "bind:%d", first);
	check_policy(word, word, (uint64_t)1 << first);
	char want[64];
	snprintf(word, sizeof(word), "preferred:%d", first);
	snprintf(want, sizeof(want), "prefer:%d", first);
	check_policy(word, want, all);
}

/* Where a second node exists: the pages go where the policy says. */
static void test_pages_across_nodes(void **state)
{
	(void)state;
	char value[64];
	if (nnodes < 2)
		harness_skip("one NUMA node: page placement across nodes cannot be checked here "
			     "(policies are, in policies_in_numa_maps)");
	int a = nodes[0], b = nodes[1];
	thp_knobs();
	harness_knob("cache_max", "0");
	snprintf(value, sizeof(value), "bind:%d", b);
	struct nu_entry e = check_policy(value, value, (uint64_t)1 << b);
	assert_int_equal(e.pages[b], BLOCK / 4096);
	snprintf(value, sizeof(value), nodes[1] == nodes[0] + 1 ? "interleave:%d-%d" : "interleave:%d,%d", a, b);
	e = check_policy(value, value, ((uint64_t)1 << a) | ((uint64_t)1 << b));
	assert_true(e.pages[a] > 0 && e.pages[b] > 0); /* spread over both */
	snprintf(value, sizeof(value), "preferred:%d", b);
	char want[64];
	snprintf(want, sizeof(want), "prefer:%d", b);
	e = check_policy(value, want, all_nodes());
	assert_true(e.pages[b] > e.total / 2); /* node b first */
}

/* default sets nothing: the thread's own policy shows through, and the
 * other policies override it for hpalloc's block only. */
static void test_default_is_kernels(void **state)
{
	(void)state;
	unsigned long mask = 1UL << nodes[0];
	char want[64];

	thp_knobs();
	harness_knob("cache_max", "0");
	assert_int_equal(syscall(SYS_set_mempolicy, MPOL_PREFERRED_, &mask, 8 * sizeof(mask) + 1), 0);
	snprintf(want, sizeof(want), "prefer:%d", nodes[0]);
	check_policy("default", want, all_nodes());
	check_policy("local", "local", all_nodes());
	assert_int_equal(syscall(SYS_set_mempolicy, MPOL_DEFAULT_, NULL, 0), 0);
	check_policy("default", "default", all_nodes());
}

/* The numa knob places private blocks only: a shared block keeps the
 * kernel's policy (other processes map its pages), and hp_backing_numa()
 * reports it as memory hpalloc did not place -- policy "", the kernel's
 * figures for the mapping ptr lies in -- as hpalloc.h says. */
static void test_shared_not_placed(void **state)
{
	(void)state;
	char word[64], kernel[64];
	struct hp_backing_numa b;
	int fd;

	thp_knobs();
	snprintf(word, sizeof(word), "bind:%d", nodes[0]);
	harness_knob("numa", word);
	kernels_word(kernel, sizeof(kernel));
	unsigned char *p = hp_shared_alloc(BLOCK, 0, &fd);
	assert_non_null(p);
	struct nu_entry e = touched_entry(p, BLOCK);
	if (strcmp(e.policy, kernel) != 0)
		fail_msg("shared block under numa=%s: numa_maps says '%s', the kernel's is '%s'", word,
			 e.policy, kernel);
	assert_int_equal(hp_backing_numa(p + 4096, &b), 0);
	assert_string_equal(b.policy, "");
	assert_string_equal(b.kernel.policy, e.policy);
	assert_int_equal(b.kernel.mappings, 1);
	assert_int_equal(hp_shared_free(p), 0);
}

/* ---- the cache ------------------------------------------------------------------ */

static void *alloc_expect(const char *want, bool hit)
{
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	void *p = hp_malloc(BLOCK);
	assert_non_null(p);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + (hit ? 1 : 0));
	struct nu_entry e;
	assert_int_equal(nu_entry_at(p, &e), 0);
	if (strcmp(e.policy, want) != 0)
		fail_msg("block %p: numa_maps says '%s', expected '%s'", p, e.policy, want);
	return p;
}

static void test_cache_never_crosses(void **state)
{
	(void)state;
	char bind[32], inter[32];
	snprintf(bind, sizeof(bind), "bind:%d", nodes[0]);
	snprintf(inter, sizeof(inter), "interleave:%d", nodes[0]);

	thp_knobs();
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "3600000");
	harness_knob("numa", bind);
	hp_free(alloc_expect(bind, false));
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 1);
	harness_knob("numa", inter); /* the bind:0 block must not serve this */
	void *p = alloc_expect(inter, false);
	harness_knob("numa", "default");
	void *q = alloc_expect("default", false);
	hp_free(p);
	hp_free(q);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 3);
	harness_knob("numa", bind); /* its own block again */
	p = alloc_expect(bind, true);
	/* a context's policy is a key of its own too */
	void *local = hp_ctx_numa(NULL, "local");
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	void *r = hp_ctx_malloc(local, BLOCK);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits);
	struct nu_entry e;
	assert_int_equal(nu_entry_at(r, &e), 0);
	assert_string_equal(e.policy, "local");
	hp_free(r);
	hp_free(p);
}

/* ---- contexts ------------------------------------------------------------------- */

static void test_ctx_numa(void **state)
{
	(void)state;
	char bind[32];
	snprintf(bind, sizeof(bind), "bind:%d", nodes[0]);

	void *a = hp_ctx_numa(NULL, bind), *b = hp_ctx_numa(hp_ctx(HP_ORIGIN_API, 0), bind);
	assert_non_null(a);
	assert_ptr_equal(a, b); /* interned */
	assert_ptr_not_equal(hp_ctx_numa(hp_ctx(HP_ORIGIN_NUMPY, 0), bind), a);
	assert_ptr_equal(hp_ctx_numa(a, "local"), hp_ctx_numa(NULL, "local"));
	errno = 0;
	assert_null(hp_ctx_numa(NULL, "bind:99"));
	assert_int_equal(errno, EINVAL);
	assert_null(hp_ctx_numa(NULL, NULL));

	/* the context's policy, whatever the knob says */
	thp_knobs();
	harness_knob("cache_max", "0");
	harness_knob("numa", "local");
	errno = 12345;
	void *p = hp_ctx_malloc(a, BLOCK);
	assert_non_null(p);
	assert_int_equal(errno, 12345); /* a successful call leaves errno alone */
	struct nu_entry e = touched_entry(p, BLOCK);
	assert_string_equal(e.policy, bind);
	assert_pages_within(&e, (uint64_t)1 << nodes[0], BLOCK / 4096);
	assert_backing_agrees(p, &e, bind);
	/* realloc through the same context keeps the placement */
	p = hp_ctx_realloc(a, p, 2 * BLOCK);
	assert_non_null(p);
	e = touched_entry(p, 2 * BLOCK);
	assert_string_equal(e.policy, bind);
	assert_pages_within(&e, (uint64_t)1 << nodes[0], 2 * BLOCK / 4096);
	/* through another policy: copied into a block placed that way */
	p = hp_realloc(p, 4 * BLOCK);
	assert_non_null(p);
	e = touched_entry(p, 4 * BLOCK);
	assert_string_equal(e.policy, "local");
	hp_free(p);
	/* "default" in a context means the kernel's even if the knob binds */
	harness_knob("numa", bind);
	p = hp_ctx_malloc(hp_ctx_numa(NULL, "default"), BLOCK);
	assert_non_null(p);
	assert_int_equal(nu_entry_at(p, &e), 0);
	assert_string_equal(e.policy, "default");
	hp_free(p);
}

/* ---- hugetlb pages from the bound node's pool ------------------------------------------ */

static void node_pool_or_skip(int node, long pages)
{
	char why[256];
	if (!harness_is_root())
		harness_skip("not root: cannot size node %d's hugetlb pool", node);
	if (harness_node_pool_set(node, 2 * MiB, pages, why, sizeof(why)) != 0)
		harness_skip("%s", why);
}

/* Tests run alone under tests/run-test, but on a shared machine a program
 * started by hand may use the pool meanwhile: wait (up to 2 s) until
 * node's pool is as this test left it -- free pages, and reservations of
 * the whole pool -- before a step whose outcome depends on exact counts.
 * false: someone else holds pages; the caller skips, saying so. */
static bool pool_as_left(int node, long free_pages, long resv)
{
	for (int i = 0; i < 40; i++) {
		if (harness_node_pool(node, 2 * MiB, "free_hugepages") == free_pages &&
		    harness_pool_counter(2 * MiB, "resv_hugepages") == resv)
			return true;
		harness_sleep_ms(50);
	}
	return false;
}

#define pool_as_left_or_skip(node, free_pages, resv, cleanup)                                  \
	do {                                                                                   \
		if (!pool_as_left((node), (free_pages), (resv))) {                             \
			cleanup;                                                               \
			harness_skip("node %d's 2 MiB pool is in use by another process "      \
				     "(not %ld free, %ld reserved as this test left it)",      \
				     (node), (long)(free_pages), (long)(resv));                \
		}                                                                              \
	} while (0)

static void test_hugetlb_bind_takes_node_pages(void **state)
{
	(void)state;
	int node = nodes[0];
	char bind[32];
	snprintf(bind, sizeof(bind), "bind:%d", node);
	node_pool_or_skip(node, 40);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "0");
	harness_knob("numa", bind);

	long free_before = 40;
	pool_as_left_or_skip(node, free_before, 0, (void)0);
	void *p = hp_malloc(BLOCK);
	assert_non_null(p);
	/* faulted in at allocation, from this node, before anyone touched it */
	assert_int_equal(harness_node_pool(node, 2 * MiB, "free_hugepages"), free_before - 32);
	struct nu_entry e;
	assert_int_equal(nu_entry_at(p, &e), 0);
	assert_string_equal(e.policy, bind);
	assert_true(e.huge);
	assert_int_equal(e.page_kb, 2048);
	assert_int_equal(e.pages[node], 32);
	assert_backing_agrees(p, &e, bind);
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_node_pool(node, 2 * MiB, "free_hugepages"), free_before);

	/* a context forcing 2 MiB pages and a policy: both hold */
	void *ctx = hp_ctx_numa(hp_ctx_pagesize(2 * MiB), bind);
	harness_knob("numa", "default");
	harness_knob("mode", "off");
	p = hp_ctx_malloc(ctx, 3 * MiB);
	assert_non_null(p);
	assert_int_equal(nu_entry_at(p, &e), 0);
	assert_string_equal(e.policy, bind);
	assert_true(e.huge);
	assert_int_equal(e.pages[node], 2);
	hp_free(p);
}

/* mode=auto plans hugetlb on a policy's pool from the free pages of the
 * nodes it allows minus every reservation (see lib/core/numa.c), keeping room
 * there for fork's copies of the block (see lib/core/os.c). */
static void test_auto_counts_node_pool(void **state)
{
	(void)state;
	int node = nodes[0];
	char bind[32];
	snprintf(bind, sizeof(bind), "bind:%d", node);
	node_pool_or_skip(node, 72);
	harness_knob("mode", "auto");
	harness_knob("pagesize", "auto");
	harness_knob("cache_max", "0");
	harness_knob("numa", bind);
	/* someone else's reservation of 8 pages: 64 left for us */
	void *other = mmap(NULL, 16 * MiB, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << 26), -1, 0);
	assert_true(other != MAP_FAILED);

	pool_as_left_or_skip(node, 72, 8, munmap(other, 16 * MiB));
	void *p = hp_malloc(BLOCK); /* 32 pages and room for their copies: what is left */
	struct nu_entry e;
	assert_int_equal(nu_entry_at(p, &e), 0);
	assert_true(e.huge);
	assert_string_equal(e.policy, bind);
	hp_free(p);
	hp_release_drain();
	/* one page fewer on the node: not planned there, THP instead */
	char why[256];
	if (harness_node_pool_set(node, 2 * MiB, 71, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	pool_as_left_or_skip(node, 71, 8, munmap(other, 16 * MiB));
	p = hp_malloc(BLOCK);
	assert_int_equal(nu_entry_at(p, &e), 0);
	assert_false(e.huge);
	assert_string_equal(e.policy, bind);
	hp_free(p);
	munmap(other, 16 * MiB);
}

int main(int argc, char **argv)
{
	harness_init(argc, argv);
	nnodes = nu_nodes(nodes, NU_MAX_NODES);
	if (nnodes == 0) {
		fprintf(stderr, "SKIP: no NUMA node information (/sys/devices/system/node/has_memory)\n");
		return HARNESS_EXIT_SKIP;
	}
	if (numa_unavailable())
		return HARNESS_EXIT_SKIP;
	const struct CMUnitTest tests[] = {
		HTEST(test_parse),
		HTEST(test_policies_in_numa_maps),
		HTEST(test_pages_across_nodes),
		HTEST(test_default_is_kernels),
		HTEST(test_shared_not_placed),
		HTEST(test_cache_never_crosses),
		HTEST(test_ctx_numa),
		HTEST(test_hugetlb_bind_takes_node_pages),
		HTEST(test_auto_counts_node_pool),
	};
	return harness_run("numa", tests, ARRAY_SIZE(tests)); /* pools restored by it */
}
