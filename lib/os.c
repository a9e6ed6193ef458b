/* Talking to the kernel about memory: mappings hpalloc owns, THP alignment,
 * hugetlb page sizes (from sysfs), pool levels (whole and per NUMA node)
 * and the mbind of a mapping (libnuma's wrapper).
 *
 * Not libhugetlbfs: linked in, its constructor runs in every program using
 * hpalloc (every program under libhpalloc-preload.so) and honours HUGETLB_*
 * variables, in secure execution too, where hpalloc honours none. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* THP mappings are followed by one PROT_NONE guard page: it keeps the
 * kernel from merging neighbouring blocks into one VMA (so smaps reports
 * each block on its own) and turns an overrun into a fault. */
#define GUARD HP_THP_GUARD

#define MAX_PAGESIZES 4
static size_t pagesizes[MAX_PAGESIZES]; /* hugetlb sizes, descending */
static int npagesizes;

size_t os_hugepages_dir_size(const char *name)
{
	unsigned long long kb;
	char tail[4];

	if (sscanf(name, "hugepages-%llu%3s", &kb, tail) != 2 || strcmp(tail, "kB") != 0 ||
	    kb == 0 || kb > SIZE_MAX >> 10)
		return 0;
	return (size_t)kb << 10;
}

/* Page sizes the kernel offers: the hugepages-<N>kB directories of
 * /sys/kernel/mm/hugepages.  Read with getdents64 into a buffer on the
 * stack, not opendir: this runs inside hp_ctx() and the allocation path,
 * where a malloc could reach an interposer (libhpalloc-preload.so) and
 * through it this very pthread_once. */
static void find_pagesizes(void)
{
	char buf[4096] __attribute__((aligned(8)));
	HP_ERRNO_SAVE;
	int fd = open("/sys/kernel/mm/hugepages", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ssize_t n;

	npagesizes = 0;
	while (fd >= 0 && (n = getdents64(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			size_t size = os_hugepages_dir_size(e->d_name);
			off += e->d_reclen;
			if (size && npagesizes < MAX_PAGESIZES)
				pagesizes[npagesizes++] = size;
		}
	if (fd >= 0)
		close(fd);
	for (int i = 1; i < npagesizes; i++) /* tiny insertion sort, descending */
		for (int j = i; j > 0 && pagesizes[j] > pagesizes[j - 1]; j--) {
			size_t t = pagesizes[j];
			pagesizes[j] = pagesizes[j - 1];
			pagesizes[j - 1] = t;
		}
	HP_ERRNO_RESTORE;
}

static pthread_once_t pagesizes_once = PTHREAD_ONCE_INIT;

bool os_pagesize_supported(size_t pagesize)
{
	pthread_once(&pagesizes_once, find_pagesizes);
	for (int i = 0; i < npagesizes; i++)
		if (pagesizes[i] == pagesize)
			return true;
	return false;
}

static long long read_counter(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* the kernel's counters are unsigned and can transiently wrap (a
	 * reserve count of -4 reads 18446744073709551612): keep it modular */
	return (long long)strtoull(buf, NULL, 10);
}

/* Pages an mmap without MAP_NORESERVE can still reserve: free - reserved.
 * Read fresh each time: this is only on the cache-miss path, next to mmap. */
long os_pool_available(size_t pagesize)
{
	char path[128];
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/free_hugepages", pagesize >> 10);
	long long free_pages = read_counter(path);
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/resv_hugepages", pagesize >> 10);
	long long resv = read_counter(path);
	if (free_pages < 0 || resv < 0) /* unknown, not "everything free" */
		return -1;
	long long avail = (long long)((unsigned long long)free_pages - (unsigned long long)resv);
	return avail > 0 ? (long)avail : 0;
}

/* Where os_pool_counter() reads: /sys, or a staged copy (tests).  Set
 * before any allocation, never while other threads read it. */
static const char *pool_sysfs = "/sys";

void os_pool_sysfs_root(const char *root)
{
	pool_sysfs = root ? root : "/sys";
}

long long os_pool_counter(int node, size_t pagesize, const char *file)
{
	char path[256];
	if (node < 0)
		snprintf(path, sizeof(path), "%s/kernel/mm/hugepages/hugepages-%zukB/%s",
			 pool_sysfs, pagesize >> 10, file);
	else
		snprintf(path, sizeof(path), "%s/devices/system/node/node%d/hugepages/hugepages-%zukB/%s",
			 pool_sysfs, node, pagesize >> 10, file);
	return read_counter(path);
}

/* The policy decides which nodes' pages count (numa.c): for the kernel's
 * own policy that is the whole pool, as os_pool_available() reads it. */
static bool pool_can_serve(size_t pagesize, size_t size, hp_numa_t p)
{
	long avail = p == HP_NUMA_DEFAULT ? os_pool_available(pagesize) : numa_pool_available(p, pagesize);
	return avail > 0 && (size_t)avail >= hp_align_up(size, pagesize) / pagesize;
}

/* Page size for a hugetlb block: the largest offered size not above the
 * knob (0 = auto) that rounds the request up by at most 1/8, else the
 * smallest offered size -- so pagesize=1G never spends a 1 GiB page on a
 * 1 MiB array.  With the knob at auto, a larger size also needs a pool
 * that can hold the block right now.  0 if the kernel offers none. */
size_t os_choose_pagesize(size_t knob, size_t size, hp_numa_t p)
{
	pthread_once(&pagesizes_once, find_pagesizes);
	for (int i = 0; i < npagesizes; i++) {
		size_t ps = pagesizes[i];
		bool smallest = i == npagesizes - 1;
		if (knob && ps > knob)
			continue;
		if (!smallest && hp_align_up(size, ps) - size > size / 8)
			continue;
		if (!knob && !smallest && !pool_can_serve(ps, size, p))
			continue;
		return ps;
	}
	return 0;
}

/* Pages of each hugetlb page size (index: its log2) in this process's
 * private mappings: hpalloc's blocks, live, cached or on their way out. */
static _Atomic size_t private_pages[64];

static void count_private(const struct hp_map *m, bool mapped)
{
	size_t pages = m->len / m->pagesize;
	if (mapped)
		atomic_fetch_add_explicit(&private_pages[prim_page_shift(m->pagesize)], pages, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&private_pages[prim_page_shift(m->pagesize)], pages, memory_order_relaxed);
}

/* Room for fork's copies.  A MAP_PRIVATE hugetlb page that a forked child
 * shares is copied on the first write by either side, and the copy needs a
 * free pool page: the kernel's reservation at mmap covers first touches
 * only.  With none free, a child that writes dies of SIGBUS, and a parent
 * that writes takes the page away from its children (unmap_ref_private),
 * which die of SIGBUS at their next touch -- a fork-worker reading its
 * parent's array while the parent writes it.  glibc's memory is copied
 * from anywhere in RAM.  So mode=auto leaves as many pages free as this
 * process's private hugetlb blocks hold: one copy of each, enough for the
 * parent (or one child) to rewrite every block however many children it
 * forked at once.  Shared blocks are never copied.  Other processes may
 * still take the free pages, and children forked one after another while
 * the parent writes need a copy each: hp_malloc(3) says what holds. */
static bool pool_keeps_room(size_t pagesize, size_t size, hp_numa_t p, bool cow)
{
	if (!pagesize)
		return false;
	size_t pages = hp_align_up(size, pagesize) / pagesize;
	size_t need = pages + atomic_load_explicit(&private_pages[prim_page_shift(pagesize)], memory_order_relaxed) +
		      (cow ? pages : 0);
	long avail = p == HP_NUMA_DEFAULT ? os_pool_available(pagesize) : numa_pool_available(p, pagesize);
	return avail > 0 && (size_t)avail >= need;
}

bool os_pool_ready(size_t pagesize, size_t size, hp_numa_t p)
{
	return pool_keeps_room(pagesize, size, p, false);
}

bool os_pool_ready_private(size_t pagesize, size_t size, hp_numa_t p)
{
	return pool_keeps_room(pagesize, size, p, true);
}

/* ---- mappings ----------------------------------------------------------------- */

/* len bytes and the guard after them, private and anonymous, starting on
 * a 2 MiB boundary. */
static void *map_aligned(size_t len, int prot, int extra)
{
	return prim_map_aligned(len + GUARD, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1);
}

int os_map_thp(size_t size, struct hp_map *out)
{
	size_t len = hp_align_up(size, HP_BASE_PAGE);
	if (len < size || len > SIZE_MAX / 2) {
		errno = ENOMEM;
		return -1;
	}
	char *p = map_aligned(len, PROT_READ | PROT_WRITE, 0);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	/* only ever on our own mapping: never on memory libc may reuse.  The
	 * guard gets the same advice so that, opened again to grow, it merges
	 * back into the block's VMA (mremap needs one VMA). */
	prim_advise(p, len + GUARD, MADV_HUGEPAGE);
	prim_protect(p + len, GUARD, PROT_NONE);
	*out = (struct hp_map){.addr = p, .len = len, .pagesize = HP_BASE_PAGE, .backend = HP_BACKEND_THP};
	hp_log(2, "thp map %p %zu", (void *)p, len);
	return 0;
}

/* Without MAP_NORESERVE the pool pages are reserved now: a short pool is
 * ENOMEM here instead of a SIGBUS at first touch. */
int os_map_hugetlb(size_t size, size_t pagesize, struct hp_map *out)
{
	if (!pagesize || !os_pagesize_supported(pagesize)) {
		errno = EINVAL;
		return -1;
	}
	size_t len = hp_align_up(size, pagesize);
	if (len < size || len > SIZE_MAX / 2) {
		errno = ENOMEM;
		return -1;
	}
	void *p = prim_map_hugetlb(len, pagesize);
	if (!p) {
		hp_log(2, "hugetlb map of %zu with %zu pages failed: %s", len, pagesize, strerror(errno));
		errno = ENOMEM;
		return -1;
	}
	*out = (struct hp_map){.addr = p, .len = len, .pagesize = pagesize, .backend = HP_BACKEND_HUGETLB};
	count_private(out, true);
	hp_log(2, "hugetlb map %p %zu (page %zu)", p, len, pagesize);
	return 0;
}

static size_t map_span(const struct hp_map *m)
{
	return m->len + (m->backend == HP_BACKEND_THP ? GUARD : 0);
}

int os_unmap(const struct hp_map *m)
{
	int rc = prim_unmap(m->addr, map_span(m));
	if (rc == 0 && m->backend == HP_BACKEND_HUGETLB)
		count_private(m, false);
	return rc;
}

/* The guard takes the policy too: with another policy than the block's it
 * would stay a VMA of its own when opened, and growing in place (one VMA)
 * would fail. */
int os_mbind(const struct hp_map *m, int mode, const unsigned long *nodes, unsigned long maxnode)
{
	if (prim_mbind(m->addr, map_span(m), mode, nodes, maxnode) == 0)
		return 0;
	hp_log(1, "mbind of %p (%zu bytes, mode %d) failed: %s", m->addr, m->len, mode, strerror(errno));
	return -1;
}

int os_populate(const struct hp_map *m)
{
	if (prim_advise(m->addr, m->len, MADV_POPULATE_WRITE) == 0 || errno == EINVAL)
		return 0; /* EINVAL: a kernel before 5.14 cannot; first touch will */
	hp_log(1, "faulting in %p (%zu bytes) failed: %s", m->addr, m->len, strerror(errno));
	return -1;
}

/* Never part of a huge page: advice on part of one makes the kernel split
 * it, and the block would come back on 4 KiB pages.  A piece cut from a
 * larger block ends where its guard takes the last page of a huge page, so
 * that extent is left out; a block whose mapping ends short of a 2 MiB
 * boundary has no huge page in its last extent, and all of it is given. */
size_t os_lazyfree(const struct hp_map *m)
{
	size_t len = m->len;

	if ((len + GUARD) % HP_THP_SIZE == 0)
		len &= ~(HP_THP_SIZE - 1);
	if (m->backend != HP_BACKEND_THP || !len)
		return 0;
	if (prim_advise(m->addr, len, MADV_FREE) == 0)
		return len;
	hp_log(2, "MADV_FREE of %p (%zu bytes) failed: %s", m->addr, len, strerror(errno));
	return 0;
}

int os_thp_split(struct hp_map *m, size_t front_len, struct hp_map *back)
{
	char *p = m->addr;

	if (m->backend != HP_BACKEND_THP || front_len % HP_BASE_PAGE ||
	    (front_len + GUARD) % HP_THP_SIZE || front_len + GUARD >= m->len) {
		errno = EINVAL;
		return -1;
	}
	/* the page becomes a guard with its contents: no syscall to drop them,
	 * and a join reopens it as it was */
	if (prim_protect(p + front_len, GUARD, PROT_NONE) < 0)
		return -1;
	*back = *m;
	back->addr = p + front_len + GUARD;
	back->len = m->len - front_len - GUARD;
	m->len = front_len;
	return 0;
}

int os_thp_join(struct hp_map *front, const struct hp_map *back)
{
	char *guard = (char *)front->addr + front->len;

	if (front->backend != HP_BACKEND_THP || back->backend != HP_BACKEND_THP ||
	    guard + GUARD != (char *)back->addr) {
		errno = EINVAL;
		return -1;
	}
	if (prim_protect(guard, GUARD, PROT_READ | PROT_WRITE) < 0)
		return -1;
	front->len += GUARD + back->len;
	/* the cut had the kernel map the huge page holding the guard with 4 KiB
	 * entries (a page of it changed protection): one huge mapping again,
	 * best effort (MADV_COLLAPSE: Linux 6.1) */
	prim_advise(guard + GUARD - HP_THP_SIZE, HP_THP_SIZE, MADV_COLLAPSE);
	return 0;
}

static int shrink_thp(struct hp_map *m, size_t new_len)
{
	char *p = m->addr;
	/* the first dropped page becomes the guard, the rest (and the old guard) goes */
	if (prim_protect(p + new_len, GUARD, PROT_NONE) < 0)
		return -1;
	prim_unmap(p + new_len + GUARD, m->len - new_len);
	m->len = new_len;
	return 0;
}

/* Growing never leaves the guard's address unmapped while the block is
 * there: another thread could map something that os_unmap would later
 * take down.  In place: the guard is opened (same advice, so it joins the
 * block's VMA, which mremap needs), the span grows, the new last page is
 * closed.  Else the block alone moves into a fresh 2 MiB aligned
 * reservation that brings its own guard: page tables move, data is not
 * copied, PMD-aligned huge pages stay huge.  The old guard must not move
 * along: mremap would copy its page table (even an empty leftover one)
 * into the first 2 MiB of the new half, which then faults 4 KiB pages. */
static int grow_in_place(struct hp_map *m, size_t new_len)
{
	char *p = m->addr;

	prim_advise(p + m->len, GUARD, MADV_HUGEPAGE);
	if (prim_protect(p + m->len, GUARD, PROT_READ | PROT_WRITE) < 0)
		return -1;
	if (!prim_remap(p, m->len + GUARD, new_len + GUARD, 0, NULL)) {
		prim_protect(p + m->len, GUARD, PROT_NONE);
		return -1;
	}
	prim_protect(p + new_len, GUARD, PROT_NONE);
	return 0;
}

static int grow_by_moving(struct hp_map *m, size_t new_len)
{
	char *target = map_aligned(new_len, PROT_NONE, MAP_NORESERVE);
	if (!target)
		return -1;
	void *moved = prim_remap(m->addr, m->len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
	if (!moved) {
		prim_unmap(target, new_len + GUARD);
		return -1;
	}
	prim_unmap((char *)m->addr + m->len, GUARD); /* the old guard, ours until now */
	prim_advise(target + new_len, GUARD, MADV_HUGEPAGE);
	m->addr = moved;
	return 0;
}

/* The block's old last 2 MiB extent was partial, so it could only hold
 * 4 KiB pages; grown, it is whole: collapse it now (one copy of at most
 * 2 MiB) rather than fault the rest of it 4 KiB at a time.  Best effort:
 * MADV_COLLAPSE needs Linux 6.1. */
static void collapse_completed_extent(char *addr, size_t old_len, size_t new_len)
{
	size_t start = old_len & ~(HP_THP_SIZE - 1);
	if (old_len % HP_THP_SIZE && start + HP_THP_SIZE <= new_len)
		prim_advise(addr + start, HP_THP_SIZE, MADV_COLLAPSE);
}

static int grow_thp(struct hp_map *m, size_t new_len)
{
	size_t old_len = m->len;

	if (grow_in_place(m, new_len) < 0 && grow_by_moving(m, new_len) < 0)
		return -1;
	m->len = new_len;
	prim_advise(m->addr, new_len, MADV_HUGEPAGE);
	collapse_completed_extent(m->addr, old_len, new_len);
	return 0;
}

int os_remap_thp(struct hp_map *m, size_t new_size)
{
	size_t new_len = hp_align_up(new_size, HP_BASE_PAGE);

	if (m->backend != HP_BACKEND_THP) {
		errno = EINVAL;
		return -1;
	}
	if (new_len < new_size || new_len > SIZE_MAX / 2) {
		errno = ENOMEM;
		return -1;
	}
	if (new_len == m->len)
		return 0;
	int rc = new_len < m->len ? shrink_thp(m, new_len) : grow_thp(m, new_len);
	if (rc < 0)
		errno = ENOMEM;
	return rc;
}
