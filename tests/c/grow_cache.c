/* Growth through the cache (lib/heap.c): a block that becomes huge by
 * realloc is cut from the front of a larger cached THP block, and grows in
 * place over the cached pieces that follow it -- the pages the cache already
 * holds, no fault, no copy -- while the kernel still sees one VMA (so mremap
 * can grow it past the cached memory) and huge pages.  And every step that
 * can fail, failing: the mprotect that cuts (the block is handed out whole),
 * the one that joins (the piece stays cached, growth falls back to mremap),
 * and a fork (a child never cuts or joins the parent's blocks). */
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- mprotect, interposed: the next `times` calls asking for prot fail */
static atomic_int fail_prot = -1, fail_times;

int mprotect(void *addr, size_t len, int prot)
{
	static int (*real)(void *, size_t, int);
	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "mprotect");
	if (prot == atomic_load(&fail_prot) && atomic_load(&fail_times) > 0) {
		atomic_fetch_sub(&fail_times, 1);
		errno = ENOMEM; /* what the kernel says at the VMA limit */
		return -1;
	}
	return real(addr, len, prot);
}

static void fail_mprotect(int prot, int times)
{
	atomic_store(&fail_prot, prot);
	atomic_store(&fail_times, times);
}

#define BIG (64 * MiB)

static void knobs(void)
{
	fail_mprotect(-1, 0);
	harness_need_thp();
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
}

/* A 64 MiB THP block, all touched (what lies from 4 MiB on, where the first
 * cut ends, with pattern REST), then freed into the cache: its address. */
#define REST 98
static char *cached_big(void)
{
	char *big = hp_malloc(BIG);
	assert_non_null(big);
	harness_fill(big, 4 * MiB, 99);
	harness_fill(big + 4 * MiB, BIG - 4 * MiB, REST);
	hp_free(big);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG);
	return big;
}

/* A small block of n bytes of pattern seed. */
static char *small_block(size_t n, uint64_t seed)
{
	char *p = hp_malloc(n);
	assert_non_null(p);
	harness_fill(p, n, seed);
	return p;
}

static char *grow(char *p, size_t old, size_t size, uint64_t seed)
{
	char *q = hp_realloc(p, size);
	assert_non_null(q);
	assert_filled(q, old, seed);
	harness_fill(q, size, seed);
	return q;
}

static void flush_and_check_empty(void)
{
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
}

static void test_growth_takes_cached_pages(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *q = small_block(1 * MiB, 5);
	uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
	long faults = harness_minor_faults();

	/* small -> huge: cut from the front of the cached block, the rest cached */
	q = grow(q, 1 * MiB, 3 * MiB, 5);
	assert_ptr_equal(q, big);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 4 * MiB);
	/* then in place over the rest: same address, no copy */
	size_t sizes[] = {6 * MiB, 12 * MiB, 24 * MiB, 48 * MiB, BIG};
	size_t old = 3 * MiB;
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		q = grow(q, old, sizes[i], 5);
		assert_ptr_equal(q, big);
		old = sizes[i];
	}
	faults = harness_minor_faults() - faults;
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies + 1); /* small -> huge only */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG);
	/* writing 64 MiB of fresh pages takes at least one fault per 2 MiB:
	 * these were the cache's, already there.  (Under ASan every write also
	 * faults in shadow memory: the kernel's pfns would be needed instead.) */
#if !defined(__SANITIZE_ADDRESS__)
	assert_true(faults < (long)(BIG / (2 * MiB)) / 4);
#else
	(void)faults;
#endif

	/* the kernel's view: one VMA again, on huge pages */
	uintptr_t start, end;
	assert_int_equal(harness_vma(q, &start, &end), 0);
	assert_int_equal(start, (uintptr_t)q);
	assert_true(end - start >= BIG);
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(q, BIG, &range), 0);
	assert_true(range.anon_huge >= BIG - 4 * MiB);

	/* so mremap grows it on past what the cache held, still without a copy */
	q = grow(q, BIG, BIG + 36 * MiB, 5);
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies + 1);
	hp_free(q);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* Growth that stops short leaves the rest cached, usable by anyone. */
static void test_rest_stays_cached(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *q = grow(small_block(1 * MiB, 6), 1 * MiB, 3 * MiB, 6);
	q = grow(q, 3 * MiB, 9 * MiB, 6);
	assert_ptr_equal(q, big);
	assert_true(hp_usable_size(q) >= 9 * MiB && hp_usable_size(q) < 12 * MiB);
	size_t rest = harness_stat(HP_STAT_CACHED_BYTES);
	assert_int_equal(rest, BIG - 10 * MiB);
	char *r = hp_malloc(rest);
	assert_ptr_equal(r, big + 10 * MiB); /* an ordinary cache hit */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	harness_fill(r, rest, 7);
	assert_filled(q, 9 * MiB, 6);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - 4 * KiB);
	hp_free(q);
	hp_free(r);
	flush_and_check_empty();
}

/* The cut's mprotect fails: the whole cached block serves the realloc. */
static void test_cut_fails(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *q = small_block(1 * MiB, 8);
	fail_mprotect(PROT_NONE, 1);
	q = grow(q, 1 * MiB, 3 * MiB, 8);
	assert_int_equal(atomic_load(&fail_times), 0);
	assert_ptr_equal(q, big);
	assert_int_equal(hp_usable_size(q), BIG);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG);
	q = grow(q, 3 * MiB, 40 * MiB, 8); /* fits: in place */
	assert_ptr_equal(q, big);
	hp_free(q);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* The join's mprotect fails: the piece stays cached and intact, the block
 * grows by mremap instead (elsewhere: the piece is in its way). */
static void test_join_fails(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *q = grow(small_block(1 * MiB, 9), 1 * MiB, 3 * MiB, 9);
	assert_ptr_equal(q, big);
	fail_mprotect(PROT_READ | PROT_WRITE, 1);
	q = grow(q, 3 * MiB, 12 * MiB, 9);
	assert_int_equal(atomic_load(&fail_times), 0);
	assert_ptr_not_equal(q, big);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 4 * MiB);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - 4 * MiB + hp_usable_size(q));
	assert_int_equal(harness_mapped(big, 4 * MiB), 0); /* the old place is gone */
	/* the piece still serves: an ordinary hit, its pages where they were */
	char *r = hp_malloc(BIG - 4 * MiB);
	assert_ptr_equal(r, big + 4 * MiB);
	assert_filled(r, BIG - 4 * MiB, REST);
	hp_free(r);
	hp_free(q);
	flush_and_check_empty();
}

/* A child's blocks from before the fork are the parent's pages: the child
 * never cuts them or joins them (its cache starts empty anyway), and the
 * parent's growth over its cache is untouched by the child's. */
static void test_fork(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *q = grow(small_block(1 * MiB, 10), 1 * MiB, 3 * MiB, 10);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int bad = harness_stat(HP_STAT_CACHED_BYTES) != 0;
		char *c = hp_realloc(q, 12 * MiB);
		bad |= !c || harness_check(c, 3 * MiB, 10) != SIZE_MAX;
		bad |= harness_stat(HP_STAT_CACHED_BYTES) != 0;
		harness_fill(c, 12 * MiB, 11);
		hp_free(c);
		hp_cache_flush();
		hp_release_drain();
		bad |= harness_stat(HP_STAT_MAPPED_BYTES) != 0;
		_exit(bad);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_filled(big + 4 * MiB, BIG - 4 * MiB, REST); /* the parent's cached piece */
	q = grow(q, 3 * MiB, 12 * MiB, 10);
	assert_ptr_equal(q, big);
	hp_free(q);
	flush_and_check_empty();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_growth_takes_cached_pages),
		HTEST(test_rest_stays_cached),
		HTEST(test_cut_fails),
		HTEST(test_join_fails),
		HTEST(test_fork),
	};

	harness_init(argc, argv);
	return harness_run("grow_cache", tests, ARRAY_SIZE(tests));
}
