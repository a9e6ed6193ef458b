/* hp_free_sized / hp_ctx_free with wrong size hints (NumPy passes wrong
 * sizes for shapes containing 0): every block still goes back to the
 * backend it came from.  A misrouted small block would be unmapped or a
 * huge one passed to libc free: ASan, a crash, or the live counters catch
 * it. */
#include "harness.h"

static const size_t wrong_hints[] = { 0, 1, 100, 2 * MiB, 64 * MiB, SIZE_MAX };

static int live_blocks_stat(int backend)
{
	switch (backend) {
	case HP_BACKEND_SMALL: return HP_STAT_SMALL_LIVE_BLOCKS;
	case HP_BACKEND_THP: return HP_STAT_THP_LIVE_BLOCKS;
	default: return HP_STAT_HUGETLB_LIVE_BLOCKS;
	}
}

static int live_bytes_stat(int backend)
{
	switch (backend) {
	case HP_BACKEND_SMALL: return HP_STAT_SMALL_LIVE_BYTES;
	case HP_BACKEND_THP: return HP_STAT_THP_LIVE_BYTES;
	default: return HP_STAT_HUGETLB_LIVE_BYTES;
	}
}

/* Allocates `size` (expecting `backend`), frees it with every wrong hint
 * in turn, through hp_free_sized and the NEP 49 entry point. */
static void free_with_wrong_hints(size_t size, int backend)
{
	for (size_t i = 0; i < ARRAY_SIZE(wrong_hints); i++) {
		for (int via_ctx = 0; via_ctx < 2; via_ctx++) {
			uint64_t blocks = harness_stat(live_blocks_stat(backend));
			uint64_t bytes = harness_stat(live_bytes_stat(backend));
			void *p = via_ctx ? hp_ctx_malloc(NULL, size) : hp_malloc(size);
			assert_non_null(p);
			struct hp_backing b;
			assert_int_equal(hp_backing(p, &b), 0);
			assert_int_equal(b.backend, backend);
			harness_fill(p, size, i);
			assert_filled(p, size, i);
			if (via_ctx)
				hp_ctx_free(NULL, p, wrong_hints[i]);
			else
				hp_free_sized(p, wrong_hints[i]);
			assert_int_equal(harness_stat(live_blocks_stat(backend)), blocks);
			assert_int_equal(harness_stat(live_bytes_stat(backend)), bytes);
			/* pages back before the next round (exhaustion.c checks
			 * the undrained case) */
			hp_release_drain();
			/* a huge block not kept by the cache left the address
			 * space (not handed to libc's free, not leaked) */
			if (backend != HP_BACKEND_SMALL && harness_stat(HP_STAT_CACHED_BYTES) == 0)
				assert_int_equal(harness_mapped(p, size), 0);
		}
	}
}

static void test_small_blocks(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "4M");
	free_with_wrong_hints(1, HP_BACKEND_SMALL);
	free_with_wrong_hints(4096, HP_BACKEND_SMALL);
	free_with_wrong_hints(3 * MiB, HP_BACKEND_SMALL);
}

static void test_thp_blocks(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	free_with_wrong_hints(1 * MiB, HP_BACKEND_THP);
	free_with_wrong_hints(5 * MiB + 7, HP_BACKEND_THP);
	/* and with the cache on: a wrong hint must not file the block under
	 * the wrong size bucket */
	harness_knob("cache_max", "256M");
	free_with_wrong_hints(6 * MiB, HP_BACKEND_THP);
	void *p = hp_malloc(64 * MiB);
	assert_non_null(p);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_true(b.usable_size >= 64 * MiB);
	assert_true(b.mapping_size >= 64 * MiB);
	harness_touch(p, 64 * MiB);
	hp_free(p);
}

static void test_hugetlb_blocks(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 4, false);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "0");
	free_with_wrong_hints(3 * MiB, HP_BACKEND_HUGETLB);
	hp_release_drain();
}

/* NumPy: a zero-sized array's data was allocated with size 1 and may be
 * freed with 0 (or the reverse): the block is still freed (the live
 * counters go back), and freeing NULL with any hint does nothing. */
static void test_zero_sized(void **state)
{
	(void)state;
	uint64_t blocks = harness_stat(HP_STAT_SMALL_LIVE_BLOCKS);
	uint64_t bytes = harness_stat(HP_STAT_SMALL_LIVE_BYTES);
	void *p = hp_ctx_malloc(NULL, 0);
	assert_non_null(p);
	void *q = hp_ctx_calloc(NULL, 0, 8);
	assert_non_null(q);
	assert_ptr_not_equal(p, q);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), blocks + 2);
	hp_ctx_free(NULL, p, 1);
	hp_ctx_free(NULL, q, 0);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), blocks);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BYTES), bytes);
	struct hp_stats before, after;
	assert_int_equal(hp_stats_get(&before), 0);
	hp_ctx_free(NULL, NULL, 12345);
	hp_free_sized(NULL, 0);
	hp_free(NULL);
	assert_int_equal(hp_stats_get(&after), 0);
	assert_memory_equal(&before.v[HP_STAT_SMALL_LIVE_BYTES], &after.v[HP_STAT_SMALL_LIVE_BYTES],
			    sizeof(uint64_t) * (HP_STAT_HUGETLB_LIVE_BLOCKS - HP_STAT_SMALL_LIVE_BYTES + 1));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_small_blocks),
		HTEST(test_thp_blocks),
		HTEST(test_hugetlb_blocks),
		HTEST(test_zero_sized),
	};

	harness_init(argc, argv);
	return harness_run("wrong_size_free", tests, ARRAY_SIZE(tests));
}
