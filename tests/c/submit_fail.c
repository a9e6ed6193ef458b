/* io_uring_submit fails (-EAGAIN: the kernel cannot allocate requests;
 * -EBUSY: older kernels with a full completion queue) after a freed
 * block's MADV_DONTNEED entries were prepared.  The entries stay queued in
 * the ring and run at the next submit, so the block must stay mapped and
 * owned by the release path until they complete: released synchronously at
 * once, its address could be handed out again and the late DONTNEED would
 * zero the new owner's live data (main before the fix: all 16384 pages of
 * a reused 64 MiB block zeroed).  Checked against /proc/self/maps and the
 * contents, not hpalloc's counters.
 *
 * Only the janitor submits, in its own time.  The refusals are armed until
 * the test has seen one (a submit of a's entries was refused: they wait in
 * the ring) and only then are b and c allocated: before, three refusals
 * were armed for whatever the janitor did while the test allocated and
 * filled b and c, and a janitor that had not run by then (a loaded
 * machine: its round starts with the control directory's poll, then the
 * cgroup, the cache, the stats file) met none -- "no submit was refused:
 * the test did not test".  Each case also runs with the janitor slowed
 * down so (its control directory's opens sleep: about 300 ms a round). */
#include "harness.h"
#include "fault.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define SIZE (64 * MiB)
#define REFUSED_WITHIN_MS 20000

/* ---- a janitor slow to come round: openat, interposed ------------------------ */
static _Atomic unsigned janitor_pause_ms;

static bool on_janitor(void)
{
	char name[16] = "";
	prctl(PR_GET_NAME, name);
	return strcmp(name, "hpalloc-janitor") == 0;
}

int openat(int dirfd, const char *path, int flags, ...)
{
	static int (*next)(int, const char *, int, ...);
	mode_t mode = 0;
	va_list ap;
	va_start(ap, flags);
	if (flags & (O_CREAT | O_TMPFILE))
		mode = va_arg(ap, mode_t);
	va_end(ap);
	unsigned ms = atomic_load(&janitor_pause_ms);
	const char *ctl = getenv("HPALLOC_CONTROL_DIR");
	/* the control directory itself: opened at the start of each round
	 * (and for its override layer) */
	if (ms && dirfd == AT_FDCWD && ctl && strcmp(path, ctl) == 0 && on_janitor())
		usleep(ms * 1000); /* a CPU it does not get, a slow disk under the control directory */
	if (!next)
		next = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
	return next(dirfd, path, flags, mode);
}

static void thp_no_cache(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("uring", "on");
}

/* Until a submit was refused since failed (a's entries wait in the ring). */
static bool refused_since(int failed)
{
	uint64_t end = harness_now_ms() + REFUSED_WITHIN_MS;
	while (fault_submit_failures() == failed && harness_now_ms() < end)
		harness_sleep_ms(1);
	return fault_submit_failures() != failed;
}

static void submit_fails_then_recovers(int err, unsigned janitor_ms, int rounds)
{
	char why[256];
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	thp_no_cache();
	/* a's release goes through the ring only once the janitor set it up */
	if (!harness_ring_ready_within(10000))
		fail_msg("the janitor did not set its io_uring up within 10 s");
	atomic_store(&janitor_pause_ms, janitor_ms);
	for (int round = 0; round < rounds; round++) {
		unsigned char *a = hp_malloc(SIZE);
		assert_non_null(a);
		harness_fill(a, SIZE, 1);
		int failed = fault_submit_failures();
		fault_submit(err, 1 << 30); /* every submit, until the test has seen one */
		hp_free(a); /* entries prepared, the submit refused */
		if (!refused_since(failed))
			fail_msg("round %d: no submit was refused within %d ms: the test did not test",
				 round, REFUSED_WITHIN_MS);
		/* The next blocks must not land on a's pages while its entries wait. */
		unsigned char *b = hp_malloc(SIZE), *c = hp_malloc(SIZE);
		assert_non_null(b);
		assert_non_null(c);
		harness_fill(b, SIZE, 2);
		harness_fill(c, SIZE, 3);
		assert_true(harness_mapped(a, SIZE) > 0); /* still waiting: mapped, not reused */
		fault_submit(0, 0);
		void *t = hp_malloc(4 * MiB); /* its release submits whatever waits */
		assert_non_null(t);
		hp_free(t);
		hp_release_drain();
		assert_filled(b, SIZE, 2);
		assert_filled(c, SIZE, 3);
		assert_int_equal(harness_mapped(a, SIZE), 0);
		hp_free(b);
		hp_free(c);
		hp_release_drain();
		assert_int_equal(harness_mapped(b, SIZE), 0);
		assert_int_equal(harness_mapped(c, SIZE), 0);
	}
	atomic_store(&janitor_pause_ms, 0);
}

static void test_submit_eagain(void **state)
{
	(void)state;
	submit_fails_then_recovers(EAGAIN, 0, 8);
}

static void test_submit_ebusy(void **state)
{
	(void)state;
	submit_fails_then_recovers(EBUSY, 0, 8);
}

/* The janitor's rounds 300 ms late, as on a loaded machine: the refusal
 * still happens before b and c exist (before, three refusals armed for a
 * janitor that came round after the test disarmed them). */
static void test_submit_ebusy_slow_janitor(void **state)
{
	(void)state;
	submit_fails_then_recovers(EBUSY, 150, 3);
}

static void test_submit_eagain_slow_janitor(void **state)
{
	(void)state;
	submit_fails_then_recovers(EAGAIN, 150, 3);
}

/* A submit that keeps failing: blocks queue up behind it, none is lost,
 * none is unmapped early; once it works again every one is released. */
static void test_long_backlog(void **state)
{
	char why[256];
	void *freed[32];
	(void)state;
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	thp_no_cache();
	fault_submit(EAGAIN, 1 << 30);
	unsigned char *keep = hp_malloc(8 * MiB);
	assert_non_null(keep);
	harness_fill(keep, 8 * MiB, 9);
	for (int i = 0; i < 32; i++) {
		freed[i] = hp_malloc(4 * MiB);
		assert_non_null(freed[i]);
		harness_touch(freed[i], 4 * MiB);
		hp_free(freed[i]);
	}
	assert_filled(keep, 8 * MiB, 9);
	fault_submit(0, 0);
	hp_release_drain();
	for (int i = 0; i < 32; i++)
		assert_int_equal(harness_mapped(freed[i], 4 * MiB), 0);
	assert_filled(keep, 8 * MiB, 9);
	hp_free(keep);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_submit_eagain),
		HTEST(test_submit_ebusy),
		HTEST(test_submit_ebusy_slow_janitor),
		HTEST(test_submit_eagain_slow_janitor),
		HTEST(test_long_backlog),
	};
	harness_init(argc, argv);
	return harness_run("submit_fail", tests, ARRAY_SIZE(tests));
}
