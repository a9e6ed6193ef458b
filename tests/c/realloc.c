/* hp_realloc keeps contents across every transition: small<->small,
 * small<->thp, thp growth (mremap, no copy: the kernel shows the same
 * physical pages, and growing costs no page fault; in place, or moved
 * when something is mapped after the block) and shrink (the tail
 * leaves the address space), small<->hugetlb, hugetlb growth (mremap
 * cannot grow hugetlb: copy) and shrink, thp<->hugetlb; and a failed
 * realloc leaves the block untouched.  Every copy path -- through
 * hp_realloc, hp_ctx_realloc and hp_huge_realloc (the preload library's
 * and CPython's raw domain's realloc) -- keeps every byte of
 * min(old, new). */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Reallocs p (holding `old` bytes of pattern `seed`) to `size`, checks the
 * preserved prefix and the backend, refills with the same pattern. */
static void *resize(void *p, size_t old, size_t size, uint64_t seed, int backend)
{
	void *q = hp_realloc(p, size);
	assert_non_null(q);
	assert_filled(q, old < size ? old : size, seed);
	struct hp_backing b;
	assert_int_equal(hp_backing(q, &b), 0);
	assert_int_equal(b.backend, backend);
	assert_true(hp_usable_size(q) >= size);
	harness_fill(q, size, seed);
	return q;
}

static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
}

static void test_small_transitions(void **state)
{
	(void)state;
	thp_knobs();
	void *p = hp_realloc(NULL, 1000); /* realloc(NULL) is malloc */
	assert_non_null(p);
	harness_fill(p, 1000, 1);
	p = resize(p, 1000, 100 * KiB, 1, HP_BACKEND_SMALL);
	p = resize(p, 100 * KiB, 300, 1, HP_BACKEND_SMALL);
	p = resize(p, 300, 1 * MiB + 1, 1, HP_BACKEND_SMALL);
	assert_int_equal((uintptr_t)p % 64, 0);
	hp_free(p);
}

static void test_small_thp_round_trip(void **state)
{
	(void)state;
	thp_knobs();
	void *p = hp_malloc(1 * MiB);
	assert_non_null(p);
	harness_fill(p, 1 * MiB, 2);
	p = resize(p, 1 * MiB, 8 * MiB, 2, HP_BACKEND_THP);       /* small -> thp */
	p = resize(p, 8 * MiB, 100 * KiB, 2, HP_BACKEND_SMALL);   /* thp -> small */
	p = resize(p, 100 * KiB, 2 * MiB, 2, HP_BACKEND_THP);     /* at threshold */
	hp_free(p);
}

/* Grows the THP block p (old bytes, all touched) to size and checks with
 * the kernel that nothing was copied: as root, /proc/self/pagemap shows
 * the old bytes on the same physical pages; for anyone, the realloc itself
 * took no page fault (a copy writes the old bytes into fresh pages, at
 * least one fault per 2 MiB). */
static bool pfns_skipped;

static void *grow_without_copy(void *p, size_t old, size_t size, uint64_t seed)
{
	size_t pages = old / 4096;
	uint64_t *before = calloc(pages, sizeof(*before));
	uint64_t *after = calloc(pages, sizeof(*after));
	assert_non_null(before);
	assert_non_null(after);
	bool pfns = harness_pfns(p, old, before) == 0;

	long faults = harness_minor_faults();
	void *q = hp_realloc(p, size);
	faults = harness_minor_faults() - faults;
	assert_non_null(q);
	assert_true(faults < (long)(old / (2 * MiB)));
	if (pfns) {
		assert_int_equal(harness_pfns(q, old, after), 0);
		for (size_t i = 0; i < pages; i++) {
			if (before[i] == 0 || before[i] != after[i])
				fail_msg("page %zu of the block: PFN %#llx before the realloc, "
					 "%#llx after: copied", i, (unsigned long long)before[i],
					 (unsigned long long)after[i]);
		}
	} else if (!pfns_skipped) {
		/* the rest of the case runs: this is a part of it skipped */
		pfns_skipped = true;
		harness_note_skip_cap("root", "not root: /proc/self/pagemap shows no PFNs, "
				      "'no copy' judged by page faults only");
	}
	free(before);
	free(after);
	assert_filled(q, old, seed);
	harness_fill(q, size, seed);
	return q;
}

static void test_thp_grow_without_copy(void **state)
{
	(void)state;
	thp_knobs();
	void *p = hp_malloc(8 * MiB);
	assert_non_null(p);
	harness_fill(p, 8 * MiB, 3);
	uint64_t inplace = harness_stat(HP_STAT_REALLOC_INPLACE);
	uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
	p = grow_without_copy(p, 8 * MiB, 64 * MiB, 3);
	p = grow_without_copy(p, 64 * MiB, 65 * MiB + 3, 3);
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies);
	assert_int_equal(harness_stat(HP_STAT_REALLOC_INPLACE), inplace + 2);
	/* the grown block is still 2 MiB aligned and madvised */
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_true(b.kernel.thp_eligible);
	harness_check_smaps_reader(p, 65 * MiB + 3);
	hp_free(p);
}

/* A THP block that cannot grow in place (a page mapped right after it)
 * moves: its page tables go to a fresh reservation, still no copy, every
 * byte kept. */
static void test_thp_grow_moving(void **state)
{
	(void)state;
	thp_knobs();
	char *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	harness_fill(p, 4 * MiB, 8);
	void *neighbour = harness_block_neighbour(p, 4 * MiB);
	uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
	char *q = hp_realloc(p, 64 * MiB);
	assert_non_null(q);
	assert_ptr_not_equal(q, p);
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies);
	assert_filled(q, 4 * MiB, 8);
	assert_int_equal((uintptr_t)q % (2 * MiB), 0);
	harness_fill(q, 64 * MiB, 8);
	hp_free(q);
	if (neighbour)
		munmap(neighbour, 4096);
}

static void test_thp_shrink(void **state)
{
	(void)state;
	thp_knobs();
	size_t rss_before = harness_statm_rss();
	void *p = hp_malloc(64 * MiB);
	assert_non_null(p);
	harness_fill(p, 64 * MiB, 4);
	p = resize(p, 64 * MiB, 16 * MiB, 4, HP_BACKEND_THP);
	p = resize(p, 16 * MiB, 3 * MiB, 4, HP_BACKEND_THP);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	/* shrinking gives the tail back: pages and address space */
	assert_true(b.mapping_size < 16 * MiB);
	assert_true(harness_statm_rss() < rss_before + 32 * MiB);
	uintptr_t start, end;
	assert_int_equal(harness_vma(p, &start, &end), 0);
	assert_true(end - (uintptr_t)p <= 3 * MiB);
	/* what follows is the guard (hpalloc(7): at least 2 MiB, to a 2 MiB
	 * boundary), holding none of the pages it had, and nothing after it */
	struct harness_smaps guard;
	assert_int_equal(harness_smaps_range((char *)p + 3 * MiB, 3 * MiB, &guard), 0);
	assert_int_equal(guard.rss, 0);
	assert_true(harness_mapped((char *)p + 6 * MiB, 58 * MiB) == 0);
	hp_free(p);
}

/* Shrunk to an odd size, then grown back: every whole 2 MiB extent is a
 * huge page again.  The guard of the shrunk block ends on a 2 MiB
 * boundary, so making it (protect, drop) split no huge page past the
 * block's own last extent; when it ended mid-extent, the split left a page
 * table there and the grown block faulted 4 KiB pages in that extent
 * (tests/preload/threads: "a 5897444-byte block is not on huge pages"). */
static void test_thp_shrink_then_grow(void **state)
{
	(void)state;
	thp_knobs();
	harness_need_thp();
	char *p = hp_malloc(16 * MiB);
	assert_non_null(p);
	harness_fill(p, 16 * MiB, 6);
	char *q = resize(p, 16 * MiB, 5 * MiB + 12345, 6, HP_BACKEND_THP);
	assert_ptr_equal(q, p);
	q = resize(q, 5 * MiB + 12345, 15 * MiB, 6, HP_BACKEND_THP);
	struct harness_smaps range;
	assert_int_equal(harness_smaps_range(q, 14 * MiB, &range), 0);
	if (range.anon_huge < 14 * MiB)
		fail_msg("of the 14 MiB of whole extents %zu KiB are huge pages", range.anon_huge >> 10);
	hp_free(q);
}

static atomic_bool compacting;

static void *compact_memory(void *arg)
{
	(void)arg;
	while (atomic_load(&compacting)) {
		int fd = open("/proc/sys/vm/compact_memory", O_WRONLY);
		if (fd < 0 || write(fd, "1", 1) != 1)
			fail_msg("compacting: %s", strerror(errno));
		close(fd);
	}
	return NULL;
}

/* A block grown over the end of its partial last extent holds that extent
 * on a huge page, also while the kernel compacts memory.  Collapsed in
 * place (MADV_COLLAPSE), the extent stayed on 4 KiB pages whenever
 * compaction held one of its pages (EAGAIN): tests/preload/threads failed
 * so in CI, "a 5487347-byte block is not on huge pages". */
static void test_thp_grow_while_compacting(void **state)
{
	(void)state;
	thp_knobs();
	harness_need_thp();
	if (!harness_is_root())
		harness_skip_cap("root", "compacting memory (/proc/sys/vm/compact_memory) needs root");
	pthread_t t;
	atomic_store(&compacting, true);
	assert_int_equal(pthread_create(&t, NULL, compact_memory, NULL), 0);
	size_t short_of = 0;
	for (int i = 0; i < 200 && !short_of; i++) {
		char *p = hp_malloc(3 * MiB + 12345);
		assert_non_null(p);
		harness_fill(p, 3 * MiB + 12345, i);
		char *q = resize(p, 3 * MiB + 12345, 4 * MiB, i, HP_BACKEND_THP);
		struct harness_smaps range;
		assert_int_equal(harness_smaps_range(q, 4 * MiB, &range), 0);
		short_of = range.anon_huge < 4 * MiB ? 4 * MiB - range.anon_huge : 0;
		hp_free(q);
		if (short_of)
			print_message("grow %d: %zu KiB of the 4 MiB block on 4 KiB pages\n", i,
				      short_of >> 10);
	}
	atomic_store(&compacting, false);
	pthread_join(t, NULL);
	assert_int_equal(short_of, 0);
}

static void hugetlb_knobs(void)
{
	harness_pool_or_skip(2 * MiB, 48, false);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "2M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "0");
}

static void test_hugetlb_transitions(void **state)
{
	(void)state;
	hugetlb_knobs();
	void *p = hp_malloc(1 * MiB);
	assert_non_null(p);
	harness_fill(p, 1 * MiB, 5);
	p = resize(p, 1 * MiB, 4 * MiB, 5, HP_BACKEND_HUGETLB);   /* small -> hugetlb */
	p = resize(p, 4 * MiB, 4 * MiB + 10, 5, HP_BACKEND_HUGETLB); /* inside the page */
	p = resize(p, 4 * MiB + 10, 40 * MiB, 5, HP_BACKEND_HUGETLB); /* grow: copy */
	p = resize(p, 40 * MiB, 6 * MiB, 5, HP_BACKEND_HUGETLB);  /* shrink */
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.kernel.kernel_page_size, 2 * MiB);
	p = resize(p, 6 * MiB, 200 * KiB, 5, HP_BACKEND_SMALL);   /* hugetlb -> small */
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS), 0);
}

/* thp -> hugetlb through the NEP 49 context that forces hugetlb pages;
 * hugetlb -> thp by growing (mremap cannot grow hugetlb) with mode=thp. */
static void test_thp_hugetlb_transitions(void **state)
{
	(void)state;
	hugetlb_knobs();
	harness_knob("mode", "thp");
	void *ctx = hp_ctx_pagesize(2 * MiB);
	assert_non_null(ctx);
	void *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	harness_fill(p, 4 * MiB, 6);
	p = hp_ctx_realloc(ctx, p, 20 * MiB);                     /* thp -> hugetlb */
	assert_non_null(p);
	assert_filled(p, 4 * MiB, 6);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	harness_fill(p, 20 * MiB, 6);
	p = resize(p, 20 * MiB, 30 * MiB, 6, HP_BACKEND_THP);     /* hugetlb -> thp */
	hp_free(p);
}

/* ---- the copy paths, every byte ---------------------------------------------
 * A huge block that cannot be resized in place is copied: by heap.c
 * (hp_realloc, hp_ctx_realloc) or by huge_api.c (hp_huge_realloc).  Only
 * two kinds of request get there: a hugetlb block growing, or shrinking
 * below half (mremap cannot resize hugetlb), and a block reallocated
 * through a context of another NUMA policy (the copy is placed anew).
 * Each step checks every byte kept, then refills the block with the next
 * seed: a block the cache hands back still holds an older pattern, which
 * must not pass for the copy. */
enum entry { VIA_REALLOC, VIA_CTX_REALLOC, VIA_HUGE_REALLOC };
static const char *const entry_names[] = { "hp_realloc", "hp_ctx_realloc", "hp_huge_realloc" };

static void *copy_step(enum entry via, void *ctx, void *p, size_t old, size_t size,
		       uint64_t seed, int backend)
{
	uint64_t copies = harness_stat(HP_STAT_REALLOC_COPIES);
	void *q = NULL;

	switch (via) {
	case VIA_REALLOC: q = hp_realloc(p, size); break;
	case VIA_CTX_REALLOC: q = hp_ctx_realloc(ctx, p, size); break;
	case VIA_HUGE_REALLOC: assert_int_equal(hp_huge_realloc(ctx, p, size, &q), 0); break;
	}
	assert_non_null(q);
	/* the premise: this step took the copy path */
	assert_int_equal(harness_stat(HP_STAT_REALLOC_COPIES), copies + 1);
	size_t kept = old < size ? old : size, bad = harness_check(q, kept, seed);
	if (bad != SIZE_MAX)
		fail_msg("%s %zu -> %zu bytes: wrong from byte %zu of the %zu kept",
			 entry_names[via], old, size, bad, kept);
	struct hp_backing b;
	assert_int_equal(hp_backing(q, &b), 0);
	assert_int_equal(b.backend, backend);
	harness_fill(q, size, seed + 1);
	return q;
}

/* 4 -> 16 -> 4 MiB on 2 MiB pages, with the cache on: the shrink's copy
 * lands in the 4 MiB block the growth left in the cache. */
static void test_hugetlb_copies_every_byte(void **state)
{
	(void)state;
	hugetlb_knobs();
	harness_knob("cache_max", "1G");
	void *numpy = hp_ctx(HP_ORIGIN_NUMPY, 0);
	for (enum entry via = VIA_REALLOC; via <= VIA_HUGE_REALLOC; via++) {
		void *p = hp_malloc(4 * MiB);
		assert_non_null(p);
		harness_fill(p, 4 * MiB, 20 + via * 10);
		p = copy_step(via, numpy, p, 4 * MiB, 16 * MiB, 20 + via * 10, HP_BACKEND_HUGETLB);
		p = copy_step(via, numpy, p, 16 * MiB, 4 * MiB, 21 + via * 10, HP_BACKEND_HUGETLB);
		hp_free(p);
	}
	hp_cache_flush();
}

/* A THP block placed by default, grown 8 -> 16 MiB under "local" and shrunk
 * to 6 MiB under the default again: each a copy.  hp_realloc takes the
 * policy from the knob, the others from their context. */
static void test_other_policy_copies_every_byte(void **state)
{
	(void)state;
	thp_knobs();
	void *local = hp_ctx_numa(hp_ctx(HP_ORIGIN_NUMPY, 0), "local");
	if (!local)
		harness_skip("this hpalloc takes no NUMA policy (built --without-libnuma, or a "
			     "kernel without NUMA): no block has another policy to be copied under");
	void *plain = hp_ctx(HP_ORIGIN_NUMPY, 0);
	for (enum entry via = VIA_REALLOC; via <= VIA_HUGE_REALLOC; via++) {
		void *p = hp_malloc(8 * MiB);
		assert_non_null(p);
		harness_fill(p, 8 * MiB, 50 + via * 10);
		harness_knob("numa", via == VIA_REALLOC ? "local" : "default");
		p = copy_step(via, local, p, 8 * MiB, 16 * MiB, 50 + via * 10, HP_BACKEND_THP);
		harness_knob("numa", "default");
		p = copy_step(via, plain, p, 16 * MiB, 6 * MiB, 51 + via * 10, HP_BACKEND_THP);
		hp_free(p);
	}
}

static void test_failed_realloc_keeps_block(void **state)
{
	(void)state;
	thp_knobs();
	const size_t sizes[] = { 1000, 8 * MiB };
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		void *p = hp_malloc(sizes[i]);
		assert_non_null(p);
		harness_fill(p, sizes[i], 7);
		errno = 0;
		assert_null(hp_realloc(p, SIZE_MAX - 4096));
		assert_int_equal(errno, ENOMEM);
		errno = 0;
		assert_null(hp_ctx_realloc(NULL, p, (size_t)1 << 62));
		assert_int_equal(errno, ENOMEM);
		assert_filled(p, sizes[i], 7);
		hp_free(p);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_small_transitions),
		HTEST(test_small_thp_round_trip),
		HTEST(test_thp_grow_without_copy),
		HTEST(test_thp_grow_moving),
		HTEST(test_thp_shrink),
		HTEST(test_thp_shrink_then_grow),
		HTEST(test_thp_grow_while_compacting),
		HTEST(test_hugetlb_transitions),
		HTEST(test_thp_hugetlb_transitions),
		HTEST(test_hugetlb_copies_every_byte),
		HTEST(test_other_policy_copies_every_byte),
		HTEST(test_failed_realloc_keeps_block),
	};

	harness_init(argc, argv);
	return harness_run("realloc", tests, ARRAY_SIZE(tests));
}
