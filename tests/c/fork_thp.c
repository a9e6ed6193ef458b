/* THP blocks across fork(): their pages are shared copy-on-write between
 * parent and child, and the first write on either side splits each huge
 * page into 4 KiB copies.  So a forked child must not reuse a block it
 * inherited (cached or live at the fork) -- on main before the fix it did,
 * and handed out blocks without a single huge page -- and the child unmaps
 * its copies of the cached blocks at once, so that the parent reusing one
 * while the child lives keeps its huge pages (on main the parent's write
 * split them too).  What counts is smaps' AnonHugePages. */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (32 * MiB)

static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	/* fresh blocks faulted on huge pages from the first touch: a machine
	 * that measured its 2 MiB faults dear (populate_pages=measured) faults
	 * them at 4 KiB first and collapses them later, after the checks here */
	harness_knob("populate_pages", "2M");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
}

static size_t huge_after_write(unsigned char *p)
{
	struct harness_smaps k;
	memset(p, 0x3c, SIZE);
	if (harness_smaps_range(p, SIZE, &k) < 0)
		return 0;
	return k.anon_huge;
}

/* A block cached before the fork, and a live one freed in
 * the child: every block the child gets must be on huge pages. */
static int child_allocates(unsigned char *live)
{
	harness_crash_kills_process();
	alarm(20);
	hp_free(live);
	for (int i = 0; i < 3; i++) {
		unsigned char *p = hp_malloc(SIZE);
		size_t huge = p ? huge_after_write(p) : 0;
		if (huge < SIZE) {
			fprintf(stderr, "child: block %d has %zu of %zu bytes on huge pages\n", i, huge,
				(size_t)SIZE);
			return 1;
		}
		hp_free(p);
	}
	return 0;
}

static void test_child_gets_huge_pages(void **state)
{
	(void)state;
	thp_knobs();
	unsigned char *cached = hp_malloc(SIZE), *live = hp_malloc(SIZE);
	assert_non_null(cached);
	assert_non_null(live);
	if (huge_after_write(cached) < SIZE)
		harness_skip("no THP for a fresh block here (THP %s)", harness_thp_mode());
	huge_after_write(live);
	hp_free(cached);
	assert_true(harness_stat(HP_STAT_CACHED_BLOCKS) >= 1);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_allocates(live));
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(huge_after_write(live), SIZE); /* the parent's block kept its pages */
	hp_free(live);
}

static void test_parent_reuses_cache_while_child_lives(void **state)
{
	int ready[2], go[2];
	char c = 0;
	(void)state;
	thp_knobs();
	unsigned char *p = hp_malloc(SIZE);
	assert_non_null(p);
	if (huge_after_write(p) < SIZE)
		harness_skip("no THP for a fresh block here (THP %s)", harness_thp_mode());
	hp_free(p);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* after fork() returned here, i.e. after the fork hooks */
		alarm(20);
		_exit(write(ready[1], &c, 1) == 1 && read(go[0], &c, 1) == 1 ? 0 : 1);
	}
	assert_int_equal(read(ready[0], &c, 1), 1);
	unsigned char *q = hp_malloc(SIZE);
	assert_ptr_equal(q, p); /* the cached block */
	size_t huge = huge_after_write(q);
	assert_int_equal(write(go[1], &c, 1), 1);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(huge, SIZE);
	hp_free(q);
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_child_gets_huge_pages),
		HTEST(test_parent_reuses_cache_while_child_lives),
	};
	harness_init(argc, argv);
	return harness_run("fork_thp", tests, ARRAY_SIZE(tests));
}
