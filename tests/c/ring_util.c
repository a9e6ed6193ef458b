/* See ring_util.h. */
#include "ring_util.h"
#include "cancel_util.h"
#include "fault.h"
#include "harness.h"

#include <errno.h>

int ring_util_uring_or_skip(void)
{
	char why[256];
	if (harness_uring_usable(why, sizeof(why)))
		return 0;
	cancel_say("io_uring: %s\n", why);
	return 77;
}

char *ring_util_block_in_ring(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	char *first = hp_malloc(RING_UTIL_SIZE); /* starts the janitor */
	if (!first || !harness_ring_ready_within(5000)) {
		cancel_say("FAIL: no block or no ring\n");
		return NULL;
	}
	hp_free(first);
	hp_release_drain();
	char *a = hp_malloc(RING_UTIL_SIZE);
	if (!a)
		return NULL;
	a[0] = 1;
	fault_submit(EAGAIN, 1 << 30);
	hp_free(a);
	for (int i = 0; i < 1000 && fault_submit_failures() == 0; i++)
		harness_sleep_ms(5);
	if (fault_submit_failures() == 0 || harness_mapped(a, RING_UTIL_SIZE) != RING_UTIL_SIZE) {
		cancel_say("FAIL: the block did not stay in the ring: the test did not test\n");
		return NULL;
	}
	return a;
}

int ring_util_no_spin(const char *when)
{
	long before = fault_others_cpu_ms();
	harness_sleep_ms(2000);
	long used = fault_others_cpu_ms() - before;
	if (used <= RING_UTIL_SPIN_LIMIT_MS)
		return 0;
	cancel_say("FAIL: %s, the other threads used %ld ms of CPU in a 2 s sleep (janitor spinning)\n",
		   when, used);
	return 1;
}
