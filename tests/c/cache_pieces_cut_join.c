/* The cache's pieces (lib/core/heap.c): before anything is mapped afresh, a THP
 * request takes the memory the cache already holds -- the front of a larger
 * cached block, cut; or a run of cached pieces lying side by side in one
 * mapping, joined -- and a block that grows by realloc grows in place over
 * the cached piece that follows it: no fault, no copy, while the kernel
 * still sees one VMA per block (so mremap can grow it further) on huge
 * pages.  And every step that can fail, failing: the mprotect that cuts
 * (the block is handed out whole), the one that joins (pieces stay cached
 * and intact, the request is mapped afresh or grows by mremap), threads
 * cutting and joining at once, and a fork (a child never cuts or joins the
 * parent's blocks). */
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- mprotect, interposed: after `skip` calls asking for prot, the next
 * `times` such calls fail */
static atomic_int fail_prot = -1, fail_skip, fail_times;

int mprotect(void *addr, size_t len, int prot)
{
	static int (*real)(void *, size_t, int);
	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "mprotect");
	if (prot == atomic_load(&fail_prot) && atomic_load(&fail_times) > 0 &&
	    atomic_fetch_sub(&fail_skip, 1) <= 0) {
		atomic_fetch_sub(&fail_times, 1);
		errno = ENOMEM; /* what the kernel says at the VMA limit */
		return -1;
	}
	return real(addr, len, prot);
}

static void fail_mprotect_after(int prot, int skip, int times)
{
	atomic_store(&fail_prot, prot);
	atomic_store(&fail_skip, skip);
	atomic_store(&fail_times, times);
}

static void fail_mprotect(int prot, int times)
{
	fail_mprotect_after(prot, 0, times);
}

#define BIG (64 * MiB)
/* Every block is followed by a 2 MiB guard (hpalloc(7)); a cut piece is
 * whole huge pages, so a cut takes the 2 MiB after the front piece as its
 * guard and the rest starts 2 MiB further on. */
#define GUARD (2 * MiB)

static void knobs(void)
{
	fail_mprotect(-1, 0);
	harness_need_thp();
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "60000");
	/* huge pages from the first fault: a block freed before its collapse (4
	 * KiB first) goes into the cache without those pages, and the pieces'
	 * pages are what these cases count (populate_pages: populate_choice.c) */
	harness_knob("populate_pages", "2M");
}

/* A 64 MiB THP block, all touched (what lies past a first cut of 4 MiB and
 * its guard with pattern REST), then freed into the cache: its address. */
#define REST 98
static char *cached_big(void)
{
	char *big = hp_malloc(BIG);
	assert_non_null(big);
	harness_fill(big, 4 * MiB + GUARD, 99);
	harness_fill(big + 4 * MiB + GUARD, BIG - 4 * MiB - GUARD, REST);
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
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 4 * MiB - GUARD);
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
	assert_int_equal(hp_usable_size(q), 10 * MiB);
	size_t rest = harness_stat(HP_STAT_CACHED_BYTES);
	assert_int_equal(rest, BIG - 10 * MiB - GUARD);
	char *r = hp_malloc(rest);
	assert_ptr_equal(r, big + 10 * MiB + GUARD); /* an ordinary cache hit */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	harness_fill(r, rest, 7);
	assert_filled(q, 9 * MiB, 6);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - GUARD);
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
	fail_mprotect(PROT_READ, 1); /* the guard's protection (guard=read) */
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
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 4 * MiB - GUARD);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - 4 * MiB - GUARD + hp_usable_size(q));
	assert_int_equal(harness_mapped(big, 4 * MiB + GUARD), 0); /* the old place and its guard are gone */
	/* the piece still serves: an ordinary hit, its pages where they were */
	char *r = hp_malloc(BIG - 4 * MiB - GUARD);
	assert_ptr_equal(r, big + 4 * MiB + GUARD);
	assert_filled(r, BIG - 4 * MiB - GUARD, REST);
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
	assert_filled(big + 4 * MiB + GUARD, BIG - 4 * MiB - GUARD, REST); /* the parent's cached piece */
	q = grow(q, 3 * MiB, 12 * MiB, 10);
	assert_ptr_equal(q, big);
	hp_free(q);
	flush_and_check_empty();
}

/* ---- any request takes the cache's pieces ----------------------------------- */

/* A cached block larger than a request serves it, cut: the front is handed
 * out, the rest stays cached, nothing is mapped afresh. */
static void test_smaller_request_cuts(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	uint64_t cuts = harness_stat(HP_STAT_CACHE_CUTS);
	long faults = harness_minor_faults();

	char *p = hp_malloc(5 * MiB);
	assert_ptr_equal(p, big);
	harness_fill(p, 5 * MiB, 12);
	faults = harness_minor_faults() - faults;
	assert_int_equal(harness_stat(HP_STAT_CACHE_CUTS), cuts + 1);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 6 * MiB - GUARD);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - GUARD); /* the cut's guard */
#if !defined(__SANITIZE_ADDRESS__) /* see test_growth_takes_cached_pages */
	assert_true(faults < 4);
#else
	(void)faults;
#endif
	/* the rest is a cached block like any other, its pages where they were */
	char *r = hp_malloc(BIG - 6 * MiB - GUARD);
	assert_ptr_equal(r, big + 6 * MiB + GUARD);
	assert_filled(p, 5 * MiB, 12);
	hp_free(r);
	hp_free(p);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* Arrays too small for a huge page of their own (threshold <= size < 2 MiB)
 * are served from the cache too, one 2 MiB piece each, and zeroed when
 * asked. */
static void test_mid_sized_requests(void **state)
{
	(void)state;
	knobs();
	harness_knob("threshold", "1M");
	char *big = cached_big();
	size_t mid = 1536 * KiB;

	char *a = hp_malloc(mid), *b = hp_calloc(1, mid);
	assert_ptr_equal(a, big);
	assert_ptr_equal(b, big + 2 * MiB + GUARD);
	assert_zeroed(b, mid);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 4 * MiB - 2 * GUARD);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - 2 * GUARD);
	hp_free(a);
	hp_free(b);
	/* the same sizes again: the pieces as they are, no cut, no syscall */
	uint64_t cuts = harness_stat(HP_STAT_CACHE_CUTS);
	a = hp_malloc(mid);
	b = hp_malloc(mid);
	assert_true((a == big && b == big + 2 * MiB + GUARD) || (b == big && a == big + 2 * MiB + GUARD));
	assert_int_equal(harness_stat(HP_STAT_CACHE_CUTS), cuts);
	hp_free(a);
	hp_free(b);
	flush_and_check_empty();
}

/* An exact fit is taken before anything is cut. */
static void test_exact_fit_first(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big();
	char *eight = hp_malloc(8 * MiB);  /* cut from big */
	char *other = hp_malloc(BIG);      /* fresh */
	hp_free(eight);
	assert_ptr_equal(eight, big);
	hp_free(other);
	uint64_t cuts = harness_stat(HP_STAT_CACHE_CUTS);
	char *p = hp_malloc(7 * MiB + 512 * KiB);
	assert_ptr_equal(p, eight);
	assert_int_equal(harness_stat(HP_STAT_CACHE_CUTS), cuts);
	hp_free(p);
	flush_and_check_empty();
}

/* Three blocks of 16 MiB less a guard cut from the cached 64 MiB one and
 * freed: four cached pieces side by side.  Their addresses. */
#define PIECE (16 * MiB - GUARD)
static void cached_pieces(char *big, char *piece[4])
{
	for (int i = 0; i < 3; i++) {
		piece[i] = hp_malloc(PIECE - 4 * KiB);
		assert_ptr_equal(piece[i], big + (size_t)i * 16 * MiB);
		harness_fill(piece[i], PIECE - 4 * KiB, 20 + (uint64_t)i);
	}
	piece[3] = big + 48 * MiB;
	for (int i = 0; i < 3; i++)
		hp_free(piece[i]);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 3 * GUARD);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 4);
}

/* A request no single piece holds: a run of pieces is joined into one
 * block -- one VMA on huge pages, as if it had never been cut -- and no
 * fresh memory is mapped. */
static void test_pieces_join(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big(), *piece[4];
	cached_pieces(big, piece);
	uint64_t joins = harness_stat(HP_STAT_CACHE_JOINS), hits = harness_stat(HP_STAT_CACHE_HITS);
	long faults = harness_minor_faults();

	char *p = hp_malloc(60 * MiB);
	assert_ptr_equal(p, big);
	harness_fill(p, 60 * MiB, 30);
	faults = harness_minor_faults() - faults;
	assert_int_equal(harness_stat(HP_STAT_CACHE_JOINS), joins + 3);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1); /* served by the cache */
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - GUARD); /* the new cut's guard */
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 2 * MiB);
#if !defined(__SANITIZE_ADDRESS__)
	assert_true(faults < (long)(60 * MiB / (2 * MiB)) / 4);
#else
	(void)faults;
#endif
	uintptr_t start, end;
	assert_int_equal(harness_vma(p, &start, &end), 0);
	assert_int_equal(start, (uintptr_t)big);
	assert_true(end - start >= 60 * MiB);
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(p, 60 * MiB, &range), 0);
	assert_true(range.anon_huge >= 56 * MiB);
	hp_free(p);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* A cut piece shrunk by realloc to a length short of a 2 MiB boundary has a
 * guard longer than 2 MiB (hpalloc(7): to the next boundary), yet still
 * ends where the rest of its block starts; joined again, the block counts
 * every byte of that guard as mapped.  The join counted 2 MiB: the soak
 * found mapped_bytes 2 MiB - 4 KiB short of live + cached. */
static void test_join_after_shrink_counts_its_guard(void **state)
{
	(void)state;
	knobs();
	harness_knob("threshold", "64K");
	char *big = cached_big();
	char *f = small_block(1536 * KiB, 41); /* cut: a 2 MiB front, its guard, the rest cached */
	assert_ptr_equal(f, big);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - GUARD);
	char *g = hp_realloc(f, 900 * KiB); /* shrunk where it is: its guard now 900 KiB .. 4 MiB */
	assert_ptr_equal(g, big);
	assert_filled(g, 900 * KiB, 41);
	hp_free(g);
	size_t shrunk = 900 * KiB; /* a multiple of 4 KiB */
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), shrunk + BIG - 2 * GUARD);
	uint64_t joins = harness_stat(HP_STAT_CACHE_JOINS);
	char *p = hp_malloc(BIG - 2 * MiB); /* the shrunk piece and the rest, joined */
	assert_ptr_equal(p, big);
	assert_int_equal(harness_stat(HP_STAT_CACHE_JOINS), joins + 1);
	harness_fill(p, BIG - 2 * MiB, 42);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG);
	hp_free(p);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* A join refused by the kernel part way: what was joined and what was not
 * go back to the cache intact, the request is mapped afresh, and every
 * piece still serves. */
static void test_join_fails_part_way(void **state)
{
	(void)state;
	knobs();
	char *big = cached_big(), *piece[4];
	cached_pieces(big, piece);
	fail_mprotect_after(PROT_READ | PROT_WRITE, 1, 1); /* the second join */

	char *p = hp_malloc(60 * MiB);
	assert_int_equal(atomic_load(&fail_times), 0);
	assert_non_null(p);
	assert_true(p < big || p >= big + BIG);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), BIG - 2 * GUARD);
	assert_int_equal(harness_stat(HP_STAT_CACHED_BLOCKS), 3);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), BIG - 2 * GUARD + hp_usable_size(p));
	harness_fill(p, 60 * MiB, 31);

	/* the two joined pieces serve as one block, the third as it was */
	char *two = hp_malloc(32 * MiB - GUARD);
	assert_ptr_equal(two, big);
	assert_filled(two + 16 * MiB, PIECE - 4 * KiB, 21);
	char *third = hp_malloc(PIECE - 4 * KiB);
	assert_ptr_equal(third, piece[2]);
	assert_filled(third, PIECE - 4 * KiB, 22);
	hp_free(two);
	hp_free(third);
	hp_free(p);
	flush_and_check_empty();
	assert_int_equal(harness_mapped(big, BIG), 0);
}

/* Threads cutting, joining and freeing at once: every block keeps its
 * contents, and nothing is left mapped at the end. */
#define STRESS_THREADS 4
#define STRESS_ROUNDS 150

static void *stress(void *arg)
{
	uint64_t seed = (uintptr_t)arg, x = seed * 0x9E3779B97F4A7C15ull + 1;
	char *held[3] = {0};
	size_t sizes[3] = {0};
	bool bad = false;

	for (int i = 0; i < STRESS_ROUNDS && !bad; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int slot = (int)(x % 3);
		if (held[slot]) {
			bad |= harness_check(held[slot], sizes[slot], seed + (uint64_t)slot) != SIZE_MAX;
			hp_free(held[slot]);
		}
		sizes[slot] = 1 * MiB + (size_t)(x >> 8) % (8 * MiB);
		held[slot] = hp_malloc(sizes[slot]);
		if (!held[slot])
			return (void *)1;
		harness_fill(held[slot], sizes[slot], seed + (uint64_t)slot);
	}
	for (int s = 0; s < 3; s++) {
		bad |= harness_check(held[s], sizes[s], seed + (uint64_t)s) != SIZE_MAX;
		hp_free(held[s]);
	}
	return (void *)(uintptr_t)bad;
}

static void test_threads(void **state)
{
	(void)state;
	knobs();
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "256M");
	pthread_t t[STRESS_THREADS];
	for (uintptr_t i = 0; i < STRESS_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, stress, (void *)(i + 1)), 0);
	for (int i = 0; i < STRESS_THREADS; i++) {
		void *bad;
		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
	assert_true(harness_stat(HP_STAT_CACHE_CUTS) > 0);
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
		HTEST(test_smaller_request_cuts),
		HTEST(test_mid_sized_requests),
		HTEST(test_exact_fit_first),
		HTEST(test_pieces_join),
		HTEST(test_join_after_shrink_counts_its_guard),
		HTEST(test_join_fails_part_way),
		HTEST(test_threads),
	};

	harness_init(argc, argv);
	return harness_run("cache_pieces_cut_join", tests, ARRAY_SIZE(tests));
}
