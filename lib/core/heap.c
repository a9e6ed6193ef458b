/* hp_malloc & co: route by size, source huge blocks and put them in the
 * registry (registry.c), realloc across every transition.
 *
 * Routing on free is by address, never by size or knobs: every huge block
 * starts on a 2 MiB (or 1 GiB) boundary, so a pointer that is not 2 MiB
 * aligned is small and goes straight to libc; an aligned one is looked up
 * in the registry.  Small blocks are small.c's.
 *
 * What the cache may keep and when it gives back is cache.c's: heap.c asks
 * it before a fresh mapping (cache_before_map) and on free
 * (cache_before_put, then cache_put under hp_heap_lock); it keeps the
 * give-backs that are no bound of the cache's -- a short hugetlb pool, a
 * forked child, hp_cache_flush -- and, without a janitor, the decay on
 * free (retire_locked). */
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

/* ---- huge path ------------------------------------------------------------------ */

static struct hp_block *cache_take_locked(uint64_t kind, size_t min_ps, size_t max_ps, size_t size)
{
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = cache_take(kind, min_ps, max_ps, size);
	pthread_mutex_unlock(&hp_heap_lock);
	return b;
}

/* The cache first, for any block the knobs accept (policy.c's looks): a
 * hit costs no syscall and no look at the pools. */
static struct hp_block *take_cached(size_t size, const struct hp_ctx *ctx, hp_numa_t numa)
{
	struct hp_cache_search looks[2];
	int n = policy_cache_searches(ctx, numa, looks);
	struct hp_block *b = NULL;

	for (int i = 0; i < n && !b; i++)
		b = cache_take_locked(looks[i].kind, looks[i].min_ps, looks[i].max_ps, size);
	return b;
}

/* A fresh mapping placed by numa before anyone touches it.  A placement
 * that cannot be applied unmaps it (numa.c: the block is refused). */
static int map_placed(struct hp_plan p, size_t size, hp_numa_t numa, struct hp_map *m)
{
	if (!policy_nodes_can_serve(p, size, numa)) {
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

/* A fresh block, the cache having given back first what it must -- or
 * none, *to_libc set, when the memory cgroup has no room for it and libc
 * holds free memory enough (cache_before_map): the program without
 * hpalloc would have had its buffer from there, and a fresh block charged
 * on top of it could leave the next fault nothing to reclaim
 * (tests/c/memcg_libc_hole.c).  to_libc NULL: only from hpalloc (a placed
 * or forced block, or a hugetlb one). */
static struct hp_block *new_block(struct hp_plan p, size_t size, hp_numa_t numa, bool *to_libc)
{
	struct hp_map m;
	bool libc_may = to_libc && numa == HP_NUMA_DEFAULT;
	if (!cache_before_map(p.backend, size, libc_may)) {
		*to_libc = true;
		return NULL;
	}
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
	b->family = pieces_new_family();
	b->fork_gen = heap_fork_gen;
	stat_add(HP_STAT_MAPPED_BYTES, m.len);
	pthread_mutex_lock(&hp_heap_lock);
	cache_missed(hp_now_ms()); /* the decay learns from fresh mappings */
	pthread_mutex_unlock(&hp_heap_lock);
	background_start(); /* a huge block: now there is work for the janitor */
	return b;
}

/* A short hugetlb pool may be short only because of us: cached blocks and
 * releases still in flight hold its pages.  Give those back (now, in this
 * thread) and try once more before the fallback decides. */
static struct hp_block *new_block_reclaiming(struct hp_plan p, size_t size, hp_numa_t numa)
{
	struct hp_block *b = new_block(p, size, numa, NULL);
	if (b || p.backend != HP_BACKEND_HUGETLB || errno != ENOMEM)
		return b; /* not short of pages (a refused placement): no use */
	/* Every block that left the heap before this point is on release.c's
	 * lists (handed over under the lock): releasing those and waiting for
	 * them is enough.  Try again even if none is left: the last one may
	 * have gone between the failed mmap and this look. */
	cache_empty(HP_BACKEND_HUGETLB, true);
	release_drain();
	return new_block(p, size, numa, NULL);
}

/* b becomes live: the registry's, counted in the live gauges; its address. */
static void *make_live(struct hp_block *b)
{
	b->dirty = true;
	b->clean = false; /* its user may protect or advise it: undone before it is cached again */
	pthread_mutex_lock(&hp_heap_lock);
	reg_insert(b);
	pthread_mutex_unlock(&hp_heap_lock);
	stats_block_live(b, true);
	return b->map.addr;
}

/* A THP block: cached, else from the cache's pieces, else fresh (or none,
 * see new_block's to_libc). */
static struct hp_block *thp_block(size_t size, hp_numa_t numa, bool *cached, bool *to_libc)
{
	struct hp_block *b = cache_take_locked(cache_kind(HP_BACKEND_THP, numa), HP_BASE_PAGE, HP_BASE_PAGE, size);
	if (!b)
		b = thp_from_pieces(size, numa);
	*cached = b != NULL;
	return b ? b : new_block((struct hp_plan){HP_BACKEND_THP, 0}, size, numa, to_libc);
}

/* Where a block comes from, in order: the cache (any kind the knobs
 * accept, placed as wanted), a fresh mapping of the planned kind, then
 * the fallback -- whose THP blocks are again cached ones first. */
static struct hp_block *huge_block(size_t size, const struct hp_ctx *ctx, bool *cached, bool *to_libc)
{
	hp_numa_t numa = numa_of(ctx);
	struct hp_block *b = take_cached(size, ctx, numa);
	if (forced(ctx))
		to_libc = NULL; /* a page size asked for: hpalloc's or none */
	if ((*cached = b != NULL))
		return b;
	struct hp_plan p = policy_plan(size, ctx, numa);
	if (p.backend == HP_BACKEND_THP)
		return thp_block(size, numa, cached, to_libc);
	b = new_block_reclaiming(p, size, numa);
	if (b)
		return b;
	stat_add(HP_STAT_FALLBACKS, 1);
	if (policy_fallback() != HP_BACKEND_THP)
		return NULL;
	hp_log(1, "hugetlb pool short for %zu bytes: using THP", size);
	return thp_block(size, numa, cached, to_libc);
}

/* The huge path alone: a live block, or NULL -- with *to_small set
 * when fallback=small sends the request to the ordinary path (the caller
 * decides whose ordinary path) or libc holds the memory a memory cgroup
 * leaves no room for (new_block), else ENOMEM. */
void *huge_try(size_t size, const struct hp_ctx *ctx, bool zero, bool *to_small)
{
	HP_ERRNO_SAVE; /* pool probes and fallbacks leave theirs */
	bool cached, to_libc = false;

	*to_small = false;
	if (size > HP_MAX_BLOCK)
		return fail_enomem();
	struct hp_block *b = huge_block(size, ctx, &cached, &to_libc);
	if (to_libc) { /* the ordinary path takes it from libc's free memory */
		stat_add(HP_STAT_MEMCG_LIBC_BLOCKS, 1);
		*to_small = true;
		HP_ERRNO_RESTORE;
		return NULL;
	}
	stat_add(cached ? HP_STAT_CACHE_HITS : HP_STAT_CACHE_MISSES, 1);
	if (!b && policy_fallback() == HP_BACKEND_SMALL) {
		hp_log(1, "hugetlb pool short for %zu bytes: using libc", size);
		*to_small = true;
		HP_ERRNO_RESTORE; /* "yours": the caller's allocator runs next */
		return NULL;
	}
	if (!b)
		return fail_enomem();
	if (zero && cached && b->dirty) /* fresh anonymous memory is zero */
		memset(b->map.addr, 0, size);
	if (!cached)
		background_fresh(&b->map); /* before anyone else can free it */
	b->origin = origin_of(ctx);
	HP_ERRNO_RESTORE;
	return make_live(b);
}

/* Every huge allocation comes through here or hp_huge_*() (huge_api.c): no
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

/* hp_heap_lock held, b just taken out of the registry: to the cache, which
 * keeps it or hands it to release.c, in the same critical section, so a
 * fork never finds it owned by nobody.  An inherited block is never clean
 * (hp_free does not make it so: its pages are the parent's too), so the
 * cache never keeps one.  Without a janitor the cache decays here, on
 * free.  The caller calls release_flush() once unlocked. */
static void retire_locked(struct hp_block *b)
{
	uint64_t now = hp_now_ms(), deadline;

	stats_block_live(b, false);
	b->next = NULL;
	cache_put(b, now);
	if (!background_running())
		cache_expire(now, &deadline);
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
	cache_forked();
	cache_empty(-1, true); /* no janitor, no ring in the child yet */
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
	size_t base_off, base_len;
	background_forget(ptr, &base_off, &base_len); /* no worker inside it from here on */
	struct hp_block *b = reg_find(ptr, false);
	if (b && !inherited(b))
		cache_before_put(b, base_off, base_len); /* still live: the caller's alone */
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

size_t hp_usable_size(const void *ptr)
{
	if (!ptr)
		return 0;
	struct hp_block *b = reg_lookup(ptr);
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
	if (policy_keeps(b->map.len, size))
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
void *resize_in_place(struct hp_block *b, size_t size, const struct hp_ctx *ctx)
{
	if (b->map.numa != numa_of(ctx))
		return NULL; /* placed under another policy: the copy is placed anew */
	if (policy_keeps(b->map.len, size)) {
		stat_add(HP_STAT_REALLOC_INPLACE, 1);
		return b->map.addr;
	}
	if (b->map.backend != HP_BACKEND_THP || forced(ctx))
		return NULL;
	background_forget(b->map.addr, NULL, NULL); /* it may move, its pages as they are */
	pthread_mutex_lock(&hp_heap_lock);
	reg_find(b->map.addr, true);
	pthread_mutex_unlock(&hp_heap_lock);
	stats_block_live(b, false);
	int rc = resize_thp(b, size);
	void *p = make_live(b); /* old or new place, always registered */
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
	struct hp_block *b = reg_lookup(ptr);
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
		pagesize = policy_pagesize(size, numa_of(NULL));
		HP_NOCANCEL_END;
	}
	struct hp_ctx *ctx = hp_ctx_pagesize(pagesize);
	if (!ctx)
		return NULL;
	return huge_alloc(size ? size : 1, ctx, zero != 0);
}

/* ---- allocation through a context (context.c): NEP 49 handler, Numba, PyTorch ------- */

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

/* ---- maintenance ------------------------------------------------------------------ */

void hp_cache_flush(void)
{
	HP_ERRNO_SAVE;
	hp_init();
	cache_empty(-1, false);
	HP_ERRNO_RESTORE;
}
