/* A cached THP block that libc would have kept resident itself stays
 * resident: no MADV_FREE as it enters the cache (lib/core/cache.c,
 * libc_would_keep()).  Offering it to the kernel costs every reuse
 * (the next writes set each page's dirty bit again: a 1 MiB temporary took
 * 1.9x its in-place loop), while libc, once it has learnt a size from a
 * free (lib/core/small.c), serves blocks up to it from its heap and keeps up to
 * twice it free there.  So, each case in a fresh process (libc has learnt
 * nothing yet), the kernel's word (smaps LazyFree) and the advice calls
 * counted:
 *   - before libc has learnt a size, a freed block is offered;
 *   - after it, a block up to that size stays resident through its frees
 *     and reuses: no advice at all;
 *   - beyond twice the size in all, blocks are offered again, and what a
 *     kept block leaves when it is taken back is there for the next one;
 *   - a block larger than what libc learnt is offered. */
#include "harness.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>

/* ---- madvise, interposed: MADV_FREE calls counted, all passed on */
static atomic_int lazyfrees;

int madvise(void *addr, size_t len, int advice)
{
	static int (*real)(void *, size_t, int);
	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
	if (advice == MADV_FREE)
		atomic_fetch_add(&lazyfrees, 1);
	return real(addr, len, advice);
}

#define BLOCK (8 * MiB)

static int failed;

static void check(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "FAIL: %s\n", what);
		failed = 1;
	}
}

static void knobs(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "1G");
	hp_knob_set("cache_decay_ms", "600000");
	hp_knob_set("populate", "off");
}

/* What the kernel says of [p, p + len): LazyFree, and whether it is all
 * resident. */
static size_t lazyfree_of(const void *p, size_t len, bool *resident)
{
	struct harness_smaps m;
	if (harness_smaps_range(p, len, &m) != 0) {
		check(false, "cannot read /proc/self/smaps");
		return SIZE_MAX;
	}
	*resident = m.rss >= len;
	return m.lazyfree;
}

static void expect_lazyfree(const void *p, size_t len, size_t want, const char *what)
{
	bool resident = false;
	size_t got = lazyfree_of(p, len, &resident);
	fprintf(stderr, "%s: LazyFree %zu KiB (want %zu KiB), %s\n", what, got >> 10, want >> 10,
		resident ? "resident" : "not all resident");
	check(got == want, what);
	check(resident, "the block's pages are still there (no pressure)");
}

/* A fresh block of size, written all over. */
static char *written(size_t size, uint64_t seed)
{
	char *p = hp_malloc(size);
	if (!p) {
		fprintf(stderr, "hp_malloc(%zu) failed\n", size);
		exit(2);
	}
	harness_fill(p, size, seed);
	return p;
}

/* libc learns BLOCK from a freed block, whose mapping is then gone: what
 * follows is mapped afresh, never offered before. */
static void teach_block(void)
{
	char *p = written(BLOCK, 1);
	int before = atomic_load(&lazyfrees);
	hp_free(p);
	check(atomic_load(&lazyfrees) == before + 1, "before libc learnt a size, a freed block is offered");
	hp_cache_flush();
	hp_release_drain();
	check(harness_mapped(p, BLOCK) == 0, "the teaching block is released");
}

static int child_reuse_stays_resident(void)
{
	knobs();
	teach_block();
	char *p = written(BLOCK, 2);
	int before = atomic_load(&lazyfrees);
	hp_free(p);
	expect_lazyfree(p, BLOCK, 0, "a block libc would keep, cached");
	for (int i = 0; i < 100; i++) {
		char *q = hp_malloc(BLOCK);
		check(q == p, "the cached block is reused");
		harness_fill(q, BLOCK, 3 + (uint64_t)i);
		hp_free(q);
	}
	int calls = atomic_load(&lazyfrees) - before;
	fprintf(stderr, "MADV_FREE calls over 101 frees of a %zu MiB block: %d\n", BLOCK / MiB, calls);
	check(calls == 0, "no advice as a block libc would keep is cached and reused");
	expect_lazyfree(p, BLOCK, 0, "after 100 reuses");
	check(harness_stat(HP_STAT_CACHED_BYTES) == BLOCK, "the block is cached");
	check(harness_stat(HP_STAT_CACHED_RECLAIMABLE_BYTES) == 0, "the stats say none of it is the kernel's");
	char *q = hp_malloc(BLOCK);
	check(q == p && harness_check(q, BLOCK, 3 + 99) == SIZE_MAX, "its contents are as left");
	hp_free(q);
	return failed;
}

static int child_offered_beyond(void)
{
	knobs();
	teach_block();
	char *b[4];
	for (int i = 0; i < 4; i++)
		b[i] = written(BLOCK, 10 + (uint64_t)i);
	for (int i = 0; i < 4; i++)
		hp_free(b[i]);
	/* libc keeps at most twice what it learnt: two blocks */
	expect_lazyfree(b[0], BLOCK, 0, "first block, kept");
	expect_lazyfree(b[1], BLOCK, 0, "second block, kept");
	expect_lazyfree(b[2], BLOCK, BLOCK, "third block, offered");
	expect_lazyfree(b[3], BLOCK, BLOCK, "fourth block, offered");
	check(harness_stat(HP_STAT_CACHED_RECLAIMABLE_BYTES) == 2 * BLOCK, "the stats say two blocks are the kernel's");

	/* all four taken back: what the kept ones held is free again */
	char *again[4];
	for (int i = 0; i < 4; i++)
		again[i] = hp_malloc(BLOCK);
	check(harness_stat(HP_STAT_CACHED_BYTES) == 0, "all four reused");
	char *c[3];
	for (int i = 0; i < 3; i++)
		c[i] = written(BLOCK, 20 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		hp_free(c[i]);
	expect_lazyfree(c[0], BLOCK, 0, "after the kept blocks were taken back: kept");
	expect_lazyfree(c[1], BLOCK, 0, "after the kept blocks were taken back: kept too");
	expect_lazyfree(c[2], BLOCK, BLOCK, "and the next offered");
	for (int i = 0; i < 4; i++)
		hp_free(again[i]);
	return failed;
}

static int child_larger_offered(void)
{
	knobs();
	teach_block();
	char *p = written(3 * BLOCK, 30); /* larger than libc learnt */
	hp_free(p);
	expect_lazyfree(p, 3 * BLOCK, 3 * BLOCK, "a block larger than libc learnt");
	hp_cache_flush();
	hp_release_drain();
	char *big = written(64 * MiB, 31); /* larger than glibc ever learns */
	hp_free(big);
	expect_lazyfree(big, 64 * MiB, 64 * MiB, "a block above glibc's 32 MiB cap");
	return failed;
}

static const struct harness_child_case children[] = {
	{"reuse_stays_resident", child_reuse_stays_resident},
	{"offered_beyond", child_offered_beyond},
	{"larger_offered", child_larger_offered},
};

static void test_reuse_stays_resident(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("reuse_stays_resident");
}

static void test_offered_beyond_what_libc_keeps(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("offered_beyond");
}

static void test_larger_than_learnt_offered(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("larger_offered");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_reuse_stays_resident),
		HTEST(test_offered_beyond_what_libc_keeps),
		HTEST(test_larger_than_learnt_offered),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cache_libc_keeps", tests, ARRAY_SIZE(tests));
}
