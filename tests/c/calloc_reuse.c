/* hp_calloc returns zeroed memory, also when the block comes back dirty
 * from the reuse cache (the stats prove it was a cache hit). */
#include "harness.h"

#include <string.h>

static void cache_knobs(void)
{
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
}

/* Dirty a block of `size`, free it into the cache, calloc it back. */
static void calloc_after_reuse(size_t size, int backend)
{
	unsigned char *p = hp_malloc(size);
	assert_non_null(p);
	memset(p, 0xA5, size);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, backend);
	hp_free(p);

	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	unsigned char *q = hp_calloc(size / 8, 8);
	assert_non_null(q);
	if (backend != HP_BACKEND_SMALL)
		assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
	assert_zeroed(q, size);
	memset(q, 0x5A, size);
	hp_free(q);

	/* the NEP 49 entry point, and a slightly smaller request from the
	 * same bucket */
	q = hp_ctx_calloc(NULL, 1, size - 4096);
	assert_non_null(q);
	assert_zeroed(q, size - 4096);
	hp_free(q);
}

static void test_thp_reuse(void **state)
{
	(void)state;
	cache_knobs();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	calloc_after_reuse(4 * MiB, HP_BACKEND_THP);
	calloc_after_reuse(32 * MiB, HP_BACKEND_THP);
}

static void test_hugetlb_reuse(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 24, false);
	cache_knobs();
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	calloc_after_reuse(4 * MiB, HP_BACKEND_HUGETLB);
	calloc_after_reuse(16 * MiB, HP_BACKEND_HUGETLB);
}

static void test_small_reuse(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "4M");
	for (int i = 0; i < 50; i++)
		calloc_after_reuse(64 * KiB, HP_BACKEND_SMALL);
	calloc_after_reuse(3 * MiB, HP_BACKEND_SMALL);
}

/* A reused block is zeroed over the whole requested size even when the
 * earlier user wrote past a page boundary right at its end. */
static void test_calloc_tail_zeroed(void **state)
{
	(void)state;
	cache_knobs();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	size_t size = 8 * MiB + 123;
	unsigned char *p = hp_malloc(size);
	assert_non_null(p);
	size_t usable = hp_usable_size(p);
	assert_true(usable >= size);
	memset(p, 0xFF, usable);
	hp_free(p);
	p = hp_calloc(1, size);
	assert_non_null(p);
	assert_zeroed(p, size);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_thp_reuse),
		HTEST(test_hugetlb_reuse),
		HTEST(test_small_reuse),
		HTEST(test_calloc_tail_zeroed),
	};

	harness_init(argc, argv);
	return harness_run("calloc_reuse", tests, ARRAY_SIZE(tests));
}
