/* Routing by size: below `threshold` libc (64-byte aligned), at or above it
 * the path `mode` names; and frees, reallocs and usable sizes stay right
 * when threshold or mode changed between allocation and free (pointers are
 * routed by address, not by the current knobs). */
#include "harness.h"

#include <errno.h>

static int backend(const void *p)
{
	struct hp_backing b;

	assert_int_equal(hp_backing(p, &b), 0);
	return b.backend;
}

/* Each origin's context counts its live huge bytes; frees through any
 * path give them back; bad origins are refused. */
static void test_origin_counts_where_bytes_came_from(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	void *torch = hp_ctx(HP_ORIGIN_TORCH, 0), *numpy = hp_ctx(HP_ORIGIN_NUMPY, 0);
	assert_non_null(torch);
	assert_ptr_equal(torch, hp_ctx(HP_ORIGIN_TORCH, 0)); /* immortal, one per origin */
	assert_ptr_not_equal(torch, numpy);
	uint64_t t0 = harness_stat(HP_STAT_TORCH_HUGE_BYTES), n0 = harness_stat(HP_STAT_NUMPY_HUGE_BYTES);
	void *a = hp_ctx_malloc(torch, 4 * MiB), *b = hp_ctx_calloc(numpy, 1, 6 * MiB);
	void *small = hp_ctx_malloc(torch, 100); /* below threshold: libc, not counted */
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(small);
	assert_int_equal(harness_stat(HP_STAT_TORCH_HUGE_BYTES) - t0, 4 * MiB);
	assert_int_equal(harness_stat(HP_STAT_NUMPY_HUGE_BYTES) - n0, 6 * MiB);
	struct hp_backing bk;
	assert_int_equal(hp_backing(a, &bk), 0);
	assert_int_equal(bk.backend, HP_BACKEND_THP);
	hp_free(a);
	hp_ctx_free(numpy, b, 6 * MiB);
	hp_ctx_free(torch, small, 100);
	assert_int_equal(harness_stat(HP_STAT_TORCH_HUGE_BYTES), t0);
	assert_int_equal(harness_stat(HP_STAT_NUMPY_HUGE_BYTES), n0);
	assert_string_equal(hp_origin_name(HP_ORIGIN_TORCH), "torch");
	assert_string_equal(hp_stat_name(HP_STAT_TORCH_HUGE_BYTES), "torch_huge_bytes");
	assert_null(hp_origin_name(HP_ORIGIN_COUNT));
	errno = 0;
	assert_null(hp_ctx(HP_ORIGIN_COUNT, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(hp_ctx(HP_ORIGIN_API, 3 * MiB));
	assert_int_equal(errno, EINVAL);
}

static void test_threshold_boundary(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "3M");
	void *below = hp_malloc(3 * MiB - 1);
	void *at = hp_malloc(3 * MiB);
	assert_non_null(below);
	assert_non_null(at);
	assert_int_equal(backend(below), HP_BACKEND_SMALL);
	assert_int_equal(backend(at), HP_BACKEND_THP);
	hp_free(below);
	hp_free(at);
}

static void test_small_alignment(void **state)
{
	(void)state;
	harness_knob("threshold", "4M");
	static const size_t sizes[] = { 1, 7, 63, 64, 65, 1000, 4097, 100000, 1 * MiB + 3 };
	void *ptrs[ARRAY_SIZE(sizes)];
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		ptrs[i] = hp_malloc(sizes[i]);
		assert_non_null(ptrs[i]);
		assert_int_equal((uintptr_t)ptrs[i] % 64, 0);
		assert_true(hp_usable_size(ptrs[i]) >= sizes[i]);
		struct hp_backing b; /* the header: small blocks report usable_size 0 */
		assert_int_equal(hp_backing(ptrs[i], &b), 0);
		assert_int_equal(b.backend, HP_BACKEND_SMALL);
		assert_int_equal(b.usable_size, 0);
		harness_fill(ptrs[i], sizes[i], i);
	}
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		assert_filled(ptrs[i], sizes[i], i);
		hp_free(ptrs[i]);
	}
	void *c = hp_calloc(3, 21);
	assert_non_null(c);
	assert_int_equal((uintptr_t)c % 64, 0);
	hp_free(c);
}

static void test_mode_off_is_all_small(void **state)
{
	(void)state;
	harness_knob("mode", "off");
	harness_knob("threshold", "1M");
	void *p = hp_malloc(16 * MiB);
	assert_non_null(p);
	assert_int_equal(backend(p), HP_BACKEND_SMALL);
	assert_int_equal((uintptr_t)p % 64, 0);
	hp_free(p);
}

/* Allocate under one setting; after a change, usable_size and free must
 * still treat the block as what it is. */
static void *alloc_as(size_t size, int expected_backend)
{
	void *p = hp_malloc(size);
	assert_non_null(p);
	assert_int_equal(backend(p), expected_backend);
	harness_fill(p, size, size);
	return p;
}

static void free_and_check_counters(void *p, size_t size, int backend_was)
{
	int stat = backend_was == HP_BACKEND_SMALL ? HP_STAT_SMALL_LIVE_BLOCKS
		 : backend_was == HP_BACKEND_THP ? HP_STAT_THP_LIVE_BLOCKS
		 : HP_STAT_HUGETLB_LIVE_BLOCKS;
	uint64_t live = harness_stat(stat);
	assert_int_equal(backend(p), backend_was);
	assert_true(hp_usable_size(p) >= size);
	assert_filled(p, size, size);
	hp_free(p);
	assert_int_equal(harness_stat(stat), live - 1);
}

static void test_threshold_raised_before_free(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	void *p = alloc_as(4 * MiB, HP_BACKEND_THP);
	harness_knob("threshold", "64M");
	free_and_check_counters(p, 4 * MiB, HP_BACKEND_THP);
}

static void test_threshold_lowered_before_free(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "64M");
	void *p = alloc_as(4 * MiB, HP_BACKEND_SMALL);
	harness_knob("threshold", "1M");
	free_and_check_counters(p, 4 * MiB, HP_BACKEND_SMALL);
}

static void test_mode_changed_before_free(void **state)
{
	(void)state;
	harness_knob("threshold", "1M");
	harness_knob("mode", "thp");
	void *thp = alloc_as(4 * MiB, HP_BACKEND_THP);
	harness_knob("mode", "off");
	void *small = alloc_as(4 * MiB, HP_BACKEND_SMALL);
	harness_knob("mode", "thp");
	free_and_check_counters(small, 4 * MiB, HP_BACKEND_SMALL);
	harness_knob("mode", "hugetlb");
	free_and_check_counters(thp, 4 * MiB, HP_BACKEND_THP);
}

static void test_hugetlb_block_after_mode_change(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 4, false);
	harness_knob("threshold", "1M");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("mode", "hugetlb");
	void *p = alloc_as(4 * MiB, HP_BACKEND_HUGETLB);
	harness_knob("mode", "off");
	harness_knob("threshold", "1G");
	free_and_check_counters(p, 4 * MiB, HP_BACKEND_HUGETLB);
}

/* Realloc of a block whose path changed keeps its contents and lands on
 * the current path. */
static void test_realloc_after_change(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "64M");
	void *p = alloc_as(2 * MiB, HP_BACKEND_SMALL);
	harness_knob("threshold", "1M");
	p = hp_realloc(p, 3 * MiB);
	assert_non_null(p);
	assert_filled(p, 2 * MiB, 2 * MiB);
	assert_int_equal(backend(p), HP_BACKEND_THP);
	harness_knob("mode", "off");
	p = hp_realloc(p, 1 * MiB);
	assert_non_null(p);
	assert_filled(p, 1 * MiB, 2 * MiB);
	assert_int_equal(backend(p), HP_BACKEND_SMALL);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_origin_counts_where_bytes_came_from),
		HTEST(test_threshold_boundary),
		HTEST(test_small_alignment),
		HTEST(test_mode_off_is_all_small),
		HTEST(test_threshold_raised_before_free),
		HTEST(test_threshold_lowered_before_free),
		HTEST(test_mode_changed_before_free),
		HTEST(test_hugetlb_block_after_mode_change),
		HTEST(test_realloc_after_change),
	};

	harness_init(argc, argv);
	return harness_run("routing", tests, ARRAY_SIZE(tests));
}
