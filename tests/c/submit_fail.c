/* io_uring_submit fails (-EAGAIN: the kernel cannot allocate requests;
 * -EBUSY: older kernels with a full completion queue) after a freed
 * block's MADV_DONTNEED entries were prepared.  The entries stay queued in
 * the ring and run at the next submit, so the block must stay mapped and
 * owned by the release path until they complete: released synchronously at
 * once, its address could be handed out again and the late DONTNEED would
 * zero the new owner's live data (main before the fix: all 16384 pages of
 * a reused 64 MiB block zeroed).  Checked against /proc/self/maps and the
 * contents, not hpalloc's counters. */
#include "harness.h"
#include "fault.h"

#include <errno.h>

#define SIZE (64 * MiB)

static void thp_no_cache(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("uring", "on");
}

static void submit_fails_then_recovers(int err)
{
	char why[256];
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	thp_no_cache();
	for (int round = 0; round < 8; round++) {
		unsigned char *a = hp_malloc(SIZE);
		assert_non_null(a);
		harness_fill(a, SIZE, 1);
		int failed = fault_submit_failures();
		fault_submit(err, 3);
		hp_free(a); /* entries prepared, the submit refused */
		/* The next blocks must not land on a's pages while its entries wait. */
		unsigned char *b = hp_malloc(SIZE), *c = hp_malloc(SIZE);
		assert_non_null(b);
		assert_non_null(c);
		harness_fill(b, SIZE, 2);
		harness_fill(c, SIZE, 3);
		fault_submit(0, 0);
		if (fault_submit_failures() == failed)
			fail_msg("round %d: no submit was refused: the test did not test", round);
		void *t = hp_malloc(4 * MiB); /* its release submits whatever waits */
		assert_non_null(t);
		hp_free(t);
		hp_release_drain();
		assert_filled(b, SIZE, 2);
		assert_filled(c, SIZE, 3);
		assert_int_equal(harness_mapped(a, SIZE), 0);
		hp_free(b);
		hp_free(c);
		hp_release_drain();
		assert_int_equal(harness_mapped(b, SIZE), 0);
		assert_int_equal(harness_mapped(c, SIZE), 0);
	}
}

static void test_submit_eagain(void **state)
{
	(void)state;
	submit_fails_then_recovers(EAGAIN);
}

static void test_submit_ebusy(void **state)
{
	(void)state;
	submit_fails_then_recovers(EBUSY);
}

/* A submit that keeps failing: blocks queue up behind it, none is lost,
 * none is unmapped early; once it works again every one is released. */
static void test_long_backlog(void **state)
{
	char why[256];
	void *freed[32];
	(void)state;
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	thp_no_cache();
	fault_submit(EAGAIN, 1 << 30);
	unsigned char *keep = hp_malloc(8 * MiB);
	assert_non_null(keep);
	harness_fill(keep, 8 * MiB, 9);
	for (int i = 0; i < 32; i++) {
		freed[i] = hp_malloc(4 * MiB);
		assert_non_null(freed[i]);
		harness_touch(freed[i], 4 * MiB);
		hp_free(freed[i]);
	}
	assert_filled(keep, 8 * MiB, 9);
	fault_submit(0, 0);
	hp_release_drain();
	for (int i = 0; i < 32; i++)
		assert_int_equal(harness_mapped(freed[i], 4 * MiB), 0);
	assert_filled(keep, 8 * MiB, 9);
	hp_free(keep);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_submit_eagain),
		HTEST(test_submit_ebusy),
		HTEST(test_long_backlog),
	};
	harness_init(argc, argv);
	return harness_run("submit_fail", tests, ARRAY_SIZE(tests));
}
