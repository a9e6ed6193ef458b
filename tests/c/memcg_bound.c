/* The memory cgroup's bound on the cache (lib/core/memcg.c) in a real memory
 * cgroup: the process moves itself into a fresh one with a limit (v1 here,
 * v2 where that has the memory controller), and the kernel's own numbers
 * judge -- the blocks still mapped after their free (/proc/self/maps: the
 * cache's), the cgroup's usage and how often its charge hit the limit
 * (v1 memory.failcnt, v2 memory.events "max"):
 *   - the bound engages: after a free the cache holds at most
 *     MEMCG_CACHE_SHARE_PCT of the headroom (limit - usage + cached), the
 *     janitor having found the cgroup the process moved to;
 *   - a limit lowered at run time is followed, without any call into the
 *     library; raised again, freed blocks are kept again;
 *   - a fresh mapping that would take the cache over its share gives the
 *     cache back first, in the allocating thread: right after the malloc,
 *     before the block is touched, the cache is within the share of what
 *     the headroom will be, and touching the block never hits the limit;
 *   - a fresh mapping that would not fit under the limit has libc give back
 *     the free memory it holds first: glibc keeps what is freed below a
 *     chunk still in use, charged and (no swap) not the kernel's to take;
 *     before, the process was OOM-killed where glibc alone would have
 *     served the block from that hole;
 *   - page cache counts as free (the working set: usage less inactive file
 *     pages): a cgroup near its limit after reading a file keeps its
 *     cache, where the usage alone gave every freed block back.
 * Root, and a memory controller (capability memcg); the cgroup is removed
 * at exit (the process moved back first), and one a killed run left is
 * removed by the next. */
#include "harness.h"
#include "../../lib/core/internal.h"
#include "memcg_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK (32 * MiB)
#define NBLOCKS 6
#define WITHIN_MS 3000
/* The process in a fresh cgroup limited to limit, the janitor aware of it. */
static void enter(size_t limit)
{
	tmemcg_make(limit);
	tmemcg_enter();
	uint64_t end = harness_now_ms() + WITHIN_MS;
	while (harness_stat(HP_STAT_MEMCG_LIMIT_BYTES) != limit && harness_now_ms() < end)
		harness_sleep_ms(10);
	if (harness_stat(HP_STAT_MEMCG_LIMIT_BYTES) != limit)
		fail_msg("the janitor did not find the cgroup %s (limit %zu MiB) within %d ms: "
			 "memcg_limit_bytes %llu", tmemcg.dir, limit >> 20, WITHIN_MS,
			 (unsigned long long)harness_stat(HP_STAT_MEMCG_LIMIT_BYTES));
}

static size_t usage(void) { return tmemcg_usage(); }
static size_t limit_hits(void) { return tmemcg_limit_hits(); }
static void set_limit(size_t limit) { tmemcg_set_limit(limit); }
static void leave(void) { tmemcg_remove(); }

/* THP blocks cached for long, the janitor running, the cache empty. */
static void knobs(void)
{
	harness_thp_cache("1G", "600000");
}

static void make_blocks(void **b, int n)
{
	for (int i = 0; i < n; i++) {
		b[i] = hp_malloc(BLOCK);
		assert_non_null(b[i]);
		harness_touch(b[i], BLOCK);
	}
}

static void free_all(void **b, int n)
{
	for (int i = 0; i < n; i++)
		hp_free(b[i]);
}

/* What the kernel still maps of freed blocks: the cache's. */
static size_t cached_of(void *const *b, int n)
{
	hp_release_drain();
	return harness_still_mapped(b, (size_t)n, BLOCK);
}

/* The rule: a share of (limit - usage + cached); also_charged is memory
 * about to be charged (a fresh block not yet touched). */
static size_t rule(size_t limit, size_t use, size_t cached, size_t also_charged)
{
	size_t charged = use + also_charged;
	size_t headroom = charged < limit ? limit - charged + cached : cached;
	return headroom / 100 * MEMCG_CACHE_SHARE_PCT;
}

static void test_bound_engages(void **state)
{
	(void)state;
	void *b[NBLOCKS];
	const size_t limit = 256 * MiB;
	knobs();
	enter(limit);
	size_t hits = limit_hits();
	uint64_t released = harness_stat(HP_STAT_MEMCG_RELEASED_BYTES);
	make_blocks(b, NBLOCKS);
	size_t peak_use = usage();
	free_all(b, NBLOCKS);
	size_t cached = cached_of(b, NBLOCKS), use = usage();
	print_message("limit %zu MiB, %d blocks of %zu MiB (usage %zu MiB) freed: %zu MiB still "
		      "mapped, usage %zu MiB, the rule allows %zu MiB; memcg_released_bytes +%llu MiB, "
		      "limit hit %zu times\n", limit >> 20, NBLOCKS, BLOCK >> 20, peak_use >> 20,
		      cached >> 20, use >> 20, rule(limit, use, cached, 0) >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_MEMCG_RELEASED_BYTES) - released) >> 20,
		      limit_hits() - hits);
	assert_true(cached <= rule(limit, use, cached, 0));
	assert_true(cached > 0); /* a bound, not no cache */
	assert_true(harness_stat(HP_STAT_MEMCG_RELEASED_BYTES) - released >= NBLOCKS * BLOCK - cached);
	assert_int_equal(limit_hits(), hits);
	leave();
}

static void test_limit_followed(void **state)
{
	(void)state;
	void *b[NBLOCKS];
	knobs();
	enter(GiB);
	make_blocks(b, NBLOCKS);
	free_all(b, NBLOCKS);
	assert_int_equal(cached_of(b, NBLOCKS), NBLOCKS * BLOCK); /* far below the limit: all kept */

	size_t lower = usage() + 64 * MiB; /* above the usage: nothing for the kernel to reclaim */
	size_t hits = limit_hits();
	set_limit(lower);
	uint64_t end = harness_now_ms() + WITHIN_MS;
	size_t cached, use;
	for (;;) {
		cached = cached_of(b, NBLOCKS);
		use = usage();
		if (cached <= rule(lower, use, cached, 0) || harness_now_ms() >= end)
			break;
		harness_sleep_ms(20);
	}
	print_message("limit lowered to %zu MiB at run time: %zu of %zu MiB still mapped (the rule "
		      "allows %zu MiB), limit hit %zu times\n", lower >> 20, cached >> 20,
		      (NBLOCKS * BLOCK) >> 20, rule(lower, use, cached, 0) >> 20, limit_hits() - hits);
	assert_true(cached <= rule(lower, use, cached, 0));
	assert_int_equal(limit_hits(), hits);

	set_limit(GiB); /* raised again: kept again */
	end = harness_now_ms() + WITHIN_MS;
	while (harness_stat(HP_STAT_MEMCG_LIMIT_BYTES) != GiB && harness_now_ms() < end)
		harness_sleep_ms(10);
	hp_cache_flush();
	make_blocks(b, NBLOCKS);
	free_all(b, NBLOCKS);
	assert_int_equal(cached_of(b, NBLOCKS), NBLOCKS * BLOCK);
	leave();
}

static void test_fresh_mapping_gives_back(void **state)
{
	(void)state;
	void *b[4];
	const size_t limit = GiB, big_size = 832 * MiB;
	knobs();
	enter(limit);
	make_blocks(b, 4);
	free_all(b, 4);
	assert_int_equal(cached_of(b, 4), 4 * BLOCK); /* within the share */
	size_t hits = limit_hits();
	void *big = hp_malloc(big_size); /* no cached block holds it: fresh */
	assert_non_null(big);
	hp_release_drain();
	/* the freed blocks still mapped are the cache's -- apart from where big
	 * lies, which only a released one can have left room for */
	size_t cached = 0, use = usage();
	for (int i = 0; i < 4; i++)
		if ((char *)b[i] + BLOCK <= (char *)big || (char *)b[i] >= (char *)big + big_size)
			cached += harness_mapped(b[i], BLOCK);
	print_message("limit %zu MiB, %zu MiB cached, a fresh %zu MiB block: before its first touch "
		      "%zu MiB still mapped of the cached blocks, the rule allows %zu MiB\n",
		      limit >> 20, (4 * BLOCK) >> 20, big_size >> 20, cached >> 20,
		      rule(limit, use, cached, big_size) >> 20);
	assert_true(cached <= rule(limit, use, cached, big_size));
	harness_touch(big, big_size);
	size_t after = limit_hits() - hits;
	print_message("the block touched: usage %zu MiB, limit hit %zu times\n", usage() >> 20, after);
	assert_int_equal(after, 0);
	hp_free(big);
	leave();
}

/* A file of len bytes read into the page cache in this process's cgroup
 * (its pages charged to it, on the inactive list: read once); false if
 * the directory is no disk's (tmpfs: shared memory, not page cache). */
static bool read_into_page_cache(const char *path, size_t len)
{
	static char buf[MiB];
	struct statfs fs;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	if (fstatfs(fd, &fs) != 0 || fs.f_type == TMPFS_MAGIC) {
		close(fd);
		unlink(path);
		return false;
	}
	memset(buf, 0x5a, sizeof(buf));
	for (size_t off = 0; off < len; off += sizeof(buf))
		assert_int_equal(write(fd, buf, sizeof(buf)), sizeof(buf));
	assert_int_equal(fsync(fd), 0);
	/* dropped, then read as a worker reads its parquet file */
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	for (size_t off = 0; off < len; off += sizeof(buf))
		assert_int_equal(read(fd, buf, sizeof(buf)), sizeof(buf));
	close(fd);
	return true;
}

/* A cgroup at its limit with page cache keeps the cache working: the
 * kernel drops that first, so it counts as free (memcg.c's working set).
 * Before, the usage counted it and the freed blocks were given back. */
static void test_page_cache_is_free(void **state)
{
	(void)state;
	void *b[NBLOCKS];
	const size_t limit = GiB, file = 768 * MiB;
	char path[600];
	knobs();
	enter(limit);
	snprintf(path, sizeof(path), "%s/page-cache", getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/var/tmp");
	if (!read_into_page_cache(path, file))
		harness_skip("%s is on tmpfs: its pages are shared memory, not page cache", path);
	size_t with_cache = usage();
	make_blocks(b, NBLOCKS);
	size_t peak_use = usage();
	free_all(b, NBLOCKS);
	harness_sleep_ms(300); /* janitor rounds: the bound applied as it reads it */
	size_t cached = cached_of(b, NBLOCKS), use = usage();
	size_t inactive = tmemcg_key("memory.stat", tmemcg.version == 1 ? "total_inactive_file" : "inactive_file");
	print_message("limit %zu MiB, a %zu MiB file read (usage %zu MiB), %d blocks of %zu MiB (usage %zu "
		      "MiB) freed: %zu MiB still mapped; usage %zu MiB of which inactive file %zu MiB; the rule "
		      "with the usage alone allows %zu MiB; memcg_cache_bound %llu MiB\n", limit >> 20,
		      file >> 20, with_cache >> 20, NBLOCKS, BLOCK >> 20, peak_use >> 20, cached >> 20,
		      use >> 20, inactive >> 20, rule(limit, use, cached, 0) >> 20,
		      (unsigned long long)harness_stat(HP_STAT_MEMCG_CACHE_BOUND) >> 20);
	unlink(path);
	assert_true(with_cache >= file / 2); /* the page cache was the cgroup's */
	assert_int_equal(cached, NBLOCKS * BLOCK); /* all kept: the page cache is free */
	assert_true(cached > rule(limit, use, cached, 0));
	leave();
}

/* The child of test_libc_hole_given_back, in the cgroup: a hole of HOLE
 * bytes in glibc's heap below a live chunk, the limit lowered so that what
 * is free under it is less than a fresh block of BIG bytes, then that block
 * touched whole.  Exits 0, or is OOM-killed. */
#define HOLE (192 * MiB)
#define PIECE (64 * 1024) /* below glibc's mmap threshold: from its heap */
#define BIG (256 * MiB)

static void hole_child(void)
{
	static void *pieces[HOLE / PIECE];
	for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
		pieces[i] = malloc(PIECE);
		if (!pieces[i])
			_exit(3);
		harness_touch(pieces[i], PIECE);
	}
	void *pin = malloc(PIECE); /* above them: glibc cannot trim its heap down past it */
	harness_touch(pin, PIECE);
	size_t before = usage();
	for (size_t i = 0; i < ARRAY_SIZE(pieces); i++)
		free(pieces[i]);
	size_t kept = usage();
	if (kept + HOLE / 2 < before) {
		print_message("glibc gave the hole back at free (usage %zu -> %zu MiB): nothing to show\n",
			      before >> 20, kept >> 20);
		_exit(4);
	}
	size_t limit = kept + BIG / 2; /* room for the block only once the hole is back */
	set_limit(limit);
	/* this process's first huge mapping finds the cgroup and its limit again */
	void *warm = hp_malloc(BLOCK);
	harness_touch(warm, BLOCK);
	hp_free(warm);
	hp_release_drain();
	uint64_t trims = harness_stat(HP_STAT_LIBC_TRIMS);
	print_message("glibc holds %zu MiB free below a live chunk (usage %zu MiB); limit %zu MiB; "
		      "a fresh %zu MiB block...\n", (size_t)HOLE >> 20, kept >> 20, limit >> 20,
		      (size_t)BIG >> 20);
	void *big = hp_malloc(BIG);
	if (!big)
		_exit(5);
	harness_touch(big, BIG);
	print_message("...touched: usage %zu MiB, libc_trims +%llu\n", usage() >> 20,
		      (unsigned long long)(harness_stat(HP_STAT_LIBC_TRIMS) - trims));
	_exit(harness_stat(HP_STAT_LIBC_TRIMS) > trims ? 0 : 6);
}

static void test_libc_hole_given_back(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__)
	harness_skip("ASan's malloc replaces glibc's: no glibc heap to trim (the plain build runs this)");
#endif
	knobs();
	enter(GiB);
	size_t hits = limit_hits();
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		hole_child();
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	size_t after = limit_hits() - hits;
	set_limit(GiB);
	if (WIFSIGNALED(status))
		fail_msg("the child was killed by signal %d (9: the OOM killer) touching a block glibc's "
			 "free memory had room for; limit hit %zu times", WTERMSIG(status), after);
	if (WEXITSTATUS(status) == 6)
		fail_msg("the block fitted only because the kernel took something back: libc_trims did not move");
	assert_int_equal(WEXITSTATUS(status), 0);
	print_message("limit hit %zu times\n", after);
	assert_int_equal(after, 0);
	leave();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_bound_engages),
		HTEST(test_limit_followed),
		HTEST(test_fresh_mapping_gives_back),
		HTEST(test_page_cache_is_free),
		HTEST(test_libc_hole_given_back),
	};

	harness_init(argc, argv);
	int rc = harness_run("memcg_bound", tests, ARRAY_SIZE(tests));
	leave();
	return rc;
}
