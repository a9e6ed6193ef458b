/* hp_huge_realloc(ctx, ptr, 0, &out) with a context that forces a page
 * size: the huge path keeps the request (a forced context always does), so
 * it must return a usable block, as hp_huge_alloc() does for size 0 (one
 * byte) and hp_ctx_realloc() does too.  On main before the fix it returned
 * 0 with a block of zero bytes: hp_usable_size() 0, hp_backing() not
 * finding it, and its first byte the block's guard, which faults on a
 * write -- the caller's first write was a SIGSEGV.  The block's memory is checked against
 * /proc/self/maps through a write and the kernel's view of its page. */
#include "harness.h"

#include <string.h>

static void test_forced_realloc_to_zero(void **state)
{
	void *ctx = hp_ctx(HP_ORIGIN_PYTHON, 2 * MiB), *p = NULL, *q = NULL;
	struct hp_backing b;
	(void)state;
	if (!ctx)
		harness_skip("no 2 MiB hugetlb page size here");
	harness_knob("fallback", "thp"); /* pool or not, the huge path serves it */
	assert_int_equal(hp_huge_alloc(ctx, 100, 64, 0, &p), 0);
	memset(p, 7, 100);
	assert_int_equal(hp_huge_realloc(ctx, p, 0, &q), 0);
	assert_non_null(q);
	assert_true(hp_owns(q));
	assert_true(hp_usable_size(q) >= 1);
	assert_int_equal(hp_backing(q, &b), 0);
	assert_int_not_equal(b.backend, HP_BACKEND_SMALL);
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(q, 1, &sm), 0);
	assert_int_equal(sm.mappings, 1); /* the kernel maps its first byte */
	((volatile char *)q)[0] = 1;      /* a guard here: SIGSEGV */
	hp_free(q);
}

/* Not forced: size 0 is below any threshold, the caller's own allocator
 * takes it and the block stays as it was. */
static void test_unforced_realloc_to_zero_is_yours(void **state)
{
	void *p = NULL, *q = NULL;
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	assert_int_equal(hp_huge_alloc(NULL, 4 * MiB, 64, 0, &p), 0);
	harness_fill(p, 4 * MiB, 3);
	assert_int_equal(hp_huge_realloc(NULL, p, 0, &q), 1);
	assert_null(q);
	assert_true(hp_owns(p));
	assert_filled(p, 4 * MiB, 3);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_forced_realloc_to_zero),
		HTEST(test_unforced_realloc_to_zero_is_yours),
	};
	harness_init(argc, argv);
	return harness_run("huge_realloc_zero", tests, ARRAY_SIZE(tests));
}
