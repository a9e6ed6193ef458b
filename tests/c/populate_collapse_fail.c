/* The populate worker's collapse refused (populate_pages, lib/threads/populate.c
 * do_collapse; madvise interposed, fault.h).  A block faulted at 4 KiB
 * first is collapsed by its worker with MADV_COLLAPSE, which can fail:
 *   - ENOMEM (no free huge page, or no room under a memory cgroup's
 *     limit): the job ends, the block stays as it is, its data intact,
 *     freed as any; the worker is not stuck -- the next block, with the
 *     refusal lifted, is collapsed as ever;
 *   - EINVAL (a kernel without MADV_COLLAPSE): the same, and no block is
 *     faulted at 4 KiB first again: the next one is on huge pages from its
 *     first fault (smaps);
 *   - EAGAIN (a page held a moment by someone else), a few times: the
 *     chunks refused are collapsed on a later try, the block whole on huge
 *     pages (smaps) -- not left with a chunk at 4 KiB for good.
 * And the cache's drop of a block freed before its collapse refused
 * (MADV_DONTNEED: EINVAL on a range mlock()ed, e.g. under
 * mlockall(MCL_FUTURE)): the block is cached with its 4 KiB pages as they
 * are and reused from the cache, the data written anew intact; with the
 * refusal lifted the next block's pages are dropped as ever.
 * And the first block's probe refused (populate_pages=measured, nothing
 * measured yet; MADV_NOHUGEPAGE says EINVAL): the blocks are made as ever,
 * errno untouched, and the probe is not tried again at every allocation.
 * Each case in a fresh process. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define SIZE (64 * MiB)
#define FIRST (4 * MiB) /* the workers' cue */

static int knobs_cache(const char *cache_max)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", cache_max);
	hp_knob_set("uring", "off");
	hp_knob_set("populate", "1");
	if (hp_knob_set("populate_pages", "4K") != 0) {
		fprintf(stderr, "FAIL: populate_pages=4K refused: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

static int knobs(void)
{
	return knobs_cache("0");
}

/* Up to ms until the interposed madvise has refused more than before. */
static bool refused_within(int before, unsigned ms)
{
	uint64_t end = harness_now_ms() + ms;
	while (fault_madvise_refused() <= before && harness_now_ms() < end)
		harness_sleep_ms(10);
	return fault_madvise_refused() > before;
}

static int child_probe_refused(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("uring", "off");
	hp_knob_set("populate", "1");
	hp_knob_set("populate_pages", "measured");
	fault_madvise(MADV_NOHUGEPAGE, EINVAL);
	int bad = 0, before = fault_madvise_refused();
	for (int i = 0; i < 4; i++) {
		errno = 1234;
		char *p = hp_malloc(SIZE);
		bad |= harness_expect(p != NULL && errno == 1234, "hp_malloc failed or changed errno");
		if (p) {
			p[0] = 1;
			hp_free(p);
		}
	}
	int probes = fault_madvise_refused() - before;
	fprintf(stderr, "4 blocks, the probe refused: %d probes; populate_start %llu\n", probes,
		(unsigned long long)harness_stat(HP_STAT_POPULATE_START));
	bad |= harness_expect(probes >= 1, "no probe was refused: the test did not test");
	bad |= harness_expect(probes == 1, "a refused probe was tried again at every allocation");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_START) == 0, "a figure from a probe that measured nothing");
	fault_madvise(MADV_NOHUGEPAGE, 0);
	return bad;
}

/* Write the block whole, its start first until its worker has given the
 * rest the 4 KiB advice (a program quicker than the worker's first look
 * would have it on huge pages from its first faults: nothing to collapse).
 * Checked back with check_small_first(). */
static int fill_small_first(char *p, uint64_t seed)
{
	uint64_t small = harness_stat(HP_STAT_POPULATE_SMALL_FIRST);
	harness_fill_slowly(p, FIRST, seed, 0);
	int bad = harness_expect(harness_stat_reaches(HP_STAT_POPULATE_SMALL_FIRST, small + 1, 5000),
				 "the block was not faulted at 4 KiB first: the test did not test");
	harness_fill_slowly(p + FIRST, SIZE - FIRST, seed + 1, 0);
	return bad;
}

static bool check_small_first(const char *p, uint64_t seed)
{
	return harness_check_filled(p, FIRST, seed) == SIZE_MAX &&
	       harness_check_filled(p + FIRST, SIZE - FIRST, seed + 1) == SIZE_MAX;
}

/* A block written whole while MADV_COLLAPSE says err: refused at least
 * once, its data intact, freed. */
static int refused_block(int err, uint64_t seed)
{
	fault_madvise(MADV_COLLAPSE, err);
	int before = fault_madvise_refused();
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "hp_malloc failed");
	int bad = fill_small_first(p, seed);
	bad |= harness_expect(refused_within(before, 10000),
			      "no MADV_COLLAPSE was refused within 10 s: the test did not test");
	harness_sleep_ms(200); /* the job's end, after its refusal */
	fprintf(stderr, "MADV_COLLAPSE refused (%s) %d times; the block's AnonHugePages %zu MiB\n",
		strerror(err), fault_madvise_refused() - before, harness_anon_huge(p, SIZE) >> 20);
	bad |= harness_expect(check_small_first(p, seed), "the block lost data");
	hp_free(p);
	bad |= harness_expect(harness_mapped(p, SIZE) == 0, "the block is still mapped after its free (cache_max=0)");
	fault_madvise(MADV_COLLAPSE, 0);
	return bad;
}

static int child_enomem(void)
{
	if (knobs())
		return 1;
	int bad = refused_block(ENOMEM, 1);
	char *q = hp_malloc(SIZE);
	if (!q)
		return harness_expect(false, "hp_malloc failed");
	harness_fill_slowly(q, SIZE, 2, 0);
	bool huge = harness_huge_within(q, SIZE, 30000);
	fprintf(stderr, "the next block, the refusal lifted: AnonHugePages %zu MiB\n", harness_anon_huge(q, SIZE) >> 20);
	bad |= harness_expect(huge, "the next block was not collapsed within 30 s: the worker is stuck");
	bad |= harness_expect(harness_check_filled(q, SIZE, 2) == SIZE_MAX, "the next block lost data");
	hp_free(q);
	return bad;
}

static int child_einval(void)
{
	if (knobs())
		return 1;
	int bad = refused_block(EINVAL, 3);
	int refused = fault_madvise_refused();
	fault_madvise(MADV_COLLAPSE, EINVAL); /* still none: it must not be asked again */
	char *q = hp_malloc(SIZE);
	if (!q)
		return harness_expect(false, "hp_malloc failed");
	harness_fill_slowly(q, FIRST, 4, 0);
	size_t first = harness_anon_huge(q, FIRST);
	harness_fill_slowly(q + FIRST, SIZE - FIRST, 5, 0);
	harness_sleep_ms(300);
	fprintf(stderr, "the next block's first %zu MiB: AnonHugePages %zu KiB; MADV_COLLAPSE asked %d more times\n",
		(size_t)FIRST >> 20, first >> 10, fault_madvise_refused() - refused);
	bad |= harness_expect(first > 0, "a block was faulted at 4 KiB first on a kernel without MADV_COLLAPSE");
	bad |= harness_expect(fault_madvise_refused() == refused, "MADV_COLLAPSE was asked again on a kernel without it");
	bad |= harness_expect(harness_check_filled(q, FIRST, 4) == SIZE_MAX &&
		     harness_check_filled(q + FIRST, SIZE - FIRST, 5) == SIZE_MAX, "the next block lost data");
	fault_madvise(MADV_COLLAPSE, 0);
	hp_free(q);
	return bad;
}

/* EAGAIN on three chunks at the block's end: the program wrote them after
 * its worker's 4 KiB advice (the start seen first), so they are on 4 KiB
 * pages until collapsed. */
static int child_eagain(void)
{
	if (knobs())
		return 1;
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "hp_malloc failed");
	int before = fault_madvise_refused();
	fault_madvise_within(MADV_COLLAPSE, EAGAIN, 3, p + SIZE - 3 * 2 * MiB, 3 * 2 * MiB);
	int bad = fill_small_first(p, 11);
	uint64_t end = harness_now_ms() + 10000; /* every chunk, not all but one */
	while (harness_anon_huge(p, SIZE) < SIZE && harness_now_ms() < end)
		harness_sleep_ms(50);
	bool huge = harness_anon_huge(p, SIZE) == SIZE;
	int refused = fault_madvise_refused() - before;
	fprintf(stderr, "MADV_COLLAPSE refused (EAGAIN) %d times; the block's AnonHugePages %zu MiB\n",
		refused, harness_anon_huge(p, SIZE) >> 20);
	bad |= harness_expect(refused == 3, "MADV_COLLAPSE was not refused 3 times: the test did not test");
	bad |= harness_expect(huge, "the chunks refused with EAGAIN stayed on 4 KiB pages");
	bad |= harness_expect(check_small_first(p, 11), "the block lost data");
	fault_madvise(MADV_COLLAPSE, 0);
	hp_free(p);
	return bad;
}

/* A block half written (its worker ahead at 4 KiB, no collapse yet),
 * freed into the cache and taken again while MADV_DONTNEED says err (0:
 * the real one).  Whether the round went as it should. */
static int drop_round(int err, uint64_t seed)
{
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "hp_malloc failed");
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	harness_fill_slowly(p, SIZE / 2, seed, 1);
	harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + 1, 2000);
	uint64_t dropped = harness_stat(HP_STAT_POPULATE_SMALL_DROPPED_BYTES), hits = harness_stat(HP_STAT_CACHE_HITS);
	int refused = fault_madvise_refused();
	fault_madvise(MADV_DONTNEED, err);
	hp_free(p);
	fault_madvise(MADV_DONTNEED, 0);
	dropped = harness_stat(HP_STAT_POPULATE_SMALL_DROPPED_BYTES) - dropped;
	refused = fault_madvise_refused() - refused;
	char *q = hp_malloc(SIZE);
	if (!q)
		return harness_expect(false, "hp_malloc (from the cache) failed");
	harness_fill_slowly(q, SIZE, seed + 1, 0);
	fprintf(stderr, "MADV_DONTNEED %s: refused %d times, %llu MiB dropped; reused %s, AnonHugePages %zu MiB\n",
		err ? strerror(err) : "real", refused, (unsigned long long)dropped >> 20,
		q == p ? "at its address" : "elsewhere", harness_anon_huge(q, SIZE) >> 20);
	int bad = harness_expect(q == p && harness_stat(HP_STAT_CACHE_HITS) == hits + 1,
				 "the freed block did not come back from the cache");
	bad |= harness_expect(harness_check_filled(q, SIZE, seed + 1) == SIZE_MAX, "the reused block lost data");
	if (err)
		bad |= harness_expect(refused > 0 && dropped == 0,
				      "no MADV_DONTNEED was refused, or a refused drop was counted: the test did not test");
	else
		bad |= harness_expect(dropped > 0, "the refusal lifted, the next block's 4 KiB pages were not dropped");
	hp_free(q);
	hp_cache_flush(); /* the next round's block a fresh one, with its job */
	return bad;
}

static int child_drop_refused(void)
{
	if (knobs_cache("1G"))
		return 1;
	hp_knob_set("cache_decay_ms", "60000");
	int bad = drop_round(EINVAL, 7);
	return bad | drop_round(0, 9);
}

static const struct harness_child_case children[] = {
	{"enomem", child_enomem},
	{"einval", child_einval},
	{"eagain", child_eagain},
	{"probe_refused", child_probe_refused},
	{"drop_refused", child_drop_refused},
};

static void test_collapse_again(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("eagain");
}

static void test_first_probe_refused(void **state)
{
	(void)state;
	harness_child_passes("probe_refused");
}

static void test_cache_drop_refused(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("drop_refused");
}

static void test_collapse_refused_by_a_limit(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("enomem");
}

static void test_kernel_without_collapse(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("einval");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_collapse_refused_by_a_limit),
		HTEST(test_kernel_without_collapse),
		HTEST(test_collapse_again),
		HTEST(test_first_probe_refused),
		HTEST(test_cache_drop_refused),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	harness_set_watchdog(300);
	return harness_run("populate_collapse_fail", tests, ARRAY_SIZE(tests));
}
