/* When a block's placement cannot be applied, the block is refused (the
 * documented rule, lib/core/numa.c): unmapped, counted in numa_refused, and the
 * request goes on as if the pool were short -- the fallback knob decides.
 * Each failure is made to happen in a child process under a seccomp filter:
 * mbind refused (as in containers whose profile forbids it), and the
 * fault-in of a bind on hugetlb pages refused (as when the bound node's
 * pages are gone).  And numa=default makes no policy call at all: under a
 * filter that kills the process on mbind or set_mempolicy, it still works. */
#include "harness.h"
#include "numa_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define BLOCK (64 * MiB)

static uint64_t stat_of(int s)
{
	struct hp_stats st;
	hp_stats_get(&st);
	return st.v[s];
}

static int set(const char *knob, const char *value)
{
	if (hp_knob_set(knob, value) == 0)
		return 0;
	fprintf(stderr, "FAIL: %s=%s refused\n", knob, value);
	return 1;
}

/* mbind refused, fallback=fail: NULL + ENOMEM, nothing left mapped. */
static int child_mbind_fail(void)
{
	int bad = set("mode", "thp") | set("fallback", "fail") | set("cache_max", "0");
	/* the library's own mappings first (janitor, ring, its thread's arena) */
	hp_free(hp_malloc(BLOCK));
	harness_sleep_ms(600);
	bad |= set("numa", "bind:0");
	int maps = nu_mapping_count();
	if (nu_seccomp_mbind(EPERM) != 0)
		return harness_expect(false, "seccomp filter");
	errno = 0;
	void *p = hp_malloc(BLOCK);
	bad |= harness_expect(p == NULL && errno == ENOMEM, "bind:0 under a refused mbind must fail with ENOMEM");
	bad |= harness_expect(stat_of(HP_STAT_NUMA_REFUSED) == 1, "numa_refused should be 1");
	bad |= harness_expect(stat_of(HP_STAT_MAPPED_BYTES) == 0, "mapped_bytes should be 0");
	bad |= harness_expect(nu_mapping_count() == maps && nu_mapping_of_size(BLOCK) == 0,
		     "the refused block is still mapped (/proc/self/maps)");
	/* the kernel's policy needs no mbind: allocations go on */
	bad |= set("numa", "default");
	p = hp_malloc(BLOCK);
	bad |= harness_expect(p != NULL, "numa=default under the same filter");
	if (p) {
		struct nu_entry e;
		memset(p, 1, BLOCK);
		bad |= harness_expect(nu_entry_at(p, &e) == 0 && strcmp(e.policy, "default") == 0, "default block in numa_maps");
		hp_free(p);
	}
	return bad;
}

/* mbind refused, fallback=small: libc memory, usable, not placed. */
static int child_mbind_small(void)
{
	int bad = set("mode", "thp") | set("fallback", "small") | set("cache_max", "0") | set("numa", "bind:0");
	if (nu_seccomp_mbind(EPERM) != 0)
		return harness_expect(false, "seccomp filter");
	char *p = hp_malloc(BLOCK);
	bad |= harness_expect(p != NULL, "fallback=small gives libc memory");
	if (!p)
		return 1;
	memset(p, 7, BLOCK);
	struct hp_backing b;
	bad |= harness_expect(hp_backing(p, &b) == 0 && b.backend == HP_BACKEND_SMALL, "the block is libc's");
	bad |= harness_expect(p[BLOCK - 1] == 7, "usable to its end");
	bad |= harness_expect(stat_of(HP_STAT_NUMA_REFUSED) == 1, "numa_refused should be 1");
	hp_free(p);
	return bad;
}

/* numa=default: no mbind, no set_mempolicy, whatever is allocated. */
static int child_default_no_policy_calls(void)
{
	int bad = set("mode", "auto") | set("cache_max", "1G");
	if (nu_seccomp_mbind(-1) != 0) /* either call kills the process */
		return harness_expect(false, "seccomp filter");
	for (int i = 0; i < 3; i++) {
		void *p = hp_malloc(BLOCK), *q = hp_calloc(1, 3 * MiB);
		bad |= harness_expect(p && q, "allocations under numa=default");
		p = hp_realloc(p, 2 * BLOCK);
		hp_free(p);
		hp_free(q);
	}
	void *ctx = hp_ctx(HP_ORIGIN_NUMPY, 0);
	void *p = hp_ctx_malloc(ctx, BLOCK);
	bad |= harness_expect(p != NULL, "through a context");
	hp_ctx_free(ctx, p, BLOCK);
	return bad;
}

/* A bind on hugetlb pages: mbind refused -- hugetlb refused, the THP
 * fallback refused too; the pool is whole afterwards. */
static int child_hugetlb_mbind_fail(void)
{
	int bad = set("mode", "hugetlb") | set("pagesize", "2M") | set("fallback", "thp") |
		  set("cache_max", "0") | set("numa", "bind:0");
	long avail = harness_pool_available(2 * MiB);
	if (nu_seccomp_mbind(EPERM) != 0)
		return harness_expect(false, "seccomp filter");
	errno = 0;
	void *p = hp_malloc(BLOCK);
	bad |= harness_expect(p == NULL && errno == ENOMEM, "hugetlb and THP both refused: NULL + ENOMEM");
	bad |= harness_expect(stat_of(HP_STAT_NUMA_REFUSED) == 2, "numa_refused should be 2 (hugetlb, then THP)");
	bad |= harness_expect(stat_of(HP_STAT_FALLBACKS) == 1, "one fallback");
	bad |= harness_expect(harness_pool_available(2 * MiB) == avail, "pool pages back");
	return bad;
}

/* The fault-in of a bind on hugetlb pages refused (as when the node has
 * no free page): refused like a short pool; with fallback=thp a THP block
 * placed the same way. */
static int child_populate_fail(void)
{
	int bad = set("mode", "hugetlb") | set("pagesize", "2M") | set("fallback", "fail") |
		  set("cache_max", "0") | set("numa", "bind:0");
	long avail = harness_pool_available(2 * MiB);
	if (nu_seccomp_populate(EFAULT) != 0)
		return harness_expect(false, "seccomp filter");
	errno = 0;
	void *p = hp_malloc(BLOCK);
	bad |= harness_expect(p == NULL && errno == ENOMEM, "fallback=fail: NULL + ENOMEM");
	/* a short node may be short because of our own cached blocks: after
	 * giving those back the library tries once more (refused again) */
	bad |= harness_expect(stat_of(HP_STAT_NUMA_REFUSED) == 2, "numa_refused should be 2 (try, retry)");
	bad |= harness_expect(harness_pool_available(2 * MiB) == avail, "pool pages back");
	bad |= set("fallback", "thp");
	p = hp_malloc(BLOCK);
	bad |= harness_expect(p != NULL, "fallback=thp gives a THP block");
	if (p) {
		struct nu_entry e;
		memset(p, 3, BLOCK);
		bad |= harness_expect(nu_entry_at(p, &e) == 0 && !e.huge && strcmp(e.policy, "bind:0") == 0,
			     "the THP block is bound to node 0 too");
		hp_free(p);
	}
	bad |= harness_expect(harness_pool_available(2 * MiB) == avail, "pool pages back after fallback");
	return bad;
}

static const struct harness_child_case children[] = {
	{"mbind_fail", child_mbind_fail},
	{"mbind_small", child_mbind_small},
	{"default_no_policy_calls", child_default_no_policy_calls},
	{"hugetlb_mbind_fail", child_hugetlb_mbind_fail},
	{"populate_fail", child_populate_fail},
};

static void run_child(const char *name)
{
	char err[4096] = "";
	int rc = harness_run_child(name, NULL, err, sizeof(err));
	if (rc != 0)
		fail_msg("child %s exited %d: %s", name, rc, err);
}

static bool node0_exists(void)
{
	int nodes[NU_MAX_NODES];
	int n = nu_nodes(nodes, NU_MAX_NODES);
	for (int i = 0; i < n; i++)
		if (nodes[i] == 0)
			return true;
	return false;
}

static void test_mbind_refused_fail(void **state)
{
	(void)state;
	run_child("mbind_fail");
}

static void test_mbind_refused_small(void **state)
{
	(void)state;
	run_child("mbind_small");
}

static void test_default_makes_no_policy_call(void **state)
{
	(void)state;
	run_child("default_no_policy_calls");
}

static void test_hugetlb_mbind_refused(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 40, true);
	run_child("hugetlb_mbind_fail");
}

static void test_populate_refused(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 40, true);
	run_child("populate_fail");
}

int main(int argc, char **argv)
{
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	if (!node0_exists()) {
		fprintf(stderr, "SKIP: no NUMA node 0 with memory (/sys/devices/system/node/has_memory)\n");
		return HARNESS_EXIT_SKIP;
	}
	if (numa_unavailable())
		return HARNESS_EXIT_SKIP;
	const struct CMUnitTest tests[] = {
		HTEST(test_mbind_refused_fail),
		HTEST(test_mbind_refused_small),
		HTEST(test_default_makes_no_policy_call),
		HTEST(test_hugetlb_mbind_refused),
		HTEST(test_populate_refused),
	};
	return harness_run("numa_fail", tests, ARRAY_SIZE(tests));
}
