/* Which hugetlb pool pages a placement may use (lib/core/numa.c's rule), on a
 * staged sysfs with two nodes -- so the multi-node logic is checked on a
 * machine with one -- and on this machine's real pool of node 0 (root):
 *   - a bind or an interleave over named nodes counts the free pages of
 *     those nodes minus every outstanding reservation (reservations are
 *     one global count: any of them may be served from these nodes);
 *   - default, local, preferred and interleave over every node count the
 *     whole pool (free - reserved), as without NUMA;
 *   - mode=auto (policy.c: choose_pagesize, policy_pool_ready) never plans a page
 *     size whose free pages sit on a node the placement may not use. */
#include "harness.h"
#include "../../lib/core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[512];

static void put(const char *rel, long value)
{
	char text[32];
	snprintf(text, sizeof(text), "%ld", value);
	harness_stage_file(root, rel, text);
}

/* Two nodes' 2 MiB pools: free pages on each, the global reserve. */
static void stage(long free0, long free1, long resv)
{
	put("devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages", free0);
	put("devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages", free1);
	put("kernel/mm/hugepages/hugepages-2048kB/free_hugepages", free0 + free1);
	put("kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", resv);
}

static const size_t PS = 2 * MiB;

static void test_staged_two_nodes(void **state)
{
	(void)state;
	hp_numa_t bind0 = numa_make(NUMA_BIND, 1), bind1 = numa_make(NUMA_BIND, 2);
	hp_numa_t bind01 = numa_make(NUMA_BIND, 3), inter1 = numa_make(NUMA_INTERLEAVE, 2);
	hp_numa_t pref0 = numa_make(NUMA_PREFERRED, 1), local = numa_make(NUMA_LOCAL, 0);

	snprintf(root, sizeof(root), "%s/sysfs", getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp");
	prim_sysfs_root(root);
	stage(0, 8, 0); /* every free page on node 1 */
	assert_int_equal(numa_pool_available(bind0, PS), 0);
	assert_int_equal(numa_pool_available(bind1, PS), 8);
	assert_int_equal(numa_pool_available(bind01, PS), 8);
	assert_int_equal(numa_pool_available(inter1, PS), 8);
	stage(5, 8, 3); /* 3 pages reserved by someone: counted against any set */
	assert_int_equal(numa_pool_available(bind0, PS), 2);
	assert_int_equal(numa_pool_available(bind1, PS), 5);
	assert_int_equal(numa_pool_available(bind01, PS), 10);
	/* the kernel's own policy reads the same staged pool (one root for
	 * every pool file): the whole pool's free - reserved */
	assert_int_equal(numa_pool_available(HP_NUMA_DEFAULT, PS), 10);
	assert_int_equal(os_pool_available(PS), 10);
	stage(1, 8, 3); /* reserved beyond what node 0 has free: none, not negative */
	assert_int_equal(numa_pool_available(bind0, PS), 0);
	/* the counters missing: unknown, never "all free" */
	put("kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", 0);
	char path[1024];
	snprintf(path, sizeof(path), "%s/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", root);
	unlink(path);
	assert_int_equal(numa_pool_available(bind1, PS), -1);
	prim_sysfs_root(NULL);
	/* placements that do not confine pages read the real whole pool */
	long whole = os_pool_available(PS);
	assert_int_equal(numa_pool_available(pref0, PS), whole);
	assert_int_equal(numa_pool_available(local, PS), whole);
	assert_int_equal(numa_pool_available(numa_make(NUMA_INTERLEAVE, 0), PS), whole);
	assert_int_equal(numa_pool_available(HP_NUMA_DEFAULT, PS), whole);
}

/* mode=auto's planning on the staged pools: 16 MiB (8 pages) fits node 1
 * only. */
static void test_staged_planning(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "%s/sysfs", getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp");
	prim_sysfs_root(root);
	stage(0, 8, 0);
	assert_false(policy_pool_ready(PS, 16 * MiB, numa_make(NUMA_BIND, 1), false));
	assert_true(policy_pool_ready(PS, 16 * MiB, numa_make(NUMA_BIND, 2), false));
	assert_false(policy_pool_ready(PS, 18 * MiB, numa_make(NUMA_BIND, 2), false));
	assert_true(policy_pool_ready(PS, 16 * MiB, numa_make(NUMA_INTERLEAVE, 3), false));
	/* the default policy plans from the staged whole pool too */
	assert_true(policy_pool_ready(PS, 16 * MiB, HP_NUMA_DEFAULT, false));
	assert_false(policy_pool_ready(PS, 18 * MiB, HP_NUMA_DEFAULT, false));
	prim_sysfs_root(NULL);
}

/* The real pool of node 0 (root): the library's count for bind:0 follows
 * node 0's free pages and the kernel's reservations as they change. */
static void test_real_node0(void **state)
{
	(void)state;
	char path[160];
	harness_node_pool_path(0, PS, "nr_hugepages", path, sizeof(path));
	if (!harness_is_root())
		harness_skip("not root: cannot size node 0's hugetlb pool");
	if (access(path, W_OK) != 0)
		harness_skip("no node 0 2 MiB pool (%s)", path);
	harness_pool_or_skip(PS, 0, true); /* saved and restored by the harness */
	assert_int_equal(harness_pool_save(path), 0);
	/* through the harness (pool.c), which puts node 0's pool back; a
	 * short answer (ENOMEM) is a skip, here or below */
	char why[256];
	if (harness_node_pool_set(0, PS, 24, why, sizeof(why)) != 0)
		harness_skip("%s", why);
	hp_numa_t bind0 = numa_make(NUMA_BIND, 1);
	long node_free = prim_pool_counter(0, PS, "free_hugepages");
	if (node_free != 24)
		harness_skip("kernel gave node 0 %ld free 2 MiB pages, 24 wanted", node_free);
	assert_int_equal(numa_pool_available(bind0, PS), 24);
	/* a reservation (mapped, untouched) */
	void *r = mmap(NULL, 10 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << 26), -1, 0);
	assert_true(r != MAP_FAILED);
	assert_int_equal(numa_pool_available(bind0, PS), 19);
	/* touched: the pages leave node 0's free list and the reservation */
	memset(r, 1, 10 * MiB);
	assert_int_equal(prim_pool_counter(0, PS, "free_hugepages"), 19);
	assert_int_equal(numa_pool_available(bind0, PS), 19);
	munmap(r, 10 * MiB);
	assert_int_equal(numa_pool_available(bind0, PS), 24);
}

int main(int argc, char **argv)
{
	harness_init(argc, argv);
	const struct CMUnitTest tests[] = {
		HTEST(test_staged_two_nodes),
		HTEST(test_staged_planning),
		HTEST(test_real_node0),
	};
	return harness_run("numa_pools", tests, ARRAY_SIZE(tests));
}
