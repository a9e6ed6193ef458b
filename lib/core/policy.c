/* Policy: where a huge block comes from.  Every decision of backend, page
 * size and fallback -- for private blocks (heap.c) and shared ones
 * (shared.c) -- is made here, so that a change to where blocks come from
 * is a change to this file, and the rules it applies are named once:
 *   - the waste rule (policy_fits(), internal.h): what serves a request is
 *     at most 1/POLICY_WASTE_DIVISOR (an eighth) more than the request
 *     rounded up to its page size.
 *     A page size obeys it (pagesize=1G never spends a 1 GiB page on a
 *     1 MiB array), and so does a cached block (cache.c): reuse never
 *     inflates RSS much;
 *   - half fits (policy_keeps(), internal.h): a live block resized stays
 *     where it is while it holds the new size and is at most twice it;
 *   - the largest block, HP_MAX_BLOCK (internal.h);
 *   - which hugetlb page size (choose_pagesize());
 *   - mode=auto: hugetlb pages only from a pool that keeps room for fork's
 *     copies (policy_pool_ready());
 *   - a bind on hugetlb pages: only its nodes' free pages
 *     (policy_nodes_can_serve());
 *   - the cache first, for any block the knobs accept (policy_cache_searches());
 *   - hugetlb pages that could not be had: the fallback knob
 *     (policy_fallback()), for private and shared blocks alike;
 *   - a shared block: hugetlb or shmem, by the same knobs
 *     (policy_shared_plan()).
 *
 * Decisions only: the facts come from os.c (the page sizes the kernel
 * offers, this process's hugetlb pages), numa.c (which pool pages a
 * placement may use) and the knobs (hp_knob(), relaxed loads); mapping,
 * caching, counting and logging are the callers'.  No lock.  Pools are
 * read (sysfs, through numa.c and os.c) only to plan a fresh mapping,
 * never for a request the cache serves. */
#include "internal.h"

/* The pool can hold a block of size placed by p right now.  The placement
 * decides which pages count (numa.c): the whole pool's free - reserved
 * for one that does not confine pages to nodes, else its nodes'. */
static bool pool_can_serve(size_t pagesize, size_t size, hp_numa_t p)
{
	long avail = numa_pool_available(p, pagesize);
	return avail > 0 && (size_t)avail >= hp_align_up(size, pagesize) / pagesize;
}

/* Page size for a hugetlb block: the largest offered size not above the
 * knob (0 = auto) that obeys the waste rule, else the smallest offered
 * size.  With the knob at auto, a larger size also needs a pool that can
 * hold the block right now.  0 if the kernel offers none. */
static size_t choose_pagesize(size_t knob, size_t size, hp_numa_t p)
{
	const size_t *sizes;
	int n = os_pagesizes(&sizes);

	for (int i = 0; i < n; i++) {
		size_t ps = sizes[i];
		bool smallest = i == n - 1;
		if (knob && ps > knob)
			continue;
		if (!smallest && !policy_fits(hp_align_up(size, ps), size))
			continue;
		if (!knob && !smallest && !pool_can_serve(ps, size, p))
			continue;
		return ps;
	}
	return 0;
}

size_t policy_pagesize(size_t size, hp_numa_t p)
{
	return choose_pagesize((size_t)hp_knob(KNOB_PAGESIZE), size, p);
}

/* Room for fork's copies.  A MAP_PRIVATE hugetlb page that a forked child
 * shares is copied on the first write by either side, and the copy needs a
 * free pool page: the kernel's reservation at mmap covers first touches
 * only.  With none free, a child that writes dies of SIGBUS, and a parent
 * that writes takes the page away from its children (unmap_ref_private),
 * which die of SIGBUS at their next touch -- a fork-worker reading its
 * parent's array while the parent writes it.  glibc's memory is copied
 * from anywhere in RAM.  So mode=auto leaves as many pages free as this
 * process's private hugetlb blocks hold (os_private_pages): one copy of
 * each, enough for the parent (or one child) to rewrite every block
 * however many children it forked at once.  A private block needs room
 * for its own copy too; a shared block is never copied.  Other processes
 * may still take the free pages, and children forked one after another
 * while the parent writes need a copy each: hp_malloc(3) says what holds. */
bool policy_pool_ready(size_t pagesize, size_t size, hp_numa_t p, bool private_block)
{
	if (!pagesize)
		return false;
	size_t pages = hp_align_up(size, pagesize) / pagesize;
	size_t need = pages + os_private_pages(pagesize) + (private_block ? pages : 0);
	long avail = numa_pool_available(p, pagesize);
	return avail > 0 && (size_t)avail >= need;
}

/* The same rule at fork time, for whatever mode mapped the blocks: the
 * page size whose pool cannot give a copy of every page of this process's
 * live private hugetlb blocks (free - reserved, and the surplus pages
 * nr_overcommit_hugepages still allows), with their numbers; false when
 * every pool can (or cannot be read: nothing to say).  A fork is then a
 * child's SIGBUS waiting for the first write (mode=hugetlb keeps no room:
 * hp_malloc(3)). */
bool policy_fork_short(size_t *pagesize, size_t *pages, long *room)
{
	const size_t *sizes;
	int n = os_pagesizes(&sizes);
	/* live blocks only: the child gives its copies of cached ones back at
	 * once (heap_fork), and nobody writes those */
	size_t live = atomic_load_explicit(&hp_counters[HP_STAT_HUGETLB_LIVE_BYTES], memory_order_relaxed);

	for (int i = 0; i < n; i++) {
		size_t held = os_private_pages(sizes[i]);
		if (held > live / sizes[i])
			held = live / sizes[i];
		if (!held)
			continue;
		long avail = os_pool_available(sizes[i]);
		long long over = prim_pool_counter(-1, sizes[i], "nr_overcommit_hugepages");
		long long surplus = prim_pool_counter(-1, sizes[i], "surplus_hugepages");
		if (avail < 0)
			continue;
		long extra = over > surplus && surplus >= 0 ? (long)(over - surplus) : 0;
		if ((size_t)avail + (size_t)extra < held) {
			*pagesize = sizes[i];
			*pages = held;
			*room = avail + extra;
			return true;
		}
	}
	return false;
}

/* ---- private blocks ------------------------------------------------------------- */

/* The cache first, for any block the knobs would accept, placed as the
 * request wants: a hit costs no syscall and no look at the pools.  None
 * for mode=thp: heap.c's thp_block() looks among THP blocks anyway. */
int policy_cache_searches(const struct hp_ctx *ctx, hp_numa_t numa, struct hp_cache_search out[2])
{
	int mode = (int)hp_knob(KNOB_MODE);
	size_t knob = (size_t)hp_knob(KNOB_PAGESIZE);
	int n = 0;

	if (forced(ctx)) {
		out[n++] = (struct hp_cache_search){cache_kind(HP_BACKEND_HUGETLB, numa), ctx->pagesize, ctx->pagesize};
		return n;
	}
	if (mode == MODE_HUGETLB || mode == MODE_AUTO)
		out[n++] = (struct hp_cache_search){cache_kind(HP_BACKEND_HUGETLB, numa), 0, knob ? knob : SIZE_MAX};
	if (mode == MODE_AUTO)
		out[n++] = (struct hp_cache_search){cache_kind(HP_BACKEND_THP, numa), HP_BASE_PAGE, HP_BASE_PAGE};
	return n;
}

/* What to map when the cache had nothing, from the knobs (or a forcing
 * ctx); auto only plans a page size whose pool has free pages where numa
 * allows, with room left for fork's copies. */
struct hp_plan policy_plan(size_t size, const struct hp_ctx *ctx, hp_numa_t numa)
{
	size_t knob = (size_t)hp_knob(KNOB_PAGESIZE);

	if (forced(ctx))
		return (struct hp_plan){HP_BACKEND_HUGETLB, ctx->pagesize};
	switch ((int)hp_knob(KNOB_MODE)) {
	case MODE_HUGETLB:
		return (struct hp_plan){HP_BACKEND_HUGETLB, choose_pagesize(knob, size, numa)};
	case MODE_AUTO: /* a page size whose pool keeps room for fork's copies */
		for (size_t ps = choose_pagesize(knob, size, numa); ps; ps = choose_pagesize(ps - 1, size, numa))
			if (policy_pool_ready(ps, size, numa, true))
				return (struct hp_plan){HP_BACKEND_HUGETLB, ps};
		break;
	default:
		break;
	}
	return (struct hp_plan){HP_BACKEND_THP, 0};
}

/* A bind on hugetlb pages may only use its nodes' free pages, which the
 * kernel's reservation at mmap does not look at: refuse up front when they
 * are short, like a short pool (numa.c).  Unknown counts do not refuse. */
bool policy_nodes_can_serve(struct hp_plan p, size_t size, hp_numa_t numa)
{
	if (p.backend != HP_BACKEND_HUGETLB || numa_mode(numa) != NUMA_BIND)
		return true;
	long avail = numa_pool_available(numa, p.pagesize);
	return avail < 0 || (size_t)avail >= hp_align_up(size, p.pagesize) / p.pagesize;
}

/* Hugetlb pages that could not be had (a short pool, a refused placement),
 * or a request the huge path could not serve at all: what it gets instead,
 * by the fallback knob -- THP (private: a THP block; shared: shmem advised
 * for THP), HP_BACKEND_SMALL (private: the caller's ordinary path; shared:
 * ordinary shared memory), or -1: nothing (ENOMEM). */
int policy_fallback(void)
{
	switch ((int)hp_knob(KNOB_FALLBACK)) {
	case FALLBACK_THP:
		return HP_BACKEND_THP;
	case FALLBACK_SMALL:
		return HP_BACKEND_SMALL;
	default:
		return -1;
	}
}

/* ---- shared blocks ---------------------------------------------------------------- */

/* As for private blocks: a page size asked for, or mode=hugetlb, means
 * hugetlb (else the fallback); mode=auto takes hugetlb when the pool can,
 * leaving the room the private blocks' fork copies need (a shared block
 * itself is never copied).  Otherwise shmem: advised for THP unless
 * mode=off.  The numa knob does not place shared blocks (docs/numa.md):
 * their pages are planned from the whole machine's pools. */
struct hp_plan policy_shared_plan(size_t size, size_t pagesize)
{
	int mode = (int)hp_knob(KNOB_MODE);
	size_t ps = pagesize ? pagesize : policy_pagesize(size, HP_NUMA_DEFAULT);

	if (ps && (pagesize || mode == MODE_HUGETLB ||
		   (mode == MODE_AUTO && policy_pool_ready(ps, size, HP_NUMA_DEFAULT, false))))
		return (struct hp_plan){HP_BACKEND_HUGETLB, ps};
	return (struct hp_plan){mode != MODE_OFF ? HP_BACKEND_THP : HP_BACKEND_SMALL, 0};
}
