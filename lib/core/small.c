/* The ordinary path: requests below `threshold` (or every request with
 * mode=off) get libc memory, 64-byte aligned.
 *
 * A block is malloc(capacity + 64) with the pointer rounded up to 64;
 * malloc's 16-byte alignment always leaves >= 16 bytes in front for a
 * header holding what libc returned and the requested size.
 *
 * Those 64 extra bytes push a 1 KiB array (128 doubles) past glibc's
 * tcache limit (1032 bytes) onto its slow path, so blocks up to
 * CACHED_MAX are kept in a small per-thread cache, like NumPy's
 * npy_alloc_cache: capacity rounded up to a 64-byte class, at most
 * PER_CLASS blocks per class, freed for real when the thread exits. */
#include "internal.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define CLASS_SHIFT 6
#define CACHED_MAX 2048
#define NCLASSES (CACHED_MAX >> CLASS_SHIFT)
#define PER_CLASS 4

struct small_header {
	void *raw;
	size_t size;
};

struct small_cache {
	uint8_t count[NCLASSES + 1];
	void *blocks[NCLASSES + 1][PER_CLASS];
};

static pthread_key_t thread_cache_key;
static pthread_once_t thread_cache_once = PTHREAD_ONCE_INIT;
static __thread struct small_cache *my_cache __attribute__((tls_model("initial-exec")));
static __thread bool thread_cache_dead __attribute__((tls_model("initial-exec")));

static inline struct small_header *header(const void *p)
{
	return (struct small_header *)p - 1;
}

/* 0 for sizes the cache does not keep. */
static inline size_t class_of(size_t size)
{
	return size <= CACHED_MAX ? (size + (1u << CLASS_SHIFT) - 1) >> CLASS_SHIFT : 0;
}

static void thread_cache_destroy(void *arg)
{
	struct small_cache *c = arg;
	for (size_t k = 1; k <= NCLASSES; k++)
		for (unsigned i = 0; i < c->count[k]; i++)
			free(header(c->blocks[k][i])->raw);
	free(c);
	my_cache = NULL;
	thread_cache_dead = true; /* frees during other destructors go straight to libc */
}

static void thread_cache_key_create(void)
{
	pthread_key_create(&thread_cache_key, thread_cache_destroy);
}

static struct small_cache *thread_cache_get(void)
{
	if (likely(my_cache != NULL) || thread_cache_dead)
		return my_cache;
	struct small_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL; /* no cache is slower, not wrong */
	pthread_once(&thread_cache_once, thread_cache_key_create);
	pthread_setspecific(thread_cache_key, c);
	return my_cache = c;
}

static inline void *handout(void *p, size_t size)
{
	header(p)->size = size;
	stats_live_add(HP_BACKEND_SMALL, size);
	return p;
}

void *small_alloc(size_t size, bool zero)
{
	size_t k = class_of(size);
	struct small_cache *c = k ? thread_cache_get() : NULL;

	if (c && c->count[k]) {
		void *p = c->blocks[k][--c->count[k]];
		if (zero)
			memset(p, 0, size);
		return handout(p, size);
	}
	size_t capacity = k ? k << CLASS_SHIFT : size;
	if (capacity > SIZE_MAX - HP_SMALL_ALIGN)
		return fail_enomem();
	char *raw = zero ? calloc(1, capacity + HP_SMALL_ALIGN) : malloc(capacity + HP_SMALL_ALIGN);
	if (unlikely(!raw))
		return fail_enomem();
	char *p = (char *)(((uintptr_t)raw + HP_SMALL_ALIGN) & ~(uintptr_t)(HP_SMALL_ALIGN - 1));
	header(p)->raw = raw;
	return handout(p, size);
}

void small_free(void *p)
{
	size_t size = header(p)->size, k = class_of(size);
	struct small_cache *c = k ? thread_cache_get() : NULL;

	stats_live_sub(HP_BACKEND_SMALL, size);
	if (c && c->count[k] < PER_CLASS) {
		c->blocks[k][c->count[k]++] = p;
		return;
	}
	free(header(p)->raw);
}

size_t small_size(const void *p)
{
	return header(p)->size;
}

size_t small_usable(const void *p)
{
	void *raw = header(p)->raw;
	return malloc_usable_size(raw) - (size_t)((const char *)p - (char *)raw);
}

/* New block, copy, free: keeps the 64-byte alignment without guessing
 * where libc's realloc would put it. */
void *small_realloc(void *p, size_t size)
{
	size_t old = header(p)->size;
	void *np = small_alloc(size, false);
	if (!np)
		return NULL;
	memcpy(np, p, size < old ? size : old);
	small_free(p);
	return np;
}

/* ---- what libc would have learnt ----------------------------------------------
 * glibc raises its mmap threshold to the size of every mmapped chunk a
 * program frees (up to 32 MiB on 64-bit, DEFAULT_MMAP_THRESHOLD_MAX; see
 * M_MMAP_THRESHOLD in mallopt(3)) and then keeps twice that free at the top
 * of its heap before trimming it: once a NumPy program has freed an array of
 * a few MiB, its other buffers of that size (pandas' hash tables, BLAS work
 * space) come from the heap, already faulted in.  hpalloc takes those frees
 * away from libc, whose thresholds then stay where its own small frees left
 * them: a pandas groupby on 20 M rows had its heap trimmed and grown back on
 * every call, 22 MiB of fresh pages each time (5,500 faults against 965).
 * So the first free of each new largest huge block up to that cap is
 * replayed to libc, a malloc and a free of the same size: libc adapts as it
 * would have without hpalloc.  Nothing is touched (libc maps the chunk and
 * unmaps it at once), and it happens once per new largest size. */
#define LIBC_LEARN_MAX (32 * HP_MiB)

static _Atomic size_t libc_learnt;

void small_libc_learn(size_t size)
{
	size_t seen = atomic_load_explicit(&libc_learnt, memory_order_relaxed);

	if (likely(size <= seen) || size > LIBC_LEARN_MAX ||
	    !atomic_compare_exchange_strong(&libc_learnt, &seen, size))
		return;
	/* ASan's allocator has no thresholds to teach, and it would keep the
	 * chunk mapped in its quarantine, wherever a freed block left room:
	 * there only what glibc would have learnt is recorded */
#if !defined(__SANITIZE_ADDRESS__)
	hp_inside++; /* an interposed malloc (the preload library) must pass this to libc */
	void *volatile chunk = malloc(size - 2 * sizeof(size_t)); /* a chunk of size, header included */
	free(chunk);
	hp_inside--;
#endif
}

size_t small_libc_learnt(void)
{
	return atomic_load_explicit(&libc_learnt, memory_order_relaxed);
}

/* ---- what libc holds free ----------------------------------------------------
 * glibc keeps freed heap memory below a chunk still in use (it trims only
 * the top of its heap): resident, charged to the memory cgroup, and no
 * swap takes it.  Without hpalloc it would serve the program's next large
 * buffers from there; with hpalloc those come from fresh huge mappings, and
 * in a cgroup near its limit the kernel finds nothing to reclaim for them
 * -- bench/numpy_bench.py's reuse-pressure row (NumPy 2.x: 256 MiB of
 * 256 KiB arrays freed below a live one, then 4 x 64 MiB) was OOM-killed
 * every time where NumPy's default ran on in that hole.  So when a fresh
 * block would not fit under the limit (cache.c decides, cache_before_map,
 * from memcg.c's measure), libc gives back what it holds free first
 * (malloc_trim(0): MADV_DONTNEED of its free pages, arena by arena, under
 * its own locks; no cancellation point). */
void small_libc_give_back(void)
{
	int saved = errno; /* a failed madvise inside must not show through a malloc that succeeds */
	hp_inside++;       /* nothing in it should reach an interposed malloc; if it does, libc's */
	malloc_trim(0);
	hp_inside--;
	errno = saved;
	stat_add(HP_STAT_LIBC_TRIMS, 1);
}

/* Whether libc would serve a request of size, in the small path's chunk
 * (size + HP_SMALL_ALIGN), from memory it holds free: asked, looked at,
 * given back.  glibc takes a request from its free chunks before it grows
 * its heap or maps one, and gives the same chunk again to the same request
 * next (its unsorted list, exact fit first).  Only its main heap counts:
 * a chunk mapped for the request (IS_MMAPPED in its header) or a heap
 * grown for it (the break moved) is fresh memory, and a thread arena's
 * heap cannot tell (NON_MAIN_ARENA); and the memory must be resident.
 * glibc's chunk header, so glibc only; under ASan no (its allocator is
 * not glibc's). */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define GLIBC_IS_MMAPPED 0x2
#define GLIBC_NON_MAIN_ARENA 0x4

/* The flags of the size field in front of a chunk glibc's malloc returned. */
static size_t glibc_chunk_flags(const void *p)
{
	return *(const size_t *)((uintptr_t)p - sizeof(size_t)) & 0x7;
}

/* Seven in eight of [p, p+len)'s pages resident, one looked at per 2 MiB:
 * free memory libc gave back (malloc_trim) is free still, but charged and
 * faulted afresh, on 4 KiB pages -- a fresh huge block is better then. */
static bool mostly_resident(const char *p, size_t len)
{
	size_t looked = 0, resident = 0;
	for (size_t off = 0; off < len; off += HP_THP_SIZE, looked++)
		resident += prim_resident(p + off) == 1;
	return resident * 8 >= looked * 7;
}
#endif

bool small_libc_has_free(size_t size)
{
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
	if (size > SIZE_MAX - HP_SMALL_ALIGN)
		return false;
	int saved = errno;
	hp_inside++; /* an interposed malloc (the preload library) must pass this to libc */
	void *brk_before = prim_heap_break();
	void *raw = malloc(size + HP_SMALL_ALIGN);
	bool held = raw && !(glibc_chunk_flags(raw) & (GLIBC_IS_MMAPPED | GLIBC_NON_MAIN_ARENA)) &&
		    prim_heap_break() == brk_before && mostly_resident(raw, size);
	free(raw);
	hp_inside--;
	errno = saved;
	return held;
#else
	(void)size;
	return false;
#endif
}
