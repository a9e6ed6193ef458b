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

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static __thread struct small_cache *my_cache __attribute__((tls_model("initial-exec")));
static __thread bool cache_dead __attribute__((tls_model("initial-exec")));

static inline struct small_header *header(const void *p)
{
	return (struct small_header *)p - 1;
}

/* 0 for sizes the cache does not keep. */
static inline size_t class_of(size_t size)
{
	return size <= CACHED_MAX ? (size + (1u << CLASS_SHIFT) - 1) >> CLASS_SHIFT : 0;
}

static void cache_destroy(void *arg)
{
	struct small_cache *c = arg;
	for (size_t k = 1; k <= NCLASSES; k++)
		for (unsigned i = 0; i < c->count[k]; i++)
			free(header(c->blocks[k][i])->raw);
	free(c);
	my_cache = NULL;
	cache_dead = true; /* frees during other destructors go straight to libc */
}

static void cache_key_create(void)
{
	pthread_key_create(&cache_key, cache_destroy);
}

static struct small_cache *cache_get(void)
{
	if (likely(my_cache != NULL) || cache_dead)
		return my_cache;
	struct small_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL; /* no cache is slower, not wrong */
	pthread_once(&cache_once, cache_key_create);
	pthread_setspecific(cache_key, c);
	return my_cache = c;
}

static void *fail_enomem(void)
{
	stat_add(HP_STAT_FAILURES, 1);
	errno = ENOMEM;
	return NULL;
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
	struct small_cache *c = k ? cache_get() : NULL;

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
	struct small_cache *c = k ? cache_get() : NULL;

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
