/* A THP block whose last 2 MiB extent is partial sits there on 4 KiB pages
 * (its mapping ended inside it); a realloc that grows it over that
 * extent's end has the kernel collapse the extent into a huge page
 * (MADV_COLLAPSE), which the kernel may refuse (EAGAIN while compaction or
 * reclaim holds a page; EINVAL before Linux 6.1).  Then the block moves
 * into a fresh reservation, its whole extents by their page tables, and
 * the used bytes of that extent are copied into a huge page faulted fresh
 * (lib/core/os.c refault_extent).  Staged with tests/c/fault.c: every byte the
 * block held survives -- the copy's last 4 KiB page too, which a copy one
 * page short lost with the whole suite green (issue 45) -- and the extent
 * is on a huge page; and when the reservation or the move is refused as
 * well, the block stays as it was, every byte kept. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* 5 MiB + 12 KiB: two whole extents, and 1 MiB + 12 KiB of a third. */
#define OLD (5 * MiB + 12 * KiB)
#define NEW (9 * MiB)

/* A block of OLD bytes of pattern seed that cannot grow in place (a page
 * mapped right after its guard, *neighbour, to unmap; NULL if something
 * was there already): its grow moves first, into a reservation, and
 * refault_extent's reservation and move are the second ones. */
static unsigned char *filled_block(uint64_t seed, void **neighbour)
{
	harness_need_thp();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("populate", "off");
	unsigned char *p = hp_malloc(OLD);
	assert_non_null(p);
	harness_fill(p, OLD, seed);
	*neighbour = harness_block_neighbour(p, OLD);
	return p;
}

static void unmap_neighbour(void *neighbour)
{
	if (neighbour)
		munmap(neighbour, 4096);
}

/* p grown to NEW while MADV_COLLAPSE is refused with err: the new block. */
static unsigned char *grow_uncollapsed(unsigned char *p, int err)
{
	fault_madvise(MADV_COLLAPSE, err);
	int refused = fault_madvise_refused();
	unsigned char *q = hp_realloc(p, NEW);
	fault_madvise(MADV_COLLAPSE, 0);
	assert_int_equal(fault_madvise_refused(), refused + 1);
	assert_non_null(q);
	return q;
}

/* The collapse refused: moved, the partial extent's bytes copied into a
 * fresh huge page -- all of them. */
static void test_refault_copies_every_byte(void **state)
{
	(void)state;
	const int errs[] = {EAGAIN, EINVAL};
	for (size_t i = 0; i < ARRAY_SIZE(errs); i++) {
		void *neighbour;
		unsigned char *p = filled_block(20 + i, &neighbour);
		uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
		unsigned char *q = grow_uncollapsed(p, errs[i]);
		assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies); /* not copied whole */
		assert_filled(q, OLD, 20 + i);
		harness_fill(q, NEW, 30 + i);
		assert_filled(q, NEW, 30 + i);
		struct harness_smaps k;
		assert_int_equal(harness_smaps_range(q, NEW, &k), 0);
		if (k.anon_huge < 8 * MiB)
			fail_msg("%s: %zu KiB of the grown block on huge pages, not its first 8 MiB",
				 strerror(errs[i]), k.anon_huge >> 10);
		hp_free(q);
		unmap_neighbour(neighbour);
	}
}

/* The collapse refused and no reservation to move into: the block stays
 * where it grew, on 4 KiB pages in that extent, every byte kept. */
static void test_no_reservation(void **state)
{
	(void)state;
	void *neighbour;
	unsigned char *p = filled_block(40, &neighbour);
	uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
	fault_map_reserve_after(1, 1);
	unsigned char *q = grow_uncollapsed(p, EAGAIN);
	fault_map_reserve(0);
	assert_int_equal(fault_map_reserve_refused(), 1);
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies); /* refault's was refused */
	assert_filled(q, OLD, 40);
	harness_fill(q, NEW, 41);
	assert_filled(q, NEW, 41);
	hp_free(q);
	unmap_neighbour(neighbour);
}

/* The collapse refused and the move refused (before the kernel touched the
 * reservation, or after it cleared it): the block stays, every byte kept. */
static void test_move_refused(void **state)
{
	(void)state;
	const enum fault_move how[] = {FAULT_MOVE_REFUSED, FAULT_MOVE_CLEARED};
	for (size_t i = 0; i < ARRAY_SIZE(how); i++) {
		void *neighbour;
		unsigned char *p = filled_block(50 + i, &neighbour);
		uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
		fault_mremap_fixed_after(1, ENOMEM, how[i], 1);
		unsigned char *q = grow_uncollapsed(p, EAGAIN);
		fault_mremap_fixed(0, how[i], 0);
		assert_int_equal(fault_mremap_refused(), 1);
		assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies); /* refault's was refused */
		assert_filled(q, OLD, 50 + i);
		harness_fill(q, NEW, 52 + i);
		assert_filled(q, NEW, 52 + i);
		hp_free(q);
		unmap_neighbour(neighbour);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_refault_copies_every_byte),
		HTEST(test_no_reservation),
		HTEST(test_move_refused),
	};
	harness_init(argc, argv);
	return harness_run("grow_collapse_fail", tests, ARRAY_SIZE(tests));
}
