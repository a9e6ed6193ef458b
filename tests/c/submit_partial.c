/* io_uring_submit takes only part of what was prepared: the kernel's
 * io_submit_sqes stops when it cannot allocate a request and returns how
 * many it took (no error when that is at least one).  The other entries
 * stay in the submission ring, behind the head the kernel publishes, and
 * run only at some later submit.  A block more than 1 GiB long needs two
 * MADV_DONTNEED entries; with only the first taken, the release path must
 * still submit the second on its own (main before the fix: nothing did --
 * the block stayed mapped and hp_release_drain() never returned, also for
 * the hugetlb pool reclaim that waits on it).  Checked against
 * /proc/self/maps. */
#include "harness.h"
#include "fault.h"

#include <stdio.h>

#define SIZE (GiB + 4 * MiB) /* two ring entries; mapped, barely touched */

/* Gone from /proc/self/maps within ms milliseconds? */
static bool unmapped_within(const void *p, size_t len, unsigned ms)
{
	uint64_t end = harness_now_ms() + ms;
	while (harness_mapped(p, len) != 0) {
		if (harness_now_ms() > end)
			return false;
		harness_sleep_ms(5);
	}
	return true;
}

static void test_partial_submit(void **state)
{
	char why[256];
	(void)state;
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("uring", "on");
	if (!harness_ring_ready_within(10000))
		fail_msg("io_uring is usable but the janitor set up no ring in 10 s");
	for (int round = 0; round < 4; round++) {
		unsigned char *a = hp_malloc(SIZE);
		assert_non_null(a);
		a[0] = 1;
		a[SIZE - 1] = 1;
		uint64_t before = harness_stat(HP_STAT_URING_RELEASES);
		fault_submit_partial(1);
		hp_free(a);
		/* the janitor submits (lib/threads/ring.c: the ring is its alone) */
		for (int i = 0; i < 2000 && fault_submit_partial_left(); i++)
			harness_sleep_ms(1);
		bool partial = !fault_submit_partial_left();
		fault_submit_partial(0);
		if (harness_stat(HP_STAT_URING_RELEASES) == before || !partial)
			fail_msg("round %d: the block did not go through the ring, partly submitted: "
				 "the test did not test", round);
		/* Not hp_release_drain() first: before the fix it hangs. */
		if (!unmapped_within(a, SIZE, 3000))
			fail_msg("round %d: entries left in the ring by a partial submit were never "
				 "submitted: %zu bytes still mapped after 3 s",
				 round, harness_mapped(a, SIZE));
		hp_release_drain();
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_partial_submit),
	};
	harness_init(argc, argv);
	return harness_run("submit_partial", tests, ARRAY_SIZE(tests));
}
