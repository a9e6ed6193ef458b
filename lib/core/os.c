/* Private blocks' mappings: THP alignment and the guard, cutting,
 * joining and growing THP mappings, hugetlb mappings of the page sizes the
 * kernel offers, how full their pools are (whole; numa.c per node), how
 * many pages this process's hugetlb blocks hold, and the mbind of a
 * mapping.  Which page size and backend a block gets is policy.c's
 * decision, from these facts.  Every system call and sysfs read goes
 * through prim.c, which carries out what this file decides.
 *
 * Not libhugetlbfs: linked in, its constructor runs in every program using
 * hpalloc (every program under libhpalloc-preload.so) and honours HUGETLB_*
 * variables, in secure execution too, where hpalloc honours none. */
#include "internal.h"

#include <errno.h>
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
#ifndef MADV_KEEPONFORK
#define MADV_KEEPONFORK 19
#endif

/* Every private huge block is followed by its guard: address space no block
 * uses, at least HP_GUARD (2 MiB) and up to the next 2 MiB boundary
 * (os_span), the end of the block's own mapping (THP) or a mapping of its
 * own (hugetlb).  Why:
 *   - it keeps the kernel from merging a block with its neighbour into one
 *     VMA, so smaps reports each block on its own;
 *   - it reads as zeros and faults on a write (guard=read, the default).
 *     Code that reads a little past the end of its data works under glibc,
 *     whose next mapping usually lies right there, so it must here:
 *     OpenBLAS's complex kernels read up to a column (16 bytes a row) past
 *     a matrix, which a 2 MiB guard covers up to 131072 rows.  guard=fault
 *     makes any access past the end fault, to find overruns.
 * It ends on a 2 MiB boundary, so past the block's own last extent it is
 * whole huge pages: protecting or dropping it never splits a huge page
 * there, whose page table would stay and have the block, grown over its
 * guard later, fault 4 KiB pages where it should get huge ones.  And the
 * span is a multiple of 2 MiB, which the kernel aligns by itself.
 * Nothing writes it, and it holds no memory: a fresh block's guard, read,
 * maps the zero page; a cut (os_thp_split) and a shrink drop the pages of
 * their new guard, which held a cached block's bytes; a grow's new guard
 * is fresh address space.  So every guard reads as zeros.  Mapped
 * with the guard's protection first and the block opened after, so a guard
 * is never charged as writable memory (strict overcommit). */
#define GUARD HP_GUARD

static int guard_prot(void)
{
	return (int)hp_knob(KNOB_GUARD) == GUARD_FAULT ? PROT_NONE
											 : PROT_READ;
}

#define MAX_PAGESIZES 4
static size_t pagesizes[MAX_PAGESIZES]; /* hugetlb sizes, descending */
static int npagesizes;

/* Page sizes the kernel offers, read once.  This runs inside hp_ctx() and
 * the allocation path, where a malloc could reach an interposer
 * (libhpalloc-preload.so) and through it this very pthread_once: prim.c
 * reads the directory without allocating. */
static void find_pagesizes(void)
{
	size_t asc[MAX_PAGESIZES];
	int n = prim_pool_sizes(asc, MAX_PAGESIZES);

	npagesizes = n > 0 ? n : 0;
	for (int i = 0; i < npagesizes; i++) /* descending */
		pagesizes[i] = asc[npagesizes - 1 - i];
}

static pthread_once_t pagesizes_once = PTHREAD_ONCE_INIT;

int os_pagesizes(const size_t **desc)
{
	pthread_once(&pagesizes_once, find_pagesizes);
	*desc = pagesizes;
	return npagesizes;
}

bool os_pagesize_supported(size_t pagesize)
{
	pthread_once(&pagesizes_once, find_pagesizes);
	for (int i = 0; i < npagesizes; i++)
		if (pagesizes[i] == pagesize)
			return true;
	return false;
}

/* Pages an mmap without MAP_NORESERVE can still reserve: free - reserved.
 * Read fresh each time: this is only on the cache-miss path, next to mmap. */
long os_pool_available(size_t pagesize)
{
	long long free_pages = prim_pool_counter(-1, pagesize, "free_hugepages");
	long long resv = prim_pool_counter(-1, pagesize, "resv_hugepages");
	if (free_pages < 0 || resv < 0) /* unknown, not "everything free" */
		return -1;
	long long avail = (long long)((unsigned long long)free_pages - (unsigned long long)resv);
	return avail > 0 ? (long)avail : 0;
}

/* Pages of each hugetlb page size (index: its log2) in this process's
 * private mappings: hpalloc's blocks, live, cached or on their way out
 * (mode=auto keeps room for their fork copies: policy.c). */
static _Atomic size_t private_pages[64];

static void count_private(const struct hp_map *m, bool mapped)
{
	size_t pages = m->len / m->kernel_page_size;
	_Atomic size_t *count = &private_pages[prim_page_shift(m->kernel_page_size)];
	if (mapped)
		atomic_fetch_add_explicit(count, pages, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(count, pages, memory_order_relaxed);
}

size_t os_private_pages(size_t pagesize)
{
	return atomic_load_explicit(&private_pages[prim_page_shift(pagesize)], memory_order_relaxed);
}

/* ---- mappings ----------------------------------------------------------------- */

/* len bytes and the guard after them, private and anonymous, starting on
 * a 2 MiB boundary. */
static void *map_aligned(size_t len, int prot, int extra)
{
	return prim_map_aligned(os_span(len), prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1);
}

/* The guard after a block of len bytes at p. */
static char *guard_of(char *p, size_t len)
{
	return p + len;
}

static size_t guard_len(size_t len)
{
	return os_span(len) - len;
}

int os_map_thp(size_t size, struct hp_map *out)
{
	size_t len = hp_align_up(size, HP_BASE_PAGE);
	if (len < size || len > SIZE_MAX / 2) {
		errno = ENOMEM;
		return -1;
	}
	char *p = map_aligned(len, guard_prot(), 0);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	/* only ever on our own mapping: never on memory libc may reuse.  The
	 * guard gets the same advice so that, opened again to grow, it merges
	 * back into the block's VMA (mremap needs one VMA). */
	prim_advise(p, os_span(len), MADV_HUGEPAGE);
	if (prim_protect(p, len, PROT_READ | PROT_WRITE) < 0) {
		hp_log(2, "opening a THP map of %zu failed: %s", len, strerror(errno));
		prim_unmap(p, os_span(len));
		errno = ENOMEM;
		return -1;
	}
	*out = (struct hp_map){.addr = p, .len = len, .kernel_page_size = HP_BASE_PAGE, .backend = HP_BACKEND_THP};
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
	void *p = prim_map_hugetlb(len, pagesize, guard_len(len), guard_prot());
	if (!p) {
		hp_log(2, "hugetlb map of %zu with %zu pages failed: %s", len, pagesize, strerror(errno));
		errno = ENOMEM;
		return -1;
	}
	*out = (struct hp_map){.addr = p, .len = len, .kernel_page_size = pagesize, .backend = HP_BACKEND_HUGETLB};
	count_private(out, true);
	hp_log(2, "hugetlb map %p %zu (page %zu)", p, len, pagesize);
	return 0;
}

static size_t map_span(const struct hp_map *m)
{
	return os_span(m->len);
}

int os_unmap(const struct hp_map *m)
{
	int rc = prim_unmap(m->addr, map_span(m));
	if (rc == 0 && m->backend == HP_BACKEND_HUGETLB)
		count_private(m, false);
	return rc;
}

/* numa.c decides the policy; this file applies it because it alone knows
 * the guard, which takes the policy too: with another policy than the
 * block's it would stay a VMA of its own when opened, and growing in place
 * (one VMA) would fail. */
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
 * it, and the block would come back on 4 KiB pages.  Every extent of a
 * block is whole (a piece cut is whole huge pages) but a last one that
 * ends short of a 2 MiB boundary, where the mapping ends too: that extent
 * holds no huge page, and all of it is given. */
size_t os_lazyfree(const struct hp_map *m)
{
	size_t len = m->len;

	if (m->backend != HP_BACKEND_THP || !len)
		return 0;
	if (prim_advise(m->addr, len, MADV_FREE) == 0)
		return len;
	hp_log(2, "MADV_FREE of %p (%zu bytes) failed: %s", m->addr, len, strerror(errno));
	return 0;
}

/* What a block's user may have set on its range that glibc's munmap would
 * have cleared, undone as the block enters the cache (cache.c), so that
 * its next user -- and take, cut and join -- finds a whole read-write
 * block with no advice of another's:
 *   - its protection: a page the program left read-only or PROT_NONE
 *     would fault the next user's writes (SIGSEGV; issue 45);
 *   - with fork_advice, MADV_DONTFORK and MADV_WIPEONFORK: a child the next
 *     user forks would find the block unmapped, or zeroed.
 * One mprotect, two madvises for the advice: on a range already as wanted
 * the kernel changes nothing, ~0.25 us each (cache.c says when it pays
 * them).  Left as the program set them: mlock (an munlock would unlock a
 * block under mlockall(MCL_FUTURE), whose program wants every page
 * locked; nothing says which), MADV_NOHUGEPAGE (huge pages lost, nothing
 * faults), MADV_DONTDUMP, placement (mbind), and a protection key set by
 * pkey_mprotect (mprotect keeps the key; hpalloc allocates none).
 * -1 + errno if one was refused (the range is no longer all mapped): the
 * block must not be cached. */
int os_reset(const struct hp_map *m, bool fork_advice)
{
	if (prim_protect(m->addr, m->len, PROT_READ | PROT_WRITE) < 0 ||
	    (fork_advice && prim_advise(m->addr, m->len, MADV_DOFORK) < 0) ||
	    /* a kernel without MADV_WIPEONFORK (before 4.14): EINVAL, nothing to undo */
	    (fork_advice && m->backend == HP_BACKEND_THP &&
	     prim_advise(m->addr, m->len, MADV_KEEPONFORK) < 0 && errno != EINVAL)) {
		hp_log(1, "cannot undo what the program set on %p (%zu bytes): %s; released, not cached",
		       m->addr, m->len, strerror(errno));
		return -1;
	}
	return 0;
}

size_t os_drop(const struct hp_map *m, size_t off, size_t len)
{
	if (m->backend != HP_BACKEND_THP || !len || off % HP_THP_SIZE || off >= m->len)
		return 0;
	if (len > m->len - off)
		len = m->len - off;
	if (prim_advise((char *)m->addr + off, len, MADV_DONTNEED) == 0)
		return len;
	hp_log(2, "MADV_DONTNEED of %p (%zu bytes) failed: %s", (char *)m->addr + off, len, strerror(errno));
	return 0;
}

int os_thp_split(struct hp_map *m, size_t front_len, struct hp_map *back)
{
	char *p = m->addr;

	if (m->backend != HP_BACKEND_THP || front_len % HP_THP_SIZE || front_len + GUARD >= m->len) {
		errno = EINVAL;
		return -1;
	}
	/* the guard is one whole huge page: protected, then its pages (the
	 * cache's, an earlier user's bytes) dropped whole -- no huge page is
	 * split, it reads as zeros as every guard does (read_past_end), and a
	 * join faults it afresh on a huge page (measured: a cut ~10 us
	 * slower, the joined block's first write there ~35 us, one fresh huge
	 * page; its 2 MiB are free meanwhile).  A drop the kernel refuses
	 * leaves those bytes readable there: the block is still right. */
	if (prim_protect(guard_of(p, front_len), guard_len(front_len), guard_prot()) < 0)
		return -1;
	prim_advise(guard_of(p, front_len), guard_len(front_len), MADV_DONTNEED);
	*back = *m;
	back->addr = p + os_span(front_len);
	back->len = m->len - os_span(front_len);
	m->len = front_len;
	return 0;
}

int os_thp_join(struct hp_map *front, const struct hp_map *back)
{
	char *guard = guard_of(front->addr, front->len);

	if (front->backend != HP_BACKEND_THP || back->backend != HP_BACKEND_THP ||
	    os_thp_end(front) != (char *)back->addr) {
		errno = EINVAL;
		return -1;
	}
	if (prim_protect(guard, guard_len(front->len), PROT_READ | PROT_WRITE) < 0)
		return -1;
	front->len = (size_t)((char *)back->addr - (char *)front->addr) + back->len;
	return 0;
}

static int shrink_thp(struct hp_map *m, size_t new_len)
{
	char *p = m->addr, *guard = guard_of(p, new_len);
	/* the first dropped bytes become the guard, their pages dropped; the
	 * rest (and the old guard) goes */
	if (prim_protect(guard, guard_len(new_len), guard_prot()) < 0)
		return -1;
	prim_advise(guard, guard_len(new_len), MADV_DONTNEED);
	prim_unmap(p + os_span(new_len), os_span(m->len) - os_span(new_len));
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
	char *p = m->addr, *guard = guard_of(p, m->len);

	prim_advise(guard, guard_len(m->len), MADV_HUGEPAGE);
	if (prim_protect(guard, guard_len(m->len), PROT_READ | PROT_WRITE) < 0)
		return -1;
	if (!prim_remap(p, os_span(m->len), os_span(new_len), 0, NULL)) {
		prim_protect(guard, guard_len(m->len), guard_prot());
		return -1;
	}
	prim_protect(guard_of(p, new_len), guard_len(new_len), guard_prot());
	return 0;
}

static int grow_by_moving(struct hp_map *m, size_t new_len)
{
	char *target = map_aligned(new_len, PROT_NONE, MAP_NORESERVE);
	if (!target)
		return -1;
	void *moved = prim_move_into(m->addr, m->len, new_len, target, os_span(new_len));
	if (!moved)
		return -1;
	/* the old guard, ours until now */
	prim_unmap(guard_of(m->addr, m->len), guard_len(m->len));
	prim_advise(guard_of(target, new_len), guard_len(new_len), MADV_HUGEPAGE);
	/* the reservation's protection until now */
	prim_protect(guard_of(target, new_len), guard_len(new_len), guard_prot());
	m->addr = moved;
	return 0;
}

/* Whether growing from old_len to new_len makes a partial last extent
 * whole.  That extent is on 4 KiB pages (the VMA ended inside it). */
static bool completes_extent(size_t old_len, size_t new_len)
{
	return old_len % HP_THP_SIZE && (old_len & ~(HP_THP_SIZE - 1)) + HP_THP_SIZE <= new_len;
}

/* Collapse the completed extent at whole in place (one copy of at most
 * 2 MiB, in the kernel; Linux 6.1+).  The kernel refuses with EAGAIN while
 * compaction or reclaim holds one of its pages. */
static bool collapse_extent(char *addr, size_t whole)
{
	return prim_advise(addr + whole, HP_THP_SIZE, MADV_COLLAPSE) == 0;
}

/* The collapse refused: the block moves into a fresh reservation, its whole
 * extents by their page tables, and the used bytes of the completed extent
 * are copied there, into a huge page faulted fresh (tests/preload/threads
 * failed in CI with a grown block partly on 4 KiB pages).  Best effort: the
 * block stays as it is if no reservation can be had. */
static void refault_extent(struct hp_map *m, size_t whole, size_t used)
{
	char *old = m->addr;
	char *target = map_aligned(m->len, PROT_NONE, MAP_NORESERVE);

	if (!target)
		return;
	if (!prim_move_into(old, whole, m->len, target, os_span(m->len)))
		return;
	memcpy(target + whole, old + whole, used);
	prim_unmap(old + whole, os_span(m->len) - whole);
	prim_advise(guard_of(target, m->len), guard_len(m->len), MADV_HUGEPAGE);
	prim_protect(guard_of(target, m->len), guard_len(m->len), guard_prot());
	m->addr = target;
}

/* A block shorter than one huge page that grows to hold one is copied by
 * the caller (at most 2 MiB, into a block placed as a new one is). */
static int grow_thp(struct hp_map *m, size_t new_len)
{
	size_t old_len = m->len, whole = old_len & ~(HP_THP_SIZE - 1);
	bool completes = completes_extent(old_len, new_len);

	if (completes && !whole)
		return -1;
	if (grow_in_place(m, new_len) < 0 && grow_by_moving(m, new_len) < 0)
		return -1;
	m->len = new_len;
	prim_advise(m->addr, new_len, MADV_HUGEPAGE);
	if (completes && !collapse_extent(m->addr, whole))
		refault_extent(m, whole, old_len - whole);
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
