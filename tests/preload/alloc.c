/* Every allocation function of an unmodified program under the preload
 * library: results as glibc would give them, large blocks on huge pages,
 * small ones not, as /proc/self/smaps says; a realloc that must copy keeps
 * every byte.  Knobs: mode=auto (THP without a pool), threshold 1M (the
 * default), cache on.  Last, with a 2 MiB pool (root), malloc(64 MiB)
 * lands on hugetlb pages, and reallocs there copy. */
#include "common.h"

#include <errno.h>
#include <malloc.h>
#include <string.h>
#include <unistd.h>

#define BIG (64 * MiB)
/* sizes no allocation can have, hidden from the compiler's own checks */
static volatile size_t half_max = SIZE_MAX / 2, near_max = SIZE_MAX - 4096;

static void huge_block(void *p, size_t size, const char *what)
{
	CHECK(p != NULL, "%s", what);
	CHECK(((uintptr_t)p & (2 * MiB - 1)) == 0, "%s: %p is not 2 MiB aligned", what, p);
	CHECK(hpalloc_owns(p), "%s: not an hpalloc block", what);
	CHECK(malloc_usable_size(p) >= size, "%s: usable %zu < %zu", what, malloc_usable_size(p), size);
	CHECK(huge_bytes(p, size) >= (size & ~(2 * MiB - 1)), "%s: %zu of %zu bytes on huge pages",
	      what, huge_bytes(p, size), size);
}

static void small_block(void *p, size_t size, const char *what)
{
	CHECK(p != NULL, "%s", what);
	CHECK(!hpalloc_owns(p), "%s: hpalloc's, but it is small", what);
	CHECK(malloc_usable_size(p) >= size, "%s: usable %zu < %zu", what, malloc_usable_size(p), size);
	memset(p, 0x5a, size);
	CHECK(on_small_pages(p), "%s: on huge pages", what);
}

static void test_malloc_calloc(void)
{
	errno = 4321;
	char *p = malloc(BIG);
	CHECK(errno == 4321, "malloc changed errno to %d", errno);
	huge_block(p, BIG, "malloc(64 MiB)");
	fill(p, BIG, 1);
	CHECK(check(p, BIG, 1), "contents");
	CHECK(hpalloc_stat("preload_huge_bytes") >= BIG, "hpalloc counts %llu preload bytes",
	      (unsigned long long)hpalloc_stat("preload_huge_bytes"));
	free(p);
	/* the cache gives the same block back; calloc must still zero it */
	char *z = calloc(BIG / 8, 8);
	huge_block(z, BIG, "calloc(8M, 8)");
	CHECK(all_zero(z, BIG), "calloc of a reused block is not zeroed");
	free(z);
	char *s = malloc(100), *c = calloc(10, 10);
	small_block(s, 100, "malloc(100)");
	small_block(c, 100, "calloc(10, 10)");
	free(s);
	free(c);
	errno = 0;
	CHECK(calloc(half_max, 4) == NULL && errno == ENOMEM, "calloc overflow: errno %d", errno);
	CHECK(malloc(near_max) == NULL && errno == ENOMEM, "malloc(huge): errno %d", errno);
	free(NULL);
	CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL)");
}

static void test_aligned(void)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 2 * MiB, BIG) == 0, "posix_memalign(2 MiB, 64 MiB)");
	huge_block(p, BIG, "posix_memalign(2 MiB)");
	free(p);
	CHECK(posix_memalign(&p, 64, 3 * MiB) == 0, "posix_memalign(64, 3 MiB)");
	huge_block(p, 3 * MiB, "posix_memalign(64)");
	free(p);
	/* beyond what the huge path aligns: glibc's */
	CHECK(posix_memalign(&p, 4 * MiB, 8 * MiB) == 0 && ((uintptr_t)p & (4 * MiB - 1)) == 0,
	      "posix_memalign(4 MiB)");
	CHECK(!hpalloc_owns(p), "4 MiB alignment went to hpalloc");
	free(p);
	void *small = NULL;
	CHECK(posix_memalign(&small, 2 * MiB, 4096) == 0, "posix_memalign(2 MiB, 4096)");
	CHECK(((uintptr_t)small & (2 * MiB - 1)) == 0 && !hpalloc_owns(small),
	      "small 2 MiB aligned block is glibc's");
	free(small); /* a 2 MiB aligned pointer hpalloc does not own: glibc's free */
	void *keep = (void *)1;
	CHECK(posix_memalign(&keep, 3, 100) == EINVAL && keep == (void *)1, "alignment 3");
	CHECK(posix_memalign(&keep, 0, 100) == EINVAL, "alignment 0");

	void *a = aligned_alloc(4096, BIG);
	huge_block(a, BIG, "aligned_alloc");
	free(a);
	void *m = memalign(2 * MiB, 5 * MiB);
	huge_block(m, 5 * MiB, "memalign");
	free(m);
	void *v = valloc(BIG);
	huge_block(v, BIG, "valloc");
	free(v);
	void *pv = pvalloc(BIG - 100);
	huge_block(pv, BIG, "pvalloc");
	free(pv);
	void *sv = valloc(5000), *spv = pvalloc(100);
	CHECK(((uintptr_t)sv & 4095) == 0 && ((uintptr_t)spv & 4095) == 0, "page alignment");
	CHECK(malloc_usable_size(spv) >= 4096, "pvalloc rounds up to a page");
	small_block(sv, 5000, "valloc(5000)");
	free(sv);
	free(spv);
	void *sa = aligned_alloc(256, 1000);
	CHECK(sa && ((uintptr_t)sa & 255) == 0, "aligned_alloc(256, 1000)");
	small_block(sa, 1000, "aligned_alloc(256)");
	free(sa);
}

static void test_realloc(void)
{
	char *p = malloc(1000);
	fill(p, 1000, 2);
	char *q = after_realloc(realloc(p, 16 * MiB)); /* small -> huge: moved, contents kept */
	huge_block(q, 16 * MiB, "realloc 1000 -> 16 MiB");
	CHECK(check(q, 1000, 2), "contents after small -> huge");
	fill(q, 16 * MiB, 3);
	char *r = after_realloc(realloc(q, 200 * MiB)); /* huge -> bigger huge (in place for THP) */
	huge_block(r, 200 * MiB, "realloc 16 -> 200 MiB");
	CHECK(check(r, 16 * MiB, 3), "contents after growing");
	char *s = after_realloc(realloc(r, 3000)); /* huge -> small: back to glibc */
	CHECK(check(s, 3000, 3), "contents after huge -> small");
	small_block(s, 3000, "realloc 200 MiB -> 3000");
	fill(s, 3000, 6);
	char *t = after_realloc(reallocarray(s, 4 * MiB, 4)); /* small -> huge again */
	huge_block(t, 16 * MiB, "reallocarray(4M, 4)");
	CHECK(check(t, 3000, 6), "contents after reallocarray small -> huge");
	errno = 0;
	CHECK(reallocarray(t, half_max, 4) == NULL && errno == ENOMEM, "reallocarray overflow");
	CHECK(hpalloc_owns(t), "overflowing reallocarray freed the block");
	CHECK(realloc(t, 0) == NULL, "realloc(huge, 0) frees and returns NULL");
	CHECK(!hpalloc_owns(t), "realloc(huge, 0) did not free");
	char *n = after_realloc(realloc(NULL, BIG));
	huge_block(n, BIG, "realloc(NULL, 64 MiB)");
	free(n);
}

/* realloc of a huge block that cannot be resized in place copies it
 * (hp_huge_realloc): a hugetlb block growing or shrinking below half, a
 * block resized under another NUMA policy.  Every byte of min(old, new)
 * must be kept; the block is refilled with the next seed after each step,
 * so an older fill of a block the cache hands back cannot pass. */
static char *copied(char *p, size_t old, size_t size, uint64_t seed, const char *what)
{
	uint64_t copies = hpalloc_stat("realloc_copies");
	char *q = after_realloc(realloc(p, size));
	CHECK(q != NULL, "%s", what);
	CHECK(hpalloc_stat("realloc_copies") == copies + 1, "%s: no copy, the case tests nothing", what);
	size_t kept = old < size ? old : size, bad = first_wrong(q, kept, seed);
	CHECK(bad == SIZE_MAX, "%s: wrong from byte %zu of the %zu kept", what, bad, kept);
	huge_block(q, size, what);
	fill(q, size, seed + 1);
	return q;
}

static void test_realloc_other_policy(void)
{
	char *p = malloc(8 * MiB);
	huge_block(p, 8 * MiB, "malloc(8 MiB)");
	fill(p, 8 * MiB, 4);
	if (hpalloc_knob("numa", "local") != 0) {
		preload_skip_part("other", "preload/alloc: realloc under another NUMA policy",
				  "this hpalloc takes no policy (built --without-libnuma, or a "
				  "kernel without NUMA)");
		free(p);
		return;
	}
	p = copied(p, 8 * MiB, 16 * MiB, 4, "realloc 8 -> 16 MiB under numa=local");
	CHECK(hpalloc_knob("numa", "default") == 0, "numa=default");
	p = copied(p, 16 * MiB, 6 * MiB, 5, "realloc 16 -> 6 MiB under numa=default");
	free(p);
}

static void test_hugetlb(void)
{
	char why[256];
	if (!pool_reserve_2m(80, why, sizeof(why))) {
		preload_skip_part("hugetlb", "preload/alloc: hugetlb blocks", why);
		return;
	}
	/* mode=auto prefers a pool that can hold the block and as many pages
	 * again for fork's copies (33 + 33 of 80); the cache may still hold
	 * THP blocks of that size, so ask for a new size */
	char *p = malloc(BIG + 2 * MiB);
	huge_block(p, BIG + 2 * MiB, "malloc with a pool");
	struct harness_smaps r;
	CHECK(harness_smaps_range(p, BIG, &r) == 0 && r.kernel_page_size == 2 * MiB && r.hugetlb >= BIG,
	      "not on hugetlb: page %zu, hugetlb %zu", r.kernel_page_size, r.hugetlb);
	fill(p, BIG, 9);
	CHECK(check(p, BIG, 9), "hugetlb contents");
	free(p);

	/* 4 -> 16 -> 4 MiB on hugetlb pages: copies (mremap cannot resize
	 * them), the shrink's into the 4 MiB block the growth left in the
	 * cache.  Nothing cached before, so that every block is fresh from
	 * the pool or that block. */
	hpalloc_cache_flush();
	char *q = malloc(4 * MiB);
	CHECK(q && harness_smaps_range(q, 4 * MiB, &r) == 0 && r.kernel_page_size == 2 * MiB,
	      "malloc(4 MiB) not on hugetlb pages");
	fill(q, 4 * MiB, 10);
	q = copied(q, 4 * MiB, 16 * MiB, 10, "realloc 4 -> 16 MiB on hugetlb pages");
	CHECK(harness_smaps_range(q, 16 * MiB, &r) == 0 && r.kernel_page_size == 2 * MiB,
	      "realloc 4 -> 16 MiB left hugetlb pages");
	q = copied(q, 16 * MiB, 4 * MiB, 11, "realloc 16 -> 4 MiB on hugetlb pages");
	CHECK(harness_smaps_range(q, 4 * MiB, &r) == 0 && r.kernel_page_size == 2 * MiB,
	      "realloc 16 -> 4 MiB left hugetlb pages");
	free(q);
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=auto", NULL};
	preload_test_init(argc, argv, knobs, NULL);
	test_malloc_calloc();
	test_aligned();
	test_realloc();
	test_realloc_other_policy();
	CHECK(hpalloc_stat("preload_huge_bytes") == 0, "live preload bytes left: %llu",
	      (unsigned long long)hpalloc_stat("preload_huge_bytes"));
	test_hugetlb();
	preload_pass("preload/alloc");
}
