/* bench/first_touch: one process's first touch of a fresh mapping, the
 * page size chosen by the caller, so that bench/first_touch.py can say
 * what a cold first touch costs per page size on this machine, apart from
 * any allocator (issue 35).
 *
 *   first_touch 4k|thp|hugetlb MIB
 *
 * 4k: MADV_NOHUGEPAGE; thp: MADV_HUGEPAGE on a 2 MiB-aligned range;
 * hugetlb: MAP_HUGETLB, 2 MiB pages from the pool.  One byte written per
 * 4 KiB page; prints "seconds minor_faults" of the writes on stdout.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define TWO_MIB ((size_t)2 << 20)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* The writes the row measures, and nothing else: in a sanitizer build
 * (the tests run this program there too) ASan's check of each write would
 * fault its shadow pages into the count. */
__attribute__((no_sanitize_address)) static void touch(volatile char *p, size_t len)
{
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: first_touch 4k|thp|hugetlb MIB\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return usage();
	const char *mode = argv[1];
	char *end;
	unsigned long mib = strtoul(argv[2], &end, 10);
	if (*end || mib == 0 || mib % 2)
		return usage();
	size_t len = (size_t)mib << 20;
	int huge = !strcmp(mode, "hugetlb");
	if (!huge && strcmp(mode, "4k") && strcmp(mode, "thp"))
		return usage();

	/* THP needs 2 MiB-aligned ranges: map one page more and align.  A
	 * hugetlb mapping reserves its pages (no MAP_NORESERVE): a pool too
	 * small fails here, not with a SIGBUS in the loop. */
	size_t maplen = huge ? len : len + TWO_MIB;
	char *map = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | (huge ? MAP_HUGETLB : MAP_NORESERVE), -1, 0);
	if (map == MAP_FAILED) {
		perror("first_touch: mmap");
		return 1;
	}
	char *p = huge ? map : (char *)(((uintptr_t)map + TWO_MIB - 1) & ~(uintptr_t)(TWO_MIB - 1));
	if (!huge && madvise(p, len, !strcmp(mode, "thp") ? MADV_HUGEPAGE : MADV_NOHUGEPAGE)) {
		perror("first_touch: madvise");
		return 1;
	}
	long faults = minor_faults();
	double start = now();
	touch(p, len);
	double took = now() - start;
	printf("%.4f %ld\n", took, minor_faults() - faults);
	return 0;
}
