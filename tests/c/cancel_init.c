/* A thread cancelled while it initialises hpalloc.  The first hp_* call of
 * a process reads the control directory with init_lock held, and logs a
 * refused control file there (verbose=1): when standard error is a pipe
 * nobody reads, that write blocks -- a cancellation point.  Deferred
 * cancellation (the default; asynchronous cancellation is unsafe in glibc
 * too) must not act inside: glibc's malloc is no cancellation point, and a
 * thread that died there held init_lock, so every later hp_* call of the
 * process waited forever (main before the fix: 3 runs of 3).  Shown here:
 * the call returns to its caller, the cancel acts at the caller's next
 * cancellation point, and every later hp_* call and fork() return. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *first_call(void *arg)
{
	(void)arg;
	return hp_malloc(64); /* the first hp_* call: initialisation */
}

static int child_cancel_in_init(void)
{
	static struct victim v = {.call = first_call};

	if (cancel_control_file("threshold", "bogus\n") < 0)
		return 1;
	int bad = cancel_victim_in_log(&v, "hp_malloc's initialisation (hp_init_slow)");
	hp_free(v.result);
	cancel_watchdog(20, "hp_* calls after a thread was cancelled in hp_init_slow");
	void *p = hp_malloc(64), *q = hp_malloc(4 * MiB);
	if (!p || !q) {
		cancel_say("FAIL: allocations after the cancel failed\n");
		bad = 1;
	}
	hp_free(p);
	hp_free(q);
	hp_release_drain();
	if (hp_knob_set("threshold", "2M") != 0) {
		cancel_say("FAIL: hp_knob_set after the cancel failed\n");
		bad = 1;
	}
	cancel_watchdog_off();
	bad |= cancel_fork_takes_every_lock();
	return bad;
}

static const struct harness_child_case children[] = {
	{"cancel_in_init", child_cancel_in_init},
};

static void test_cancel_inside_init(void **state)
{
	(void)state;
	char err[8192];
	int rc = harness_run_child("cancel_in_init", (const char *const[]){"HPALLOC_VERBOSE=1", NULL},
				   err, sizeof(err));
	if (rc != 0)
		fail_msg("child exited %d:\n%s", rc, err);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_inside_init),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_init", tests, ARRAY_SIZE(tests));
}
