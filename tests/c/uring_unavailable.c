/* io_uring cannot be had: io_uring_queue_init fails (interposed),
 * kernel.io_uring_disabled forbids it (sysctl, root), or a seccomp filter
 * refuses io_uring_setup (as Docker's default profile does).  hpalloc must
 * then release synchronously -- the mapping is gone when hp_free returns --
 * say so in its gauges, and never touch a ring it does not have.  Each case
 * runs in a fresh process so the ring setup happens under the condition. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define SYSCTL "/proc/sys/kernel/io_uring_disabled"

static uint64_t stat_of(int s)
{
	struct hp_stats st;
	return hp_stats_get(&st) == 0 ? st.v[s] : UINT64_MAX;
}

/* The workload every case runs: frees are synchronous, nothing leaks. */
static int releases_synchronously(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("uring", "on");
	usleep(50 * 1000); /* give the janitor time to try its ring setup */
	for (int i = 0; i < 50; i++) {
		char *p = hp_malloc(8 * MiB);
		if (!p)
			return 1;
		p[0] = p[8 * MiB - 1] = 1;
		hp_free(p);
		if (harness_mapped(p, 8 * MiB) != 0) {
			fprintf(stderr, "FAIL: freed block still mapped (released through a ring?)\n");
			return 1;
		}
	}
	hp_release_drain();
	if (stat_of(HP_STAT_URING_ACTIVE) != 0 || stat_of(HP_STAT_URING_RELEASES) != 0) {
		fprintf(stderr, "FAIL: uring_active=%llu uring_releases=%llu\n",
			(unsigned long long)stat_of(HP_STAT_URING_ACTIVE),
			(unsigned long long)stat_of(HP_STAT_URING_RELEASES));
		return 1;
	}
	if (stat_of(HP_STAT_JANITOR_ACTIVE) != 1) {
		fprintf(stderr, "FAIL: the janitor should run without a ring\n");
		return 1;
	}
	return 0;
}

static int child_queue_init_fails(void)
{
	fault_queue_init(ENOMEM);
	return releases_synchronously();
}

static int child_seccomp(void)
{
	if (fault_seccomp_no_io_uring() != 0) {
		perror("seccomp");
		return 77;
	}
	return releases_synchronously();
}

static int child_plain(void)
{
	return releases_synchronously();
}

static const struct harness_child_case children[] = {
	{"queue_init_fails", child_queue_init_fails},
	{"seccomp", child_seccomp},
	{"plain", child_plain},
};

static void run(const char *name, int want)
{
	char err[4096];
	int rc = harness_run_child(name, (const char *const[]){NULL}, err, sizeof(err));
	if (rc == 77)
		harness_skip("%s", err);
	if (rc != want)
		fail_msg("child %s exited %d (wanted %d):\n%s", name, rc, want, err);
}

static void test_queue_init_fails(void **state)
{
	(void)state;
	run("queue_init_fails", 0);
}

static void test_seccomp_refuses_io_uring_setup(void **state)
{
	(void)state;
	run("seccomp", 0);
}

/* kernel.io_uring_disabled=2: io_uring_setup fails with EPERM for all.
 * Machine-wide: restored here and, should this process die, by run-test. */
static void test_sysctl_io_uring_disabled(void **state)
{
	(void)state;
	long before = harness_read_long(SYSCTL);
	if (before < 0)
		harness_skip("%s not present: this kernel cannot disable io_uring", SYSCTL);
	if (!harness_is_root())
		harness_skip("writing %s needs root", SYSCTL);
	if (harness_write_long(SYSCTL, 2) != 0)
		fail_msg("cannot write %s as root", SYSCTL);
	char err[4096];
	int rc = harness_run_child("plain", (const char *const[]){NULL}, err, sizeof(err));
	harness_write_long(SYSCTL, before);
	assert_int_equal(harness_read_long(SYSCTL), before);
	if (rc != 0)
		fail_msg("child exited %d:\n%s", rc, err);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_queue_init_fails),
		HTEST(test_seccomp_refuses_io_uring_setup),
		HTEST(test_sysctl_io_uring_disabled),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("uring_unavailable", tests, ARRAY_SIZE(tests));
}
