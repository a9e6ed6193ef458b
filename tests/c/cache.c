/* The reuse cache: hits and misses are counted, a hit is the same mapping
 * with its pages still resident, the cache never keeps more
 * than cache_max bytes mapped (evictions counted, /proc/self/maps agrees;
 * also right after cache_max is lowered under blocks already cached),
 * and blocks idle for cache_decay_ms go back to the kernel -- pages and
 * mapping, the hugetlb pool refilled -- within a few decay periods and
 * without any call into the library, while a block reused before its
 * deadline stays its user's.  A cached block serves a request only within
 * the waste rule (1/8 over the request): the mapping a 64 MiB request gets
 * (/proc/self/maps, smaps' hugetlb bytes) is no longer than 72 MiB. */
#include "harness.h"

#include <stdio.h>

/* A decayed block is gone between cache_decay_ms and cache_decay_ms + one
 * janitor period (250 ms) plus the release itself after its free; three
 * decay periods of 300 ms leave room for a loaded machine, and a decay
 * that waited for the next library call or a second period misses it. */
#define DECAY_MS 300
#define DECAY_BOUND_MS (3 * DECAY_MS)

static void thp_cache_knobs(const char *cache_max, const char *decay_ms)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", cache_max);
	harness_knob("cache_decay_ms", decay_ms);
	/* huge pages from the first fault: a block freed before a collapse (4 KiB
	 * first) goes into the cache without its pages, and what these cases
	 * count resident is the cache's (populate_pages: populate_choice.c) */
	harness_knob("populate_pages", "2M");
}

static void test_hit_and_miss(void **state)
{
	(void)state;
	thp_cache_knobs("256M", "60000");
	uint64_t misses = harness_stat(HP_STAT_CACHE_MISSES);
	void *p = hp_malloc(16 * MiB);
	assert_non_null(p);
	assert_int_equal(harness_stat(HP_STAT_CACHE_MISSES), misses + 1);
	harness_touch(p, 16 * MiB);
	hp_free(p);
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) >= 16 * MiB);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 1);
	assert_int_equal(harness_stat(HP_STAT_THP_LIVE_BLOCKS), 0);
	assert_true(harness_stat(HP_STAT_MAPPED_BYTES) >= 16 * MiB);
	/* cached: still mapped, pages still there */
	assert_int_equal(harness_mapped(p, 16 * MiB), 16 * MiB);

	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	void *q = hp_malloc(16 * MiB);
	assert_non_null(q);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	/* the kernel's view of a hit: the same mapping, its pages still
	 * resident (a cache that dropped them would show Rss 0 here) */
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(q, 16 * MiB, &range), 0);
	hp_free(q);
	assert_ptr_equal(q, p);
	assert_true(range.rss >= 16 * MiB);

	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	assert_int_equal(harness_mapped(p, 16 * MiB), 0);
}


/* The waste rule on reuse: a 76 MiB block cached, a 64 MiB request may
 * take 72 MiB at most (policy_fits) -- a THP block is cut (pieces.c) and
 * the request's mapping is 64 MiB; a hugetlb block (38 pages) is left
 * cached and the request gets a fresh one of 32 pages.  Before, with the
 * rule replaced by "long enough", nothing noticed: the request took the
 * whole 76 MiB (77,824 KiB mapped; 38 pool pages for 32). */
#define WASTE_CACHED (76 * MiB)
#define WASTE_WANTED (64 * MiB)
#define WASTE_MOST (WASTE_WANTED + WASTE_WANTED / 8)

static void test_waste_rule_thp(void **state)
{
	(void)state;
	harness_need_thp();
	thp_cache_knobs("1G", "60000");
	void *a = hp_malloc(WASTE_CACHED);
	assert_non_null(a);
	harness_touch(a, WASTE_CACHED);
	hp_free(a);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), WASTE_CACHED);
	void *b = hp_malloc(WASTE_WANTED);
	assert_non_null(b);
	uintptr_t start, end;
	assert_int_equal(harness_vma(b, &start, &end), 0);
	print_message("a %zu MiB block cached, a %zu MiB request: its mapping %zu KiB (at most %zu)\n",
		      WASTE_CACHED >> 20, WASTE_WANTED >> 20, (size_t)(end - start) >> 10, WASTE_MOST >> 10);
	assert_true(end - start >= WASTE_WANTED);
	assert_true(end - start <= WASTE_MOST);
	hp_free(b);
}

static void test_waste_rule_hugetlb(void **state)
{
	(void)state;
	const long pages = (WASTE_CACHED + WASTE_WANTED) / (2 * MiB);
	harness_pool_or_skip(2 * MiB, pages, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
	void *a = hp_malloc(WASTE_CACHED);
	assert_non_null(a);
	harness_touch(a, WASTE_CACHED);
	hp_free(a);
	void *b = hp_malloc(WASTE_WANTED);
	assert_non_null(b);
	harness_touch(b, WASTE_WANTED);
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(b, WASTE_WANTED, &sm), 0);
	print_message("a %zu MiB hugetlb block cached, a %zu MiB request: %zu MiB of pool pages "
		      "mapped for it (at most %zu); pool free %ld of %ld\n", WASTE_CACHED >> 20,
		      WASTE_WANTED >> 20, sm.hugetlb >> 20, WASTE_MOST >> 20,
		      harness_pool_available(2 * MiB), pages);
	assert_int_equal(sm.mappings, 1);
	assert_true(sm.hugetlb <= WASTE_MOST);
	assert_int_equal(harness_mapped(a, WASTE_CACHED), WASTE_CACHED); /* still cached */
	hp_free(b);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), pages);
}

static void test_bound(void **state)
{
	(void)state;
	thp_cache_knobs("8M", "60000");
	/* harness_still_mapped() counts every mapping where the blocks were: the 32
	 * MiB block below would start a populate worker, whose stack may land
	 * in the hole the released blocks left */
	harness_knob("populate", "off");
	void *blocks[6];
	for (size_t i = 0; i < ARRAY_SIZE(blocks); i++) {
		blocks[i] = hp_malloc(4 * MiB);
		assert_non_null(blocks[i]);
		harness_touch(blocks[i], 4 * MiB);
	}
	uint64_t evictions = harness_stat(HP_STAT_CACHE_EVICTIONS);
	for (size_t i = 0; i < ARRAY_SIZE(blocks); i++) {
		hp_free(blocks[i]);
		assert_true(harness_stat(HP_STAT_CACHED_BYTES) <= 8 * MiB);
	}
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) > 0);
	/* 24 MiB freed into an 8 MiB cache: at least 4 blocks did not stay */
	assert_true(harness_stat(HP_STAT_CACHE_EVICTIONS) - evictions >= 4);
	hp_release_drain();
	assert_true(harness_stat(HP_STAT_MAPPED_BYTES) <= 8 * MiB);
	/* what the kernel still has of them: the cache's share, no more */
	size_t kept = harness_still_mapped(blocks, ARRAY_SIZE(blocks), 4 * MiB);
	print_message("kernel keeps %zu MiB of the freed blocks (cache_max 8M)\n", kept >> 20);
	assert_true(kept > 0);
	assert_true(kept <= 8 * MiB);

	/* a block larger than the whole cache is never cached */
	void *big = hp_malloc(32 * MiB);
	assert_non_null(big);
	hp_free(big);
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) <= 8 * MiB);
	hp_release_drain();
	assert_int_equal(harness_mapped(big, 32 * MiB), 0);
	assert_true(harness_still_mapped(blocks, ARRAY_SIZE(blocks), 4 * MiB) <= 8 * MiB);
}

static void test_cache_max_zero(void **state)
{
	(void)state;
	thp_cache_knobs("0", "60000");
	void *p = hp_malloc(8 * MiB);
	assert_non_null(p);
	harness_touch(p, 8 * MiB);
	hp_free(p);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	assert_int_equal(harness_mapped(p, 8 * MiB), 0);
}

/* Waits, asking only the kernel (no call into the library, which could do
 * the release itself), until nothing of [p, p+len) is mapped any more;
 * returns the milliseconds since `freed_ms`, or fails the test once the
 * bound is over.  The decay is the one in force at the free (the gauge:
 * DECAY_MS unless the cache learnt a longer one). */
static uint64_t wait_unmapped(const void *p, size_t len, uint64_t freed_ms, uint64_t decay)
{
	uint64_t now, bound = decay + (DECAY_BOUND_MS - DECAY_MS);

	while ((now = harness_now_ms()) < freed_ms + bound && harness_mapped(p, len))
		harness_sleep_ms(5);
	size_t left = harness_mapped(p, len);
	if (left)
		fail_msg("%zu bytes still mapped %llu ms after the free (decay %llu ms)", left,
			 (unsigned long long)(now - freed_ms), (unsigned long long)decay);
	print_message("decayed and unmapped %llu ms after the free (decay %llu ms)\n",
		      (unsigned long long)(now - freed_ms), (unsigned long long)decay);
	assert_true(now - freed_ms + 10 >= decay); /* not before its time */
	return now - freed_ms;
}

/* The decay in force, read right after a free. */
static uint64_t decay_now(void)
{
	uint64_t d = harness_stat(HP_STAT_CACHE_DECAY_MS);
	assert_true(d >= DECAY_MS);
	return d;
}

static void test_decay_releases_rss(void **state)
{
	(void)state;
	thp_cache_knobs("1G", "300");
	size_t size = 64 * MiB;
	size_t rss0 = harness_statm_rss();
	unsigned char *p = hp_malloc(size);
	assert_non_null(p);
	harness_touch(p, size);
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(p, size, &range), 0);
	assert_true(range.rss >= size);
	size_t rss1 = harness_statm_rss();
	assert_true(rss1 >= rss0 + size - 4 * MiB);

	uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);
	uint64_t released = harness_stat(HP_STAT_RELEASED_BYTES);
	uint64_t freed = harness_now_ms();
	hp_free(p);
	uint64_t decay = decay_now();
	/* freed into the cache, not released yet: pages still resident */
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) >= size);
	assert_int_equal(harness_smaps_range(p, size, &range), 0);
	assert_true(range.rss >= size);
	wait_unmapped(p, size, freed, decay);
	size_t rss2 = harness_statm_rss();
	assert_true(rss2 + size - 4 * MiB <= rss1);
	assert_true(harness_stat(HP_STAT_CACHE_DECAYS) > decays);
	assert_true(harness_stat(HP_STAT_RELEASED_BYTES) - released >= size);
}

/* smaps shows hugetlb pages under Private_Hugetlb (Rss stays 0): the pool
 * count and the mapping say whether they went back. */
static void test_decay_returns_hugetlb_pages(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 8, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "300");

	void *p = hp_malloc(8 * MiB);
	assert_non_null(p);
	harness_touch(p, 8 * MiB);
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(p, 8 * MiB, &range), 0);
	assert_int_equal(range.hugetlb, 8 * MiB);
	assert_int_equal(harness_pool_available(2 * MiB), 4);
	uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);
	uint64_t freed = harness_now_ms();
	hp_free(p);
	uint64_t decay = decay_now();
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) >= 8 * MiB);
	/* cached: the pool pages stay with the block */
	assert_int_equal(harness_smaps_range(p, 8 * MiB, &range), 0);
	assert_int_equal(range.hugetlb, 8 * MiB);
	assert_int_equal(harness_pool_available(2 * MiB), 4);
	wait_unmapped(p, 8 * MiB, freed, decay);
	assert_int_equal(harness_pool_available(2 * MiB), 8);
	assert_true(harness_stat(HP_STAT_CACHE_DECAYS) > decays);
}

/* A block reused before its deadline is not released under the user.  The
 * block A is freed together with a larger block B (which no request
 * reuses), A is taken back at once (a cache hit: the same mapping, its
 * contents), and then the test waits for the one observable sign that the
 * janitor has dealt with A's old deadline: B -- freed after A, so due
 * after it -- decays.  A must be untouched: mapped, resident, contents
 * kept, and only B's decay counted. */
static void test_reuse_before_decay(void **state)
{
	(void)state;
	for (int round = 0; round < 3; round++) {
		/* each round from the knob's decay: mapping a and b right after
		 * the last round's decay would teach the cache a longer one (a
		 * knob change starts over) */
		thp_cache_knobs("1G", "1000");
		thp_cache_knobs("1G", "300");
		unsigned char *a = hp_malloc(8 * MiB);
		unsigned char *b = hp_malloc(16 * MiB);
		assert_non_null(a);
		assert_non_null(b);
		harness_fill(a, 8 * MiB, (uint64_t)round);
		harness_touch(b, 16 * MiB);
		uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
		uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);

		uint64_t freed = harness_now_ms();
		hp_free(a);
		hp_free(b);
		uint64_t decay = decay_now();
		unsigned char *again = hp_malloc(8 * MiB);
		uint64_t reused_after = harness_now_ms() - freed;
		assert_true(reused_after < DECAY_MS); /* premise: before the deadline */
		assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
		assert_ptr_equal(again, a);
		assert_filled(again, 8 * MiB, (uint64_t)round);

		wait_unmapped(b, 16 * MiB, freed, decay);
		assert_int_equal(harness_stat(HP_STAT_CACHE_DECAYS), decays + 1);
		struct harness_smaps range;
		assert_int_equal(harness_mapped(again, 8 * MiB), 8 * MiB);
		assert_int_equal(harness_smaps_range(again, 8 * MiB, &range), 0);
		assert_true(range.rss >= 8 * MiB);
		assert_filled(again, 8 * MiB, (uint64_t)round);
		hp_free(again);
		hp_cache_flush();
		hp_release_drain();
	}
}

/* The decay learns (lib/core/cache.c): a fresh mapping soon after a decay
 * doubles the decay in force, up to 32 times the knob; a decay after a
 * whole window (32 times the knob) without one halves it; a knob change
 * starts over.  Decays still come, at the decay in force. */
static void test_decay_learns(void **state)
{
	(void)state;
	const uint64_t knob = 20;
	thp_cache_knobs("1G", "20");
	uint64_t want = knob;
	for (int i = 0; i < 3; i++) {
		void *p = hp_malloc(8 * MiB); /* a miss: after a decay from i = 1 on */
		assert_non_null(p);
		if (i > 0)
			want *= 2;
		assert_int_equal(harness_stat(HP_STAT_CACHE_DECAY_MS), want);
		uint64_t freed = harness_now_ms();
		hp_free(p);
		uint64_t took = wait_unmapped(p, 8 * MiB, freed, want);
		assert_true(took + 10 >= want);
	}
	assert_int_equal(want, 4 * knob);

	/* a whole window without a fresh mapping: the next decay halves it */
	void *x = hp_malloc(8 * MiB), *y = hp_malloc(8 * MiB);
	assert_non_null(x);
	assert_non_null(y);
	want = harness_stat(HP_STAT_CACHE_DECAY_MS); /* x and y were misses too */
	assert_true(want <= 32 * knob);
	harness_sleep_ms(32 * knob + 50);
	uint64_t freed = harness_now_ms();
	hp_free(x);
	wait_unmapped(x, 8 * MiB, freed, want);
	assert_int_equal(harness_stat(HP_STAT_CACHE_DECAY_MS), want / 2 > knob ? want / 2 : knob);

	/* a knob change starts over */
	hp_free(y);
	hp_cache_flush();
	hp_release_drain();
	harness_knob("cache_decay_ms", "300");
	void *z = hp_malloc(8 * MiB);
	assert_non_null(z);
	assert_int_equal(harness_stat(HP_STAT_CACHE_DECAY_MS), 300);
	hp_free(z);
	hp_cache_flush();
	hp_release_drain();
}

/* cache_max lowered while blocks are cached: the cache gives the excess
 * back, oldest blocks first, within a few janitor periods (250 ms each)
 * and without any call into the library -- counted (cached_bytes) and
 * unmapped (/proc/self/maps).  The decay is far off, so only the lowered
 * bound can take them. */
#define LOWERED_BOUND_MS 2000

static void test_lowered_bound_trims(void **state)
{
	(void)state;
	thp_cache_knobs("1G", "600000");
	harness_janitor_start();
	void *big = hp_malloc(64 * MiB), *small[2];
	assert_non_null(big);
	harness_touch(big, 64 * MiB);
	for (size_t i = 0; i < ARRAY_SIZE(small); i++) {
		small[i] = hp_malloc(4 * MiB);
		assert_non_null(small[i]);
		harness_touch(small[i], 4 * MiB);
	}
	hp_free(big); /* the oldest: the first to go */
	for (size_t i = 0; i < ARRAY_SIZE(small); i++)
		hp_free(small[i]);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 72 * MiB);
	assert_int_equal(harness_mapped(big, 64 * MiB), 64 * MiB);

	uint64_t t0 = harness_now_ms();
	harness_knob("cache_max", "8M");
	while ((harness_stat(HP_STAT_CACHED_BYTES) > 8 * MiB || harness_mapped(big, 64 * MiB)) &&
	       harness_now_ms() < t0 + LOWERED_BOUND_MS)
		harness_sleep_ms(10);
	size_t cached = harness_stat(HP_STAT_CACHED_BYTES), mapped = harness_mapped(big, 64 * MiB);
	print_message("cache_max 1G -> 8M with 72 MiB cached: after %llu ms, %zu MiB cached, "
		      "%zu MiB of the 64 MiB block mapped\n",
		      (unsigned long long)(harness_now_ms() - t0), cached >> 20, mapped >> 20);
	if (cached > 8 * MiB || mapped)
		fail_msg("%zu bytes cached and %zu bytes of the oldest block still mapped %d ms after "
			 "cache_max went down to 8M", cached, mapped, LOWERED_BOUND_MS);
	/* the excess went, not the whole cache */
	assert_int_equal(cached, 8 * MiB);
	assert_int_equal(harness_still_mapped(small, ARRAY_SIZE(small), 4 * MiB), 8 * MiB);
}

/* cache_rss_max (the Dask plugin's bound): a process whose resident memory
 * exceeds it gets that excess back from the cache, oldest blocks first,
 * within a few janitor periods (100 ms each with the bound set) and
 * without any call into the library; while over, a freed block is not
 * kept; bound off, the cache keeps blocks again.  Judged by the kernel:
 * /proc/self/statm and /proc/self/maps. */
#define RSS_BLOCKS 4
#define RSS_BLOCK (32 * MiB)
#define RSS_BOUND_MS 3000

/* Waits until the process's resident memory is at most limit. */
static bool rss_at_most_within(size_t limit, unsigned ms)
{
	uint64_t end = harness_now_ms() + ms;
	while (harness_statm_rss() > limit && harness_now_ms() < end)
		harness_sleep_ms(20);
	return harness_statm_rss() <= limit;
}

static void set_rss_max(size_t bytes)
{
	char v[32];
	snprintf(v, sizeof(v), "%zu", bytes);
	harness_knob("cache_rss_max", v);
}

/* RSS_BLOCKS written blocks freed into a cache that keeps them (the
 * janitor running, no decay within the test). */
static void cache_written_blocks(void **blocks)
{
	thp_cache_knobs("1G", "600000");
	harness_janitor_start();
	for (size_t i = 0; i < RSS_BLOCKS; i++) {
		blocks[i] = hp_malloc(RSS_BLOCK);
		assert_non_null(blocks[i]);
		harness_touch(blocks[i], RSS_BLOCK);
	}
	for (size_t i = 0; i < RSS_BLOCKS; i++)
		hp_free(blocks[i]);
}

static void test_rss_bound_yields(void **state)
{
	(void)state;
	void *blocks[RSS_BLOCKS];
	cache_written_blocks(blocks);
	/* no bound: all cached, mapped, resident */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), RSS_BLOCKS);
	assert_int_equal(harness_still_mapped(blocks, RSS_BLOCKS, RSS_BLOCK), RSS_BLOCKS * RSS_BLOCK);
	size_t rss = harness_statm_rss();
	assert_true(rss >= RSS_BLOCKS * RSS_BLOCK);

	/* a bound half the cache below the process: about half must go */
	size_t limit = rss - RSS_BLOCKS * RSS_BLOCK / 2;
	uint64_t evictions = harness_stat(HP_STAT_CACHE_EVICTIONS);
	set_rss_max(limit);
	bool under = rss_at_most_within(limit, RSS_BOUND_MS);
	/* the pages go first, the mappings when the release completes */
	uint64_t end = harness_now_ms() + RSS_BOUND_MS;
	size_t kept;
	while ((kept = harness_still_mapped(blocks, RSS_BLOCKS, RSS_BLOCK)) == RSS_BLOCKS * RSS_BLOCK &&
	       harness_now_ms() < end)
		harness_sleep_ms(20);
	print_message("rss %zu MiB, bound %zu MiB: now %zu MiB, the kernel keeps %zu MiB of the "
		      "cached blocks\n", rss >> 20, limit >> 20, harness_statm_rss() >> 20, kept >> 20);
	assert_true(under);
	assert_true(kept < RSS_BLOCKS * RSS_BLOCK);
	assert_true(kept > 0); /* the excess went, not the whole cache */
	assert_true(harness_stat(HP_STAT_CACHE_EVICTIONS) > evictions);

	/* over the bound, a freed block is not kept */
	set_rss_max(4096);
	end = harness_now_ms() + RSS_BOUND_MS;
	while (harness_stat(HP_STAT_CACHED_BLOCKS) > 0 && harness_now_ms() < end)
		harness_sleep_ms(20);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	void *p = hp_malloc(RSS_BLOCK);
	assert_non_null(p);
	harness_touch(p, RSS_BLOCK);
	hp_free(p);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	hp_release_drain();
	assert_int_equal(harness_mapped(p, RSS_BLOCK), 0);

	/* bound off: kept again, at once */
	set_rss_max(0);
	p = hp_malloc(RSS_BLOCK);
	assert_non_null(p);
	hp_free(p);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 1);
	assert_int_equal(harness_mapped(p, RSS_BLOCK), RSS_BLOCK);
}

/* cache_rss_max and a fresh mapping: under the bound, but not with the new
 * block on top of the cache -- the cache gives the difference back before
 * the block is mapped, in the allocating thread (no janitor period to
 * wait: a memory monitor would have seen the peak). */
static void test_rss_bound_fresh_block(void **state)
{
	(void)state;
	void *blocks[RSS_BLOCKS];
	cache_written_blocks(blocks);
	assert_int_equal(harness_still_mapped(blocks, RSS_BLOCKS, RSS_BLOCK), RSS_BLOCKS * RSS_BLOCK);
	size_t rss = harness_statm_rss();
	set_rss_max(rss + 16 * MiB); /* the janitor has nothing to do */
	harness_sleep_ms(300);
	assert_int_equal(harness_still_mapped(blocks, RSS_BLOCKS, RSS_BLOCK), RSS_BLOCKS * RSS_BLOCK);

	void *big = hp_malloc(2 * RSS_BLOCK); /* no cached block fits: fresh */
	assert_non_null(big);
	/* not /proc/self/maps: the fresh block may lie where the released
	 * ones were; the process's resident memory, before big is touched */
	size_t after = harness_statm_rss();
	print_message("rss %zu MiB, bound %zu MiB, a fresh %zu MiB block: rss %zu MiB before "
		      "its first touch, %zu MiB cached\n", rss >> 20, (rss + 16 * MiB) >> 20,
		      (2 * RSS_BLOCK) >> 20, after >> 20,
		      (size_t)harness_stat(HP_STAT_CACHED_BYTES) >> 20);
	assert_true(after + 2 * RSS_BLOCK <= rss + 16 * MiB);
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) <= RSS_BLOCKS * RSS_BLOCK - (2 * RSS_BLOCK - 16 * MiB));
	harness_touch(big, 2 * RSS_BLOCK);
	hp_free(big);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_hit_and_miss),
		HTEST(test_bound),
		HTEST(test_waste_rule_thp),
		HTEST(test_waste_rule_hugetlb),
		HTEST(test_cache_max_zero),
		HTEST(test_lowered_bound_trims),
		HTEST(test_decay_releases_rss),
		HTEST(test_decay_returns_hugetlb_pages),
		HTEST(test_reuse_before_decay),
		HTEST(test_decay_learns),
		HTEST(test_rss_bound_yields),
		HTEST(test_rss_bound_fresh_block),
	};

	harness_init(argc, argv);
	return harness_run("cache", tests, ARRAY_SIZE(tests));
}
