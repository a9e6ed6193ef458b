/* Reading past the end of a block does what it does under glibc: nothing.
 * Code reads a little past the end of its data (OpenBLAS's complex kernels
 * load up to a column past a matrix, issue 32), which under glibc lands in
 * the next mapping; hpalloc follows every block with a 2 MiB guard that
 * reads as zeros and faults on a write (hpalloc(7), the guard knob).  For
 * blocks of many sizes, fresh, cached and reused, cut, grown, moved, shrunk
 * and on hugetlb pages: every page of the 2 MiB past the requested size
 * reads without a fault, and every guard reads as zeros (a reused block's
 * own bytes past the request are its last user's).  A write past the end
 * faults; guard=fault makes a read fault too.  Before the guard became
 * readable the first read past the 4 KiB rounding was a SIGSEGV; before a
 * cut dropped its guard's pages, reading past a piece showed the cached
 * block's old bytes (issue 45). */
#include "harness.h"

#include <setjmp.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define GUARD (2 * MiB)

static sigjmp_buf fault_jmp;

static void on_fault(int sig)
{
	siglongjmp(fault_jmp, sig);
}

/* Reads every 4 KiB and the last byte of [p + size, p + size + span):
 * SIZE_MAX if none faulted, else the offset past size that did.  *nonzero
 * counts bytes read that were not 0. */
static size_t read_past(const unsigned char *p, size_t size, size_t span, size_t *nonzero)
{
	struct sigaction sa = {.sa_handler = on_fault}, old_segv, old_bus;
	volatile size_t off = 0;

	*nonzero = 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
	size_t faulted = SIZE_MAX;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		for (off = 0; off < span; off += 4 * KiB)
			*nonzero += ((const volatile unsigned char *)p)[size + off] != 0;
		off = span - 1;
		*nonzero += ((const volatile unsigned char *)p)[size + off] != 0;
	} else {
		faulted = off;
	}
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	return faulted;
}

/* The 2 MiB past a block of size bytes read; zeros if fresh. */
static void assert_reads_past(const void *p, size_t size, bool zeros, const char *what)
{
	size_t nonzero, at = read_past(p, size, GUARD, &nonzero);
	if (at != SIZE_MAX)
		fail_msg("%s: %zu byte block: reading %zu bytes past its end faulted", what, size, at);
	if (zeros && nonzero)
		fail_msg("%s: %zu byte block: %zu of the bytes read past its end were not 0", what, size,
			 nonzero);
}

/* Whether writing (or, with read, reading) the first byte of the page
 * after p's mapping of len bytes faults: in a child, which dies of it. */
static bool access_faults(const void *p, size_t len, bool read)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		volatile unsigned char *end = (volatile unsigned char *)p + len;
		if (read)
			(void)*end;
		else
			*end = 1;
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

static const size_t sizes[] = {
	1 * MiB, 1 * MiB + 1, 1440000 /* 300 x 300 complex128, issue 32 */, 2 * MiB - 1,
	2 * MiB, 4 * MiB /* 512 x 512 complex128 */, 4 * MiB + 100, 7840000 /* 700 x 700 */,
	16 * MiB - 4 * KiB, 64 * MiB,
};

static void thp_knobs(void)
{
	harness_need_thp();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
}

/* Fresh blocks, then the same sizes again from the cache (the guard of a
 * cached block is the one it was mapped with). */
static void test_thp_fresh_and_cached(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("cache_max", "1G");
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
			unsigned char *p = hp_malloc(sizes[i]);
			assert_non_null(p);
			harness_fill(p, sizes[i], i + 1);
			/* a cached block may hold an earlier block's bytes past size */
			assert_reads_past(p, sizes[i], round == 0, round ? "cached" : "fresh");
			assert_filled(p, sizes[i], i + 1);
			hp_free(p);
		}
	}
	assert_true(harness_stat(HP_STAT_CACHE_HITS) >= ARRAY_SIZE(sizes));
}

/* A block cut from a cached one ends where its guard, a huge page of the
 * cached block's with its pages dropped, begins; when the rest of the
 * cached block has gone back to the kernel, the guard is still there. */
static void test_thp_cut_piece(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
	unsigned char *big = hp_malloc(64 * MiB);
	assert_non_null(big);
	hp_free(big);
	uint64_t cuts = harness_stat(HP_STAT_CACHE_CUTS);
	unsigned char *p = hp_malloc(4 * MiB);
	assert_ptr_equal(p, big);
	assert_int_equal(harness_stat(HP_STAT_CACHE_CUTS), cuts + 1);
	harness_fill(p, 4 * MiB, 3);
	assert_reads_past(p, 4 * MiB, true, "cut, the rest cached");
	hp_cache_flush(); /* the rest is released */
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_mapped(p + 4 * MiB + GUARD, 64 * MiB - 4 * MiB - GUARD), 0);
	assert_reads_past(p, 4 * MiB, true, "cut, the rest released");
	assert_true(access_faults(p, 4 * MiB, false));
	assert_filled(p, 4 * MiB, 3);
	hp_free(p);
}

/* The guard after a block of the cache's, whatever it was cut, joined,
 * grown or shrunk from, reads as zeros, as hpalloc(7) promises: before,
 * a cut kept the cached pages of its new guard, and reading past a block
 * cut from a freed 200 MiB one of 0xcd bytes showed 0xcd (issue 45).  The
 * guard starts where the block's mapping ends (hp_usable_size): the bytes
 * between the request and that end are the block's, a reused one's as its
 * last user left them. */
static void assert_guard_zeros(const unsigned char *p, const char *what)
{
	size_t nonzero, len = hp_usable_size(p), at = read_past(p, len, GUARD, &nonzero);
	if (at != SIZE_MAX)
		fail_msg("%s: reading %zu bytes past the %zu-byte mapping faulted", what, at, len);
	if (nonzero)
		fail_msg("%s: %zu of the bytes read in the guard after %zu bytes were not 0", what, nonzero,
			 len);
}

/* A block freed full of 0xcd, then cut, grown over the cache, shrunk,
 * joined and moved: every guard on the way reads as zeros. */
static void test_thp_reused_guard_zeros(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
	harness_knob("populate", "off");
	unsigned char *big = hp_malloc(200 * MiB);
	assert_non_null(big);
	memset(big, 0xcd, 200 * MiB);
	hp_free(big);
	unsigned char *a = hp_malloc(20 * MiB); /* the case */
	assert_ptr_equal(a, big);
	assert_guard_zeros(a, "cut");
	unsigned char *d = hp_realloc(a, 21 * MiB); /* over its guard and the cached rest, cut again */
	assert_ptr_equal(d, a);
	assert_guard_zeros(d, "grown over the cache");
	unsigned char *b = hp_malloc(30 * MiB + 100); /* cut from the rest: a mapping longer than asked */
	assert_ptr_equal(b, big + 24 * MiB);
	assert_guard_zeros(b, "cut, longer than asked");
	unsigned char *rest = hp_malloc(142 * MiB); /* the rest, held: the pieces below must join */
	assert_ptr_equal(rest, big + 58 * MiB);
	unsigned char *c = hp_realloc(b, 12 * MiB + 5); /* shrunk where it is */
	assert_ptr_equal(c, b);
	assert_guard_zeros(c, "shrunk");
	hp_free(d);
	hp_free(c);
	uint64_t joins = harness_stat(HP_STAT_CACHE_JOINS);
	unsigned char *e = hp_malloc(34 * MiB); /* the two pieces joined */
	assert_ptr_equal(e, big);
	assert_int_equal(harness_stat(HP_STAT_CACHE_JOINS), joins + 1);
	assert_guard_zeros(e, "joined");
	/* the cut's guard dropped in between faults a huge page again once
	 * written: the joined block is on huge pages, but for the last extent
	 * the shrink split */
	memset(e, 0x5a, 34 * MiB);
	struct harness_smaps k;
	assert_int_equal(harness_smaps_range(e, 34 * MiB, &k), 0);
	if (k.anon_huge < 34 * MiB)
		fail_msg("the joined block has %zu KiB of its first 34 MiB on huge pages", k.anon_huge >> 10);
	unsigned char *f = hp_realloc(e, 150 * MiB); /* rest is in its way: moved */
	assert_non_null(f);
	assert_ptr_not_equal(f, e);
	assert_guard_zeros(f, "moved");
	hp_free(f);
	hp_free(rest);
}

/* realloc: grown in place, moved (something mapped right after the guard),
 * shrunk. */
static void test_thp_realloc(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("cache_max", "0");
	unsigned char *p = hp_malloc(3 * MiB + 5);
	assert_non_null(p);
	harness_fill(p, 3 * MiB + 5, 4);
	p = hp_realloc(p, 9 * MiB + 7);
	assert_non_null(p);
	assert_reads_past(p, 9 * MiB + 7, true, "grown");
	void *neighbour = harness_block_neighbour(p, 9 * MiB + 4 * KiB);
	unsigned char *q = hp_realloc(p, 40 * MiB + 3);
	assert_non_null(q);
	if (neighbour)
		assert_ptr_not_equal(q, p);
	assert_reads_past(q, 40 * MiB + 3, true, "moved");
	q = hp_realloc(q, 5 * MiB + 1);
	assert_non_null(q);
	assert_reads_past(q, 5 * MiB + 1, true, "shrunk");
	assert_filled(q, 3 * MiB + 5, 4);
	assert_true(access_faults(q, hp_usable_size(q), false));
	hp_free(q);
	if (neighbour)
		munmap(neighbour, 4096);
}

/* A write past the end faults; with guard=fault, a read too (for finding
 * overruns); the knob takes for blocks mapped after it changed. */
static void test_guard_fault_knob(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("cache_max", "0");
	unsigned char *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	assert_true(access_faults(p, 4 * MiB, false));
	assert_false(access_faults(p, 4 * MiB, true));
	hp_free(p);
	harness_knob("guard", "fault");
	p = hp_malloc(4 * MiB);
	assert_non_null(p);
	assert_true(access_faults(p, 4 * MiB, false));
	assert_true(access_faults(p, 4 * MiB, true));
	size_t nonzero;
	assert_int_equal(read_past(p, 4 * MiB, GUARD, &nonzero), 0);
	hp_free(p);
}

/* hugetlb blocks, 2 MiB pages: an exact multiple of the page size is where
 * nothing of the block's own page is left to read past. */
static void test_hugetlb(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 16, false);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	const size_t hsizes[] = {2 * MiB, 4 * MiB, 1440000, 6 * MiB - 100};
	for (size_t i = 0; i < ARRAY_SIZE(hsizes); i++) {
		unsigned char *p = hp_malloc(hsizes[i]);
		assert_non_null(p);
		struct hp_backing b;
		assert_int_equal(hp_backing(p, &b), 0);
		assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
		harness_fill(p, hsizes[i], 7);
		assert_reads_past(p, hsizes[i], false, "hugetlb");
		assert_true(access_faults(p, b.mapping_size, false));
		hp_free(p);
	}
	hp_release_drain();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_thp_fresh_and_cached),
		HTEST(test_thp_cut_piece),
		HTEST(test_thp_reused_guard_zeros),
		HTEST(test_thp_realloc),
		HTEST(test_guard_fault_knob),
		HTEST(test_hugetlb),
	};

	harness_init(argc, argv);
	return harness_run("read_past_end", tests, ARRAY_SIZE(tests));
}
