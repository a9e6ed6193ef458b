/* Populate ahead under a memory bound (issue 34): the workers never fault
 * past what the memory cgroup, or cache_rss_max, leaves free.  Going over a
 * cgroup's limit is no ENOMEM for the worker: the kernel's OOM killer kills
 * the whole process -- before, a program that fits its limit was killed
 * for pages it never touched ("hpalloc-ahead invoked oom-killer").
 *   - A worst-case-sized buffer filled in part, as a file read into a
 *     preallocated array is: hp_malloc(1 GiB), the first 256 MiB written in
 *     2 MiB steps at a reader's pace, in a v1 (v2 elsewhere) memory cgroup
 *     limited to 300 MiB, with the default knobs (populate=auto) and with
 *     populate=2: the process runs to the end, as with populate=off, no OOM
 *     kill in the cgroup; the workers took part (populate_ahead_bytes).
 *   - The limit lowered while the workers are ahead: they stop there.
 *   - cache_rss_max, no cgroup: the block's resident memory (smaps) stays
 *     under what the bound leaves, the workers ahead by at most half of it.
 * The kernel's numbers judge: the child's exit status, memory.oom_control
 * (memory.events), smaps.  Root and a memory controller for the cgroup
 * cases (tests/c/memcg_util.c makes and removes the cgroup, also when a
 * case fails). */
#include "harness.h"
#include "memcg_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK GiB
#define FILL (256 * MiB)
#define LIMIT (300 * MiB)
#define PACE_MS 2 /* per 2 MiB: a reader's pace, the workers get ahead */

static void knobs(const char *populate)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	if (populate)
		harness_knob("populate", populate);
}

struct fill {
	size_t block, fill;
	unsigned pace_ms;
	size_t lower_to; /* 0, or the limit set halfway through the fill */
};

/* In the cgroup: the buffer, filled in part; 0 if all of it reads back. */
static int fill_child(void *arg)
{
	const struct fill *f = arg;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(f->block);
	if (!p)
		return 2;
	if (f->lower_to) {
		harness_fill_slowly(p, f->fill / 2, 7, f->pace_ms);
		tmemcg_set_limit(f->lower_to);
		harness_fill_slowly(p + f->fill / 2, f->fill / 2, 7 + f->fill / 2, f->pace_ms);
	} else {
		harness_fill_slowly(p, f->fill, 7, f->pace_ms);
	}
	harness_sleep_ms(300); /* the workers' last look */
	struct harness_smaps sm;
	if (harness_smaps_range(p, f->block, &sm) != 0)
		return 3;
	print_message("  filled %zu of %zu MiB: block Rss %zu MiB, cgroup usage %zu MiB, "
		      "populated ahead %llu MiB\n", f->fill >> 20, f->block >> 20, sm.rss >> 20,
		      tmemcg_usage() >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
	if (harness_check_filled(p, f->fill, 7) != SIZE_MAX)
		return 4;
	hp_free(p);
	return 0;
}

/* The child's status, and the cgroup's OOM kills meanwhile. */
static int run_in_limit(const struct fill *f, size_t limit, size_t *kills)
{
	tmemcg_make(limit);
	size_t before = tmemcg_oom_kills();
	int status = tmemcg_spawn(fill_child, (void *)f);
	*kills = tmemcg_oom_kills() - before;
	print_message("%s: %s, %zu OOM kills in the cgroup, its peak %zu MiB of %zu MiB\n",
		      f->lower_to ? "limit lowered" : "fill", tmemcg_status_text(status), *kills,
		      tmemcg_peak() >> 20, (f->lower_to ? f->lower_to : limit) >> 20);
	tmemcg_remove();
	return status;
}

static void survives(const char *populate)
{
	harness_need_thp();
	knobs(populate);
	struct fill f = {.block = BLOCK, .fill = FILL, .pace_ms = PACE_MS};
	size_t kills;
	print_message("populate=%s, %zu MiB limit, %zu MiB of a %zu MiB block filled:\n",
		      populate ? populate : "auto (the default)", (size_t)LIMIT >> 20, (size_t)FILL >> 20,
		      (size_t)BLOCK >> 20);
	int status = run_in_limit(&f, LIMIT, &kills);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("populate=%s: the program that fits its limit did not run to the end: %s",
			 populate ? populate : "auto", tmemcg_status_text(status));
	assert_int_equal(kills, 0);
}

/* The control: without workers the program fits (else the limit is wrong
 * for this machine and the cases below prove nothing). */
static void test_fits_without_workers(void **state)
{
	(void)state;
	survives("off");
}

static void test_default_knobs_survive(void **state)
{
	(void)state;
	survives(NULL);
}

static void test_two_workers_survive(void **state)
{
	(void)state;
	survives("2");
}

/* Halfway through the fill the limit comes down to what the program
 * needs (its usage then plus the other half and some): the workers that
 * were ahead stop, the program runs to the end. */
static void test_limit_lowered(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	struct fill f = {.block = BLOCK, .fill = FILL, .pace_ms = PACE_MS, .lower_to = FILL + 24 * MiB};
	size_t kills;
	int status = run_in_limit(&f, 2 * GiB, &kills);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the limit lowered under the workers: %s", tmemcg_status_text(status));
	assert_int_equal(kills, 0);
}

/* cache_rss_max, no cgroup: the workers keep the process under it. */
static void test_rss_bound(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	const size_t fill = 80 * MiB, room = 96 * MiB;
	size_t base = harness_statm_rss();
	char value[32];
	snprintf(value, sizeof(value), "%zu", base + room);
	harness_knob("cache_rss_max", value);
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(BLOCK);
	assert_non_null(p);
	harness_fill_slowly(p, fill, 9, PACE_MS);
	harness_sleep_ms(300);
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(p, BLOCK, &sm), 0);
	/* ahead <= half of what is left: fill + (room - fill) / 2, a chunk more
	 * for the reading the workers had */
	size_t bound = fill + (room - fill) / 2 + 2 * MiB;
	print_message("cache_rss_max = RSS + %zu MiB, %zu MiB filled: block Rss %zu MiB (bound %zu), "
		      "populated ahead %llu MiB\n", room >> 20, fill >> 20, sm.rss >> 20, bound >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
	assert_true(sm.rss <= bound);
	assert_int_equal(harness_check_filled(p, fill, 9), SIZE_MAX);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_fits_without_workers),
		HTEST(test_default_knobs_survive),
		HTEST(test_two_workers_survive),
		HTEST(test_limit_lowered),
		HTEST(test_rss_bound),
	};
	harness_init(argc, argv);
	return harness_run("populate_memcg", tests, ARRAY_SIZE(tests));
}
