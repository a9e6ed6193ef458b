/* What the kernel says about this process and machine, read independently
 * of the library: smaps checked against hp_kernel_backing, statm, maps,
 * pagemap, the thread's faults, the THP mode, whether io_uring can be set
 * up (and the skips of a case that needs THP or io_uring); see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

void harness_check_smaps_reader(const void *addr, size_t len)
{
	struct hp_kernel_backing lib;
	struct harness_smaps own;

	assert_int_equal(hp_kernel_backing(addr, len, &lib), 0);
	assert_int_equal(harness_smaps_range(addr, len, &own), 0);
	assert_true(own.mappings > 0);
	assert_int_equal(lib.kernel_page_size, own.kernel_page_size);
	assert_int_equal(lib.rss_bytes, own.rss);
	assert_int_equal(lib.anon_huge_bytes, own.anon_huge + own.shmem_pmd);
	assert_int_equal(lib.hugetlb_bytes, own.hugetlb);
	assert_int_equal(lib.huge_bytes, own.huge);
	assert_int_equal(!!lib.thp_eligible, own.thp_eligible);
}

size_t harness_statm_rss(void)
{
	char buf[128];
	unsigned long size, resident;

	if (harness_read_text("/proc/self/statm", buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%lu %lu", &size, &resident) != 2)
		return 0;
	return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Calls fn(start, end, arg) for every /proc/self/maps entry until it
 * returns non-zero; -1 if the file cannot be read. */
static int each_mapping(int (*fn)(uintptr_t, uintptr_t, void *), void *arg)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	unsigned long start, end;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &start, &end) == 2 && fn(start, end, arg))
			break;
	fclose(f);
	return 0;
}

struct overlap {
	uintptr_t lo, hi;
	size_t bytes;
};

static int add_overlap(uintptr_t start, uintptr_t end, void *arg)
{
	struct overlap *o = arg;
	uintptr_t a = start > o->lo ? start : o->lo, b = end < o->hi ? end : o->hi;

	if (a < b)
		o->bytes += b - a;
	return 0;
}

size_t harness_mapped(const void *addr, size_t len)
{
	struct overlap o = { (uintptr_t)addr, (uintptr_t)addr + len, 0 };

	if (each_mapping(add_overlap, &o) != 0)
		return SIZE_MAX;
	return o.bytes;
}

size_t harness_still_mapped(void *const *blocks, size_t n, size_t size)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += harness_mapped(blocks[i], size);
	return total;
}

struct vma_find {
	uintptr_t addr, start, end;
	bool found;
};

static int find_vma(uintptr_t start, uintptr_t end, void *arg)
{
	struct vma_find *v = arg;

	if (start <= v->addr && v->addr < end) {
		v->start = start;
		v->end = end;
		v->found = true;
		return 1;
	}
	return 0;
}

int harness_vma(const void *addr, uintptr_t *start, uintptr_t *end)
{
	struct vma_find v = { .addr = (uintptr_t)addr };

	if (each_mapping(find_vma, &v) != 0 || !v.found)
		return -1;
	*start = v.start;
	*end = v.end;
	return 0;
}

void *harness_block_neighbour(const void *p, size_t len)
{
	uintptr_t start, end = (uintptr_t)p + len;

	if (harness_vma((const char *)p + len, &start, &end) != 0)
		end = (uintptr_t)p + len; /* nothing right after the block */
	void *page = mmap((void *)end, 4096, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (page == MAP_FAILED && errno == EEXIST)
		return NULL;
	if (page == MAP_FAILED)
		fail_msg("mmap of a page at %#lx: %s", (unsigned long)end, strerror(errno));
	if (page != (void *)end) /* a kernel before 4.17 takes the address as a hint */
		fail_msg("mmap placed the page at %p, not at %#lx", page, (unsigned long)end);
	return page;
}

struct huge_vmas {
	int count;
	size_t bytes;
};

static int add_huge_vma(uintptr_t start, uintptr_t end, const struct harness_smaps *m, void *arg)
{
	struct huge_vmas *h = arg;

	if (m->kernel_page_size > 4 * KiB || m->thp_eligible) {
		h->count++;
		h->bytes += end - start;
	}
	return 0;
}

int harness_huge_vmas(size_t *bytes)
{
	struct huge_vmas h = {0};

	if (harness_smaps_each(add_huge_vma, &h) != 0)
		fail_msg("harness: cannot read /proc/self/smaps");
	*bytes = h.bytes;
	return h.count;
}

int harness_pfns(const void *addr, size_t len, uint64_t *pfn)
{
	size_t pages = len / 4096;
	off_t off = (off_t)((uintptr_t)addr / 4096 * sizeof(uint64_t));

	if (!harness_is_root())
		return -1;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail_msg("harness: root cannot open /proc/self/pagemap: %s", strerror(errno));
	ssize_t want = (ssize_t)(pages * sizeof(uint64_t));
	ssize_t got = pread(fd, pfn, (size_t)want, off);
	close(fd);
	if (got != want)
		fail_msg("harness: short read of /proc/self/pagemap");
	for (size_t i = 0; i < pages; i++) /* bit 63 present, bits 0-54 PFN */
		pfn[i] = (pfn[i] >> 63) ? pfn[i] & ((1ull << 55) - 1) : 0;
	return 0;
}

long harness_minor_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_minflt;
}

const char *harness_thp_mode(void)
{
	static const char *const modes[] = { "always", "madvise", "never" };
	char buf[128], want[16];

	if (harness_read_text("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof(buf)) <= 0)
		return "never";
	for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
		snprintf(want, sizeof(want), "[%s]", modes[i]);
		if (strstr(buf, want))
			return modes[i];
	}
	return "never";
}

bool harness_uring_usable(char *why, size_t why_len)
{
	long disabled = harness_read_long("/proc/sys/kernel/io_uring_disabled");
	struct io_uring_params params;

	if (disabled == 2) {
		snprintf(why, why_len, "io_uring disabled by kernel.io_uring_disabled=2");
		return false;
	}
	memset(&params, 0, sizeof(params));
	long fd = syscall(__NR_io_uring_setup, 4, &params);
	if (fd < 0) {
		snprintf(why, why_len, "io_uring_setup failed: %s (seccomp or sysctl)",
			 strerror(errno));
		return false;
	}
	close((int)fd);
	return true;
}

void harness_need_uring(void)
{
#ifndef HAVE_LIBURING
	harness_skip_cap("uring", "built --without-liburing: releases are always synchronous");
#else
	char why[256];

	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip_cap("uring", "%s", why);
#endif
}

void harness_need_thp(void)
{
	if (strcmp(harness_thp_mode(), "never") == 0)
		harness_skip_cap("thp", "transparent_hugepage/enabled is [never]: no THP");
}

void harness_need_collapse(void)
{
	struct utsname u;
	int major = 0, minor = 0;
	harness_need_thp();
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2 ||
	    major < 6 || (major == 6 && minor < 1))
		harness_skip("no MADV_COLLAPSE before Linux 6.1: populate_pages keeps blocks on huge pages");
}

size_t harness_anon_huge(const void *p, size_t len)
{
	struct harness_smaps sm;
	return harness_smaps_range(p, len, &sm) == 0 ? sm.anon_huge : 0;
}

bool harness_huge_within(const void *p, size_t len, unsigned ms)
{
	uint64_t end = harness_now_ms() + ms;
	while (harness_anon_huge(p, len) < len - 2 * MiB && harness_now_ms() < end)
		harness_sleep_ms(50);
	return harness_anon_huge(p, len) >= len - 2 * MiB;
}
