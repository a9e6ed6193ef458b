/* Successful calls leave errno as they found it.  On main before the fix
 * the first hp_malloc(100) left ENOENT (absent control files) and a
 * hugetlb->THP fallback left ENOMEM; a realloc that had to move (the try
 * in place failed) must not leave that failure's ENOMEM either.  Each call below succeeds and must
 * leave a sentinel errno untouched; the first call happens in a fresh
 * process, where lazy initialisation runs. */
#include "harness.h"
#include "keeps_errno.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>


static int child_first_calls(void)
{
	void *p = NULL, *q = NULL, *r = NULL;
	struct hp_backing b;
	struct hp_stats st;
	struct hp_knob_info ki;
	char buf[64];
	uint64_t v;

	KEEPS(p = hp_malloc(100)); /* the very first call: lazy init */
	KEEPS(hp_free(p));
	KEEPS(hp_knob_set("mode", "thp"));
	KEEPS(hp_knob_set("threshold", "1M"));
	KEEPS(p = hp_malloc(8 * MiB));
	KEEPS(hp_backing(p, &b));
	KEEPS(hp_kernel_backing(p, 8 * MiB, &b.kernel));
	KEEPS(q = hp_realloc(p, 64 * MiB));
	KEEPS(q = hp_realloc(q, 1000));
	KEEPS(hp_usable_size(q));
	KEEPS(hp_free(q));
	KEEPS(p = hp_calloc(1, 16 * MiB));
	KEEPS(hp_free_sized(p, 0));
	KEEPS(p = hp_ctx_calloc(hp_ctx(HP_ORIGIN_NUMPY, 0), 4, MiB));
	KEEPS(p = hp_ctx_realloc(hp_ctx(HP_ORIGIN_NUMPY, 0), p, 8 * MiB));
	KEEPS(hp_ctx_free(NULL, p, 8 * MiB));
	KEEPS(hp_huge_alloc(NULL, 8 * MiB, 64, 0, &r));
	KEEPS(hp_huge_realloc(NULL, r, 32 * MiB, &r));
	KEEPS(hp_owns(r));
	KEEPS(hp_free(r));
	KEEPS(hp_stats_get(&st));
	KEEPS(hp_knob_info(0, &ki));
	KEEPS(hp_knob_get("mode", buf, sizeof(buf)));
	KEEPS(hp_knob_unset("mode"));
	KEEPS(hp_knob_unset(NULL));
	KEEPS(hp_parse_size("4M", &v));
	KEEPS(hp_format_size(v, buf, sizeof(buf)));
	KEEPS(hp_cache_flush());
	KEEPS(hp_release_drain());
	KEEPS(hp_control_reload());
	KEEPS(hp_version());
	return keeps_errno_failures ? 1 : 0;
}

/* mode=hugetlb with no free pool page falls back to THP: a success. */
static int child_fallback(void)
{
	void *p = NULL;
	hp_knob_set("mode", "hugetlb");
	hp_knob_set("threshold", "1M");
	hp_knob_set("fallback", "thp");
	KEEPS(p = hp_malloc(8 * MiB));
	struct hp_backing b;
	if (!p || hp_backing(p, &b) != 0 || b.backend != HP_BACKEND_THP) {
		fprintf(stderr, "FAIL: no THP fallback happened: the test did not test\n");
		return 1;
	}
	KEEPS(hp_free(p));
	return keeps_errno_failures ? 1 : 0;
}

/* A realloc that must move: growing a THP block tries mremap in place
 * first, which fails with ENOMEM when something is mapped right after the
 * block, and then moves it.  The realloc succeeds, so that ENOMEM must not
 * reach the caller -- through hp_realloc, hp_ctx_realloc (NumPy's
 * handler) or hp_huge_realloc (the preload library, CPython's raw
 * domain). */
static void test_moved_realloc_keeps_errno(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0"); /* no cached piece to grow over */
	void *numpy = hp_ctx(HP_ORIGIN_NUMPY, 0);
	keeps_errno_failures = 0;
	for (int via = 0; via < 3; via++) {
		char *p = hp_malloc(4 * MiB);
		assert_non_null(p);
		void *neighbour = harness_block_neighbour(p, 4 * MiB), *q = NULL;
		switch (via) {
		case 0: KEEPS(q = hp_realloc(p, 64 * MiB)); break;
		case 1: KEEPS(q = hp_ctx_realloc(numpy, p, 64 * MiB)); break;
		default: KEEPS(hp_huge_realloc(NULL, p, 64 * MiB, &q)); break;
		}
		assert_non_null(q);
		if (q == p)
			fail_msg("grown in place although a page was mapped after the block: "
				 "the case tests nothing");
		hp_free(q);
		if (neighbour)
			munmap(neighbour, 4096);
	}
	assert_int_equal(keeps_errno_failures, 0);
}

static const struct harness_child_case children[] = {
	{"first_calls", child_first_calls},
	{"fallback", child_fallback},
};

static void test_successful_calls_keep_errno(void **state)
{
	(void)state;
	harness_child_passes("first_calls");
}

static void test_fallback_keeps_errno(void **state)
{
	(void)state;
	/* An empty pool whatever the machine had free, so the fallback happens. */
	harness_pool_or_skip(2 * MiB, 0, true);
	harness_child_passes("fallback");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_successful_calls_keep_errno),
		HTEST(test_fallback_keeps_errno),
		HTEST(test_moved_realloc_keeps_errno),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("errno_kept", tests, ARRAY_SIZE(tests));
}
