/* A kernel without MADV_POPULATE_WRITE (before 5.14: madvise says EINVAL;
 * here madvise is interposed to say so, fault.h).  The workers' first fault-in fails:
 * the job ends, populate is off for the process, and the program faults
 * its blocks itself, on huge pages, nothing lost.  The same for ENOMEM (a
 * memory cgroup at its limit refuses a fault-in that no program thread
 * asked for): the job ends, the program goes on.  Each case in a fresh
 * process. */
#include "harness.h"
#include "fault.h"
#include "populate_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define SIZE (256 * MiB)

/* The worker tried MADV_POPULATE_WRITE once more than before this block. */
static int refused_before;

static bool tried_once(void)
{
	for (int i = 0; i < 10000 && fault_madvise_refused() <= refused_before; i++)
		harness_sleep_ms(1);
	harness_sleep_ms(50); /* and not again, for the checks below */
	return fault_madvise_refused() > refused_before;
}

static int block_tried_once(uint64_t seed)
{
	refused_before = fault_madvise_refused();
	return pop_fresh_block_whole(SIZE, seed, tried_once);
}

static void knobs(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("populate", "1");
}

static int child_einval(void)
{
	knobs();
	fault_madvise(MADV_POPULATE_WRITE, EINVAL);
	int bad = block_tried_once(1);
	int tried = fault_madvise_refused();
	fprintf(stderr, "MADV_POPULATE_WRITE refused %d times on the first block\n", tried);
	bad |= harness_expect(tried == 1, "a worker should try once, then stop");
	bad |= pop_fresh_block_whole(SIZE, 2, NULL); /* populate is off now: no job at all */
	bad |= harness_expect(fault_madvise_refused() == tried, "populate was tried again on a kernel without it");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) == 0, "populate_ahead_bytes should be 0");
	return bad;
}

static int child_enomem(void)
{
	knobs();
	fault_madvise(MADV_POPULATE_WRITE, ENOMEM);
	int bad = block_tried_once(3);
	int tried = fault_madvise_refused();
	bad |= harness_expect(tried == 1, "a worker should try once, then end the job");
	bad |= block_tried_once(4); /* a limit is no kernel's lack: tried again, ends again */
	bad |= harness_expect(fault_madvise_refused() == tried + 1, "the next block's job was not tried once");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) == 0, "populate_ahead_bytes should be 0");
	return bad;
}

static const struct harness_child_case children[] = {
	{"einval", child_einval},
	{"enomem", child_enomem},
};

static void test_kernel_without_populate_write(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("einval");
}

static void test_populate_refused_by_a_limit(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("enomem");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_kernel_without_populate_write),
		HTEST(test_populate_refused_by_a_limit),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("populate_unsupported", tests, ARRAY_SIZE(tests));
}
