/* Populate workers that cannot be created (a pids cgroup, RLIMIT_NPROC;
 * here pthread_create is made to fail).  Nothing is lost: without a worker
 * no job is made and the program faults its block itself, on huge pages,
 * as without populate; with fewer workers than the knob asks, those there
 * are do the work.  A creation that failed is not tried again (as the
 * janitor's), so a process at its thread limit does not pay for a failed
 * pthread_create on every fresh block.  Each case in a fresh process. */
#include "harness.h"
#include "fault.h"
#include "populate_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SIZE (256 * MiB)

static void knobs(const char *populate)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("populate", populate);
}

static int child_no_worker(void)
{
	knobs("2");
	fault_pthread_create(EAGAIN);
	int bad = pop_fresh_block_whole(SIZE, 1, NULL);
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_THREADS) == 0, "populate_threads should be 0");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) == 0, "populated without a worker");
	fault_pthread_create(0); /* threads may start again: not tried again */
	bad |= pop_fresh_block_whole(SIZE, 2, NULL);
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_THREADS) == 0, "a worker was tried again");
	return bad;
}

/* The janitor and the first worker start, the second worker cannot. */
static int child_one_of_two(void)
{
	knobs("2");
	fault_pthread_create_after(2, EAGAIN);
	int bad = pop_fresh_block_whole(SIZE, 3, pop_workers_populated);
	fault_pthread_create(0);
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_THREADS) == 1, "populate_threads should be 1");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) > 0, "the one worker populated nothing");
	return bad;
}

static const struct harness_child_case children[] = {
	{"no_worker", child_no_worker},
	{"one_of_two", child_one_of_two},
};

static void test_no_worker_program_faults_itself(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("no_worker");
}

static void test_fewer_workers_than_asked(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("one_of_two");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_no_worker_program_faults_itself),
		HTEST(test_fewer_workers_than_asked),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("populate_thread_fail", tests, ARRAY_SIZE(tests));
}
