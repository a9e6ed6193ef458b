/* hugetlb backend: blocks land on huge pages of the requested size, as
 * /proc/self/smaps says (library reader and the harness's own), pool pages
 * are reserved at map time and go back to the pool on free. */
#include "harness.h"

#include <errno.h>
#include <string.h>

static void hugetlb_knobs(const char *pagesize)
{
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", pagesize);
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "0");
}

/* Maps, checks and frees one block of `size` on `pagesize` pages. */
static void check_hugetlb_block(size_t size, size_t pagesize)
{
	size_t mapped = (size + pagesize - 1) / pagesize * pagesize;
	long before = harness_pool_available(pagesize);
	uint64_t live = harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS);

	void *p = hp_malloc(size);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % 64, 0);
	/* reserved at mmap time (no MAP_NORESERVE), before any touch */
	assert_int_equal(harness_pool_available(pagesize), before - (long)(mapped / pagesize));

	harness_fill(p, size, 42);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(b.requested_page_size, pagesize);
	assert_true(b.usable_size >= size);
	assert_int_equal(hp_usable_size(p), b.usable_size);
	assert_true(b.mapping_size >= mapped);
	assert_int_equal(b.mapping_size % pagesize, 0);
	assert_int_equal(b.kernel.kernel_page_size, pagesize);
	assert_true(b.kernel.hugetlb_bytes >= mapped);
	assert_int_equal(b.kernel.anon_huge_bytes, 0);
	harness_check_smaps_reader(p, size);
	assert_int_equal(harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS), live + 1);
	assert_filled(p, size, 42);

	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS), live);
	assert_int_equal(harness_pool_available(pagesize), before);
	assert_int_equal(harness_mapped(p, mapped), 0);
}

static void test_hugetlb_2m_pages(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 8, true);
	hugetlb_knobs("2M");
	check_hugetlb_block(6 * MiB + 123, 2 * MiB);
	check_hugetlb_block(2 * MiB, 2 * MiB);
	/* at the threshold exactly: huge path */
	check_hugetlb_block(1 * MiB, 2 * MiB);
}

static void test_hugetlb_1g_page(void **state)
{
	(void)state;
	/* the kernel may refuse a 1 GiB page (fragmentation): only this case
	 * is skipped then, with the reason */
	harness_pool_or_skip(GiB, 1, true);
	harness_pool_or_skip(2 * MiB, 64, true);
	hugetlb_knobs("1G");
	/* the knob is the largest page size: a block that fills most of a
	 * 1 GiB page gets one ... */
	check_hugetlb_block(GiB - 64 * MiB, GiB);
	/* ... a 100 MiB one would waste 90% of it and takes 2 MiB pages */
	check_hugetlb_block(100 * MiB, 2 * MiB);
}

/* hp_malloc_pagesize ignores threshold and mode. */
static void test_malloc_pagesize(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 4, true);
	harness_knob("mode", "thp");
	harness_knob("threshold", "64M");
	harness_knob("cache_max", "0");

	unsigned char *p = hp_malloc_pagesize(100 * KiB, 2 * MiB, 1);
	assert_non_null(p);
	assert_zeroed(p, 100 * KiB);
	harness_fill(p, 100 * KiB, 7);
	struct hp_backing b;
	assert_int_equal(hp_backing(p + 4000, &b), 0); /* interior pointer */
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(b.kernel.kernel_page_size, 2 * MiB);
	assert_int_equal(harness_pool_available(2 * MiB), 3);
	harness_check_smaps_reader(p, 100 * KiB);
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), 4);
}

/* The NEP 49 context forcing a page size: what the NumPy handler uses. */
static void test_ctx_pagesize(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 8, true);
	harness_knob("mode", "off");
	harness_knob("cache_max", "0");

	void *ctx = hp_ctx_pagesize(2 * MiB);
	assert_non_null(ctx);
	unsigned char *p = hp_ctx_calloc(ctx, 3, MiB);
	assert_non_null(p);
	assert_zeroed(p, 3 * MiB);
	harness_fill(p, 3 * MiB, 9);
	p = hp_ctx_realloc(ctx, p, 9 * MiB);
	assert_non_null(p);
	assert_filled(p, 3 * MiB, 9);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(b.kernel.kernel_page_size, 2 * MiB);
	hp_ctx_free(ctx, p, 1); /* wrong size hint on purpose */
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), 8);

	errno = 0;
	assert_null(hp_ctx_pagesize(3 * MiB));
	assert_int_equal(errno, EINVAL);
}

/* mode=auto: hugetlb while the pool can hold the block and keep a free
 * page for fork's copy of each (lib/core/os.c), then thp -- as smaps says: the
 * first block on 2 MiB pages (Private_Hugetlb), the second on a
 * THP-advised mapping with AnonHugePages, no hugetlb page in it. */
static void test_auto_mode_follows_pool(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 4, true);
	harness_knob("mode", "auto");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");

	void *a = hp_malloc(4 * MiB);
	void *b = hp_malloc(4 * MiB);
	assert_non_null(a);
	assert_non_null(b);
	struct hp_backing ba, bb;
	assert_int_equal(hp_backing(a, &ba), 0);
	assert_int_equal(hp_backing(b, &bb), 0);
	assert_int_equal(ba.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(bb.backend, HP_BACKEND_THP);
	harness_touch(a, 4 * MiB);
	harness_touch(b, 4 * MiB);

	struct harness_smaps sa, sb;
	assert_int_equal(harness_smaps_range(a, 4 * MiB, &sa), 0);
	assert_int_equal(sa.kernel_page_size, 2 * MiB);
	assert_int_equal(sa.hugetlb, 4 * MiB);
	assert_int_equal(harness_pool_available(2 * MiB), 2); /* the room for the copies */
	assert_int_equal(harness_smaps_range(b, 4 * MiB, &sb), 0);
	assert_int_equal(sb.kernel_page_size, 4 * KiB);
	assert_int_equal(sb.hugetlb, 0);
	assert_true(sb.thp_eligible);
	bool thp = strcmp(harness_thp_mode(), "never") != 0;
	if (thp)
		assert_true(sb.anon_huge >= 2 * MiB);
	hp_free(a);
	hp_free(b);
	hp_release_drain();
	assert_int_equal(harness_mapped(a, 4 * MiB), 0);
	assert_int_equal(harness_mapped(b, 4 * MiB), 0);
	assert_int_equal(harness_pool_available(2 * MiB), 4);
	if (!thp)
		harness_skip_cap("thp", "THP is [never]: the fallback's AnonHugePages not checked");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_hugetlb_2m_pages),
		HTEST(test_hugetlb_1g_page),
		HTEST(test_malloc_pagesize),
		HTEST(test_ctx_pagesize),
		HTEST(test_auto_mode_follows_pool),
	};

	harness_init(argc, argv);
	return harness_run("hugetlb", tests, ARRAY_SIZE(tests));
}
