/* The kernel's huge page splits, as the library says them (lib/threads/thp.c,
 * issue 34): thp_splits_seen and thp_underused_splits_seen count
 * /proc/vmstat's split counters while the process holds THP blocks.
 *   - A split the test itself makes (MADV_COLD on half of a huge page of a
 *     mapping of its own: the kernel splits it, thp_split_page moves) while
 *     a THP block is held is counted within a janitor round or two; with
 *     no block held, splits (the test's, and any other process's) are not.
 *   - Root: with khugepaged/max_ptes_none lowered for the case (64; 511,
 *     the default, keeps the shrinker off) a block whose huge pages are
 *     mostly zeros (a byte written in each: a sparse program's) loses them
 *     to a memory cgroup's reclaim (smaps AnonHugePages), and the library
 *     counts under-used splits.  The setting is put back at the end of the case,
 *     at exit, and if the program is killed by a signal the harness
 *     catches. */
#include "harness.h"
#include "memcg_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_PTES_NONE "/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none"

static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("populate", "off");
}

/* A huge page of the test's own mapping, split by the kernel (MADV_COLD on
 * half of it); false if the kernel gave no huge page to split. */
static bool split_one(void)
{
	char *m = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	char *p = (char *)(((uintptr_t)m + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
	madvise(p, 2 * MiB, MADV_HUGEPAGE);
	memset(p, 1, 2 * MiB);
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(p, 2 * MiB, &sm), 0);
	bool huge = sm.anon_huge == 2 * MiB;
	if (huge)
		assert_int_equal(madvise(p, MiB, MADV_COLD), 0);
	munmap(m, 4 * MiB);
	return huge;
}

static void test_splits_counted_while_holding(void **state)
{
	(void)state;
	harness_need_thp();
	thp_knobs();
	harness_janitor_start();
	/* nothing held: not counted, whoever splits */
	harness_sleep_ms(300);
	uint64_t seen = harness_stat(HP_STAT_THP_SPLITS_SEEN);
	if (!split_one())
		harness_skip_cap("thp", "the kernel gave the test's own mapping no huge page to split");
	harness_sleep_ms(700); /* two janitor rounds and more */
	uint64_t idle = harness_stat(HP_STAT_THP_SPLITS_SEEN) - seen;
	/* a block held: the test's split is counted */
	void *b = hp_malloc(8 * MiB);
	assert_non_null(b);
	harness_touch(b, 8 * MiB);
	harness_sleep_ms(300); /* the janitor's look before the split */
	seen = harness_stat(HP_STAT_THP_SPLITS_SEEN);
	assert_true(split_one());
	bool counted = harness_stat_reaches(HP_STAT_THP_SPLITS_SEEN, seen + 1, 3000);
	print_message("a huge page split (MADV_COLD on half of it): thp_splits_seen +%llu with no THP "
		      "block held, +%llu with one\n", (unsigned long long)idle,
		      (unsigned long long)(harness_stat(HP_STAT_THP_SPLITS_SEEN) - seen));
	assert_int_equal(idle, 0);
	assert_true(counted);
	hp_free(b);
}

/* ---- under-used huge pages split by a cgroup's reclaim (root) ---------------------- */
static char saved_ptes_none[32];

static void restore_ptes_none(void)
{
	if (!saved_ptes_none[0])
		return;
	FILE *f = fopen(MAX_PTES_NONE, "we");
	if (f) {
		fputs(saved_ptes_none, f);
		fclose(f);
	}
	saved_ptes_none[0] = '\0';
}

/* The signals the harness restores the pools on, its handlers kept. */
static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGALRM};
static struct sigaction harness_action[ARRAY_SIZE(caught)];

static void restore_on_signal(int sig)
{
	restore_ptes_none();
	for (size_t i = 0; i < ARRAY_SIZE(caught); i++)
		if (caught[i] == sig)
			sigaction(sig, &harness_action[i], NULL);
	raise(sig); /* the harness's handler next */
}

static bool lower_ptes_none(const char *value)
{
	static bool hooked;
	FILE *f = fopen(MAX_PTES_NONE, "re");
	if (!f || !fgets(saved_ptes_none, sizeof(saved_ptes_none), f)) {
		if (f)
			fclose(f);
		saved_ptes_none[0] = '\0';
		return false;
	}
	fclose(f);
	if (!hooked) {
		struct sigaction sa = {.sa_handler = restore_on_signal};
		sigemptyset(&sa.sa_mask);
		atexit(restore_ptes_none);
		for (size_t i = 0; i < ARRAY_SIZE(caught); i++)
			sigaction(caught[i], &sa, &harness_action[i]);
		hooked = true;
	}
	f = fopen(MAX_PTES_NONE, "we");
	if (!f)
		return false;
	fputs(value, f);
	return fclose(f) == 0;
}

/* In the cgroup: a block filled 64 MiB, then a byte written in each huge
 * page of the next 64 MiB (huge pages of zeros but for one byte); then the
 * cgroup's reclaim (the parent asks it to give back what it cannot, there
 * being no swap: the kernel tries everything, the under-used shrinker
 * included).  Exits 0 if the block lost huge pages and the library counted
 * under-used splits. */
static int underused_child(void *arg)
{
	(void)arg;
	char *p = hp_malloc(256 * MiB);
	if (!p)
		return 2;
	harness_fill_slowly(p, 64 * MiB, 1, 0);
	for (size_t off = 64 * MiB; off < 128 * MiB; off += 2 * MiB)
		p[off + 4096] = 1;
	struct harness_smaps before, after;
	if (harness_smaps_range(p, 256 * MiB, &before) != 0)
		return 3;
	uint64_t seen = harness_stat(HP_STAT_THP_UNDERUSED_SPLITS_SEEN);
	/* reclaim: the limit lowered under the usage, which fails (nothing to
	 * swap to) after trying every shrinker */
	tmemcg_try_limit(tmemcg_usage() - 48 * MiB);
	harness_stat_reaches(HP_STAT_THP_UNDERUSED_SPLITS_SEEN, seen + 1, 3000);
	if (harness_smaps_range(p, 256 * MiB, &after) != 0)
		return 3;
	fprintf(stderr, "child: block Rss %zu MiB, AnonHugePages %zu MiB; after the cgroup's reclaim: "
		"Rss %zu MiB, AnonHugePages %zu MiB; thp_underused_splits_seen +%llu\n",
		before.rss >> 20, before.anon_huge >> 20, after.rss >> 20, after.anon_huge >> 20,
		(unsigned long long)(harness_stat(HP_STAT_THP_UNDERUSED_SPLITS_SEEN) - seen));
	if (harness_check_filled(p, 64 * MiB, 1) != SIZE_MAX)
		return 4; /* what the program wrote is never lost */
	for (size_t off = 64 * MiB; off < 128 * MiB; off += 2 * MiB)
		if (p[off + 4096] != 1)
			return 4;
	return after.anon_huge < before.anon_huge &&
	       harness_stat(HP_STAT_THP_UNDERUSED_SPLITS_SEEN) > seen ? 0 : 1;
}

static void test_underused_split_by_reclaim(void **state)
{
	(void)state;
	harness_need_thp();
	thp_knobs();
	if (access("/sys/kernel/mm/transparent_hugepage/shrink_underused", F_OK) != 0)
		harness_skip("no under-used THP shrinker in this kernel (Linux 6.12+)");
	tmemcg_make(GiB);
	if (!lower_ptes_none("64"))
		harness_skip_cap("root", "cannot write %s", MAX_PTES_NONE);
	int status = tmemcg_spawn(underused_child, NULL);
	restore_ptes_none();
	tmemcg_remove();
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("populated zeros under reclaim: %s (1: no huge page lost or no under-used split "
			 "counted)", tmemcg_status_text(status));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_splits_counted_while_holding),
		HTEST(test_underused_split_by_reclaim),
	};
	harness_init(argc, argv);
	int rc = harness_run("thp_splits", tests, ARRAY_SIZE(tests));
	restore_ptes_none();
	return rc;
}
