/* The reuse cache: hits and misses are counted, it never holds more than
 * cache_max bytes (evictions counted), and blocks idle for cache_decay_ms
 * give their pages back: RSS (smaps of the range, /proc/self/statm, the
 * hugetlb pool) drops without any call into the library. */
#include "harness.h"

/* Generous: only guards against "never"; decay itself is ~100s of ms. */
#define DECAY_WAIT_MS 10000

static void thp_cache_knobs(const char *cache_max, const char *decay_ms)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", cache_max);
	harness_knob("cache_decay_ms", decay_ms);
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

	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	void *q = hp_malloc(16 * MiB);
	assert_non_null(q);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	hp_free(q);

	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
}

static void test_bound(void **state)
{
	(void)state;
	thp_cache_knobs("8M", "60000");
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

	/* a block larger than the whole cache is never cached */
	void *big = hp_malloc(32 * MiB);
	assert_non_null(big);
	hp_free(big);
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) <= 8 * MiB);
}

static void test_cache_max_zero(void **state)
{
	(void)state;
	thp_cache_knobs("0", "60000");
	void *p = hp_malloc(8 * MiB);
	assert_non_null(p);
	hp_free(p);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
}

/* Waits (polling) until the range has at most `max_rss` resident bytes and
 * a decay was counted. */
static bool wait_for_decay(const void *p, size_t len, size_t max_rss, uint64_t decays)
{
	uint64_t deadline = harness_now_ms() + DECAY_WAIT_MS;
	struct harness_smaps s;

	do {
		harness_sleep_ms(20);
		assert_int_equal(harness_smaps_range(p, len, &s), 0);
		if (s.rss <= max_rss && harness_stat(HP_STAT_CACHE_DECAYS) > decays)
			return true;
	} while (harness_now_ms() < deadline);
	print_error("range rss %zu after %d ms, decays %llu -> %llu\n", s.rss,
		    DECAY_WAIT_MS, (unsigned long long)decays,
		    (unsigned long long)harness_stat(HP_STAT_CACHE_DECAYS));
	return false;
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
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_true(b.kernel.rss_bytes >= size);
	size_t rss1 = harness_statm_rss();
	assert_true(rss1 >= rss0 + size - 4 * MiB);

	uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);
	uint64_t released = harness_stat(HP_STAT_RELEASED_BYTES);
	hp_free(p);
	/* freed into the cache, not released yet: pages still resident */
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) >= size);
	assert_true(wait_for_decay(p, size, 0, decays));
	size_t rss2 = harness_statm_rss();
	assert_true(rss2 + size - 4 * MiB <= rss1);
	assert_true(harness_stat(HP_STAT_RELEASED_BYTES) - released >= size);
}

static void test_decay_returns_hugetlb_pages(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 8, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "200");

	void *p = hp_malloc(8 * MiB);
	assert_non_null(p);
	harness_touch(p, 8 * MiB);
	assert_int_equal(harness_pool_available(2 * MiB), 4);
	uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);
	hp_free(p);
	assert_true(harness_stat(HP_STAT_CACHED_BYTES) >= 8 * MiB);
	assert_true(wait_for_decay(p, 8 * MiB, 0, decays));
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), 8);
}

/* A block reused before its deadline is not released under the user. */
static void test_reuse_before_decay(void **state)
{
	(void)state;
	thp_cache_knobs("1G", "200");
	for (int i = 0; i < 5; i++) {
		unsigned char *p = hp_malloc(8 * MiB);
		assert_non_null(p);
		harness_fill(p, 8 * MiB, (uint64_t)i);
		harness_sleep_ms(150);
		assert_filled(p, 8 * MiB, (uint64_t)i);
		struct hp_backing b;
		assert_int_equal(hp_backing(p, &b), 0);
		assert_true(b.kernel.rss_bytes >= 8 * MiB);
		hp_free(p);
		harness_sleep_ms(50);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_hit_and_miss),
		HTEST(test_bound),
		HTEST(test_cache_max_zero),
		HTEST(test_decay_releases_rss),
		HTEST(test_decay_returns_hugetlb_pages),
		HTEST(test_reuse_before_decay),
	};

	harness_init(argc, argv);
	return harness_run("cache", tests, ARRAY_SIZE(tests));
}
