/* A thread cancelled while hp_release_drain() waits for blocks held in the
 * io_uring (here its submits fail with EAGAIN, so they stay there).  The
 * drain waits in pthread_cond_wait -- a cancellation point -- with the
 * release lock: a thread cancelled there ended holding it, and every later
 * release, drain and fork() of the process waited forever (main before
 * the fix).  Deferred cancellation (the default) must not act inside:
 * the drain returns once the ring has released the blocks, and the
 * cancellation acts at the caller's next cancellation point. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>

static void *drain(void *arg)
{
	(void)arg;
	hp_release_drain();
	return NULL;
}

static int uring_or_skip(void)
{
	char why[256];
	if (harness_uring_usable(why, sizeof(why)))
		return 0;
	cancel_say("io_uring: %s\n", why);
	return 77;
}

static void let_submits_through(void)
{
	fault_submit(0, 0);
}

static int child_cancel_in_drain(void)
{
	static struct victim v = {.call = drain};
	int bad = 0;

	if (uring_or_skip())
		return 77;
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	char *a = hp_malloc(8 * MiB); /* the first huge block starts the janitor */
	if (!a || !harness_ring_ready_within(5000)) {
		cancel_say("FAIL: no block or no ring\n");
		return 1;
	}
	a[0] = 1;
	fault_submit(EAGAIN, 1 << 30);
	hp_free(a); /* into the ring; its submit refused: it stays there */
	for (int i = 0; i < 1000 && fault_submit_failures() == 0; i++)
		harness_sleep_ms(5);
	if (fault_submit_failures() == 0) {
		cancel_say("FAIL: no submit was refused: the test did not test\n");
		return 1;
	}
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 202 /* futex */, 10000))
		return 1;
	cancel_victim_cancel(&v, let_submits_through);
	if (!cancel_victim_join(&v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v.returned)) {
		cancel_say("FAIL: the cancellation acted inside hp_release_drain "
			   "(pthread_cond_wait with the release lock held)\n");
		bad = 1;
	}
	cancel_watchdog(20, "hp_release_drain after a thread was cancelled in one");
	hp_release_drain();
	if (harness_mapped(a, 8 * MiB) != 0) {
		cancel_say("FAIL: the block in the ring was never released\n");
		bad = 1;
	}
	char *b = hp_malloc(8 * MiB);
	if (!b) {
		cancel_say("FAIL: hp_malloc after the cancel failed\n");
		return 1;
	}
	b[0] = 1;
	hp_free(b);
	hp_release_drain();
	if (harness_mapped(b, 8 * MiB) != 0) {
		cancel_say("FAIL: a block freed after the cancel was never released\n");
		bad = 1;
	}
	cancel_watchdog_off();
	bad |= cancel_fork_takes_every_lock();
	return bad;
}

static const struct harness_child_case children[] = {
	{"cancel_in_drain", child_cancel_in_drain},
};

static void test_cancel_inside_drain(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("cancel_in_drain");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_inside_drain),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_drain", tests, ARRAY_SIZE(tests));
}
