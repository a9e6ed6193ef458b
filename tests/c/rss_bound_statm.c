/* cache_rss_max reads the process's resident memory from /proc/self/statm
 * (lib/core/smaps.c, hp_self_rss): only while there is something to give back,
 * and a read that fails loses nothing.
 *   - Nothing cached, the process under the bound: the janitor reads
 *     nothing and wakes at its ordinary tick, not every 100 ms.
 *   - A block entering the empty cache brings the bound back: over it, the
 *     block is given back to the kernel.
 *   - statm cannot be opened (EMFILE: a process out of descriptors; no
 *     /proc in a sandbox): no bound.  Allocation, reuse and contents go on,
 *     errno is unchanged by the failed read on the allocation path, and
 *     every block is accounted for and unmapped at the end; once statm can
 *     be read again the bound applies.
 * open() is interposed (the executable comes first in symbol lookup): it
 * counts the library's opens of statm by thread and fails them on demand. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STATM "/proc/self/statm"
#define BLOCK (32 * MiB)
#define NBLOCKS 4
#define RSS_TICK_MS 100 /* lib/threads/janitor.c: the bound's period while it watches */
#define TICK_MS 250     /* lib/threads/janitor.c: the janitor's ordinary period */
#define WITHIN_MS 3000

static atomic_int statm_err;
static atomic_long statm_opens_other; /* by threads other than the tests' */
static long main_tid;

int open(const char *path, int flags, ...)
{
	if (strcmp(path, STATM) == 0) {
		if ((long)syscall(SYS_gettid) != main_tid)
			atomic_fetch_add(&statm_opens_other, 1);
		int err = atomic_load(&statm_err);
		if (err) {
			errno = err;
			return -1;
		}
	}
	HARNESS_OPEN_PASS_ON(path, flags);
}

/* The janitor's thread id (its name, lib/threads/janitor.c), or -1. */
static long find_janitor(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long found = -1;
	assert_non_null(d);
	while ((e = readdir(d)) && found < 0) {
		char path[300], name[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f) && strncmp(name, "hpalloc-janitor", 15) == 0)
			found = strtol(e->d_name, NULL, 10);
		fclose(f);
	}
	closedir(d);
	return found;
}

/* The janitor names itself once it runs: wait for that. */
static long janitor_tid(void)
{
	long tid;
	uint64_t end = harness_now_ms() + WITHIN_MS;
	while ((tid = find_janitor()) < 0 && harness_now_ms() < end)
		harness_sleep_ms(10);
	return tid;
}

/* How often thread tid went to sleep (voluntary_ctxt_switches). */
static long sleeps_of(long tid)
{
	char path[64], line[128];
	long n = -1;
	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	FILE *f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

static void set_rss_max(size_t bytes)
{
	char v[32];
	snprintf(v, sizeof(v), "%zu", bytes);
	harness_knob("cache_rss_max", v);
}

/* THP blocks cached for long, the janitor running, nothing cached. */
static void knobs(void)
{
	atomic_store(&statm_err, 0);
	main_tid = (long)syscall(SYS_gettid);
	harness_thp_cache("1G", "600000");
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
}

static bool cached_blocks_within(uint64_t want, unsigned ms)
{
	uint64_t end = harness_now_ms() + ms;
	while (harness_stat(HP_STAT_CACHED_BLOCKS) != want && harness_now_ms() < end)
		harness_sleep_ms(10);
	return harness_stat(HP_STAT_CACHED_BLOCKS) == want;
}

static void test_empty_cache_not_watched(void **state)
{
	(void)state;
	knobs();
	set_rss_max((size_t)1 << 40); /* far above the process: under it */
	long tid = janitor_tid();
	assert_true(tid > 0);
	harness_sleep_ms(2 * TICK_MS); /* the knob's wake-up and the look after it */
	long opens = atomic_load(&statm_opens_other), sleeps = sleeps_of(tid);
	harness_sleep_ms(1000);
	opens = atomic_load(&statm_opens_other) - opens;
	sleeps = sleeps_of(tid) - sleeps;
	print_message("nothing cached, under the bound, 1 s: the janitor read statm %ld times and "
		      "slept %ld times\n", opens, sleeps);
	assert_int_equal(opens, 0);
	assert_true(sleeps <= 1000 / TICK_MS + 2); /* watching: 1000 / RSS_TICK_MS */
	set_rss_max(0);
}

static void test_cached_block_brings_the_bound_back(void **state)
{
	(void)state;
	knobs();
	/* under the bound with nothing cached: the janitor waits idle ... */
	set_rss_max(harness_statm_rss() + 16 * MiB);
	harness_sleep_ms(2 * TICK_MS);
	/* ... while live memory takes the process over it */
	void *p = hp_malloc(BLOCK);
	assert_non_null(p);
	harness_touch(p, BLOCK);
	long opens = atomic_load(&statm_opens_other);
	hp_free(p); /* into the empty cache: over the bound, it must go */
	bool gone = cached_blocks_within(0, WITHIN_MS);
	print_message("a block cached over the bound: %s, statm read %ld times meanwhile\n",
		      gone ? "given back" : "still cached", atomic_load(&statm_opens_other) - opens);
	assert_true(gone);
	assert_true(atomic_load(&statm_opens_other) > opens);
	hp_release_drain();
	assert_int_equal(harness_mapped(p, BLOCK), 0);
	set_rss_max(0);
}

static void test_statm_unreadable(void **state)
{
	(void)state;
	void *b[NBLOCKS];
	knobs();
	atomic_store(&statm_err, EMFILE);
	set_rss_max(4096); /* any process is over it: were statm read, nothing would stay cached */
	for (int i = 0; i < NBLOCKS; i++) {
		b[i] = hp_malloc(BLOCK);
		assert_non_null(b[i]);
		harness_fill(b[i], BLOCK, (uint64_t)i);
	}
	long opens = atomic_load(&statm_opens_other);
	hp_free(b[0]);
	hp_free(b[1]);
	harness_sleep_ms(4 * RSS_TICK_MS);
	print_message("statm refused (EMFILE): the janitor tried %ld times in %d ms; %d blocks "
		      "cached\n", atomic_load(&statm_opens_other) - opens, 4 * RSS_TICK_MS,
		      (int)harness_stat(HP_STAT_CACHED_BLOCKS));
	assert_true(atomic_load(&statm_opens_other) > opens); /* it did look */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 2); /* an unread bound is no bound */

	/* the allocation path reads statm too (a fresh mapping with something
	 * cached): refused, errno stays as it was */
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	errno = EINTR;
	b[0] = hp_malloc(BLOCK);     /* a cached block again */
	void *fresh = hp_malloc(4 * BLOCK); /* no cached block holds it */
	assert_int_equal(errno, EINTR);
	assert_non_null(b[0]);
	assert_non_null(fresh);
	assert_true(harness_stat(HP_STAT_CACHE_HITS) > hits);
	harness_fill(b[0], BLOCK, 10);
	harness_fill(fresh, 4 * BLOCK, 11);
	assert_filled(b[0], BLOCK, 10);
	for (int i = 2; i < NBLOCKS; i++)
		assert_filled(b[i], BLOCK, (uint64_t)i);
	assert_filled(fresh, 4 * BLOCK, 11);
	/* every mapped byte is a live or a cached block's */
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES),
			 harness_stat(HP_STAT_THP_LIVE_BYTES) + harness_stat(HP_STAT_CACHED_BYTES));

	/* statm readable again: the bound applies, the cache gives back */
	hp_free(b[2]);
	atomic_store(&statm_err, 0);
	bool emptied = cached_blocks_within(0, WITHIN_MS);
	print_message("statm readable again: the cache %s\n", emptied ? "gave its blocks back" :
		      "kept its blocks");
	assert_true(emptied);
	set_rss_max(0);
	hp_free(b[0]);
	hp_free(b[3]);
	hp_free(fresh);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	assert_int_equal(harness_mapped(fresh, 4 * BLOCK), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_empty_cache_not_watched),
		HTEST(test_cached_block_brings_the_bound_back),
		HTEST(test_statm_unreadable),
	};

	harness_init(argc, argv);
	return harness_run("rss_bound_statm", tests, ARRAY_SIZE(tests));
}
