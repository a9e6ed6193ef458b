/* A forked child frees a hugetlb block it inherited (live at fork) and
 * allocates again.  The block's pool reservation stayed with the parent:
 * on main before the fix the child cached it and handed it out again, and
 * the first write needed a pool page nobody had reserved -- SIGBUS, with a
 * pool sized to have none to spare.  Now the child releases it and gets a
 * fresh block (or the fallback): never a signal. */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (8 * MiB)
#define PAGES 4 /* exactly the block: nothing to spare */

static int child(void *inherited)
{
	hp_free(inherited);
	for (int i = 0; i < 4; i++) {
		unsigned char *p = hp_malloc(SIZE);
		if (!p)
			return 2;
		memset(p, 0x5a, SIZE); /* SIGBUS here on the old code */
		hp_free(p);
	}
	return 0;
}

static void test_child_reuses_no_inherited_hugetlb_block(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, PAGES, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "1G");
	harness_knob("fallback", "thp");
	unsigned char *a = hp_malloc(SIZE);
	assert_non_null(a);
	struct hp_backing b;
	assert_int_equal(hp_backing(a, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	memset(a, 1, SIZE);
	assert_int_equal(harness_pool_available(2 * MiB), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child(a));
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("child killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	assert_int_equal(WEXITSTATUS(status), 0);
	for (size_t i = 0; i < SIZE; i += 4096)
		assert_int_equal(a[i], 1); /* the parent's block is its own */
	hp_free(a);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), PAGES);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_child_reuses_no_inherited_hugetlb_block),
	};
	harness_init(argc, argv);
	return harness_run("fork_hugetlb", tests, ARRAY_SIZE(tests));
}
