/* What the populate workers choose on the machine they run on (issues 44,
 * 49): how a fresh block is first touched, and whether they fault ahead at
 * all.  The figures the choice is made from are staged (the library's
 * populate_figures_stage), so both outcomes happen on any machine; smaps
 * (VmFlags, AnonHugePages) and the counters judge.
 *   - populate_pages is measured by default.  Huge pages staged dear (a VM
 *     whose free memory went back to its host: 8 ms per 2 MiB against
 *     0.8 ms of 4 KiB faults): a fresh block goes on at 4 KiB once the
 *     program has begun it ("nh" in its VmFlags past its first 4 MiB),
 *     populate_start says 2.  Staged cheap (bare metal, memory a process
 *     freed a moment ago: 0.2 ms): it stays on huge pages ("hg", no "nh"),
 *     populate_start says 1, and written it is on huge pages at once.
 *     Not measured yet (populate_start 0: a process's first block): the
 *     allocation probes both kinds first and the block starts as that says.
 *     Either way a block filled and kept is on huge pages (>= 90 %) soon
 *     after, its data intact.
 *   - A busy machine (a thread spinning on every CPU the process may use):
 *     under populate=auto the workers stand back (populate_busy counts it)
 *     and fault nothing ahead of a program filling a block; on an idle
 *     machine they do (skipped, saying so, where the machine is busy with
 *     something else).  An explicit number of workers always works. */
#include "harness.h"
#include "../../lib/core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (128 * MiB)
#define START (4 * MiB) /* chunks 0 and 1: the workers' cue */
#define PACE_MS 1
#define SETTLE_MS 3000

static void knobs(const char *populate)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("populate", populate);
}

/* ---- how a block starts -------------------------------------------------------- */

static void test_measured_is_the_default(void **state)
{
	(void)state;
	char value[32];
	assert_int_equal(hp_knob_get("populate_pages", value, sizeof(value)), 0);
	assert_string_equal(value, "measured");
}

/* The smaps of the block past its start once its worker has seen the
 * program begin (a look within a few ms): nh there if it goes on at 4 KiB. */
static struct harness_smaps advice_after_start(char *p, bool at_4k)
{
	struct harness_smaps sm;
	uint64_t end = harness_now_ms() + 1000;
	do {
		assert_int_equal(harness_smaps_range(p + 2 * START, 2 * MiB, &sm), 0);
		if (sm.thp_refused == at_4k)
			break;
		harness_sleep_ms(5);
	} while (harness_now_ms() < end);
	return sm;
}

/* A fresh block under staged figures: the gauge, the VmFlags past the
 * program's start, then filled and kept: huge within SETTLE_MS, data
 * intact. */
static void starts(uint64_t huge_ns, uint64_t base_ns, bool at_4k, uint64_t gauge)
{
	harness_need_collapse();
	knobs("1");
	populate_figures_stage(huge_ns, base_ns);
	assert_int_equal(harness_stat(HP_STAT_POPULATE_START), gauge);
	char *p = hp_malloc(BLOCK);
	assert_non_null(p);
	if (!gauge) { /* the first block's probe measured both, now: as it says */
		gauge = harness_stat(HP_STAT_POPULATE_START);
		print_message("nothing measured: the first block's probe found huge pages %llu us, 4 KiB "
			      "pages %llu us per 2 MiB\n",
			      (unsigned long long)harness_stat(HP_STAT_POPULATE_2M_US),
			      (unsigned long long)harness_stat(HP_STAT_POPULATE_4K_US));
		if (!gauge)
			fail_msg("the first block under populate_pages=measured was not probed before its start");
		at_4k = gauge == 2;
	}
	uint64_t t0 = harness_now_ms();
	/* the program's start (its first 4 MiB, on huge pages: the advice comes
	 * once it has begun), then where the rest stands */
	harness_fill_slowly(p, START, 3, 0);
	struct harness_smaps sm = advice_after_start(p, at_4k);
	print_message("figures staged: huge pages %llu us, 4 KiB pages %llu us per 2 MiB: the block's VmFlags "
		      "after its start %s%s\n", (unsigned long long)huge_ns / 1000,
		      (unsigned long long)base_ns / 1000, sm.thp_eligible ? "hg " : "", sm.thp_refused ? "nh" : "");
	if (at_4k && !sm.thp_refused)
		fail_msg("huge pages staged dear, but the fresh block does not go on at 4 KiB (no nh)");
	if (!at_4k && (sm.thp_refused || !sm.thp_eligible))
		fail_msg("huge pages staged cheap, but the fresh block does not go on on huge pages");
	harness_fill_slowly(p + START, BLOCK - START, 3 + START, PACE_MS);
	size_t at_once = harness_anon_huge(p, BLOCK);
	bool settled = harness_huge_within(p, BLOCK, SETTLE_MS);
	print_message("  filled in %llu ms: on huge pages %zu MiB at once, %zu MiB within %d ms; figures now "
		      "%llu / %llu us\n", (unsigned long long)(harness_now_ms() - t0), at_once >> 20,
		      harness_anon_huge(p, BLOCK) >> 20, SETTLE_MS,
		      (unsigned long long)harness_stat(HP_STAT_POPULATE_2M_US),
		      (unsigned long long)harness_stat(HP_STAT_POPULATE_4K_US));
	assert_int_equal(harness_check_filled(p, START, 3), SIZE_MAX);
	assert_int_equal(harness_check_filled(p + START, BLOCK - START, 3 + START), SIZE_MAX);
	if (!settled)
		fail_msg("a block filled and kept is not on huge pages (>= 90 %%) within %d ms", SETTLE_MS);
	if (!at_4k && at_once < BLOCK / 2)
		fail_msg("started on huge pages, yet only %zu MiB of %d are huge right after the fill",
			 at_once >> 20, (int)(BLOCK >> 20));
	hp_free(p);
}

static void test_huge_dear_starts_at_4k(void **state)
{
	(void)state;
	starts(8000000, 800000, true, 2);
}

static void test_huge_cheap_starts_huge(void **state)
{
	(void)state;
	starts(200000, 800000, false, 1);
}

static void test_not_measured_probes_first(void **state)
{
	(void)state;
	starts(0, 0, true, 0);
}

/* ---- busy cores ---------------------------------------------------------------- */

static _Atomic bool spinning;

static void *spin(void *arg)
{
	(void)arg;
	while (atomic_load_explicit(&spinning, memory_order_relaxed))
		;
	return NULL;
}

static int cpus(void)
{
	cpu_set_t set;
	return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* What the workers faulted ahead of a block filled at a reader's pace. */
static uint64_t ahead_of_fill(void)
{
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(BLOCK);
	assert_non_null(p);
	harness_fill_slowly(p, BLOCK / 2, 4, PACE_MS * 2);
	harness_sleep_ms(100);
	assert_int_equal(harness_check_filled(p, BLOCK / 2, 4), SIZE_MAX);
	hp_free(p);
	return harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead;
}

/* The machine's runnable tasks but this thread (/proc/loadavg), what the
 * workers compare with the CPUs: the median of 21 readings over 100 ms. */
static long others_runnable(void)
{
	long seen[21];
	for (int i = 0; i < 21; i++) {
		FILE *f = fopen("/proc/loadavg", "re");
		double a, b, c;
		long r = 1, t;
		if (!f || fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &r, &t) != 5)
			r = 1;
		if (f)
			fclose(f);
		seen[i] = r - 1;
		for (int k = i; k > 0 && seen[k - 1] > seen[k]; k--) {
			long x = seen[k];
			seen[k] = seen[k - 1];
			seen[k - 1] = x;
		}
		harness_sleep_ms(5);
	}
	return seen[10];
}

static void test_busy_cores_stand_back(void **state)
{
	(void)state;
	int n = cpus();
	if (n < 2)
		harness_skip("one CPU: populate=auto starts no worker at all");
	knobs("auto");
	harness_knob("populate_pages", "2M");
	pthread_t t[64];
	n = n > 64 ? 64 : n;
	atomic_store(&spinning, true);
	for (int i = 0; i < n; i++)
		assert_int_equal(pthread_create(&t[i], NULL, spin, NULL), 0);
	harness_sleep_ms(50);
	uint64_t busy = harness_stat(HP_STAT_POPULATE_BUSY);
	uint64_t ahead = ahead_of_fill();
	busy = harness_stat(HP_STAT_POPULATE_BUSY) - busy;
	atomic_store(&spinning, false);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	print_message("%d threads spinning on %d CPUs: populate_busy +%llu, %llu MiB faulted ahead\n", n, n,
		      (unsigned long long)busy, (unsigned long long)ahead >> 20);
	if (!busy)
		fail_msg("every CPU busy, and the workers never stood back (populate_busy did not move)");
	/* a reading between two spinner wake-ups may let one chunk through */
	if (ahead > 4 * MiB)
		fail_msg("every CPU busy, and the workers faulted %llu MiB ahead", (unsigned long long)ahead >> 20);
}

static void test_idle_core_works(void **state)
{
	(void)state;
	if (cpus() < 2)
		harness_skip("one CPU: populate=auto starts no worker at all");
	knobs("auto");
	harness_knob("populate_pages", "2M");
	long others = others_runnable();
	if (others >= cpus())
		harness_skip("the machine is busy with something else (%ld runnable tasks on %d CPUs): "
			     "nothing to show about an idle one", others, cpus());
	uint64_t ahead = ahead_of_fill();
	print_message("an idle machine: %llu MiB faulted ahead\n", (unsigned long long)ahead >> 20);
	if (!ahead)
		fail_msg("a CPU idle, and the workers faulted nothing ahead");
}

/* An explicit number of workers is the user's: they work on a busy machine. */
static void test_explicit_workers_work_when_busy(void **state)
{
	(void)state;
	int n = cpus() > 64 ? 64 : cpus();
	knobs("1");
	harness_knob("populate_pages", "2M");
	pthread_t t[64];
	atomic_store(&spinning, true);
	for (int i = 0; i < n; i++)
		assert_int_equal(pthread_create(&t[i], NULL, spin, NULL), 0);
	uint64_t busy = harness_stat(HP_STAT_POPULATE_BUSY);
	uint64_t ahead = ahead_of_fill();
	atomic_store(&spinning, false);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	print_message("populate=1, every CPU busy: %llu MiB faulted ahead, populate_busy +%llu\n",
		      (unsigned long long)ahead >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_POPULATE_BUSY) - busy));
	assert_int_equal(harness_stat(HP_STAT_POPULATE_BUSY), busy);
	if (!ahead)
		fail_msg("populate=1 on a busy machine faulted nothing ahead");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_measured_is_the_default),
		HTEST(test_huge_dear_starts_at_4k),
		HTEST(test_huge_cheap_starts_huge),
		HTEST(test_not_measured_probes_first),
		HTEST(test_busy_cores_stand_back),
		HTEST(test_idle_core_works),
		HTEST(test_explicit_workers_work_when_busy),
	};
	harness_init(argc, argv);
	return harness_run("populate_choice", tests, ARRAY_SIZE(tests));
}
