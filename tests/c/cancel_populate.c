/* A thread cancelled while hp_free waits for a populate worker to leave
 * the block (lib/threads/populate.c, issue 27).  populate_forget() waits in
 * pthread_cond_wait, a cancellation point; glibc's free is none, and a
 * thread cancelled there would die holding pop_lock with its block never
 * released: every later fresh block, free of a watched block and fork()
 * of the process would wait forever.  hp_free runs with cancellation
 * disabled (HP_NOCANCEL_BEGIN), so the free completes and the cancellation
 * acts at the caller's next cancellation point.
 *
 * A worker is held inside the block (populate_util.h) so the victim's
 * hp_free is seen blocked in a futex when it is cancelled; then the worker
 * is let go.  Shown: hp_free returned (the block is gone), the thread was
 * cancelled after it, and every later call and fork() return. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"
#include "populate_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SIZE (256 * MiB)

static void *free_it(void *p)
{
	hp_free(p);
	return NULL;
}

static void let_worker_go(void)
{
	pop_hold_workers(false);
}

static int child_cancel_in_forget(void)
{
	static struct victim v = {.call = free_it};
	bool skip;
	char why[256];
	int bad = 0;

	char *p = pop_hold_block(SIZE, &skip, why, sizeof(why));
	if (!p) {
		cancel_say("%s\n", why);
		return skip ? 77 : 1;
	}
	v.arg = p;
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 202 /* futex: waiting for the worker */, 10000))
		return 1;
	cancel_victim_cancel(&v, let_worker_go);
	if (!cancel_victim_join(&v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v.returned)) {
		cancel_say("FAIL: the cancellation acted inside hp_free, waiting for the populate "
			   "worker (a cancellation point)\n");
		bad = 1;
	}
	pop_hold_stop();
	if (harness_mapped(p, SIZE) != 0) {
		cancel_say("FAIL: the victim's block was not released\n");
		bad = 1;
	}
	cancel_watchdog(30, "hp_* calls after a thread was cancelled in hp_free");
	char *q = hp_malloc(SIZE); /* a fresh block: a job, pop_lock */
	if (!q) {
		cancel_say("FAIL: hp_malloc after the cancel: %s\n", strerror(errno));
		return 1;
	}
	harness_fill(q, 16 * MiB, 7);
	hp_free(q); /* a watched block's free: pop_lock */
	cancel_watchdog_off();
	return bad | cancel_fork_takes_every_lock();
}

static const struct harness_child_case children[] = {
	{"cancel_in_forget", child_cancel_in_forget},
};

static void test_cancel_while_free_waits_for_worker(void **state)
{
	(void)state;
	pop_hold_require();
	harness_child_passes("cancel_in_forget");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_while_free_waits_for_worker),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_populate", tests, ARRAY_SIZE(tests));
}
