/* A mapping moved onto a boundary (prim_move_into: a shmem block of a
 * shared array, a hugetlb block with its guard, a THP block growing) whose
 * move the kernel refuses: the request fails or falls back cleanly, the
 * reservation it was moving into is given back, and a mapping another
 * thread made meanwhile where the kernel had cleared the destination is
 * never taken down.  The kernel's three ways of refusing are staged with
 * fault_mremap_fixed(), each on a block fault_map_off_boundary() places
 * where it must move; a kernel that cannot move hugetlb pages (before 5.16:
 * EINVAL) still gets its block, placed the old way (by hint, tried again
 * when another thread takes the place: fault_map_hint_taken).
 *
 * Why the move at all: tests/c/shared's fork/churn case lost its block
 * (ENOMEM, 5 runs in 40) when a block was placed by handing its place back
 * and asking for it by hint, and its churn thread mapped there first. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct maps {
	int all, open; /* lines of /proc/self/maps; of them, not PROT_NONE */
};

static struct maps maps_now(void)
{
	struct maps m = {0, 0};
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char perms[8] = "";
		if (!strchr(line, '\n'))
			fail_msg("a /proc/self/maps line longer than %zu", sizeof(line));
		sscanf(line, "%*s %7s", perms);
		m.all++;
		m.open += strncmp(perms, "---", 3) != 0;
	}
	fclose(f);
	return m;
}

static void assert_taken_intact(void)
{
	size_t len;
	unsigned char *t = fault_move_taken(&len);
	assert_non_null(t);
	for (size_t i = 0; i < len; i += 512)
		if (t[i] != 0x5a)
			fail_msg("the other thread's mapping lost byte %zu of %zu", i, len);
	munmap(t, len);
}

/* The moves refused (as `how`) for one request that needed a move: what
 * is mapped before the failed request and after it. */
struct refusal {
	struct maps before, after;
	int err;
};

/* One shared block made and freed: the lazy set-up out of the counts. */
static void warm_shared(void)
{
	int fd;
	void *warm = hp_shared_alloc(4 * MiB, 0, &fd);
	assert_non_null(warm);
	assert_int_equal(hp_shared_free(warm), 0);
}

static struct refusal refuse_shared(enum fault_move how)
{
	struct refusal r;
	harness_knob("mode", "thp");
	int fd;
	warm_shared();
	fault_mremap_fixed(ENOMEM, how, 1);
	fault_map_off_boundary(1);
	r.before = maps_now();
	void *p = hp_shared_alloc(4 * MiB, 0, &fd);
	r.err = errno;
	r.after = maps_now();
	fault_mremap_fixed(0, how, 0);
	assert_int_equal(fault_mremap_refused(), 1);
	assert_null(p);
	return r;
}

/* The kernel cleared the destination and a thread mapped there: its
 * mapping survives the cleanup, nothing else is left. */
static void test_shared_move_taken(void **state)
{
	(void)state;
	struct refusal r = refuse_shared(FAULT_MOVE_TAKEN);
	assert_int_equal(r.err, ENOMEM);
	assert_int_equal(r.after.all, r.before.all + 1);
	assert_taken_intact();
}

static void test_shared_move_cleared(void **state)
{
	(void)state;
	struct refusal r = refuse_shared(FAULT_MOVE_CLEARED);
	assert_int_equal(r.err, ENOMEM);
	assert_int_equal(r.after.all, r.before.all);
}

/* Refused before the kernel touched the destination: the part of the
 * reservation the block was to fill cannot be told from another thread's
 * mapping and stays, inaccessible; nothing accessible is left. */
static void test_shared_move_refused(void **state)
{
	(void)state;
	struct refusal r = refuse_shared(FAULT_MOVE_REFUSED);
	assert_int_equal(r.err, ENOMEM);
	assert_int_equal(r.after.open, r.before.open);
	assert_true(r.after.all <= r.before.all + 1);
}

/* No reservation to move into (an address space limit): the block fails
 * with ENOMEM and leaves nothing mapped. */
static void test_shared_no_reservation(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	int fd;
	warm_shared();
	fault_map_off_boundary(1);
	fault_map_reserve(1);
	struct maps before = maps_now();
	void *p = hp_shared_alloc(4 * MiB, 0, &fd);
	int err = errno;
	struct maps after = maps_now();
	fault_map_reserve(0);
	assert_int_equal(fault_map_reserve_refused(), 1);
	assert_null(p);
	assert_int_equal(err, ENOMEM);
	assert_int_equal(after.all, before.all);
}

/* A kernel that cannot move the mapping (hugetlb before 5.16 clears the
 * destination, then says EINVAL): placed by hint instead, on a boundary. */
static void test_shared_move_unsupported(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	fault_mremap_fixed(EINVAL, FAULT_MOVE_CLEARED, 1);
	fault_map_off_boundary(1);
	int fd;
	char *p = hp_shared_alloc(4 * MiB, 0, &fd);
	fault_mremap_fixed(0, FAULT_MOVE_CLEARED, 0);
	assert_int_equal(fault_mremap_refused(), 1);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	harness_fill(p, 4 * MiB, 6);
	assert_filled(p, 4 * MiB, 6);
	assert_int_equal(hp_shared_free(p), 0);
}

/* Placed by hint, and the place taken by another thread between the
 * reservation handed back and the mapping asked for there: tried again,
 * and the block gets a boundary all the same (map_by_hint giving up after
 * its first try left the suite green, issue 45).  Taken at every try: a
 * clean ENOMEM, nothing of the tries left mapped. */
static void test_shared_hint_taken(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	warm_shared();
	fault_mremap_fixed(EINVAL, FAULT_MOVE_CLEARED, 1);
	fault_map_off_boundary(1);
	fault_map_hint_taken(1);
	int fd;
	char *p = hp_shared_alloc(4 * MiB, 0, &fd);
	int err = errno;
	fault_mremap_fixed(0, FAULT_MOVE_CLEARED, 0);
	fault_map_hint_taken(0);
	fault_hint_blockers_unmap();
	assert_int_equal(fault_map_hints_taken(), 1);
	if (!p)
		fail_msg("a place taken once failed the block: %s", strerror(err));
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	harness_fill(p, 4 * MiB, 7);
	assert_filled(p, 4 * MiB, 7);
	assert_int_equal(hp_shared_free(p), 0);
}

static void test_shared_hint_always_taken(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	warm_shared();
	fault_mremap_fixed(EINVAL, FAULT_MOVE_CLEARED, 1);
	fault_map_off_boundary(1);
	fault_map_hint_taken(16);
	struct maps before = maps_now();
	int fd;
	char *p = hp_shared_alloc(4 * MiB, 0, &fd);
	int err = errno, taken = fault_map_hints_taken();
	fault_mremap_fixed(0, FAULT_MOVE_CLEARED, 0);
	fault_map_hint_taken(0);
	struct maps after = maps_now();
	fault_hint_blockers_unmap();
	assert_null(p);
	assert_int_equal(err, ENOMEM);
	assert_true(taken >= 2 && taken < 16); /* tried more than once, and gave up */
	/* the other thread's pages alone (two of them may be one mapping) */
	assert_int_equal(after.open, before.open);
	assert_true(after.all <= before.all + taken);
}

/* p: a 2 MiB block on hugetlb pages that holds what is written to it. */
static void check_and_free_hugetlb(char *p, unsigned seed)
{
	struct hp_backing b;
	assert_non_null(p);
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	harness_fill(p, 2 * MiB, seed);
	assert_filled(p, 2 * MiB, seed);
	hp_free(p);
	hp_release_drain();
}

/* A hugetlb block whose guard's place is taken moves; refused, with a
 * thread mapping in the cleared place: the pool gets the page back (the
 * allocator's retry may take it again: then the block is on hugetlb pages
 * and whole), the thread keeps its mapping, and the next block is on
 * hugetlb pages. */
static void test_hugetlb_move_taken(void **state)
{
	(void)state;
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_pool_or_skip(2 * MiB, 2, true);
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_TAKEN, 1);
	fault_map_off_boundary(1);
	char *p = hp_malloc(2 * MiB);
	fault_mremap_fixed(0, FAULT_MOVE_TAKEN, 0);
	assert_int_equal(fault_mremap_refused(), 1);
	assert_non_null(fault_blocker());
	munmap(fault_blocker(), 4096);
	if (p) /* the allocator's retry took the page again */
		check_and_free_hugetlb(p, 5);
	assert_taken_intact();
	assert_int_equal(harness_pool_available(2 * MiB), 2);
	check_and_free_hugetlb(hp_malloc(2 * MiB), 4);
}

/* A THP block that cannot grow in place moves into a fresh reservation;
 * that move refused, with a thread mapping in the cleared place: the
 * realloc still gives every byte (copied, or the block as it was), and the
 * thread keeps its mapping. */
static void test_grow_move_taken(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
	char *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	harness_fill(p, 4 * MiB, 8);
	void *neighbour = harness_block_neighbour(p, 4 * MiB); /* NULL: a mapping is there already */
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_TAKEN, 1);
	char *q = hp_realloc(p, 64 * MiB);
	fault_mremap_fixed(0, FAULT_MOVE_TAKEN, 0);
	assert_int_equal(fault_mremap_refused(), 1);
	assert_taken_intact();
	assert_non_null(q);
	assert_filled(q, 4 * MiB, 8);
	harness_fill(q, 64 * MiB, 9);
	assert_filled(q, 64 * MiB, 9);
	hp_free(q);
	if (neighbour)
		munmap(neighbour, 4096);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_shared_move_taken),
		HTEST(test_shared_move_cleared),
		HTEST(test_shared_move_refused),
		HTEST(test_shared_no_reservation),
		HTEST(test_shared_move_unsupported),
		HTEST(test_shared_hint_taken),
		HTEST(test_shared_hint_always_taken),
		HTEST(test_hugetlb_move_taken),
		HTEST(test_grow_move_taken),
	};
	harness_init(argc, argv);
	return harness_run("map_move_fail", tests, ARRAY_SIZE(tests));
}
