/* fork() while populate workers are inside a block (lib/threads/populate.c, issue
 * 27).  fork waits until no worker is inside a job: a worker looks at a
 * chunk before it faults it in, and a fault-in after a fork that came
 * between the two -- the program having written the chunk meanwhile -- is
 * a write to pages the child now shares, which copies them in the parent
 * (and splits its huge page: tests/preload/fork once found its parent's
 * block partly on 4 KiB pages).  The child has no workers and no jobs,
 * keeps the parent's blocks as the program's, and starts workers of its
 * own with its own first fresh block.
 *
 * First a worker is held inside a chunk (populate_util.h) that the program
 * then writes, and the program forks while a thread lets the worker go
 * HOLD_MS later: fork returns only after that, and the parent's pages of
 * the chunk are the ones it had before the fork (pagemap: not copied).
 * The child reads the parent's data, populates a block of its own and
 * exits 0; the parent finds its block whole.  Then 20 forks race live
 * workers. */
#include "harness.h"
#include "fault.h"
#include "populate_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIZE (256 * MiB)
#define CHILD_SIZE (128 * MiB)
#define CHUNK (2 * MiB)
#define PAGE 4096
#define HOLD_MS 300

/* In the child: the parent's data as it was, no worker inherited, and a
 * block of its own populated by workers of its own. */
static int child_side(const char *parent_block)
{
	int bad = harness_expect(harness_check(parent_block, POP_FILLED, 1) == SIZE_MAX,
			"the child does not see the parent's data");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_THREADS) == 0, "the child counts workers it has not got");
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *q = hp_malloc(CHILD_SIZE);
	if (!q)
		return harness_expect(false, "no block in the child");
	harness_fill_slowly(q, POP_FILLED, 4, 0); /* its workers start */
	bad |= harness_expect(harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + 1, 10000),
		     "the child's workers populated nothing of its block");
	harness_fill_slowly(q + POP_FILLED, CHILD_SIZE - POP_FILLED, 5, 0);
	bad |= harness_expect(harness_check_filled(q, POP_FILLED, 4) == SIZE_MAX &&
		     harness_check_filled(q + POP_FILLED, CHILD_SIZE - POP_FILLED, 5) == SIZE_MAX,
		     "the child's block lost data");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_THREADS) >= 1, "the child started no worker of its own");
	hp_free(q);
	return bad;
}

static int wait_child(pid_t pid)
{
	int status;
	if (pid < 0)
		return harness_expect(false, "fork failed");
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "FAIL: the child ended with status %#x\n", status);
		return 1;
	}
	return 0;
}

static _Atomic bool released;

static void *release_later(void *arg)
{
	(void)arg;
	struct timespec ts = {0, HOLD_MS * 1000000L};
	nanosleep(&ts, NULL);
	atomic_store(&released, true);
	pop_hold_workers(false);
	return NULL;
}

/* The pages of [addr, addr + len) the parent has after the fork are the
 * ones it had before: shared with the child, not copied. */
static int same_pages(const uint64_t *before, const char *addr, size_t len)
{
	size_t n = len / PAGE, moved = 0;
	uint64_t *after = calloc(n, sizeof(*after));
	if (!after || harness_pfns(addr, len, after) < 0) {
		free(after);
		return harness_expect(false, "no pagemap");
	}
	for (size_t i = 0; i < n; i++)
		moved += after[i] != before[i];
	free(after);
	if (moved)
		fprintf(stderr, "FAIL: %zu of the %zu pages the program wrote before the fork were copied "
			"in the parent after it (a worker's fault-in after the fork)\n", moved, n);
	return moved ? 1 : 0;
}

static int child_fork_held(void)
{
	bool skip;
	char why[256];
	char *p = pop_hold_block(SIZE, &skip, why, sizeof(why));
	if (!p) {
		fprintf(stderr, "%s\n", why);
		return skip ? 77 : 1;
	}
	/* the program writes the held worker's chunk, all but the page the
	 * worker waits for, before the fork */
	uintptr_t held = pop_hold_first_held() & ~(uintptr_t)(PAGE - 1);
	char *rest = (char *)held + PAGE;
	size_t len = ((held & ~(uintptr_t)(CHUNK - 1)) + CHUNK) - (uintptr_t)rest;
	uint64_t *before = calloc(len / PAGE, sizeof(*before));
	int fds[2];
	pthread_t t;
	if (!held || !len || !before || pipe(fds) != 0) {
		free(before);
		return harness_expect(false, "no held fault, no memory or no pipe");
	}
	memset(rest, 0x5a, len);
	int bad = harness_expect(harness_pfns(rest, len, before) == 0, "no pagemap");
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	atomic_store(&released, false);
	if (pthread_create(&t, NULL, release_later, NULL) != 0)
		return harness_expect(false, "pthread_create");
	alarm(60); /* a fork waiting for a worker nobody lets go never returns */
	pid_t pid = fork();
	if (pid == 0) { /* shares the parent's pages until the parent has looked */
		char c;
		close(fds[1]);
		while (read(fds[0], &c, 1) > 0)
			;
		_exit(child_side(p));
	}
	alarm(0);
	bool waited = atomic_load(&released);
	pthread_join(t, NULL);
	close(fds[0]);
	bad |= harness_expect(waited, "fork returned while a populate worker was inside the block");
	bad |= harness_expect(harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + 1, 10000),
		     "the held worker's fault-in never completed");
	bad |= same_pages(before, rest, len);
	free(before);
	close(fds[1]); /* the child goes on */
	bad |= wait_child(pid);
	harness_fill_slowly(p + POP_FILLED, SIZE - POP_FILLED, 5, 0); /* the rest, as the program would */
	pop_hold_stop();
	bad |= harness_expect(harness_check(p, POP_FILLED, 1) == SIZE_MAX, "the parent's first data changed");
	bad |= harness_expect(harness_check_filled(p + POP_FILLED, SIZE - POP_FILLED, 5) == SIZE_MAX,
		     "the parent's block lost data");
	hp_free(p);
	return bad;
}

static int child_fork_races(void)
{
	int bad = 0;
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("populate", "2");
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "no block");
	harness_fill(p, POP_FILLED, 1);
	size_t off = POP_FILLED;
	int forks = 0;
	for (; forks < 20 && !bad; forks++, off += 8 * MiB) {
		harness_fill_slowly(p + off, 8 * MiB, 6 + forks, 0); /* the workers keep ahead of this */
		pid_t pid = fork();
		if (pid == 0)
			_exit(child_side(p));
		bad |= wait_child(pid);
	}
	bad |= harness_expect(harness_check(p, POP_FILLED, 1) == SIZE_MAX, "the parent's data changed");
	for (int i = 0; i < forks; i++)
		if (harness_check_filled(p + POP_FILLED + i * 8 * MiB, 8 * MiB, 6 + i) != SIZE_MAX) {
			bad |= harness_expect(false, "the parent's block lost data");
			break;
		}
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) > 0, "no worker populated: the test did not test");
	hp_free(p);
	return bad;
}

/* The child has none of the parent's jobs: a job of the parent's is for
 * the parent's block, and in the child the same addresses are the child's
 * copy -- its workers would write into it, costing the child a private
 * copy of every page they fault (before, with the child keeping the
 * parent's jobs, nothing noticed: its Rss over the parent's block grew
 * 47 MiB past what it wrote).  The parent's job is populating at the fork;
 * the child starts workers of its own (a fresh block) and writes on in the
 * parent's block itself: no more of it is resident than it wrote. */
static void test_child_drops_parents_jobs(void **state)
{
	(void)state;
	harness_need_thp();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("populate", "1");
	const size_t size = 512 * MiB, start = 4 * MiB, upto = 40 * MiB;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(size);
	assert_non_null(p);
	harness_fill_slowly(p, start, 1, 0);
	/* the parent's job populates (chunks 2 and 3) */
	assert_true(harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + 4 * MiB, 10000));
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *q = hp_malloc(64 * MiB); /* the child's first block: its workers start */
		if (!q)
			_exit(2);
		harness_fill_slowly(p + 2 * start, upto - 2 * start, 3, 2); /* on, as the parent would */
		harness_sleep_ms(400);
		struct harness_smaps sm;
		if (harness_smaps_range(p, size, &sm) != 0)
			_exit(3);
		fprintf(stderr, "child: wrote the parent's block up to %zu MiB: its Rss %zu MiB\n", upto >> 20,
			sm.rss >> 20);
		_exit(sm.rss <= upto ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	hp_free(p);
}

static const struct harness_child_case children[] = {
	{"fork_held", child_fork_held},
	{"fork_races", child_fork_races},
};

static void test_fork_with_worker_inside(void **state)
{
	(void)state;
	pop_hold_require();
	harness_child_passes("fork_held");
}

static void test_forks_race_workers(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("fork_races");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_fork_with_worker_inside),
		HTEST(test_forks_race_workers),
		HTEST(test_child_drops_parents_jobs),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("populate_fork", tests, ARRAY_SIZE(tests));
}
