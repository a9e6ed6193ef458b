/* A thread cancelled inside hp_control_reload().  The reload reads the
 * control directory with control.c's lock held and logs a refused control
 * file there (verbose=1): when standard error is a pipe nobody reads, that
 * write blocks -- a cancellation point.  Deferred cancellation must not act
 * inside: a thread that died there held the control lock, so every later
 * reload, the janitor's next poll and every fork() of the process (its
 * handler takes that lock) waited forever.  Shown here: the call returns
 * to its caller, the cancel acts at the caller's next cancellation point,
 * and later reloads, knob changes and fork() return. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"

#include <string.h>

static void *reload(void *arg)
{
	(void)arg;
	hp_control_reload();
	return NULL;
}

static int later_calls_return(void)
{
	char value[HP_KNOB_VALUE_MAX] = "";
	int bad = 0;

	cancel_watchdog(20, "hp_* calls after a thread was cancelled in hp_control_reload");
	if (cancel_control_file("threshold", "3M\n") < 0)
		return 1;
	hp_control_reload();
	if (hp_knob_get("threshold", value, sizeof(value)) != HP_SOURCE_CONTROL ||
	    strcmp(value, "3M") != 0) {
		cancel_say("FAIL: the reload after the cancel did not read threshold=3M (%s)\n",
			   value);
		bad = 1;
	}
	if (hp_knob_set("cache_max", "0") != 0) {
		cancel_say("FAIL: hp_knob_set after the cancel failed\n");
		bad = 1;
	}
	cancel_watchdog_off();
	return bad | cancel_fork_takes_every_lock();
}

static int child_cancel_in_reload(void)
{
	static struct victim v = {.call = reload};

	hp_free(hp_malloc(64)); /* initialised: the reload alone reads the file */
	if (cancel_control_file("threshold", "bogus\n") < 0)
		return 1;
	int bad = cancel_victim_in_log(&v, "hp_control_reload");
	return bad | later_calls_return();
}

static const struct harness_child_case children[] = {
	{"cancel_in_reload", child_cancel_in_reload},
};

static void test_cancel_inside_reload(void **state)
{
	(void)state;
	char err[8192];
	int rc = harness_run_child("cancel_in_reload",
				   (const char *const[]){"HPALLOC_VERBOSE=1", NULL},
				   err, sizeof(err));
	if (rc != 0)
		fail_msg("child exited %d:\n%s", rc, err);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_inside_reload),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_reload", tests, ARRAY_SIZE(tests));
}
