/* Populate ahead (lib/threads/populate.c, issue 27): worker threads fault a fresh
 * huge block in ahead of a program that touches it from its start, and
 * never commit memory the program does not touch.  What the kernel says
 * (smaps Rss and AnonHugePages of the block, numa_maps), not hpalloc's
 * bookkeeping, is the evidence; populate_ahead_bytes only says the
 * workers took part.  Memory bounds, not timings: those are in bench/
 * (the zeros1G first call and sparse8G rows of bench/numpy_bench.py). */
#include "harness.h"
#include "numa_util.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GROUP_BYTES (16 * MiB)  /* a sentinel group: 8 chunks of 2 MiB */
#define AHEAD_BYTES (64 * MiB)  /* at most this beyond the last sentinel reached */
/* what the workers fault once chunks 0 and 1 are resident, before the
 * program reaches another sentinel: as much as it touched (readahead's
 * ramp), chunks 2 and 3 */
#define FIRST_WINDOW (2 * 2 * MiB)

static void knobs(const char *populate)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("populate", populate);
	/* the workers ahead on huge pages; 4 KiB first is populate_pages.c's and
	 * populate_choice.c's */
	harness_knob("populate_pages", "2M");
}

static struct harness_smaps smaps_of(const void *p, size_t len)
{
	struct harness_smaps sm;
	assert_int_equal(harness_smaps_range(p, len, &sm), 0);
	return sm;
}

/* Threads of this process named hpalloc-ahead. */
static int populate_threads(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "re");
		if (f && fgets(comm, sizeof(comm), f) && strcmp(comm, "hpalloc-ahead\n") == 0)
			n++;
		if (f)
			fclose(f);
	}
	closedir(d);
	return n;
}

static void test_sequential_fill_populated_ahead_on_huge_pages(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("1");
	const size_t size = 512 * MiB;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	uint64_t saved = harness_stat(HP_STAT_POPULATE_SAVED_US);
	char *p = hp_calloc(1, size);
	assert_non_null(p);
	harness_fill_slowly(p, 4 * MiB, 1, 0); /* chunks 0 and 1: the workers start */
	/* while the program pauses they fault what they may (chunks 2 and 3),
	 * however loaded the machine: the assertions below do not hang on who
	 * got a CPU first */
	assert_true(harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + FIRST_WINDOW, 10000));
	harness_fill_slowly(p + 4 * MiB, size - 4 * MiB, 1 + 4 * MiB, 1);
	assert_int_equal(harness_check_filled(p, 4 * MiB, 1), SIZE_MAX);
	assert_int_equal(harness_check_filled(p + 4 * MiB, size - 4 * MiB, 1 + 4 * MiB), SIZE_MAX);
	struct harness_smaps sm = smaps_of(p, size);
	uint64_t by_workers = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead;
	print_message("512 MiB filled: Rss %zu MiB, AnonHugePages %zu MiB; populated ahead %llu MiB, "
		      "saved %llu ms (estimate)\n", sm.rss >> 20, sm.anon_huge >> 20,
		      (unsigned long long)by_workers >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_POPULATE_SAVED_US) - saved) / 1000);
	assert_true(sm.anon_huge == size);         /* the workers' pages are huge too */
	assert_true(by_workers >= FIRST_WINDOW);   /* they did take part */
	assert_true(by_workers <= size - 4 * MiB); /* never the program's first stretch */
	assert_true(harness_stat(HP_STAT_POPULATE_SAVED_US) > saved);
	assert_int_equal(populate_threads(), 1);
	hp_free(p);
}

/* SigBlk of /proc/self/task/<tid>/status of the first thread named name
 * (0 and false if none). */
static bool sigblk_of(const char *name, unsigned long long *mask)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;
	assert_non_null(d);
	while (!found && (e = readdir(d))) {
		char path[300], line[256], comm[32] = "";
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "re");
		if (f && fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		if (f)
			fclose(f);
		if (strcmp(comm, name) != 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "SigBlk: %llx", mask) == 1)
				found = true;
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

static _Atomic long handled_in; /* the thread SIGUSR1's handler ran in, 0: none */

static void on_usr1(int sig)
{
	(void)sig;
	atomic_store(&handled_in, (long)syscall(SYS_gettid));
}

/* The workers block every signal, as the janitor does: the program's
 * signals are the program's threads' (a handler that runs in a worker runs
 * where the program never expects it, with hpalloc's locks perhaps held).
 * Before: with the workers' pthread_sigmask removed nothing noticed.  The
 * kernel's SigBlk of each, and a SIGUSR1 the program's only thread blocks:
 * it waits until that thread unblocks it, and runs there. */
static void test_workers_block_signals(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	char *p = hp_malloc(256 * MiB);
	assert_non_null(p);
	harness_fill_slowly(p, 4 * MiB, 1, 0); /* a job: the workers start */
	assert_true(populate_threads() >= 1);
	unsigned long long worker = 0, janitor = 0;
	assert_true(sigblk_of("hpalloc-ahead", &worker));
	assert_true(sigblk_of("hpalloc-janitor", &janitor));
	print_message("SigBlk: hpalloc-ahead %016llx, hpalloc-janitor %016llx\n", worker, janitor);
	const int program_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE,
				       SIGALRM, SIGTERM, SIGCHLD, SIGWINCH, SIGIO};
	for (size_t i = 0; i < ARRAY_SIZE(program_signals); i++)
		assert_true(worker & (1ULL << (program_signals[i] - 1)));
	assert_true(worker == janitor);

	struct sigaction sa = {.sa_handler = on_usr1}, old;
	sigset_t usr1, before;
	sigemptyset(&sa.sa_mask);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &usr1, &before), 0);
	atomic_store(&handled_in, 0);
	for (int i = 0; i < 10; i++) {
		kill(getpid(), SIGUSR1); /* to the process: any thread that does not block it */
		harness_sleep_ms(10);
	}
	long early = atomic_load(&handled_in);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &before, NULL), 0); /* delivered here, now */
	long late = atomic_load(&handled_in);
	sigaction(SIGUSR1, &old, NULL);
	print_message("SIGUSR1 blocked by the program's thread: handled in thread %ld meanwhile "
		      "(0: none), then in %ld (the program's is %ld)\n", early, late, (long)syscall(SYS_gettid));
	assert_int_equal(early, 0);
	assert_int_equal(late, (long)syscall(SYS_gettid));
	hp_free(p);
}

/* Readahead's ramp: the workers are ahead of the program by no more than
 * it has touched (AHEAD_BYTES at most), so a block filled only a little
 * costs little more -- before, 4 MiB touched left 30 MiB resident.  The
 * block's Rss from smaps after each stretch, the workers given time to do
 * all they may. */
static void test_ramp_follows_what_is_touched(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	const size_t size = 1 * GiB, marks[] = {4 * MiB, 16 * MiB, 64 * MiB, 300 * MiB};
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(size);
	assert_non_null(p);
	size_t done = 0;
	for (size_t i = 0; i < ARRAY_SIZE(marks); i++) {
		harness_fill_slowly(p + done, marks[i] - done, 1 + done, 0);
		done = marks[i];
		harness_sleep_ms(400); /* within the workers' patience (1 s) */
		struct harness_smaps sm = smaps_of(p, size);
		size_t bound = done + (done < AHEAD_BYTES ? done : AHEAD_BYTES);
		print_message("%3zu MiB touched: Rss %3zu MiB (at most %3zu), populated ahead %llu MiB\n",
			      done >> 20, sm.rss >> 20, bound >> 20,
			      (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
		assert_true(sm.rss >= done);
		assert_true(sm.rss <= bound);
	}
	assert_true(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) > ahead); /* they took part */
	assert_int_equal(harness_check_filled(p, done, 1), SIZE_MAX);
	hp_free(p);
}

/* 8 GiB np.zeros touched at 1 %: one element per 100 x 2 MiB.  The workers
 * wait for a stretch from the start that never comes. */
static void test_sparse_touch_commits_within_bound(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	const size_t size = 8 * GiB, step = 100 * 2 * MiB;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	double *a = hp_calloc(size / sizeof(double), sizeof(double));
	assert_non_null(a);
	size_t touched = 0;
	for (size_t i = 0; i < size / sizeof(double); i += step / sizeof(double), touched++)
		a[i] = 1;
	harness_sleep_ms(1500); /* past the workers' patience */
	struct harness_smaps sm = smaps_of(a, size);
	size_t bound = size * 3 / 100 + 64 * MiB;
	print_message("8 GiB touched at %zu elements: Rss %zu MiB (AnonHugePages %zu MiB), bound %zu MiB, "
		      "populated ahead %llu MiB\n", touched, sm.rss >> 20, sm.anon_huge >> 20, bound >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
	assert_true(sm.rss <= bound);
	assert_true(sm.rss <= touched * 2 * MiB); /* what the program touched, no more */
	hp_free(a);
}

/* A program that fills the start of a block and stops: the workers stop
 * at most AHEAD_BYTES (and the group it was in) beyond. */
static void test_stops_where_program_stops(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	const size_t size = 1 * GiB, filled = 40 * MiB;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(size);
	assert_non_null(p);
	harness_fill_slowly(p, filled, 2, 1);
	harness_sleep_ms(1500);
	struct harness_smaps sm = smaps_of(p, size);
	print_message("filled %zu MiB of 1 GiB: Rss %zu MiB, populated ahead %llu MiB\n", filled >> 20,
		      sm.rss >> 20, (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
	assert_true(sm.rss <= filled + GROUP_BYTES + AHEAD_BYTES);
	assert_true(sm.rss > filled); /* they were ahead of it */
	hp_free(p);
}

static void test_untouched_block_never_populated(void **state)
{
	(void)state;
	harness_need_thp();
	knobs("2");
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_calloc(1, 1 * GiB);
	assert_non_null(p);
	p[0] = 1; /* the first chunk alone: no stretch */
	harness_sleep_ms(1500);
	struct harness_smaps sm = smaps_of(p, 1 * GiB);
	assert_true(sm.rss <= 2 * MiB);
	assert_int_equal(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES), ahead);
	hp_free(p);
}

/* populate=off: no worker, whatever the program does; and with workers
 * allowed, none before a block they could help (32 MiB and more). */
static void test_no_thread_without_work(void **state)
{
	(void)state;
	harness_need_thp();
	int before = populate_threads();
	assert_int_equal(before, 0); /* the first case of the process */
	knobs("off");
	char *p = hp_malloc(256 * MiB);
	assert_non_null(p);
	harness_fill_slowly(p, 64 * MiB, 3, 1);
	hp_free(p);
	assert_int_equal(populate_threads(), before);
	knobs("2");
	for (int i = 0; i < 4; i++) {
		char *q = hp_malloc(16 * MiB);
		assert_non_null(q);
		harness_fill(q, 16 * MiB, 4);
		hp_free(q);
	}
	assert_int_equal(populate_threads(), before);
}

/* The workers fault under the block's policy: placed (mbind) before its
 * job exists, it keeps the policy and has its pages where it says. */
static void test_numa_policy_kept(void **state)
{
	(void)state;
	harness_need_thp();
	if (numa_unavailable())
		harness_skip("no NUMA policies in this build or kernel");
	knobs("1");
	harness_knob("numa", "bind:0");
	const size_t size = 256 * MiB;
	uint64_t ahead = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	char *p = hp_malloc(size);
	assert_non_null(p);
	harness_fill_slowly(p, 4 * MiB, 5, 0);
	assert_true(harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead + FIRST_WINDOW, 10000));
	harness_fill_slowly(p + 4 * MiB, size - 4 * MiB, 6, 1);
	struct nu_entry e;
	assert_int_equal(nu_entry_at(p, &e), 0);
	print_message("numa_maps: %s, N0=%ld of %ld pages; populated ahead %llu MiB\n", e.policy, e.pages[0],
		      e.total, (unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead) >> 20);
	assert_string_equal(e.policy, "bind:0");
	assert_true(e.total > 0 && e.pages[0] == e.total);
	assert_true(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) > ahead);
	hp_free(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_no_thread_without_work), /* first: no worker yet */
		HTEST(test_sequential_fill_populated_ahead_on_huge_pages),
		HTEST(test_numa_policy_kept),
		HTEST(test_ramp_follows_what_is_touched),
		HTEST(test_workers_block_signals),
		HTEST(test_sparse_touch_commits_within_bound),
		HTEST(test_stops_where_program_stops),
		HTEST(test_untouched_block_never_populated),
	};
	harness_init(argc, argv);
	return harness_run("populate", tests, ARRAY_SIZE(tests));
}
