/* Populate ahead under a memory bound (issues 34, 45): a page the workers
 * fault ahead of the program is charged to it, and nothing can take it back
 * without risking a write of the program that raced with the taking
 * (populate.c's "Memory").  Going over a cgroup's limit is no ENOMEM for
 * anyone: the OOM killer kills the whole process.  So where a bound holds --
 * a memory cgroup's limit, or cache_rss_max -- the workers fault nothing
 * ahead, and a program that fits its limit without them fits with them.
 *   - The program: hp_calloc(1 GiB), its first 200 MiB written at
 *     a reader's pace, a pause, then 90 MiB of libc's memory written.  Its
 *     limit is the same program's peak without workers (populate=off,
 *     measured first in a cgroup with room) plus MARGIN: with the default
 *     knobs and with populate=2 it runs to the end, no OOM kill, nothing
 *     populated ahead (before: killed, the workers up to 64 MiB ahead).
 *   - A limit set while the workers are ahead (the cgroup had none): they
 *     stop there, and the program that goes on filling runs to the end.
 *   - cache_rss_max, no cgroup: nothing ahead, the block's Rss (smaps) is
 *     what the program wrote.
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
#define FILL (200 * MiB)
#define AFTER (90 * MiB)
#define PAUSE_MS 1500
#define MARGIN (6 * MiB) /* over the peak without workers: the had 3 */
#define ROOMY (2 * GiB)
#define PACE_MS 2 /* per 2 MiB: a reader's pace, the workers get ahead */
#define LOOK_MS 400 /* the janitor looks at the cgroup every round (250 ms at most) */

static void knobs(const char *populate)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	if (populate)
		harness_knob("populate", populate);
}

struct fill {
	size_t fill;      /* bytes of the block written, in order */
	size_t after;     /* then, after PAUSE_MS, this much of libc's memory written */
	size_t limit_at;  /* 0, or the limit set halfway through the fill */
	bool none_ahead;  /* exit 5 if the workers faulted anything ahead */
};

static void *fill_after(size_t n)
{
	char *q = malloc(n); /* libc's: where the program's next data goes */
	if (q)
		memset(q, 0x5a, n);
	return q;
}

/* In the cgroup: the buffer filled in part, then libc's memory; 0 if all
 * of it reads back. */
static int fill_child(void *arg)
{
	const struct fill *f = arg;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_calloc(1, BLOCK);
	if (!p)
		return 2;
	if (f->limit_at) {
		harness_fill_slowly(p, f->fill / 2, 7, PACE_MS);
		tmemcg_set_limit(f->limit_at);
		harness_sleep_ms(LOOK_MS); /* the janitor's next look sees the limit */
		uint64_t seen = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
		harness_fill_slowly(p + f->fill / 2, f->fill / 2, 7 + f->fill / 2, PACE_MS);
		uint64_t more = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - seen;
		print_message("  populated ahead before the limit was seen %llu MiB, after %llu MiB\n",
			      (unsigned long long)(seen - ahead) >> 20, (unsigned long long)more >> 20);
		if (more)
			return 5;
	} else {
		harness_fill_slowly(p, f->fill, 7, PACE_MS);
	}
	harness_sleep_ms(PAUSE_MS);
	struct harness_smaps sm;
	if (harness_smaps_range(p, BLOCK, &sm) != 0)
		return 3;
	ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead;
	print_message("  filled %zu of %zu MiB: block Rss %zu MiB, cgroup usage %zu MiB, "
		      "populated ahead %llu MiB\n", f->fill >> 20, (size_t)BLOCK >> 20, sm.rss >> 20,
		      tmemcg_usage() >> 20, (unsigned long long)ahead >> 20);
	if (f->none_ahead && ahead)
		return 5;
	char *q = f->after ? fill_after(f->after) : NULL;
	if (f->after && !q)
		return 6;
	bool intact = f->limit_at ? harness_check_filled(p, f->fill / 2, 7) == SIZE_MAX &&
					    harness_check_filled(p + f->fill / 2, f->fill / 2, 7 + f->fill / 2) == SIZE_MAX
				  : harness_check_filled(p, f->fill, 7) == SIZE_MAX;
	if (!intact || (q && q[f->after - 1] != 0x5a))
		return 4;
	free(q);
	hp_free(p);
	return 0;
}

/* The child's status in a cgroup limited to limit; the cgroup's OOM kills
 * meanwhile and its peak. */
static int run_in_limit(const struct fill *f, size_t limit, size_t *kills, size_t *peak)
{
	tmemcg_make(limit);
	size_t before = tmemcg_oom_kills();
	int status = tmemcg_spawn(fill_child, (void *)f);
	*kills = tmemcg_oom_kills() - before;
	*peak = tmemcg_peak();
	print_message("  %s, %zu OOM kills in the cgroup, its peak %zu MiB, limit %zu MiB\n",
		      tmemcg_status_text(status), *kills, *peak >> 20,
		      (f->limit_at ? f->limit_at : limit) >> 20);
	tmemcg_remove();
	return status;
}

static void must_survive(int status, size_t kills, const char *what)
{
	if (WIFEXITED(status) && WEXITSTATUS(status) == 5)
		fail_msg("%s: the workers faulted pages ahead of the program under a memory limit", what);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("%s: the program that fits its limit did not run to the end: %s", what,
			 tmemcg_status_text(status));
	assert_int_equal(kills, 0);
}

/* The program's peak without workers, in a cgroup with room: the control
 * the limit is made from (and a control that it runs at all). */
static size_t peak_without_workers(void)
{
	static size_t peak;
	if (peak)
		return peak;
	struct fill f = {.fill = FILL, .after = AFTER};
	size_t kills;
	harness_knob("populate", "off");
	print_message("the control, populate=off, %zu MiB limit:\n", (size_t)ROOMY >> 20);
	int status = run_in_limit(&f, ROOMY, &kills, &peak);
	must_survive(status, kills, "populate=off");
	if (!peak)
		harness_skip_cap("memcg", "the cgroup reports no peak (max_usage_in_bytes, memory.peak)");
	return peak;
}

static void fill_pause_allocate(const char *populate)
{
	harness_need_thp();
	knobs(NULL);
	size_t limit = peak_without_workers() + MARGIN, kills, peak;
	hp_knob_unset("populate"); /* the control's off */
	knobs(populate);
	struct fill f = {.fill = FILL, .after = AFTER, .none_ahead = true};
	print_message("populate=%s: %zu of a %zu MiB block written, %u ms pause, %zu MiB of libc's "
		      "memory written; limit: the peak without workers + %zu MiB\n",
		      populate ? populate : "auto (the default)", (size_t)FILL >> 20, (size_t)BLOCK >> 20,
		      PAUSE_MS, (size_t)AFTER >> 20, (size_t)MARGIN >> 20);
	int status = run_in_limit(&f, limit, &kills, &peak);
	must_survive(status, kills, populate ? populate : "default knobs");
}

static void test_default_knobs(void **state)
{
	(void)state;
	fill_pause_allocate(NULL);
}

static void test_two_workers(void **state)
{
	(void)state;
	fill_pause_allocate("2");
}

/* A cgroup without a limit, which gets one halfway through the fill: what
 * the program needs (its usage then, the other half, the libc memory after,
 * and room for what the workers had ahead).  The workers fault nothing more
 * once the limit is seen (exit 5 otherwise); the program runs to the end. */
static void test_limit_set_while_ahead(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	struct fill f = {.fill = FILL, .after = 16 * MiB, .limit_at = FILL + 16 * MiB + 96 * MiB};
	size_t kills, peak;
	print_message("no limit, then %zu MiB halfway through the fill:\n", f.limit_at >> 20);
	int status = run_in_limit(&f, TMEMCG_NO_LIMIT, &kills, &peak);
	must_survive(status, kills, "a limit set while the workers are ahead");
}

/* cache_rss_max, no cgroup: nothing ahead, the block holds what was written. */
static void test_rss_bound(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	const size_t fill = 80 * MiB;
	char value[32];
	snprintf(value, sizeof(value), "%zu", harness_statm_rss() + 512 * MiB);
	harness_knob("cache_rss_max", value);
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(BLOCK);
	assert_non_null(p);
	harness_fill_slowly(p, fill, 9, PACE_MS);
	harness_sleep_ms(300);
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(p, BLOCK, &sm), 0);
	ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead;
	print_message("cache_rss_max = RSS + 512 MiB, %zu MiB filled: block Rss %zu MiB, populated ahead "
		      "%llu MiB\n", fill >> 20, sm.rss >> 20, (unsigned long long)ahead >> 20);
	assert_int_equal(ahead, 0);
	assert_true(sm.rss <= fill);
	assert_int_equal(harness_check_filled(p, fill, 9), SIZE_MAX);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_default_knobs),
		HTEST(test_two_workers),
		HTEST(test_limit_set_while_ahead),
		HTEST(test_rss_bound),
	};
	harness_init(argc, argv);
	return harness_run("populate_memcg", tests, ARRAY_SIZE(tests));
}
