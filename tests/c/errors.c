/* Impossible requests return NULL with errno set (ENOMEM for sizes, EINVAL
 * for bad arguments) in every mode, are counted, and never abort; zero-byte
 * requests and freeing NULL succeed and leave errno and the counters as
 * they were. */
#include "harness.h"

#include <errno.h>

static const char *const modes[] = { "off", "thp", "hugetlb", "auto" };

static const size_t impossible[] = {
	SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2, (size_t)1 << 62, (size_t)1 << 50,
};

static void expect_enomem(void *p)
{
	int saved = errno;
	if (p) {
		hp_free(p);
		fail_msg("an impossible request returned %p", p);
	}
	assert_int_equal(saved, ENOMEM);
}

static void test_impossible_sizes_every_mode(void **state)
{
	(void)state;
	for (size_t m = 0; m < ARRAY_SIZE(modes); m++) {
		harness_knob("mode", modes[m]);
		harness_knob("threshold", "1M");
		harness_knob("fallback", "thp");
		uint64_t failures = harness_stat(HP_STAT_FAILURES);
		for (size_t i = 0; i < ARRAY_SIZE(impossible); i++) {
			errno = 0;
			expect_enomem(hp_malloc(impossible[i]));
			errno = 0;
			expect_enomem(hp_calloc(1, impossible[i]));
			errno = 0;
			expect_enomem(hp_ctx_malloc(NULL, impossible[i]));
			errno = 0;
			expect_enomem(hp_realloc(NULL, impossible[i]));
		}
		assert_true(harness_stat(HP_STAT_FAILURES) >= failures + 4 * ARRAY_SIZE(impossible));
	}
}

static void test_calloc_overflow(void **state)
{
	(void)state;
	static const size_t pairs[][2] = {
		{ SIZE_MAX, 2 }, { 2, SIZE_MAX }, { (size_t)1 << 33, (size_t)1 << 33 },
		{ SIZE_MAX / 8 + 1, 8 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(pairs); i++) {
		errno = 0;
		expect_enomem(hp_calloc(pairs[i][0], pairs[i][1]));
		errno = 0;
		expect_enomem(hp_ctx_calloc(NULL, pairs[i][0], pairs[i][1]));
	}
}

static void test_hugetlb_fail_mode(void **state)
{
	(void)state;
	harness_knob("mode", "hugetlb");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	errno = 0;
	expect_enomem(hp_malloc((size_t)1 << 40)); /* 1 TiB: no pool has it */
	errno = 0;
	expect_enomem(hp_malloc_pagesize((size_t)1 << 40, 2 * MiB, 0));
}

static void test_bad_arguments(void **state)
{
	(void)state;
	struct hp_backing b;

	errno = 0;
	assert_null(hp_malloc_pagesize(4 * MiB, 3 * MiB, 0)); /* not a page size */
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(hp_ctx_pagesize(12345));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(hp_backing(NULL, &b), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_kernel_backing(NULL, 4096, NULL), -1);
	assert_int_equal(hp_usable_size(NULL), 0);
	assert_null(hp_stat_name(-1));
	assert_null(hp_stat_name(HP_STAT_COUNT));
	assert_non_null(hp_stat_name(0));
	assert_string_equal(hp_stat_name(HP_STAT_THP_LIVE_BYTES), "thp_live_bytes");
	assert_string_equal(hp_backend_name(HP_BACKEND_SMALL), "small");
	assert_string_equal(hp_backend_name(HP_BACKEND_THP), "thp");
	assert_string_equal(hp_backend_name(HP_BACKEND_HUGETLB), "hugetlb");
	assert_string_equal(hp_source_name(HP_SOURCE_ENV), "env");
	assert_int_equal(hp_stats_get(NULL), -1);
	assert_non_null(hp_version());

	/* freeing NULL does nothing: no counter moves, errno is kept */
	struct hp_stats before, after;
	assert_int_equal(hp_stats_get(&before), 0);
	errno = EDOM;
	hp_free(NULL);
	hp_free_sized(NULL, 123);
	hp_ctx_free(NULL, NULL, 0);
	assert_int_equal(errno, EDOM);
	assert_int_equal(hp_stats_get(&after), 0);
	for (int i = 0; i < HP_STAT_COUNT; i++)
		if (i != HP_STAT_CONFIG_GENERATION && before.v[i] != after.v[i])
			fail_msg("hp_free(NULL) changed %s: %llu -> %llu", hp_stat_name(i),
				 (unsigned long long)before.v[i], (unsigned long long)after.v[i]);
}

/* Zero-byte requests succeed as glibc's do: a distinct, 64-byte aligned
 * pointer (counted as a live small block until freed), errno untouched. */
static void test_zero_size(void **state)
{
	(void)state;
	harness_knob("cache_max", "0");
	uint64_t live = harness_stat(HP_STAT_SMALL_LIVE_BLOCKS);
	errno = EDOM;
	void *a = hp_malloc(0);
	void *b = hp_malloc(0);
	void *c = hp_calloc(0, 0);
	void *d = hp_calloc(0, 8);
	assert_int_equal(errno, EDOM);
	void *const blocks[] = { a, b, c, d };
	for (size_t i = 0; i < ARRAY_SIZE(blocks); i++) {
		assert_non_null(blocks[i]);
		assert_int_equal((uintptr_t)blocks[i] % 64, 0);
		for (size_t j = 0; j < i; j++)
			assert_ptr_not_equal(blocks[i], blocks[j]);
	}
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), live + 4);
	for (size_t i = 0; i < ARRAY_SIZE(blocks); i++)
		hp_free(blocks[i]);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), live);

	/* a forced page size gives one whole (zeroed) page even for 0 bytes */
	unsigned char *e = hp_malloc_pagesize(0, 0, 1);
	assert_non_null(e);
	assert_true(hp_usable_size(e) >= 4096);
	assert_zeroed(e, hp_usable_size(e));
	struct hp_backing be;
	assert_int_equal(hp_backing(e, &be), 0);
	assert_true(be.backend == HP_BACKEND_THP || be.backend == HP_BACKEND_HUGETLB);
	hp_free(e);
	hp_release_drain();
	assert_int_equal(harness_mapped(e, 4096), 0);
	assert_int_equal(errno, EDOM);
}

/* The allocator keeps working after all those failures. */
static void test_still_works(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	for (int i = 0; i < 3; i++) {
		errno = 0;
		expect_enomem(hp_malloc(SIZE_MAX / 2));
		void *p = hp_malloc(8 * MiB);
		assert_non_null(p);
		harness_fill(p, 8 * MiB, (uint64_t)i);
		assert_filled(p, 8 * MiB, (uint64_t)i);
		hp_free(p);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_impossible_sizes_every_mode),
		HTEST(test_calloc_overflow),
		HTEST(test_hugetlb_fail_mode),
		HTEST(test_bad_arguments),
		HTEST(test_zero_size),
		HTEST(test_still_works),
	};

	harness_init(argc, argv);
	return harness_run("errors", tests, ARRAY_SIZE(tests));
}
