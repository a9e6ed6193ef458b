/* hp_malloc & co: route by size, keep a registry of huge blocks, realloc
 * across every transition.
 *
 * Routing on free is by address, never by size or knobs: every huge block
 * starts on a 2 MiB (or 1 GiB) boundary, so a pointer that is not 2 MiB
 * aligned is small and goes straight to libc; an aligned one is looked up
 * in the registry.  Small blocks are small.c's. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

pthread_mutex_t hp_heap_lock = PTHREAD_MUTEX_INITIALIZER;

/* Bumped in a forked child: blocks mapped before the fork carry an older
 * generation, and the child releases them when they are freed instead of
 * caching them.  A hugetlb block's pool reservation stayed with the parent
 * (a reuse would fault a pool page nobody reserved: SIGBUS); a THP block's
 * pages are shared copy-on-write with the parent, and the first write
 * splits each huge page into 4 KiB copies (a reuse would hand out a block
 * without huge pages, and keep the parent's pages shared). */
static unsigned heap_fork_gen;

static void *fail_enomem(void)
{
	stat_add(HP_STAT_FAILURES, 1);
	errno = ENOMEM;
	return NULL;
}

/* ---- registry of live huge blocks ------------------------------------------------
 * Written under hp_heap_lock (a block leaves it and enters the cache in one
 * critical section), and also under reg_lock, the innermost lock of all:
 * readers (hp_owns, lookups) take reg_lock alone, and nothing is called
 * while it is held.  So the free() of an interposer, which asks hp_owns()
 * about every 2 MiB aligned pointer, is safe wherever it is called from --
 * also from hpalloc's own code holding its other locks (release.c frees
 * block records under rel_lock), where hp_heap_lock would invert the order. */

#define REG_BITS 12
static struct hp_block *registry[1u << REG_BITS];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static inline size_t reg_slot(const void *addr)
{
	return (size_t)((((uintptr_t)addr >> 21) * 0x9E3779B97F4A7C15ull) >> (64 - REG_BITS));
}

static void reg_insert(struct hp_block *b)
{
	size_t i = reg_slot(b->map.addr);
	pthread_mutex_lock(&reg_lock);
	b->hnext = registry[i];
	registry[i] = b;
	pthread_mutex_unlock(&reg_lock);
}

static struct hp_block *reg_find(const void *addr, bool remove)
{
	struct hp_block *b = NULL;

	pthread_mutex_lock(&reg_lock);
	for (struct hp_block **pp = &registry[reg_slot(addr)]; *pp; pp = &(*pp)->hnext)
		if ((*pp)->map.addr == addr) {
			b = *pp;
			if (remove)
				*pp = b->hnext;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
	return b;
}

/* Block whose mapping contains addr (interior pointers; slow, for reports). */
static struct hp_block *reg_find_containing(const void *addr)
{
	struct hp_block *found = NULL;

	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < (1u << REG_BITS) && !found; i++)
		for (struct hp_block *b = registry[i]; b; b = b->hnext)
			if ((const char *)addr >= (char *)b->map.addr &&
			    (const char *)addr < (char *)b->map.addr + b->map.len) {
				found = b;
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

static inline bool maybe_huge(const void *p)
{
	return ((uintptr_t)p & (HP_THP_SIZE - 1)) == 0;
}

/* ---- huge path ------------------------------------------------------------------ */

struct plan {
	int backend;
	size_t pagesize;
};

/* A context: who allocates (origin, for the stats) and, when pagesize is
 * not 0, hugetlb pages of that size forced whatever threshold and mode say;
 * a derived one (hp_ctx_numa) also places its blocks by its own policy
 * instead of the numa knob's.  All of them live as long as the process
 * (static, or interned and never freed), so handlers holding one never
 * outlive it. */
struct hp_ctx {
	int origin;
	size_t pagesize;
	bool has_numa;         /* numa below, not the knob's */
	hp_numa_t numa;
	struct hp_ctx *next;   /* interned derived contexts */
};
#define CTX_PAGESIZES 3 /* follow the knobs, 2 MiB, 1 GiB */
/* Filled in here, never written after: hp_ctx() is called from whichever
 * thread allocates first while other threads read the same context. */
#define CTX_ENTRY(o, ps) {.origin = (o), .pagesize = (ps)} /* no numa of its own */
#define CTX_ROW(o) {CTX_ENTRY(o, 0), CTX_ENTRY(o, 2 * HP_MiB), CTX_ENTRY(o, HP_GiB)}
static struct hp_ctx contexts[HP_ORIGIN_COUNT][CTX_PAGESIZES] = {
	CTX_ROW(HP_ORIGIN_API),   CTX_ROW(HP_ORIGIN_NUMPY), CTX_ROW(HP_ORIGIN_PYTHON),
	CTX_ROW(HP_ORIGIN_TORCH), CTX_ROW(HP_ORIGIN_NUMBA), CTX_ROW(HP_ORIGIN_PRELOAD),
};
_Static_assert(HP_ORIGIN_COUNT == 6, "a CTX_ROW for every origin");

static inline bool forced(const struct hp_ctx *ctx)
{
	return ctx && ctx->pagesize;
}

static inline int origin_of(const struct hp_ctx *ctx)
{
	return ctx ? ctx->origin : HP_ORIGIN_API;
}

/* The placement of a new block: the context's, else the knob's. */
static inline hp_numa_t numa_of(const struct hp_ctx *ctx)
{
	if (ctx && ctx->has_numa)
		return ctx->numa;
	return atomic_load_explicit(&hp_cfg.numa, memory_order_relaxed);
}

/* Which kind of block to try first, from the knobs (or a forcing ctx);
 * auto only plans a page size whose pool has free pages where numa allows,
 * with room left for fork's copies (os_pool_ready_private). */
static struct plan plan_for(size_t size, const struct hp_ctx *ctx, hp_numa_t numa)
{
	size_t knob = atomic_load_explicit(&hp_cfg.pagesize, memory_order_relaxed);

	if (forced(ctx))
		return (struct plan){HP_BACKEND_HUGETLB, ctx->pagesize};
	switch (atomic_load_explicit(&hp_cfg.mode, memory_order_relaxed)) {
	case MODE_HUGETLB:
		return (struct plan){HP_BACKEND_HUGETLB, os_choose_pagesize(knob, size, numa)};
	case MODE_AUTO: /* a page size whose pool keeps room for fork's copies */
		for (size_t ps = os_choose_pagesize(knob, size, numa); ps;
		     ps = os_choose_pagesize(ps - 1, size, numa))
			if (os_pool_ready_private(ps, size, numa))
				return (struct plan){HP_BACKEND_HUGETLB, ps};
		break;
	default:
		break;
	}
	return (struct plan){HP_BACKEND_THP, HP_BASE_PAGE};
}

static struct hp_block *cache_take_locked(uint64_t kind, size_t min_ps, size_t max_ps, size_t size)
{
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = cache_take(kind, min_ps, max_ps, size);
	pthread_mutex_unlock(&hp_heap_lock);
	return b;
}

/* The cache first, for any block the knobs would accept and placed as this
 * request wants: a hit costs no syscall and no look at the pools (auto
 * modes read sysfs otherwise). */
static struct hp_block *take_cached(size_t size, const struct hp_ctx *ctx, hp_numa_t numa)
{
	int mode = atomic_load_explicit(&hp_cfg.mode, memory_order_relaxed);
	size_t knob = atomic_load_explicit(&hp_cfg.pagesize, memory_order_relaxed);
	struct hp_block *b = NULL;

	if (forced(ctx))
		return cache_take_locked(cache_kind(HP_BACKEND_HUGETLB, numa), ctx->pagesize, ctx->pagesize, size);
	if (mode == MODE_HUGETLB || mode == MODE_AUTO)
		b = cache_take_locked(cache_kind(HP_BACKEND_HUGETLB, numa), 0, knob ? knob : SIZE_MAX, size);
	if (!b && mode == MODE_AUTO)
		b = cache_take_locked(cache_kind(HP_BACKEND_THP, numa), HP_BASE_PAGE, HP_BASE_PAGE, size);
	return b;
}

/* A bind on hugetlb pages may only use its nodes' free pages, which the
 * kernel's reservation at mmap does not look at: refuse up front when they
 * are short, like a short pool (numa.c). */
static bool nodes_can_serve(struct plan p, size_t size, hp_numa_t numa)
{
	if (p.backend != HP_BACKEND_HUGETLB || numa_mode(numa) != NUMA_BIND)
		return true;
	long avail = numa_pool_available(numa, p.pagesize);
	return avail < 0 || (size_t)avail >= hp_align_up(size, p.pagesize) / p.pagesize;
}

/* A fresh mapping placed by numa before anyone touches it.  A placement
 * that cannot be applied unmaps it (numa.c: the block is refused). */
static int map_placed(struct plan p, size_t size, hp_numa_t numa, struct hp_map *m)
{
	if (!nodes_can_serve(p, size, numa)) {
		errno = ENOMEM;
		return -1;
	}
	int rc = p.backend == HP_BACKEND_HUGETLB ? os_map_hugetlb(size, p.pagesize, m) : os_map_thp(size, m);
	if (rc < 0 || numa == HP_NUMA_DEFAULT || numa_place(m, numa) == 0)
		return rc;
	int err = errno;
	os_unmap(m);
	stat_add(HP_STAT_NUMA_REFUSED, 1);
	errno = err;
	return -1;
}

/* ---- pieces: the cache's THP memory serves any size ----------------------------------
 * Fresh pages cost a fault each and the kernel zeroes every one of them
 * (in a program with many arrays of a few MiB, most of its system time);
 * on a VM that hands freed memory back to its host (free page reporting)
 * they are also the slowest pages to get.  The cache holds pages that are
 * already there, but a block serves only a request of about its own size
 * (cache.c's fits()).  So before anything is mapped afresh, a THP request
 * takes the cache's memory in pieces, as a heap would:
 *   - cut: the front of the smallest cached THP block that holds it (the
 *     rest stays cached);
 *   - join: else a run of cached pieces that lie side by side in one
 *     mapping, made one block again, and cut.
 * And an array that grows (ndarray.resize, a buffer doubling) grows in place
 * over the cached piece that follows it.  Joining is lazy -- a freed piece
 * is cached as it is -- so a program repeating the same sizes gets exact
 * fits with no syscall, and only a request that no block holds pays the
 * mprotects of a join.
 *
 * Pieces are cut so that each starts on a 2 MiB boundary (cut_len), keep the
 * kind (backend, placement) and the family (the mmap they come from) of
 * what they were cut from, and only a family's pieces are joined: they are
 * one anonymous mapping to the kernel, so a joined block is one VMA again,
 * which mremap needs to grow it further.  A block mapped before a fork is
 * never cut or joined (inherited(): its pages are not this process's to
 * cache).  Cutting and joining run outside hp_heap_lock on blocks that are
 * in neither the cache nor the registry: the caller's alone. */

static _Atomic uint64_t family_seq;

/* The length of a piece cut to hold size: its guard page ends on a 2 MiB
 * boundary, where the next piece starts. */
static size_t cut_len(size_t size)
{
	return hp_align_up(size + HP_THP_GUARD, HP_THP_SIZE) - HP_THP_GUARD;
}

/* ---- cached memory the kernel may take back ------------------------------------------
 * A cache that keeps freed memory resident makes a process under a memory
 * limit (a container's cgroup, no swap) be killed where libc's allocator,
 * which gave it back, would live (issue 25).  So every THP block is
 * offered to the kernel as it enters the cache (os_lazyfree: MADV_FREE):
 * under pressure the kernel drops its pages like clean page cache, and
 * otherwise a reuse finds them as they were -- jemalloc's "muzzy" pages.
 * Done in the thread that caches the block, while it is that thread's
 * alone and before anybody can take it from the cache: a lazy free issued
 * later (the janitor's) could race a new owner's writes and discard them.
 * hugetlb blocks are not offered: pool pages are not the memory cgroup's
 * (hpalloc(7) says what a cached one costs a cgroup). */
static void offer_to_kernel(struct hp_block *b)
{
	b->reclaimable = os_lazyfree(&b->map);
}

static void cache_put_unlocked(struct hp_block *b)
{
	offer_to_kernel(b);
	pthread_mutex_lock(&hp_heap_lock);
	release_adopt(cache_put(b, hp_now_ms()));
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(false);
}

/* THP block b keeps what holds size; a tail of 2 MiB or more goes to the
 * cache.  Best effort: b may stay whole (no memory for the record, or the
 * mprotect failed) -- larger than asked, never wrong. */
static void cut_tail(struct hp_block *b, size_t size)
{
	size_t len = cut_len(size);
	if (len + HP_THP_GUARD + HP_THP_SIZE > b->map.len)
		return;
	struct hp_block *tail = calloc(1, sizeof(*tail));
	if (!tail)
		return;
	if (os_thp_split(&b->map, len, &tail->map) < 0) {
		free(tail);
		return;
	}
	tail->kind = b->kind;
	tail->family = b->family;
	tail->fork_gen = b->fork_gen;
	tail->dirty = true;
	stat_sub(HP_STAT_MAPPED_BYTES, HP_THP_GUARD); /* a page became b's guard */
	stat_add(HP_STAT_CACHE_CUTS, 1);
	cache_put_unlocked(tail);
}

/* b (the caller's) joined with the piece that follows it; false and both
 * unchanged if the kernel refused. */
static bool join_next(struct hp_block *b, struct hp_block *next)
{
	if (os_thp_join(&b->map, &next->map) < 0)
		return false;
	stat_add(HP_STAT_MAPPED_BYTES, HP_THP_GUARD); /* b's guard is a page of it again */
	stat_add(HP_STAT_CACHE_JOINS, 1);
	free(next);
	return true;
}

/* The run of pieces (linked in address order) made one block.  If a join
 * fails, the pieces not joined go back to the cache and the block is as
 * long as the joins made it. */
static struct hp_block *join_run(struct hp_block *run)
{
	struct hp_block *b = run, *next;

	for (run = run->next; run; run = next) {
		next = run->next;
		if (!join_next(b, run))
			break;
	}
	b->next = NULL;
	for (; run; run = next) {
		next = run->next;
		cache_put_unlocked(run);
	}
	return b;
}

/* A THP block for size from the cache's pieces (see above), or NULL. */
static struct hp_block *thp_from_pieces(size_t size, hp_numa_t numa)
{
	uint64_t kind = cache_kind(HP_BACKEND_THP, numa);
	size_t need = hp_align_up(size, HP_BASE_PAGE);

	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = cache_take_at_least(kind, need);
	struct hp_block *run = b ? NULL : cache_take_run(kind, need);
	pthread_mutex_unlock(&hp_heap_lock);
	if (run && (b = join_run(run))->map.len < need) {
		cache_put_unlocked(b); /* a join failed short of size */
		return NULL;
	}
	if (b)
		cut_tail(b, size);
	return b;
}

/* THP block b (the caller's) grown toward size over the cached pieces of its
 * family that follow it; what it took beyond size back into the cache. */
static void grow_over_cache(struct hp_block *b, size_t size)
{
	bool grew = false;

	while (b->map.len < size) {
		pthread_mutex_lock(&hp_heap_lock);
		struct hp_block *next = cache_take_at(b->family, os_thp_end(&b->map));
		pthread_mutex_unlock(&hp_heap_lock);
		if (!next)
			break;
		if (!join_next(b, next)) {
			cache_put_unlocked(next);
			break;
		}
		grew = true;
	}
	if (grew)
		cut_tail(b, size);
}

/* cache_rss_max: a fresh mapping must not take the process over the bound
 * while the cache holds memory it could give back first -- so it gives
 * that back now, in this thread, before the new pages fault in (the
 * janitor, 100 ms later, would be after a memory monitor saw the peak). */
static void make_room(size_t size)
{
	size_t limit = atomic_load_explicit(&hp_cfg.cache_rss_max, memory_order_relaxed);
	if (!limit || !atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed))
		return;
	size_t rss = hp_self_rss();
	if (rss + size > limit)
		heap_yield(rss + size - limit, true);
}

static struct hp_block *new_block(struct plan p, size_t size, hp_numa_t numa)
{
	struct hp_map m;
	make_room(size);
	if (map_placed(p, size, numa, &m) < 0)
		return NULL;
	struct hp_block *b = calloc(1, sizeof(*b));
	if (!b) {
		os_unmap(&m);
		errno = ENOMEM;
		return NULL;
	}
	b->map = m;
	b->kind = cache_kind(m.backend, m.numa); /* neither changes while it lives */
	b->family = atomic_fetch_add_explicit(&family_seq, 1, memory_order_relaxed) + 1;
	b->fork_gen = heap_fork_gen;
	stat_add(HP_STAT_MAPPED_BYTES, m.len);
	pthread_mutex_lock(&hp_heap_lock);
	cache_missed(hp_now_ms()); /* the decay learns from fresh mappings */
	pthread_mutex_unlock(&hp_heap_lock);
	janitor_start(); /* a huge block: now there is work for it (janitor.c) */
	return b;
}

/* A short hugetlb pool may be short only because of us: cached blocks and
 * releases still in flight hold its pages.  Give those back (now, in this
 * thread) and try once more before the fallback decides. */
static struct hp_block *new_block_reclaiming(struct plan p, size_t size, hp_numa_t numa)
{
	struct hp_block *b = new_block(p, size, numa);
	if (b || p.backend != HP_BACKEND_HUGETLB || errno != ENOMEM)
		return b; /* not short of pages (a refused placement): no use */
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *cached = cache_take_backend(HP_BACKEND_HUGETLB);
	release_adopt(cached);
	pthread_mutex_unlock(&hp_heap_lock);
	/* Every block that left the heap before this point is on release.c's
	 * lists (handed over under the lock): releasing those and waiting for
	 * them is enough.  Try again even if none is left: the last one may
	 * have gone between the failed mmap and this look. */
	release_flush(true);
	release_drain();
	return new_block(p, size, numa);
}

static void *publish_block(struct hp_block *b)
{
	b->dirty = true;
	pthread_mutex_lock(&hp_heap_lock);
	reg_insert(b);
	pthread_mutex_unlock(&hp_heap_lock);
	stats_block_live(b, true);
	return b->map.addr;
}

/* Larger than any x86-64 address space: refuse before rounding can wrap. */
#define HP_MAX_BLOCK ((size_t)1 << 46)

/* A THP block: cached, else from the cache's pieces, else fresh. */
static struct hp_block *thp_block(size_t size, hp_numa_t numa, bool *cached)
{
	struct hp_block *b = cache_take_locked(cache_kind(HP_BACKEND_THP, numa), HP_BASE_PAGE, HP_BASE_PAGE, size);
	if (!b)
		b = thp_from_pieces(size, numa);
	*cached = b != NULL;
	return b ? b : new_block((struct plan){HP_BACKEND_THP, HP_BASE_PAGE}, size, numa);
}

/* Where a block comes from, in order: the cache (any kind the knobs
 * accept, placed as wanted), a fresh mapping of the planned kind, then
 * the fallback -- whose THP blocks are again cached ones first. */
static struct hp_block *huge_block(size_t size, const struct hp_ctx *ctx, bool *cached)
{
	hp_numa_t numa = numa_of(ctx);
	struct hp_block *b = take_cached(size, ctx, numa);
	if ((*cached = b != NULL))
		return b;
	struct plan p = plan_for(size, ctx, numa);
	if (p.backend == HP_BACKEND_THP)
		return thp_block(size, numa, cached);
	b = new_block_reclaiming(p, size, numa);
	if (b)
		return b;
	stat_add(HP_STAT_FALLBACKS, 1);
	if (atomic_load_explicit(&hp_cfg.fallback, memory_order_relaxed) != FALLBACK_THP)
		return NULL;
	hp_log(1, "hugetlb pool short for %zu bytes: using THP", size);
	return thp_block(size, numa, cached);
}

/* The huge path alone: a published block, or NULL -- with *to_small set
 * when fallback=small sends the request to the ordinary path (the caller
 * decides whose ordinary path), else ENOMEM. */
static void *huge_try(size_t size, const struct hp_ctx *ctx, bool zero, bool *to_small)
{
	HP_ERRNO_SAVE; /* pool probes and fallbacks leave theirs */
	bool cached;

	*to_small = false;
	if (size > HP_MAX_BLOCK)
		return fail_enomem();
	struct hp_block *b = huge_block(size, ctx, &cached);
	stat_add(cached ? HP_STAT_CACHE_HITS : HP_STAT_CACHE_MISSES, 1);
	if (!b && atomic_load_explicit(&hp_cfg.fallback, memory_order_relaxed) == FALLBACK_SMALL) {
		hp_log(1, "hugetlb pool short for %zu bytes: using libc", size);
		*to_small = true;
		HP_ERRNO_RESTORE; /* "yours": the caller's allocator runs next */
		return NULL;
	}
	if (!b)
		return fail_enomem();
	if (zero && cached && b->dirty) /* fresh anonymous memory is zero */
		memset(b->map.addr, 0, size);
	b->origin = origin_of(ctx);
	HP_ERRNO_RESTORE;
	return publish_block(b);
}

/* Every huge allocation comes through here or hp_huge_*(): no
 * cancellation point (sysfs reads of mode=auto, log lines, a drain of a
 * short pool, some with a lock held), see HP_NOCANCEL_BEGIN. */
static void *huge_alloc(size_t size, const struct hp_ctx *ctx, bool zero)
{
	bool to_small;
	HP_NOCANCEL_BEGIN;
	void *p = huge_try(size, ctx, zero, &to_small);
	HP_NOCANCEL_END;
	return to_small ? small_alloc(size, zero) : p;
}

/* A block mapped before this process was forked: not ours to reuse. */
static bool inherited(const struct hp_block *b)
{
	return b->fork_gen != heap_fork_gen;
}

/* Freed now, b would be cached (a guess without the lock: cache_max may
 * change meanwhile, and b->reclaimable stays true either way). */
static bool will_cache(const struct hp_block *b)
{
	return b->map.backend == HP_BACKEND_THP && !inherited(b) &&
	       b->map.len <= atomic_load_explicit(&hp_cfg.cache_max, memory_order_relaxed);
}

/* hp_heap_lock held, b just taken out of the registry: into the cache or
 * to release.c, in the same critical section, so a fork never finds it
 * owned by nobody.  Without a janitor the cache decays here, on free.  The
 * caller calls release_flush() once unlocked. */
static void retire_locked(struct hp_block *b)
{
	uint64_t now = hp_now_ms(), deadline;

	stats_block_live(b, false);
	b->next = NULL;
	release_adopt(inherited(b) ? b : cache_put(b, now));
	if (!janitor_running())
		release_adopt(cache_expire(now, &deadline));
}

void heap_yield(size_t bytes, bool sync)
{
	pthread_mutex_lock(&hp_heap_lock);
	release_adopt(cache_take_oldest(bytes));
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(sync);
}

void heap_expire(uint64_t *next_deadline_ms)
{
	pthread_mutex_lock(&hp_heap_lock);
	release_adopt(cache_expire(hp_now_ms(), next_deadline_ms));
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(false);
}

/* The child keeps the parent's live blocks (the program may still use and
 * free them) but unmaps its copies of the cached ones (see heap_fork_gen):
 * the parent's cached pages are then its own again, and reusing them costs
 * it no copy-on-write while the child lives. */
void heap_fork(int phase)
{
	fork_mutex(&hp_heap_lock, phase);
	if (phase != FORK_CHILD)
		return;
	heap_fork_gen++;
	release_adopt(cache_take_all());
	release_flush(true); /* no janitor, no ring in the child yet */
}

/* Taken last before a fork, after every other lock: a thread holding one of
 * those may still free() through hp_owns(), which takes this one. */
void heap_registry_fork(int phase)
{
	fork_mutex(&reg_lock, phase);
}

static inline bool wants_huge(size_t size)
{
	return size >= atomic_load_explicit(&hp_cfg.threshold, memory_order_relaxed) &&
	       atomic_load_explicit(&hp_cfg.mode, memory_order_relaxed) != MODE_OFF;
}

/* ---- public allocation API ------------------------------------------------------- */

void *hp_malloc(size_t size)
{
	hp_init();
	if (likely(!wants_huge(size)))
		return small_alloc(size, false);
	return huge_alloc(size, NULL, false);
}

void *hp_calloc(size_t nmemb, size_t size)
{
	size_t total;

	hp_init();
	if (__builtin_mul_overflow(nmemb, size, &total))
		return fail_enomem();
	if (likely(!wants_huge(total)))
		return small_alloc(total, true);
	return huge_alloc(total, NULL, true);
}

void hp_free(void *ptr)
{
	if (!ptr)
		return;
	if (likely(!maybe_huge(ptr))) {
		small_free(ptr);
		return;
	}
	HP_ERRNO_SAVE;
	HP_NOCANCEL_BEGIN; /* the cache's decay logs with hp_heap_lock held */
	struct hp_block *b = reg_find(ptr, false);
	if (b && will_cache(b))
		offer_to_kernel(b); /* still live: the caller's alone */
	pthread_mutex_lock(&hp_heap_lock);
	b = reg_find(ptr, true);
	size_t len = b ? b->map.len : 0;
	if (b)
		retire_locked(b);
	pthread_mutex_unlock(&hp_heap_lock);
	if (b) {
		small_libc_learn(len); /* before the block's range is free for libc's mmap */
		release_flush(false);
	} else {
		small_free(ptr);
	}
	HP_NOCANCEL_END;
	HP_ERRNO_RESTORE;
}

void hp_free_sized(void *ptr, size_t size)
{
	(void)size; /* a hint only: NumPy passes wrong sizes for 0-d shapes */
	hp_free(ptr);
}

static struct hp_block *lookup(const void *ptr)
{
	return maybe_huge(ptr) ? reg_find(ptr, false) : NULL;
}

size_t hp_usable_size(const void *ptr)
{
	if (!ptr)
		return 0;
	struct hp_block *b = lookup(ptr);
	return b ? b->map.len : small_usable(ptr);
}

/* A new block through ctx: huge when forced or at least threshold. */
static void *alloc_ctx(size_t size, const struct hp_ctx *ctx, bool zero)
{
	if (forced(ctx) || wants_huge(size))
		return huge_alloc(size, ctx, zero);
	return small_alloc(size, zero);
}

/* Copy into a new allocation of the current routing, free the old one. */
static void *realloc_by_copy(void *ptr, size_t old_usable, size_t size, const struct hp_ctx *ctx)
{
	void *np = alloc_ctx(size, ctx, false);
	if (!np)
		return NULL;
	memcpy(np, ptr, old_usable < size ? old_usable : size);
	stat_add(HP_STAT_REALLOC_COPIES, 1);
	hp_free(ptr);
	return np;
}

/* THP block b (out of the registry) resized to hold size: grown over the
 * cached pieces that follow it, and what is left to do by mremap (fresh
 * pages to grow; a shrink gives its tail back to the kernel, as a program
 * that shrinks an array expects, not to the cache). */
static int resize_thp(struct hp_block *b, size_t size)
{
	if (size > b->map.len && !inherited(b))
		grow_over_cache(b, size);
	if (size <= b->map.len && size >= b->map.len / 2)
		return 0;
	size_t old_len = b->map.len;
	int rc = os_remap_thp(&b->map, size);
	stat_sub(HP_STAT_MAPPED_BYTES, old_len);
	stat_add(HP_STAT_MAPPED_BYTES, b->map.len);
	return rc;
}

/* A huge block that stays huge, resized without copying when it can be:
 * kept as it is when it still fits well, THP blocks grown or shrunk by
 * moving page tables (mremap).  NULL: it must be copied. */
static void *resize_in_place(struct hp_block *b, size_t size, const struct hp_ctx *ctx)
{
	if (b->map.numa != numa_of(ctx))
		return NULL; /* placed under another policy: the copy is placed anew */
	if (size <= b->map.len && size >= b->map.len / 2) {
		stat_add(HP_STAT_REALLOC_INPLACE, 1);
		return b->map.addr;
	}
	if (b->map.backend != HP_BACKEND_THP || forced(ctx))
		return NULL;
	pthread_mutex_lock(&hp_heap_lock);
	reg_find(b->map.addr, true);
	pthread_mutex_unlock(&hp_heap_lock);
	stats_block_live(b, false);
	int rc = resize_thp(b, size);
	void *p = publish_block(b); /* old or new place, always registered */
	if (rc != 0)
		return NULL; /* could not grow (address space): copy */
	stat_add(HP_STAT_REALLOC_INPLACE, 1);
	return p;
}

static void *realloc_huge(struct hp_block *b, size_t size, const struct hp_ctx *ctx)
{
	if (size > HP_MAX_BLOCK)
		return fail_enomem();
	if (forced(ctx) || wants_huge(size)) {
		HP_NOCANCEL_BEGIN; /* cuts and joins go through the cache */
		void *p = resize_in_place(b, size, ctx);
		HP_NOCANCEL_END;
		if (p)
			return p;
	}
	return realloc_by_copy(b->map.addr, b->map.len, size, ctx);
}

static void *realloc_ctx(void *ptr, size_t size, const struct hp_ctx *ctx)
{
	hp_init();
	if (!ptr)
		return alloc_ctx(forced(ctx) && !size ? 1 : size, ctx, false);
	if (size == 0)
		size = 1; /* keep a valid block: NumPy never expects NULL here */
	struct hp_block *b = lookup(ptr);
	if (b)
		return realloc_huge(b, size, ctx);
	if (forced(ctx) || wants_huge(size))
		return realloc_by_copy(ptr, small_size(ptr), size, ctx);
	return small_realloc(ptr, size);
}

void *hp_realloc(void *ptr, size_t size)
{
	HP_ERRNO_SAVE;
	void *p = realloc_ctx(ptr, size, NULL);
	if (p)
		HP_ERRNO_RESTORE;
	return p;
}

void *hp_malloc_pagesize(size_t size, size_t pagesize, int zero)
{
	hp_init();
	if (pagesize == 0) {
		HP_NOCANCEL_BEGIN; /* reads the pools */
		pagesize = os_choose_pagesize(atomic_load(&hp_cfg.pagesize), size, numa_of(NULL));
		HP_NOCANCEL_END;
	}
	struct hp_ctx *ctx = hp_ctx_pagesize(pagesize);
	if (!ctx)
		return NULL;
	return huge_alloc(size ? size : 1, ctx, zero != 0);
}

/* ---- NEP 49 entry points ---------------------------------------------------------- */

static bool pagesize_supported(size_t pagesize)
{
	HP_NOCANCEL_BEGIN; /* the first call lists the kernel's page sizes */
	bool ok = os_pagesize_supported(pagesize);
	HP_NOCANCEL_END;
	return ok;
}

void *hp_ctx(int origin, size_t pagesize)
{
	int slot = pagesize == 0 ? 0 : pagesize == 2 * HP_MiB ? 1 : pagesize == HP_GiB ? 2 : -1;

	if (origin < 0 || origin >= HP_ORIGIN_COUNT || slot < 0 ||
	    (pagesize && !pagesize_supported(pagesize))) {
		errno = EINVAL;
		return NULL;
	}
	return &contexts[origin][slot];
}

void *hp_ctx_pagesize(size_t pagesize)
{
	if (pagesize == 0) { /* not a page size: hp_ctx() would follow the knobs */
		errno = EINVAL;
		return NULL;
	}
	return hp_ctx(HP_ORIGIN_API, pagesize);
}

/* Derived contexts: pushed onto a list, lock-free and never freed, so a
 * fork or a signal finds it whole and a handler's context lives forever. */
static _Atomic(struct hp_ctx *) derived;

static struct hp_ctx *find_derived(struct hp_ctx *from, const struct hp_ctx *want)
{
	for (struct hp_ctx *c = from; c; c = c->next)
		if (c->origin == want->origin && c->pagesize == want->pagesize && c->numa == want->numa)
			return c;
	return NULL;
}

void *hp_ctx_numa(void *ctx, const char *policy)
{
	const struct hp_ctx *base = ctx ? ctx : hp_ctx(HP_ORIGIN_API, 0);
	uint64_t numa;
	HP_ERRNO_SAVE;

	hp_init();
	HP_NOCANCEL_BEGIN; /* the first parse asks libnuma for the nodes */
	int rc = knobs_parse(KNOB_NUMA, policy, &numa, NULL, 0);
	HP_NOCANCEL_END;
	if (rc < 0)
		return NULL; /* EINVAL; hp_knob_parse("numa", ...) says why */
	struct hp_ctx want = {.origin = base->origin, .pagesize = base->pagesize,
			      .has_numa = true, .numa = numa};
	struct hp_ctx *head = atomic_load(&derived), *c, *mine = NULL;
	for (;;) {
		if ((c = find_derived(head, &want)))
			break;
		if (!mine && !(mine = malloc(sizeof(*mine))))
			return NULL; /* ENOMEM */
		*mine = want;
		mine->next = head;
		if (atomic_compare_exchange_weak(&derived, &head, mine)) {
			c = mine;
			mine = NULL;
			break;
		}
		/* another thread pushed first: head is the new head, look again */
	}
	free(mine); /* the same context was interned by another thread */
	HP_ERRNO_RESTORE;
	return c;
}

void *hp_ctx_malloc(void *ctx, size_t size)
{
	if (!ctx)
		return hp_malloc(size);
	hp_init();
	return alloc_ctx(forced(ctx) && !size ? 1 : size, ctx, false);
}

void *hp_ctx_calloc(void *ctx, size_t nelem, size_t elsize)
{
	size_t total;
	if (!ctx)
		return hp_calloc(nelem, elsize);
	hp_init();
	if (__builtin_mul_overflow(nelem, elsize, &total))
		return fail_enomem();
	return alloc_ctx(forced(ctx) && !total ? 1 : total, ctx, true);
}

void *hp_ctx_realloc(void *ctx, void *ptr, size_t new_size)
{
	HP_ERRNO_SAVE;
	void *p = realloc_ctx(ptr, new_size, ctx);
	if (p)
		HP_ERRNO_RESTORE;
	return p;
}

void hp_ctx_free(void *ctx, void *ptr, size_t size)
{
	(void)ctx;
	hp_free_sized(ptr, size);
}

/* ---- the huge path alone, for interposers ----------------------------------------
 * The CPython raw-domain wrapper and the preload library keep their own
 * ordinary allocator for everything below threshold: these never hand out
 * or take back libc memory, and say "yours" (1) instead. */

int hp_owns(const void *ptr)
{
	return ptr && lookup(ptr) != NULL;
}

/* The interposers' fast path: one relaxed load for the common answer.
 * threshold is 0 only before knobs_init (its lowest value is 4K). */
size_t hp_huge_threshold(void)
{
	size_t t = atomic_load_explicit(&hp_cfg.threshold, memory_order_relaxed);

	if (unlikely(t == 0 || hp_inside) ||
	    atomic_load_explicit(&hp_cfg.mode, memory_order_relaxed) == MODE_OFF)
		return SIZE_MAX;
	return t;
}

static bool huge_alignment_ok(size_t alignment)
{
	return alignment <= HP_THP_SIZE && (alignment & (alignment - 1)) == 0;
}

static int huge_alloc_work(void *ctx, size_t size, size_t alignment, int zero, void **out)
{
	bool to_small;

	if (!out) {
		errno = EINVAL;
		return -1;
	}
	hp_init();
	if (!(forced(ctx) || wants_huge(size)) || !huge_alignment_ok(alignment))
		return 1;
	void *p = huge_try(size ? size : 1, ctx, zero != 0, &to_small);
	if (!p)
		return to_small ? 1 : -1;
	*out = p;
	return 0;
}

/* An interposed malloc called from hpalloc's own code (hp_inside: its
 * initialisation, the janitor, these two functions) gets "yours": it never
 * comes back into the huge path and its locks. */
int hp_huge_alloc(void *ctx, size_t size, size_t alignment, int zero, void **out)
{
	if (hp_inside && out)
		return 1;
	HP_NOCANCEL_BEGIN; /* as huge_alloc() */
	hp_inside++;
	int rc = huge_alloc_work(ctx, size, alignment, zero, out);
	hp_inside--;
	HP_NOCANCEL_END;
	return rc;
}

static int huge_realloc_work(void *ctx, void *ptr, size_t size, void **out)
{
	struct hp_block *b = ptr && out ? lookup(ptr) : NULL;
	bool to_small;
	HP_ERRNO_SAVE; /* mremap trying in place first, then moving */

	if (!b) {
		errno = EINVAL;
		return -1;
	}
	if (!(forced(ctx) || wants_huge(size)))
		return 1;
	if (size > HP_MAX_BLOCK) {
		fail_enomem();
		return -1;
	}
	if (size == 0)
		size = 1; /* forced: a block of one byte, as hp_huge_alloc() gives */
	void *np = resize_in_place(b, size, ctx);
	if (np) {
		*out = np;
		HP_ERRNO_RESTORE;
		return 0;
	}
	np = huge_try(size, ctx, false, &to_small);
	if (!np)
		return to_small ? 1 : -1;
	memcpy(np, ptr, b->map.len < size ? b->map.len : size);
	stat_add(HP_STAT_REALLOC_COPIES, 1);
	hp_free(ptr);
	*out = np;
	HP_ERRNO_RESTORE;
	return 0;
}

int hp_huge_realloc(void *ctx, void *ptr, size_t size, void **out)
{
	if (hp_inside && out && hp_owns(ptr))
		return 1;
	HP_NOCANCEL_BEGIN; /* as huge_alloc() */
	hp_inside++;
	int rc = huge_realloc_work(ctx, ptr, size, out);
	hp_inside--;
	HP_NOCANCEL_END;
	return rc;
}

/* ---- reports and maintenance ------------------------------------------------------- */

int hp_backing(const void *ptr, struct hp_backing *out)
{
	if (!ptr || !out) {
		errno = EINVAL;
		return -1;
	}
	HP_ERRNO_SAVE;
	hp_init();
	*out = (struct hp_backing){.backend = HP_BACKEND_SMALL, .requested_page_size = HP_BASE_PAGE};
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = reg_find_containing(ptr);
	struct hp_map m = b ? b->map : (struct hp_map){0}; /* copied: b may go once unlocked */
	pthread_mutex_unlock(&hp_heap_lock);
	bool found = b || shared_lookup(ptr, &m);
	int rc;
	if (!found) { /* libc memory, maybe not even ours: read no header, report the page */
		rc = hp_kernel_backing(ptr, 1, &out->kernel);
	} else {
		out->backend = m.backend;
		out->usable_size = out->mapping_size = m.len;
		out->requested_page_size = m.backend == HP_BACKEND_HUGETLB ? m.pagesize :
					   m.backend == HP_BACKEND_THP ? HP_THP_SIZE : HP_BASE_PAGE;
		rc = hp_kernel_backing(m.addr, m.len, &out->kernel);
	}
	if (rc == 0)
		HP_ERRNO_RESTORE;
	return rc;
}

int hp_backing_numa(const void *ptr, struct hp_backing_numa *out)
{
	if (!ptr || !out) {
		errno = EINVAL;
		return -1;
	}
	HP_ERRNO_SAVE;
	hp_init();
	*out = (struct hp_backing_numa){.policy = ""};
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = reg_find_containing(ptr);
	struct hp_map m = b ? b->map : (struct hp_map){0}; /* copied: b may go once unlocked */
	pthread_mutex_unlock(&hp_heap_lock);
	if (b)
		numa_format(m.numa, out->policy, sizeof(out->policy));
	int rc = b ? hp_kernel_numa(m.addr, m.len, &out->kernel) : hp_kernel_numa(ptr, 1, &out->kernel);
	if (rc == 0)
		HP_ERRNO_RESTORE;
	return rc;
}

void hp_cache_flush(void)
{
	HP_ERRNO_SAVE;
	hp_init();
	pthread_mutex_lock(&hp_heap_lock);
	release_adopt(cache_take_all());
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(false);
	HP_ERRNO_RESTORE;
}
