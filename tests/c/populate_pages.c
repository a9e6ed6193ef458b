/* 4 KiB first, huge pages behind the program (issue 35, knob
 * populate_pages, lib/threads/populate.c).  Where a VM reports free pages, a
 * fresh 2 MiB fault costs several times 2 MiB of 4 KiB faults, so a
 * fresh block may be faulted at 4 KiB first and its populate worker
 * collapses it to 2 MiB pages once the program is done with it.  What the
 * kernel says (smaps) judges:
 *   - populate_pages=4K: past the program's start (its first 4 MiB, the
 *     workers' cue, on huge pages) the block is advised MADV_NOHUGEPAGE
 *     and the program's first touch is on 4 KiB pages (no AnonHugePages),
 *     and within 30 s of its last write the block is on huge pages, its
 *     data intact (the collapse copies the pages).
 *   - The block freed while its worker collapses it (or, cached, also
 *     before, while the program fills it), 10 rounds each: with
 *     the cache off, the range mapped again afresh by the test, one page
 *     touched per 2 MiB, stays on 4 KiB pages (no worker collapses a block
 *     that is gone); with the cache on, the block reused from the cache is
 *     THP-eligible again ("hg": a block leaves its job with its advice
 *     back), with the huge pages it had when freed, and once written anew
 *     all on huge pages (the cache dropped the 4 KiB pages not collapsed
 *     yet: kept, a block reused in a loop would stay on them), its data
 *     intact.
 *   - A fork while the block is on 4 KiB pages first: the child's copy is
 *     THP-eligible again (nobody collapses it there), its data intact; the
 *     parent's block is collapsed as ever.
 *   - In a memory cgroup whose limit leaves the block little room: no
 *     worker follows a block under a limit (populate.c's "Memory"), so none
 *     is faulted at 4 KiB first -- its first touch is on huge pages, as
 *     with 2M, with no collapse's moment of double charge.  The program
 *     runs to the end, no OOM kill.
 * On a kernel before 6.1 (no MADV_COLLAPSE) the cases skip: the knob then
 * leaves blocks on huge pages from their first fault. */
#include "harness.h"
#include "memcg_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (64 * MiB)
#define FIRST (4 * MiB) /* the workers' cue */
#define NEXT (8 * MiB)  /* written once the worker has seen the start */

static void knobs(const char *cache_max)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", cache_max);
	hp_knob_set("uring", "off");
	hp_knob_set("populate", "1");
}

/* In a child: populate_pages=4K, or a failure said. */
static int base_first(void)
{
	if (hp_knob_set("populate_pages", "4K") != 0) {
		fprintf(stderr, "FAIL: populate_pages=4K refused: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

/* Whether the mapping at p is advised MADV_NOHUGEPAGE within ms. */
static bool refused_within(const char *p, unsigned ms)
{
	struct harness_smaps sm;
	uint64_t end = harness_now_ms() + ms;
	while (harness_smaps_range(p, 1, &sm) == 0 && !sm.thp_refused && harness_now_ms() < end)
		harness_sleep_ms(5);
	return harness_smaps_range(p, 1, &sm) == 0 && sm.thp_refused;
}

static int child_small_then_huge(void)
{
	knobs("0");
	if (base_first())
		return 1;
	uint64_t t0 = harness_now_ms();
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "hp_malloc failed");
	/* the program's start, on huge pages: the worker advises the rest once
	 * it has seen it (the block's VMA has its anon_vma then: populate.c) */
	harness_fill_slowly(p, FIRST, 1, 0);
	bool advised = refused_within(p + FIRST, 1000);
	harness_fill_slowly(p + FIRST, NEXT, 2, 0);
	size_t next = harness_anon_huge(p + FIRST, NEXT);
	fprintf(stderr, "first %zu MiB written; the next %zu MiB (%s): AnonHugePages %zu KiB\n",
		(size_t)FIRST >> 20, (size_t)NEXT >> 20, advised ? "nh" : "not advised", next >> 10);
	int bad = harness_expect(advised, "the block was not advised to 4 KiB pages after the program began it");
	bad |= harness_expect(next == 0, "the program's first touch was on huge pages, not 4 KiB ones");
	harness_fill_slowly(p + FIRST + NEXT, SIZE - FIRST - NEXT, 3, 1);
	uint64_t t1 = harness_now_ms();
	bool huge = harness_huge_within(p, SIZE, 30000);
	fprintf(stderr, "filled in %llu ms; on huge pages %llu ms later (AnonHugePages %zu MiB); "
		"base_first %llu, collapsed %llu MiB\n", (unsigned long long)(t1 - t0),
		(unsigned long long)(harness_now_ms() - t1), harness_anon_huge(p, SIZE) >> 20,
		(unsigned long long)harness_stat(HP_STAT_POPULATE_SMALL_FIRST),
		(unsigned long long)harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES) >> 20);
	bad |= harness_expect(huge, "the block is not on huge pages 30 s after the program wrote it");
	bad |= harness_expect(harness_check_filled(p, FIRST, 1) == SIZE_MAX &&
		     harness_check_filled(p + FIRST, NEXT, 2) == SIZE_MAX &&
		     harness_check_filled(p + FIRST + NEXT, SIZE - FIRST - NEXT, 3) == SIZE_MAX,
		     "the block lost data");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_SMALL_FIRST) >= 1, "populate_small_first did not count it");
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES) > 0, "populate_collapsed_bytes is 0");
	hp_free(p);
	return bad;
}

/* A block filled, then freed as soon as its worker has collapsed some of
 * it (or, at the latest, 10 s on).  Its address; *huge: its AnonHugePages
 * just before the free. */
static char *freed_mid_collapse(uint64_t seed, size_t *huge)
{
	char *p = hp_malloc(SIZE);
	if (!p)
		return NULL;
	uint64_t before = harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES);
	harness_fill_slowly(p, SIZE, seed, 0);
	harness_stat_reaches(HP_STAT_POPULATE_COLLAPSED_BYTES, before + 1, 10000);
	*huge = harness_anon_huge(p, SIZE);
	hp_free(p);
	return p;
}

/* Cache off: the freed range, mapped afresh and touched once per 2 MiB,
 * must stay on 4 KiB pages: a worker collapsing there after the free
 * (MADV_COLLAPSE heeds no THP setting) would turn it huge. */
static int child_freed_uncached(void)
{
	knobs("0");
	if (base_first())
		return 1;
	int bad = 0;
	uint64_t collapsed0 = harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES);
	for (int round = 0; round < 10 && !bad; round++) {
		size_t was;
		char *p = freed_mid_collapse(100 + round, &was);
		if (!p)
			return harness_expect(false, "hp_malloc failed");
		bad |= harness_expect(harness_mapped(p, SIZE) == 0, "the freed block is still mapped (cache_max=0)");
		char *q = mmap(p, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (q != p) {
			fprintf(stderr, "FAIL: could not map the freed range again (%s)\n", strerror(errno));
			if (q != MAP_FAILED)
				munmap(q, SIZE);
			return 1;
		}
		madvise(q, SIZE, MADV_NOHUGEPAGE); /* its own faults stay 4 KiB whatever THP's setting */
		for (size_t off = 0; off < SIZE; off += 2 * MiB)
			q[off] = 1;
		harness_sleep_ms(300);
		size_t huge = harness_anon_huge(q, SIZE);
		munmap(q, SIZE);
		if (huge) {
			fprintf(stderr, "FAIL: round %d: %zu KiB of a mapping made after the free went huge\n",
				round, huge >> 10);
			bad = 1;
		}
	}
	fprintf(stderr, "collapsed over the rounds: %llu MiB\n",
		(unsigned long long)(harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES) - collapsed0) >> 20);
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES) > collapsed0,
		     "no collapse ever started: the test did not test");
	return bad;
}

/* A block half filled (its worker populating ahead at 4 KiB, no
 * collapse yet), then freed.  Its address. */
static char *freed_mid_fill(uint64_t seed)
{
	char *p = hp_malloc(SIZE);
	if (!p)
		return NULL;
	uint64_t before = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	harness_fill_slowly(p, SIZE / 2, seed, 1);
	harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, before + 1, 2000);
	hp_free(p);
	return p;
}

/* Cache on: the block freed mid-collapse (even rounds) or before it (odd
 * ones) comes back from the cache THP-eligible, with the huge pages it had
 * when freed; the rest, its 4 KiB pages dropped by the cache, is faulted
 * on huge pages as the next owner writes it. */
static int child_freed_cached(void)
{
	knobs("1G");
	hp_knob_set("cache_decay_ms", "60000");
	if (base_first())
		return 1;
	int bad = 0;
	for (int round = 0; round < 10 && !bad; round++) {
		size_t was = 0;
		bool mid_fill = round % 2;
		uint64_t dropped = harness_stat(HP_STAT_POPULATE_SMALL_DROPPED_BYTES);
		char *p = mid_fill ? freed_mid_fill(200 + round) : freed_mid_collapse(200 + round, &was);
		if (!p)
			return harness_expect(false, "hp_malloc failed");
		uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
		char *q = hp_malloc(SIZE);
		if (!q)
			return harness_expect(false, "hp_malloc (from the cache) failed");
		bad |= harness_expect(harness_stat(HP_STAT_CACHE_HITS) == hits + 1, "the block did not come from the cache");
		struct harness_smaps sm;
		if (harness_smaps_range(q, SIZE, &sm) != 0 || !sm.thp_eligible) {
			fprintf(stderr, "FAIL: round %d (freed %s): the cached block is not THP-eligible "
				"(no \"hg\" in VmFlags): its advice was not given back\n", round,
				mid_fill ? "mid-fill" : "mid-collapse");
			bad = 1;
		}
		harness_fill_slowly(q, SIZE, 300 + round, 0);
		bad |= harness_expect(harness_check_filled(q, SIZE, 300 + round) == SIZE_MAX, "the reused block lost data");
		size_t now = harness_anon_huge(q, SIZE);
		dropped = harness_stat(HP_STAT_POPULATE_SMALL_DROPPED_BYTES) - dropped;
		/* freed mid-fill, its job was alive: its 4 KiB pages were there
		 * to drop (mid-collapse, the collapse may end before the free) */
		if (q != p || now < was || (!mid_fill && was == 0) || now < SIZE - SIZE / 16 ||
		    (mid_fill && !dropped)) {
			fprintf(stderr, "FAIL: round %d (freed %s): freed with %zu MiB on huge pages, reused %s "
				"and written with %zu MiB of %zu (4 KiB pages dropped: %llu MiB)\n",
				round, mid_fill ? "mid-fill" : "mid-collapse", was >> 20,
				q == p ? "at its address" : "elsewhere", now >> 20, (size_t)SIZE >> 20,
				(unsigned long long)dropped >> 20);
			bad = 1;
		}
		hp_free(q);
		hp_cache_flush(); /* the next round's block a fresh one, with its job */
	}
	return bad;
}

/* A fork while the block is on 4 KiB pages first: the child's copy is
 * nobody's job there, so it gets its huge-page advice back at once (its
 * later faults on huge pages), its data the parent's; the parent's worker
 * goes on and collapses the parent's block. */
static int child_fork_mid_fill(void)
{
	knobs("0");
	if (base_first())
		return 1;
	char *p = hp_malloc(SIZE);
	if (!p)
		return harness_expect(false, "hp_malloc failed");
	uint64_t before = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	harness_fill_slowly(p, SIZE / 2, 9, 1);
	harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, before + 1, 2000);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return harness_expect(false, "fork failed");
	if (pid == 0) {
		struct harness_smaps sm;
		int bad = harness_expect(harness_smaps_range(p, SIZE, &sm) == 0 && sm.thp_eligible,
				"the child's copy of a block on 4 KiB pages first is not THP-eligible");
		bad |= harness_expect(harness_check_filled(p, SIZE / 2, 9) == SIZE_MAX, "the child's copy lost data");
		_exit(bad);
	}
	int status;
	int bad = harness_expect(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
			"the forked child failed");
	harness_fill_slowly(p + SIZE / 2, SIZE / 2, 10, 0);
	bad |= harness_expect(harness_huge_within(p, SIZE, 30000), "the parent's block is not on huge pages 30 s after the fork");
	bad |= harness_expect(harness_check_filled(p, SIZE / 2, 9) == SIZE_MAX &&
		     harness_check_filled(p + SIZE / 2, SIZE / 2, 10) == SIZE_MAX, "the parent's block lost data");
	hp_free(p);
	return bad;
}

static const struct harness_child_case children[] = {
	{"fork_mid_fill", child_fork_mid_fill},
	{"small_then_huge", child_small_then_huge},
	{"freed_uncached", child_freed_uncached},
	{"freed_cached", child_freed_cached},
};

static void test_small_first_then_huge(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("small_then_huge");
}

static void test_freed_mid_collapse_uncached(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("freed_uncached");
}

static void test_fork_mid_fill(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("fork_mid_fill");
}

static void test_freed_mid_collapse_cached(void **state)
{
	(void)state;
	harness_need_collapse();
	harness_child_passes("freed_cached");
}

/* ---- under a memory cgroup's limit --------------------------------------- */

#define MEMCG_BLOCK (128 * MiB)
#define MEMCG_LIMIT (MEMCG_BLOCK + 24 * MiB)

static int memcg_child(void *arg)
{
	(void)arg;
	knobs("0");
	if (base_first())
		return 2;
	uint64_t small = harness_stat(HP_STAT_POPULATE_SMALL_FIRST);
	char *p = hp_malloc(MEMCG_BLOCK);
	if (!p)
		return 3;
	harness_fill_slowly(p, MEMCG_BLOCK, 5, 1);
	bool huge = harness_huge_within(p, MEMCG_BLOCK, 1000);
	print_message("  filled %zu MiB: AnonHugePages %zu MiB (%s), cgroup usage %zu MiB, collapsed %llu MiB\n",
		      (size_t)MEMCG_BLOCK >> 20, harness_anon_huge(p, MEMCG_BLOCK) >> 20, huge ? "all" : "not all",
		      tmemcg_usage() >> 20,
		      (unsigned long long)harness_stat(HP_STAT_POPULATE_COLLAPSED_BYTES) >> 20);
	if (harness_check_filled(p, MEMCG_BLOCK, 5) != SIZE_MAX)
		return 4;
	if (harness_stat(HP_STAT_POPULATE_SMALL_FIRST) != small || !huge)
		return 5;
	hp_free(p);
	return 0;
}

static void test_memcg_no_oom(void **state)
{
	(void)state;
	harness_need_collapse();
	tmemcg_make(MEMCG_LIMIT);
	size_t before = tmemcg_oom_kills();
	int status = tmemcg_spawn(memcg_child, NULL);
	size_t kills = tmemcg_oom_kills() - before, peak = tmemcg_peak();
	tmemcg_remove();
	print_message("populate_pages=4K, %zu MiB block in a %zu MiB limit: %s, %zu OOM kills, peak %zu MiB\n",
		      (size_t)MEMCG_BLOCK >> 20, (size_t)MEMCG_LIMIT >> 20, tmemcg_status_text(status), kills,
		      peak >> 20);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 5)
		fail_msg("under a memory limit the block was faulted at 4 KiB first (or not on huge pages)");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the program that fits its limit did not run to the end: %s", tmemcg_status_text(status));
	assert_int_equal(kills, 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_small_first_then_huge),
		HTEST(test_freed_mid_collapse_uncached),
		HTEST(test_freed_mid_collapse_cached),
		HTEST(test_fork_mid_fill),
		HTEST(test_memcg_no_oom),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	harness_set_watchdog(300);
	return harness_run("populate_pages", tests, ARRAY_SIZE(tests));
}
