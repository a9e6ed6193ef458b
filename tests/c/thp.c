/* thp backend: own 2 MiB aligned mappings with MADV_HUGEPAGE that really get
 * AnonHugePages once touched, no larger than the request rounded to 4 KiB
 * (as /proc/self/maps and smaps show them), gone from the address space
 * once freed; memory handed out from libc is never madvised (numpy issue
 * 31590). */
#include "harness.h"

#include <stdio.h>
#include <string.h>

static void skip_unless_thp_possible(void)
{
	harness_need_thp();
}

/* The process's address space (VmSize in /proc/self/status), in bytes. */
static size_t vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	size_t kb = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	fclose(f);
	assert_true(kb > 0);
	return kb * KiB;
}
/* libc's own heap may grow by 132 KiB steps meanwhile */
#define VM_SLACK (256 * KiB)

static void thp_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
}

static void test_thp_block_is_huge(void **state)
{
	(void)state;
	skip_unless_thp_possible();
	thp_knobs();

	size_t size = 4 * MiB;
	unsigned char *p = hp_malloc(size);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	harness_fill(p, size, 3);

	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_THP);
	assert_true(b.usable_size >= size);
	assert_int_equal(b.kernel.kernel_page_size, 4 * KiB);
	assert_true(b.kernel.thp_eligible);
	assert_true(b.kernel.anon_huge_bytes > 0);
	assert_int_equal(b.kernel.hugetlb_bytes, 0);
	harness_check_smaps_reader(p, size);

	struct harness_smaps own;
	assert_int_equal(harness_smaps_range(p, size, &own), 0);
	assert_true(own.anon_huge >= 2 * MiB);
	assert_filled(p, size, 3);
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_mapped(p, size), 0);
}

/* "no waste beyond 4 KiB rounding", as the kernel sees it: the block's
 * mapping (/proc/self/maps) starts at the block and ends at the request
 * rounded up to 4 KiB -- followed by its guard (hpalloc(7): at least
 * 2 MiB, to a 2 MiB boundary), a mapping of its own that reads as zeros
 * and holds no memory -- the
 * process's address space (VmSize) grew by no more than that and is back
 * once the block is freed, and, every byte touched, it holds no more than
 * that (a mapping rounded up to 2 MiB would get a whole huge page for the
 * last partial extent). */
#define GUARD (2 * MiB)
static void test_thp_mapping_not_rounded_to_2m(void **state)
{
	(void)state;
	thp_knobs();

	size_t size = 4 * MiB + 100;
	size_t rounded = (size + 4 * KiB - 1) / (4 * KiB) * (4 * KiB);
	hp_free(hp_malloc(size)); /* first use of the size: libc's own records */
	hp_release_drain();
	size_t vm0 = vm_size();
	unsigned char *p = hp_malloc(size);
	assert_non_null(p);
	/* the whole address space, not only the block's VMA: a mapping rounded
	 * to 2 MiB behind a 4 KiB record would add ~2 MiB past the guard */
	size_t grew = vm_size() - vm0, span = (rounded + GUARD + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
	if (grew > span + VM_SLACK)
		fail_msg("a %zu byte block grew the address space by %zu bytes, not "
			 "%zu (4 KiB rounding and the guard)", size, grew, span);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_THP);
	assert_true(b.mapping_size >= size);
	assert_true(b.mapping_size < size + 4 * KiB);

	harness_touch(p, size);
	uintptr_t start, end;
	assert_int_equal(harness_vma(p, &start, &end), 0);
	assert_int_equal(start, (uintptr_t)p);
	assert_int_equal(end - start, rounded);
	struct harness_smaps own;
	assert_int_equal(harness_smaps_range(p, rounded, &own), 0);
	assert_int_equal(own.mappings, 1);
	assert_true(own.rss <= rounded);
	assert_true(own.anon_huge <= size / (2 * MiB) * (2 * MiB));
	/* the guard: a mapping of its own, read as zeros, holding no memory */
	uintptr_t gstart, gend;
	assert_int_equal(harness_vma(p + rounded, &gstart, &gend), 0);
	assert_int_equal(gstart, (uintptr_t)p + rounded);
	assert_int_equal(gend, (uintptr_t)p + span);
	for (size_t off = 0; off < GUARD; off += 4 * KiB)
		assert_int_equal(((volatile unsigned char *)p)[rounded + off], 0);
	assert_int_equal(harness_smaps_range(p + rounded, GUARD, &own), 0);
	assert_int_equal(own.rss, 0);
	hp_free(p);
	hp_release_drain();
	assert_int_equal(harness_mapped(p, span), 0);
	if (vm_size() > vm0 + VM_SLACK)
		fail_msg("%zu bytes of address space left after free and drain",
			 vm_size() - vm0);
}

/* Blocks below the threshold come from libc and must not be madvised. */
static void test_small_block_not_madvised(void **state)
{
	(void)state;
	thp_knobs();
	harness_knob("threshold", "64M");

	size_t size = 8 * MiB;
	void *p = hp_malloc(size);
	assert_non_null(p);
	harness_touch(p, size);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_SMALL);
	assert_int_equal(b.mapping_size, 0);
	assert_false(b.kernel.thp_eligible);
	harness_check_smaps_reader(p, size);
	hp_free(p);
}

/* A THP block reused from the cache keeps its huge pages. */
static void test_thp_cached_block_stays_huge(void **state)
{
	(void)state;
	skip_unless_thp_possible();
	thp_knobs();
	harness_knob("cache_max", "256M");
	harness_knob("cache_decay_ms", "60000");

	void *p = hp_malloc(16 * MiB);
	assert_non_null(p);
	harness_touch(p, 16 * MiB);
	hp_free(p);
	uint64_t hits = harness_stat(HP_STAT_CACHE_HITS);
	p = hp_malloc(16 * MiB);
	assert_non_null(p);
	assert_int_equal(harness_stat(HP_STAT_CACHE_HITS), hits + 1);
	harness_touch(p, 16 * MiB);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_THP);
	assert_true(b.kernel.anon_huge_bytes > 0);
	assert_true(b.kernel.thp_eligible);
	struct harness_smaps own;
	assert_int_equal(harness_smaps_range(p, 16 * MiB, &own), 0);
	assert_true(own.anon_huge >= 8 * MiB);
	hp_free(p);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_mapped(p, 16 * MiB), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_thp_block_is_huge),
		HTEST(test_thp_mapping_not_rounded_to_2m),
		HTEST(test_small_block_not_madvised),
		HTEST(test_thp_cached_block_stays_huge),
	};

	harness_init(argc, argv);
	return harness_run("thp", tests, ARRAY_SIZE(tests));
}
