/* fork while releases are in flight, and while another thread frees.
 * Every block on its way out at the moment of fork is still mapped in the
 * child (the parent unmaps under the release lock), so the child must unmap
 * its copies -- and must never unmap an address the parent had already
 * given back (it could hold a new block).  Checked in the child against
 * /proc/self/maps: after its drain, a freed block's range may only be
 * mapped if a live block of the child's registry covers it (one the other
 * thread had not freed yet at fork).  The parent's live data is checked. */
#include "harness.h"
#include "fault.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFREE 24
#define SIZE (4 * MiB)

static bool live_in_registry(const char *p)
{
	struct hp_backing b;
	return hp_backing(p, &b) == 0 && b.backend != HP_BACKEND_SMALL;
}

static void *free_all(void *arg)
{
	void **blocks = arg;
	for (int i = 0; i < NFREE; i++)
		hp_free(blocks[i]);
	return NULL;
}

static int child_checks(void **mine, void **theirs, unsigned char *live)
{
	hp_release_drain();
	for (int i = 0; i < NFREE; i++) {
		if (harness_mapped(mine[i], SIZE) != 0) {
			fprintf(stderr, "child: block %d freed before fork still mapped\n", i);
			return 1;
		}
		if (harness_mapped(theirs[i], SIZE) != 0 && !live_in_registry(theirs[i])) {
			fprintf(stderr, "child: block %d freed by the other thread still mapped\n", i);
			return 1;
		}
	}
	if (harness_check(live, 16 * MiB, 3) != SIZE_MAX)
		return 2;
	char *q = hp_malloc(SIZE); /* the child allocates on its own */
	if (!q)
		return 3;
	q[SIZE - 1] = 1;
	hp_free(q);
	hp_release_drain();
	return harness_mapped(q, SIZE) == 0 ? 0 : 4;
}

static void alloc_touched(void **blocks)
{
	for (int i = 0; i < NFREE; i++) {
		blocks[i] = hp_malloc(SIZE);
		assert_non_null(blocks[i]);
		harness_touch(blocks[i], SIZE);
	}
}

static void test_fork_with_releases_in_flight(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	for (int round = 0; round < 30; round++) {
		void *mine[NFREE], *theirs[NFREE];
		pthread_t t;
		unsigned char *live = hp_malloc(16 * MiB);
		assert_non_null(live);
		harness_fill(live, 16 * MiB, 3);
		alloc_touched(mine);
		alloc_touched(theirs);
		assert_int_equal(pthread_create(&t, NULL, free_all, theirs), 0);
		for (int i = 0; i < NFREE; i++)
			hp_free(mine[i]); /* releases queued, some completing now */
		fflush(NULL);
		pid_t pid = fork(); /* the other thread is freeing right now */
		assert_true(pid >= 0);
		if (pid == 0)
			_exit(child_checks(mine, theirs, live));
		pthread_join(t, NULL);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("round %d: child %s %d", round, WIFEXITED(status) ? "exited" : "killed by signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		assert_filled(live, 16 * MiB, 3);
		hp_free(live);
		hp_release_drain();
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_fork_with_releases_in_flight),
	};
	harness_init(argc, argv);
	return harness_run("fork_inflight", tests, ARRAY_SIZE(tests));
}
