/* /proc (or /sys) missing: a private mount namespace with an empty tmpfs
 * over it, as in minimal containers.  hpalloc must keep allocating (THP
 * when it cannot see the hugetlb pools), report what it cannot know as an
 * error (hp_backing: -1, not made-up numbers), and publish/poll nothing
 * wrong.  Root only (mount namespaces). */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>

static int hide(const char *dir)
{
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=1M") != 0) {
		fprintf(stderr, "cannot hide %s: %s\n", dir, strerror(errno));
		return -1;
	}
	return 0;
}

static int workload(bool proc_hidden)
{
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	for (int i = 0; i < 20; i++) {
		char *p = hp_calloc(1, 8 * MiB);
		if (!p) {
			fprintf(stderr, "FAIL: allocation failed\n");
			return 1;
		}
		p[0] = 1;
		struct hp_backing b;
		errno = 0;
		int rc = hp_backing(p, &b);
		if (proc_hidden && (rc != -1 || errno == 0)) {
			fprintf(stderr, "FAIL: hp_backing without /proc: rc %d errno %d\n", rc, errno);
			return 1;
		}
		if (!proc_hidden && rc != 0) {
			fprintf(stderr, "FAIL: hp_backing: %s\n", strerror(errno));
			return 1;
		}
		if (b.backend != HP_BACKEND_THP && b.backend != HP_BACKEND_HUGETLB) {
			fprintf(stderr, "FAIL: not on the huge path: %d\n", b.backend);
			return 1;
		}
		hp_free(p);
	}
	hp_release_drain();
	struct hp_stats st;
	if (hp_stats_get(&st) != 0 || st.v[HP_STAT_MAPPED_BYTES] != 0) {
		fprintf(stderr, "FAIL: blocks left mapped\n");
		return 1;
	}
	return 0;
}

static int child_no_proc(void)
{
	return hide("/proc") ? 77 : workload(true);
}

static int child_no_sys(void)
{
	if (hide("/sys"))
		return 77;
	hp_knob_set("mode", "auto"); /* pools unknown: THP, not hugetlb guesses */
	return workload(false);
}

static const struct harness_child_case children[] = {
	{"no_proc", child_no_proc},
	{"no_sys", child_no_sys},
};

static void run(const char *name)
{
	char err[4096];
	if (!harness_is_root())
		harness_skip("mount namespaces need root");
	/* LeakSanitizer reads /proc at exit: in a sanitizer build, not here */
	const char *const env[] = {"ASAN_OPTIONS=halt_on_error=1:detect_leaks=0", NULL};
	int rc = harness_run_child(name, env, err, sizeof(err));
	if (rc == 77)
		fail_msg("as root, could not set up the namespace: %s", err);
	if (rc != 0)
		fail_msg("child %s exited %d:\n%s", name, rc, err);
}

static void test_proc_missing(void **state)
{
	(void)state;
	run("no_proc");
}

static void test_sys_missing(void **state)
{
	(void)state;
	run("no_sys");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_proc_missing),
		HTEST(test_sys_missing),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("no_proc_keeps_allocating", tests, ARRAY_SIZE(tests));
}
