/* hp_huge_alloc / hp_huge_realloc / hp_owns: the huge path alone, for
 * wrappers with an ordinary allocator of their own (the raw domain, the
 * preload library).  They never hand out or take back libc memory: below
 * the threshold, with mode=off, an alignment above 2 MiB or fallback=small
 * on a short pool they answer 1 ("yours") and change nothing. */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>

static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
}

static void test_alloc_routes(void **state)
{
	void *p = (void *)1;
	(void)state;
	thp_knobs();
	errno = 1234;
	assert_int_equal(hp_huge_alloc(NULL, 1 * MiB, 64, 0, &p), 1); /* below threshold */
	assert_ptr_equal(p, (void *)1);
	assert_int_equal(hp_huge_alloc(NULL, 4 * MiB, 4 * MiB, 0, &p), 1); /* alignment */
	assert_int_equal(hp_huge_alloc(NULL, 4 * MiB, 3, 0, &p), 1);       /* not a power of 2 */
	assert_int_equal(hp_huge_alloc(NULL, 4 * MiB, 4096, 1, &p), 0);
	assert_int_equal(errno, 1234);
	assert_true(hp_owns(p));
	assert_false(hp_owns((char *)p + 4096));
	assert_zeroed(p, 4 * MiB);
	harness_touch(p, 4 * MiB);
	struct harness_smaps k;
	assert_int_equal(harness_smaps_range(p, 4 * MiB, &k), 0);
	assert_int_equal(k.anon_huge, 4 * MiB); /* the kernel says huge */
	hp_free(p);
	assert_false(hp_owns(p));
	harness_knob("mode", "off");
	assert_int_equal(hp_huge_alloc(NULL, 64 * MiB, 64, 0, &p), 1);
}

static void test_never_owns_libc_memory(void **state)
{
	(void)state;
	thp_knobs();
	void *small = hp_malloc(1000), *libc = NULL;
	assert_int_equal(posix_memalign(&libc, 2 * MiB, 4096), 0); /* 2 MiB aligned, not ours */
	assert_false(hp_owns(small));
	assert_false(hp_owns(libc));
	assert_false(hp_owns(NULL));
	void *out;
	errno = 0;
	assert_int_equal(hp_huge_realloc(NULL, libc, 8 * MiB, &out), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_huge_alloc(NULL, 8 * MiB, 64, 0, NULL), -1);
	free(libc);
	hp_free(small);
}

static void test_realloc_stays_huge_or_says_yours(void **state)
{
	void *p, *q;
	(void)state;
	thp_knobs();
	assert_int_equal(hp_huge_alloc(hp_ctx(HP_ORIGIN_PRELOAD, 0), 3 * MiB, 64, 0, &p), 0);
	harness_fill(p, 3 * MiB, 7);
	assert_int_equal(hp_huge_realloc(NULL, p, 64 * MiB, &q), 0); /* grows, no copy (mremap) */
	assert_filled(q, 3 * MiB, 7);
	assert_true(hp_owns(q));
	harness_touch((char *)q + 3 * MiB, 61 * MiB);
	/* below the threshold: the caller's to move; the block is untouched */
	void *r = (void *)1;
	assert_int_equal(hp_huge_realloc(NULL, q, 1 * MiB, &r), 1);
	assert_ptr_equal(r, (void *)1);
	assert_true(hp_owns(q));
	assert_filled(q, 3 * MiB, 7);
	hp_free(q);
}

static void test_short_pool_fallback_small_says_yours(void **state)
{
	void *p = (void *)1;
	(void)state;
	harness_pool_or_skip(2 * MiB, 2, true);
	harness_knob("mode", "hugetlb");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
	harness_knob("fallback", "small");
	errno = 1234;
	assert_int_equal(hp_huge_alloc(NULL, 16 * MiB, 64, 0, &p), 1); /* pool of 2 pages */
	assert_ptr_equal(p, (void *)1); /* untouched */
	assert_int_equal(errno, 1234); /* "yours" changes nothing, errno neither */
	harness_knob("fallback", "fail");
	errno = 0;
	assert_int_equal(hp_huge_alloc(NULL, 16 * MiB, 64, 0, &p), -1);
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(hp_huge_alloc(NULL, 4 * MiB, 64, 0, &p), 0);
	struct harness_smaps k;
	harness_touch(p, 4 * MiB);
	assert_int_equal(harness_smaps_range(p, 4 * MiB, &k), 0);
	assert_int_equal(k.hugetlb, 4 * MiB);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_alloc_routes),
		HTEST(test_never_owns_libc_memory),
		HTEST(test_realloc_stays_huge_or_says_yours),
		HTEST(test_short_pool_fallback_small_says_yours),
	};
	harness_init(argc, argv);
	return harness_run("huge_api_never_uses_libc", tests, ARRAY_SIZE(tests));
}
