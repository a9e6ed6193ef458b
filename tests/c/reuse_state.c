/* A block the cache hands out again carries nothing its last user set on
 * its pages (issue 45).  A program may mprotect part of a buffer it got
 * from malloc, or advise it MADV_DONTFORK or MADV_WIPEONFORK, and free it
 * as it was: glibc unmaps such a buffer on free, so whoever gets the memory
 * next gets it read-write and forked as any other.  The cache keeps it
 * instead; before the fix its next user got the read-only or PROT_NONE
 * page back and died of a SIGSEGV writing there.  So here, for a block
 * reused whole, cut from a larger cached one, joined from cached pieces,
 * on hugetlb pages, and one libc would have kept: every byte of the next
 * block writes (in a child first: a fault says where), and a child it
 * forks sees all of it.  A block whose state cannot be undone (the
 * program unmapped part of it; the kernel refusing the advice, staged with
 * tests/c/fault.c) is released, never cached. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

#define BIG (64 * MiB)
#define GUARD (2 * MiB)

static void knobs(void)
{
	harness_thp_cache("1G", "60000");
}

/* ---- writing in a child: a fault is reported with where it hit ---------- */

static unsigned char *volatile child_base;

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "child: signal %d writing byte %td of the reused block\n", sig,
			 (unsigned char *)si->si_addr - child_base);
	(void)!write(2, msg, (size_t)n);
	_exit(3);
}

/* Whether every byte of [p, p + len) takes a write, tried in a child (a
 * write that faults kills only it): the child's stderr names the first
 * byte that faulted. */
static bool writes_everywhere(unsigned char *p, size_t len)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		child_base = p;
		for (size_t off = 0; off < len; off += 4 * KiB)
			((volatile unsigned char *)p)[off] = 0x11;
		((volatile unsigned char *)p)[len - 1] = 0x11;
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* p, a block of len bytes reused from the cache: writable everywhere, in a
 * child and then here. */
static void assert_writable(unsigned char *p, size_t len, uint64_t seed, const char *what)
{
	if (!writes_everywhere(p, len))
		fail_msg("%s: a write to the reused %zu-byte block faulted", what, len);
	harness_fill(p, len, seed);
	assert_filled(p, len, seed);
}

/* The same, and for a THP block one mapping of the kernel's again (the
 * protections the program set split it; mremap grows only one mapping). */
static void assert_whole(unsigned char *p, size_t len, uint64_t seed, const char *what)
{
	assert_writable(p, len, seed, what);
	uintptr_t start, end;
	assert_int_equal(harness_vma(p, &start, &end), 0);
	if (start > (uintptr_t)p || end < (uintptr_t)p + len)
		fail_msg("%s: the block is split: its mapping %#lx-%#lx, the block %p + %zu", what,
			 (unsigned long)start, (unsigned long)end, (void *)p, len);
}

/* A fresh block of len bytes with pattern seed, parts protected as a
 * program would (read-only: one page of `page` bytes at ro; PROT_NONE:
 * 2 MiB at none), then freed into the cache: its address. */
static unsigned char *protected_and_freed(size_t len, size_t page, size_t ro, size_t none, uint64_t seed)
{
	unsigned char *p = hp_malloc(len);
	assert_non_null(p);
	harness_fill(p, len, seed);
	assert_int_equal(mprotect(p + ro, page, PROT_READ), 0);
	assert_int_equal(mprotect(p + none, 2 * MiB, PROT_NONE), 0);
	uint64_t cached = harness_stat(HP_STAT_CACHED_BYTES);
	hp_free(p);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), cached + len);
	return p;
}

/* The case: the same size again, the same block. */
static void test_reused_whole(void **state)
{
	(void)state;
	knobs();
	unsigned char *old = protected_and_freed(BIG, 4 * KiB, 8 * MiB + 12 * KiB, 40 * MiB, 1);
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	unsigned char *p = hp_malloc(BIG);
	assert_ptr_equal(p, old);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
	assert_whole(p, BIG, 2, "reused whole");
	hp_free(p);
}

/* A 200 MiB block with protected parts in front and behind serves a
 * 20 MiB request cut from its front, and the rest serves another; both
 * freed, the pieces joined serve a request for nearly all of it. */
static void test_cut_and_joined(void **state)
{
	(void)state;
	knobs();
	size_t len = 200 * MiB;
	unsigned char *old = protected_and_freed(len, 4 * KiB, 10 * MiB, 150 * MiB, 3);
	uint64_t cuts = harness_stat(HP_STAT_CACHE_CUTS), joins = harness_stat(HP_STAT_CACHE_JOINS);
	unsigned char *front = hp_malloc(20 * MiB);
	assert_ptr_equal(front, old);
	assert_int_equal(harness_stat(HP_STAT_CACHE_CUTS), cuts + 1);
	assert_whole(front, 20 * MiB, 4, "cut, front");
	size_t rest_len = len - 20 * MiB - GUARD;
	unsigned char *rest = hp_malloc(rest_len);
	assert_ptr_equal(rest, old + 20 * MiB + GUARD);
	assert_whole(rest, rest_len, 5, "cut, rest");
	/* each protects a part of its piece again before it goes */
	assert_int_equal(mprotect(front + 4 * MiB, 4 * KiB, PROT_NONE), 0);
	assert_int_equal(mprotect(rest + 100 * MiB, 4 * MiB, PROT_READ), 0);
	hp_free(front);
	hp_free(rest);
	unsigned char *p = hp_malloc(len - 4 * MiB);
	assert_ptr_equal(p, old);
	assert_true(harness_stat(HP_STAT_CACHE_JOINS) > joins);
	assert_whole(p, len - 4 * MiB, 6, "joined");
	hp_free(p);
}

/* hugetlb blocks are cached too (2 MiB pages; the pool holds the block
 * and the copies of the child's writes). */
static void test_hugetlb(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 8, false);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
	unsigned char *old = protected_and_freed(6 * MiB, 2 * MiB, 0, 2 * MiB, 7); /* whole huge pages */
	unsigned char *p = hp_malloc(6 * MiB);
	assert_ptr_equal(p, old);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	assert_writable(p, 6 * MiB, 8, "hugetlb"); /* the kernel never merges hugetlb mappings */
	hp_free(p);
}

/* A block libc would have kept (no longer than what it learnt from the
 * frees so far) stays resident in the cache with no advice at all, but
 * its protection is undone all the same. */
static void test_kept_block(void **state)
{
	(void)state;
	knobs();
	unsigned char *warm = hp_malloc(4 * MiB); /* libc learns 4 MiB from its free */
	assert_non_null(warm);
	hp_free(warm);
	hp_cache_flush();
	hp_release_drain();
	unsigned char *old = protected_and_freed(4 * MiB, 4 * KiB, 0, 2 * MiB, 9);
	assert_int_equal(harness_stat(HP_STAT_CACHED_RECLAIMABLE_BYTES), 0); /* kept, not offered */
	unsigned char *p = hp_malloc(4 * MiB);
	assert_ptr_equal(p, old);
	assert_whole(p, 4 * MiB, 10, "kept resident");
	hp_free(p);
}

/* The child of a fork sees every byte of p (a block of len bytes with
 * pattern seed), or says why not. */
static void assert_child_sees(const unsigned char *p, size_t len, uint64_t seed, const char *what)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		size_t bad = harness_check(p, len, seed);
		if (bad != SIZE_MAX)
			fprintf(stderr, "child: byte %zu of the block is not what its parent wrote\n", bad);
		_exit(bad != SIZE_MAX);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("%s: the child died of signal %d reading the block its parent got from the cache",
			 what, WTERMSIG(status));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("%s: the child saw other bytes than its parent wrote", what);
}

/* MADV_DONTFORK, then MADV_WIPEONFORK, on part of a block glibc would have
 * unmapped: the block's next user forks, and its child sees every byte
 * (before the fix: a SIGSEGV in the child's read, or zeros). */
static void test_fork_advice(void **state)
{
	(void)state;
	knobs();
	const struct {
		int advice;
		const char *name;
	} advice[] = {{MADV_DONTFORK, "MADV_DONTFORK"}, {MADV_WIPEONFORK, "MADV_WIPEONFORK"}};
	for (size_t i = 0; i < ARRAY_SIZE(advice); i++) {
		unsigned char *old = hp_malloc(BIG);
		assert_non_null(old);
		if (madvise(old + 4 * MiB, 4 * MiB, advice[i].advice) != 0) {
			hp_free(old);
			harness_skip("no %s here: %s", advice[i].name, strerror(errno));
		}
		hp_free(old);
		unsigned char *p = hp_malloc(BIG);
		assert_ptr_equal(p, old);
		harness_fill(p, BIG, 11 + i);
		assert_child_sees(p, BIG, 11 + i, advice[i].name);
		hp_free(p);
	}
}

/* The program unmapped part of its block before freeing it (glibc's free
 * unmaps the rest without complaint): its protection cannot be put back
 * over the hole, so it is released, and the next block is whole. */
static void test_part_unmapped(void **state)
{
	(void)state;
	knobs();
	unsigned char *p = hp_malloc(BIG);
	assert_non_null(p);
	harness_fill(p, BIG, 12);
	assert_int_equal(munmap(p + 10 * MiB, 2 * MiB), 0);
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	assert_int_equal(harness_mapped(p, BIG), 0);
	unsigned char *q = hp_malloc(BIG);
	assert_non_null(q);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits);
	assert_whole(q, BIG, 13, "after a block with a hole");
	hp_free(q);
}

/* The kernel refuses to undo the advice (staged: MADV_DOFORK fails with
 * ENOMEM, as at the map count's limit): the block is released, not cached. */
static void test_reset_refused(void **state)
{
	(void)state;
	knobs();
	unsigned char *p = hp_malloc(BIG);
	assert_non_null(p);
	harness_fill(p, BIG, 14);
	fault_madvise(MADV_DOFORK, ENOMEM);
	int refused = fault_madvise_refused();
	hp_free(p);
	fault_madvise(MADV_DOFORK, 0);
	assert_int_equal(fault_madvise_refused(), refused + 1);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	assert_int_equal(harness_mapped(p, BIG), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_reused_whole),
		HTEST(test_cut_and_joined),
		HTEST(test_kept_block),
		HTEST(test_fork_advice),
		HTEST(test_part_unmapped),
		HTEST(test_reset_refused),
		HTEST(test_hugetlb), /* last: a failure leaves its block behind */
	};
	harness_init(argc, argv);
	return harness_run("reuse_state", tests, ARRAY_SIZE(tests));
}
