/* The program closes every descriptor it did not open, as daemons and
 * sandboxes do at start (closefrom(3), close_range(3, ~0U, 0)), while
 * hpalloc's janitor runs and a freed block waits in its io_uring (its
 * submits fail with EAGAIN until the close, so it is still there).  The
 * ring was fd 3 then: every io_uring_enter failed with EBADF, the janitor
 * spun (1.8 s of CPU in a 2 s sleep), the block stayed "in the ring" and
 * hp_release_drain() never returned.  Now:
 *   - registered: the ring has no descriptor in the table at all, the
 *     close changes nothing, releases keep going through the ring;
 *   - where the kernel cannot register the ring fd (before 5.18; made so
 *     here by refusing io_uring_register_ring_fd), the close is noticed:
 *     the block is released, every later release is synchronous.
 * Either way nothing spins (the CPU time of every other thread of the
 * process, from /proc/self/task, while the test sleeps), the drain returns
 * and no freed block stays mapped.  Each case runs in a fresh process. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"
#include "ring_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIZE RING_UTIL_SIZE
#define URING RING_UTIL_URING

static uint64_t stat_of(int s)
{
	struct hp_stats st;
	return hp_stats_get(&st) == 0 ? st.v[s] : UINT64_MAX;
}

/* After the close: the held block is released, the drain returns, later
 * frees are released too, and nothing spins. */
static int after_close(char *a, const char *how)
{
	int bad = 0;
	fault_submit(0, 0); /* submits would work again: only the descriptor is gone */
	bad |= ring_util_no_spin(how);
	cancel_watchdog(20, "hp_release_drain after the ring's descriptor was closed");
	hp_release_drain();
	cancel_watchdog_off();
	if (harness_mapped(a, SIZE) != 0) {
		cancel_say("FAIL: %s, the block that was in the ring stayed mapped\n", how);
		bad = 1;
	}
	for (int i = 0; i < 8; i++) {
		char *b = hp_malloc(SIZE);
		if (!b)
			return 1;
		b[SIZE - 1] = 1;
		hp_free(b);
		cancel_watchdog(20, "hp_release_drain of a later block");
		hp_release_drain();
		cancel_watchdog_off();
		if (harness_mapped(b, SIZE) != 0) {
			cancel_say("FAIL: %s, a block freed afterwards stayed mapped\n", how);
			return 1;
		}
	}
	return bad;
}

static int child_closefrom_registered(void)
{
	int first, bad = 0;
	if (ring_util_uring_or_skip())
		return 77;
	char *a = ring_util_block_in_ring();
	if (!a)
		return 1;
	int n = fault_fds_linking(URING, &first);
	if (n != 0) {
		cancel_say("FAIL: the ring is in the descriptor table (fd %d): a program can close it\n",
			   first);
		bad = 1;
	}
	closefrom(3);
	bad |= after_close(a, "after closefrom(3)");
	uint64_t ring_releases = stat_of(HP_STAT_URING_RELEASES);
	char *b = hp_malloc(SIZE);
	hp_free(b);
	hp_release_drain();
	if (stat_of(HP_STAT_URING_RELEASES) == ring_releases || stat_of(HP_STAT_URING_ACTIVE) != 1) {
		cancel_say("FAIL: the registered ring stopped working after closefrom(3)\n");
		bad = 1;
	}
	return bad;
}

static int child_close_range_plain_fd(void)
{
	int first, bad = 0;
	if (ring_util_uring_or_skip())
		return 77;
	fault_register_ring(EINVAL); /* as a kernel before 5.18 */
	char *a = ring_util_block_in_ring();
	if (!a)
		return 1;
	if (fault_fds_linking(URING, &first) != 1) {
		cancel_say("FAIL: no plain ring descriptor to close: the test did not test\n");
		return 1;
	}
	if (close_range(3, ~0U, 0) != 0) {
		cancel_say("close_range: %s\n", strerror(errno));
		return 77;
	}
	bad |= after_close(a, "after close_range(3, ~0U)");
	if (stat_of(HP_STAT_URING_ACTIVE) != 0) {
		cancel_say("FAIL: uring_active still 1 with the ring's descriptor closed\n");
		bad = 1;
	}
	char *b = hp_malloc(SIZE);
	b[0] = 1;
	hp_free(b); /* synchronous now: gone when hp_free returns */
	if (harness_mapped(b, SIZE) != 0) {
		cancel_say("FAIL: a release after the close was not synchronous\n");
		bad = 1;
	}
	return bad;
}

static const struct harness_child_case children[] = {
	{"closefrom_registered", child_closefrom_registered},
	{"close_range_plain_fd", child_close_range_plain_fd},
};

static void test_closefrom_with_registered_ring(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("closefrom_registered");
}

static void test_close_range_with_plain_ring_fd(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("close_range_plain_fd");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_closefrom_with_registered_ring),
		HTEST(test_close_range_with_plain_ring_fd),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("ring_fd_closed", tests, ARRAY_SIZE(tests));
}
