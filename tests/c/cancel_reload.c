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

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *reload(void *arg)
{
	(void)arg;
	hp_control_reload();
	return NULL;
}

static int write_control_file(const char *name, const char *text)
{
	char path[4096];
	const char *dir = getenv("HPALLOC_CONTROL_DIR");
	snprintf(path, sizeof(path), "%s/%s", dir ? dir : ".", name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) < 0 || close(fd) != 0) {
		cancel_say("cannot write %s\n", path);
		return -1;
	}
	return 0;
}

static int later_calls_return(void)
{
	char value[HP_KNOB_VALUE_MAX] = "";
	int bad = 0;

	cancel_watchdog(20, "hp_* calls after a thread was cancelled in hp_control_reload");
	if (write_control_file("threshold", "3M\n") < 0)
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
	int bad = 0;

	hp_free(hp_malloc(64)); /* initialised: the reload alone reads the file */
	if (write_control_file("threshold", "bogus\n") < 0)
		return 1;
	cancel_stderr_block();
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 1 /* write */, 10000))
		return 1;
	cancel_victim_cancel(&v, cancel_stderr_flow);
	if (!cancel_victim_join(&v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v.returned)) {
		cancel_say("FAIL: the cancellation acted inside hp_control_reload "
			   "(it is a cancellation point)\n");
		bad = 1;
	}
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
