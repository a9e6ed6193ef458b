/* A thread cancelled inside hp_shared_alloc or hp_shared_map (deferred
 * cancellation, the default).  Both can write a log line (verbose=1: the
 * fallback of a short pool, a descriptor refused), standard error here a
 * pipe nobody reads: a cancellation point.  Main before the fix: the thread
 * died inside the call -- a block made and its descriptor lost, or the
 * refusal never returned.  Shown here: the call returns (the block, or
 * NULL + EINVAL for the refused descriptor), the cancellation acts at the
 * caller's next cancellation point, and later calls and fork() return. */
#include "harness.h"
#include "cancel_util.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (4 * MiB)

static void *shared_alloc(void *arg)
{
	(void)arg;
	return hp_shared_alloc(SIZE, 0, NULL);
}

static int unsealed_fd = -1;

static void *shared_map_refused(void *arg)
{
	(void)arg;
	errno = 0;
	void *p = hp_shared_map(unsealed_fd, NULL);
	return p ? p : (errno == EINVAL ? (void *)1 : NULL);
}

static int run_victim(void *(*call)(void *), const char *what)
{
	static struct victim v;
	v = (struct victim){.call = call};
	hp_knob_set("verbose", "1");
	cancel_stderr_block();
	cancel_victim_start(&v);
	if (!cancel_victim_blocked_in(&v, 1 /* write */, 10000))
		return 1;
	cancel_victim_cancel(&v, cancel_stderr_flow);
	int bad = 0;
	if (!cancel_victim_join(&v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v.returned)) {
		cancel_say("FAIL: the cancellation acted inside %s: it is a cancellation point\n",
			   what);
		return 1;
	}
	if (!v.result) {
		cancel_say("FAIL: %s failed: %s\n", what, strerror(errno));
		return 1;
	}
	cancel_watchdog(20, "hp_shared_* calls after a thread was cancelled in one");
	if (v.result != (void *)1) {
		memset(v.result, 1, SIZE);
		if (hp_shared_free(v.result) != 0) {
			cancel_say("FAIL: the victim's block is not one: %s\n", strerror(errno));
			bad = 1;
		}
	}
	void *p = hp_shared_alloc(SIZE, 0, NULL);
	if (!p || hp_shared_free(p) != 0) {
		cancel_say("FAIL: a shared block after the cancel: %s\n", strerror(errno));
		bad = 1;
	}
	cancel_watchdog_off();
	return bad | cancel_fork_takes_every_lock();
}

/* mode=hugetlb with an empty pool: the block falls back to THP shmem, and
 * says so (verbose=1). */
static int child_cancel_in_alloc(void)
{
	hp_knob_set("mode", "hugetlb");
	hp_knob_set("fallback", "thp");
	return run_victim(shared_alloc, "hp_shared_alloc (the fallback's log line)");
}

/* A memfd whose size is not sealed: refused, and said (verbose=1). */
static int child_cancel_in_refusal(void)
{
	unsealed_fd = memfd_create("not-a-block", MFD_CLOEXEC);
	if (unsealed_fd < 0 || ftruncate(unsealed_fd, SIZE) != 0) {
		cancel_say("FAIL: memfd: %s\n", strerror(errno));
		return 1;
	}
	return run_victim(shared_map_refused, "hp_shared_map (the refusal's log line)");
}

static const struct harness_child_case children[] = {
	{"cancel_in_alloc", child_cancel_in_alloc},
	{"cancel_in_refusal", child_cancel_in_refusal},
};

static void test_cancel_inside_shared_alloc(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 0, true);
	harness_child_passes("cancel_in_alloc");
}

static void test_cancel_inside_shared_map(void **state)
{
	(void)state;
	harness_child_passes("cancel_in_refusal");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cancel_inside_shared_alloc),
		HTEST(test_cancel_inside_shared_map),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cancel_shared", tests, ARRAY_SIZE(tests));
}
