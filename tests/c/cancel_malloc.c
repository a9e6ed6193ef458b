/* A thread cancelled inside a large hp_malloc (deferred cancellation, the
 * default).  glibc's malloc is never a cancellation point; hpalloc's huge
 * path reaches several: a log line (verbose=2 logs every mapping; standard
 * error here is a pipe nobody reads), the sysfs reads of mode=auto, and
 * with a short hugetlb pool a drain of the blocks still being released,
 * waiting in pthread_cond_wait with the release lock.  Main before the fix:
 *   - in the log line the thread died inside hp_malloc, the mapping it had
 *     just made lost (never registered, never freed);
 *   - in the drain it died holding the release lock: every later release,
 *     drain and fork() of the process waited forever.
 * Shown here: hp_malloc returns its block, the cancellation acts at the
 * caller's next cancellation point, and every later hp_* call and fork()
 * return. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SIZE (8 * MiB)
#define POOL_PAGES 4 /* SIZE in 2 MiB pages */

static void *large_malloc(void *arg)
{
	(void)arg;
	return hp_malloc(SIZE);
}

static int check_victim(struct victim *v, const char *where)
{
	int bad = 0;
	if (!cancel_victim_join(v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v->returned)) {
		cancel_say("FAIL: the cancellation acted inside hp_malloc (%s): hp_malloc is a "
			   "cancellation point\n", where);
		return 1;
	}
	if (!v->result) {
		cancel_say("FAIL: hp_malloc returned NULL: %s\n", strerror(errno));
		return 1;
	}
	memset(v->result, 1, SIZE); /* all of it is the block's */
	return bad;
}

/* Every later call returns; the victim's block is released like any. */
static int later_calls_return(void *block)
{
	int bad = 0;
	cancel_watchdog(20, "hp_* calls after a thread was cancelled in hp_malloc");
	hp_free(block);
	hp_release_drain();
	if (block && harness_mapped(block, SIZE) != 0) {
		cancel_say("FAIL: the victim's block was not released\n");
		bad = 1;
	}
	void *p = hp_malloc(SIZE);
	if (!p) {
		cancel_say("FAIL: hp_malloc after the cancel: %s\n", strerror(errno));
		bad = 1;
	}
	hp_free(p);
	hp_release_drain();
	cancel_watchdog_off();
	return bad | cancel_fork_takes_every_lock();
}

static int child_cancel_in_log(void)
{
	static struct victim v = {.call = large_malloc};

	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("verbose", "2"); /* "thp map ..." for every mapping */
	cancel_stderr_block();
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 1 /* write */, 10000))
		return 1;
	cancel_victim_cancel(&v, cancel_stderr_flow);
	int bad = check_victim(&v, "writing its log line");
	return bad | later_calls_return(v.result);
}

static void let_submits_through(void)
{
	fault_submit(0, 0);
}

/* The pool is short only because of a block still in the ring: the
 * allocation drains the releases and tries again. */
static int child_cancel_in_reclaim(void)
{
	static struct victim v = {.call = large_malloc};
	char why[256];

	if (!harness_uring_usable(why, sizeof(why))) {
		cancel_say("io_uring: %s\n", why);
		return 77;
	}
	hp_knob_set("mode", "hugetlb");
	hp_knob_set("pagesize", "2M");
	hp_knob_set("fallback", "fail");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	char *a = hp_malloc(SIZE); /* the whole pool */
	if (!a || !harness_ring_ready_within(5000)) {
		cancel_say("FAIL: no block of the pool (%s) or no ring\n", strerror(errno));
		return 1;
	}
	a[0] = 1;
	fault_submit(EAGAIN, 1 << 30);
	hp_free(a); /* into the ring, where its submit is refused: the pool stays used */
	for (int i = 0; i < 1000 && fault_submit_failures() == 0; i++)
		harness_sleep_ms(5);
	if (fault_submit_failures() == 0) {
		cancel_say("FAIL: no submit was refused: the test did not test\n");
		return 1;
	}
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 202 /* futex: the drain */, 10000))
		return 1;
	cancel_victim_cancel(&v, let_submits_through);
	int bad = check_victim(&v, "draining the releases of a short pool");
	return bad | later_calls_return(v.result);
}

static const struct harness_child_case children[] = {
	{"cancel_in_log", child_cancel_in_log},
	{"cancel_in_reclaim", child_cancel_in_reclaim},
};

static void test_cancel_inside_log_line(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("cancel_in_log");
}

static void test_cancel_inside_short_pool_drain(void **state)
{
	(void)state;
	harness_need_uring();
	harness_pool_or_skip(2 * MiB, POOL_PAGES, true);
	harness_child_passes("cancel_in_reclaim");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_inside_log_line),
		HTEST(test_cancel_inside_short_pool_drain),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_malloc", tests, ARRAY_SIZE(tests));
}
