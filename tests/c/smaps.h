/* The C tests' one reader of /proc/self/smaps, independent of the library
 * (lib/core/smaps.c) and of cmocka: linked into tests/c/libharness.la, the
 * preload tests' programs (which cannot link the harness) and the soak
 * workload.
 *
 * "Huge" means here what it means in tests/python/hp_memory.py and in
 * lib/core/smaps.c: the bytes of a mapping on huge pages are
 *     AnonHugePages + ShmemPmdMapped     (THP: anonymous, or the shmem of shared blocks)
 *   + Private_Hugetlb + Shared_Hugetlb   (hugetlb pages, private or shared).
 * FilePmdMapped (THP page cache of regular files) is not counted: hpalloc
 * never maps such files. */
#ifndef HP_TESTS_SMAPS_H
#define HP_TESTS_SMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct harness_smaps {
	int mappings;            /* smaps entries overlapping the range */
	size_t kernel_page_size; /* of the first one                     */
	size_t rss;
	size_t anon_huge;        /* AnonHugePages                        */
	size_t shmem_pmd;        /* ShmemPmdMapped                       */
	size_t hugetlb;          /* Private_Hugetlb + Shared_Hugetlb     */
	size_t huge;             /* anon_huge + shmem_pmd + hugetlb      */
	size_t lazyfree;         /* LazyFree: MADV_FREE'd, the kernel's to take */
	bool thp_eligible;       /* "hg" in VmFlags of the first one     */
	bool thp_refused;        /* "nh" in VmFlags of the first one     */
};

/* Calls fn(start, end, fields, arg) for every mapping of /proc/self/smaps
 * (fields->mappings is 1) until fn returns non-zero.  0, or -1 if the file
 * cannot be read. */
int harness_smaps_each(int (*fn)(uintptr_t start, uintptr_t end,
				 const struct harness_smaps *fields, void *arg),
		       void *arg);
/* The mappings overlapping [addr, addr+len), summed.  0, or -1. */
int harness_smaps_range(const void *addr, size_t len, struct harness_smaps *out);
/* harness_smaps_range() once every whole 2 MiB extent of the range is huge
 * in one mapping, or ms have passed: hpalloc may fault a fresh block at
 * 4 KiB first, its VMA split where its worker sampled or collapsed, and
 * collapse it behind the program (populate_pages=measured): what a test
 * reads then stays what it is.  0, or -1. */
#define HARNESS_SETTLE_MS 10000
int harness_smaps_settled(const void *addr, size_t len, unsigned ms, struct harness_smaps *out);
/* Writes the smaps entry of the mapping holding addr, as the kernel wrote
 * it, to fd: what a program dying of a signal says about where.  Only
 * open/read/write and a static buffer (no malloc: the crash may be inside
 * it), so one caller at a time. */
void harness_smaps_print(uintptr_t addr, int fd);

#endif
