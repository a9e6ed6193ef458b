/* libhpalloc-preload.so: the large allocations of any dynamically linked
 * program on huge pages, unmodified (LD_PRELOAD, or `hpctl run --preload`).
 *
 * Not part of libhpalloc: a shared object of its own, linked against
 * libhpalloc.so.1, interposing malloc & co and using the public API alone.
 * A process therefore has one allocator state whoever calls it (this
 * library, NumPy's handler, hp_malloc), and a pointer always goes back to
 * its one owner.
 *
 * Routing
 *   A new block by size: below hp_huge_threshold() straight to glibc's own
 *   entry points (__libc_malloc & co, which glibc exports for wrappers like
 *   this one and which never call back into the interposed names); at or
 *   above it, hp_huge_alloc(), which answers 1 ("yours") whenever the huge
 *   path does not take the request (mode=off, an alignment above 2 MiB,
 *   fallback=small on a short pool): glibc again.
 *   An existing block by address: every huge block starts on a 2 MiB
 *   boundary, so a pointer that is not 2 MiB aligned is glibc's without
 *   asking anyone; an aligned one is hpalloc's if hp_owns() says so.  This
 *   holds for pointers glibc handed out before this library was
 *   initialised, or while hpalloc's own code was running.
 *
 * No recursion, no deadlock
 *   hpalloc's own mallocs (stdio, opendir, liburing, pthread_create, block
 *   records; in its initialisation and in its janitor thread) see
 *   hp_huge_threshold() == SIZE_MAX and go to glibc.  hp_owns() takes only
 *   the registry's innermost lock, so free() is safe from any context.
 *   Nothing here calls dlsym() on an allocation path: the one glibc function
 *   without a __libc_ name, malloc_usable_size, is looked up once, in the
 *   constructor, through the handle of the loaded libc.
 *
 * Fork
 *   hpalloc's pthread_atfork handlers hold every hpalloc lock across fork();
 *   glibc's fork takes its malloc locks after the prepare handlers and
 *   releases them in the child before the child handlers, so the order is
 *   always hpalloc's locks first, then glibc's, as on every path here.
 *
 * Start-up
 *   Until the library has read its knobs, hp_huge_threshold() is SIZE_MAX:
 *   what the dynamic linker and other libraries' constructors allocate
 *   before ours is glibc's.  The constructor initialises hpalloc (knobs,
 *   control directory) in a well-defined context, not in whatever
 *   allocation happens to come first.  It starts no thread: like glibc's
 *   malloc, hpalloc starts its janitor only when there is work for it, at
 *   the first huge block (lib/threads/janitor.c).  A program whose allocations all
 *   stay below the threshold remains a process of one thread -- one that
 *   may still unshare(CLONE_NEWUSER), as bwrap and rootless containers do
 *   -- and appears in `hpctl stats` from its first huge block on.
 *
 * Cancellation
 *   glibc's malloc & co are no cancellation points; hpalloc's entry points
 *   called here are none either (lib/core/internal.h, HP_NOCANCEL_BEGIN), and
 *   the small path below the threshold never leaves glibc.
 */
#include "hpalloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/lib-names.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PUBLIC __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HUGE_ALIGN ((uintptr_t)2 << 20)

/* glibc's allocator itself (GLIBC_2.2.5), below the interposable names. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_memalign(size_t alignment, size_t size);

typedef size_t (*usable_fn)(void *);
static _Atomic(usable_fn) libc_usable_size;
static void *_Atomic preload_ctx_cache;

/* Every huge block is allocated through this context: `hpctl stats` and
 * hp_stats_get() count them as preload_huge_bytes. */
static void *preload_ctx(void)
{
	void *ctx = atomic_load_explicit(&preload_ctx_cache, memory_order_relaxed);
	if (unlikely(!ctx)) {
		ctx = hp_ctx(HP_ORIGIN_PRELOAD, 0); /* immortal, same value every time */
		atomic_store_explicit(&preload_ctx_cache, ctx, memory_order_relaxed);
	}
	return ctx;
}

static inline bool maybe_huge(const void *p)
{
	return ((uintptr_t)p & (HUGE_ALIGN - 1)) == 0 && p;
}

static inline bool is_huge(const void *p)
{
	return maybe_huge(p) && hp_owns(p);
}

/* ---- glibc's side ------------------------------------------------------------ */

static usable_fn resolve_usable_size(void)
{
	void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
	usable_fn fn = libc ? (usable_fn)dlsym(libc, "malloc_usable_size") : NULL;

	if (libc)
		dlclose(libc);
	if (!fn) { /* not glibc: nothing here could work */
		static const char msg[] = "libhpalloc-preload: glibc's malloc_usable_size not found\n";
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
		abort();
	}
	atomic_store_explicit(&libc_usable_size, fn, memory_order_release);
	return fn;
}

static size_t libc_usable(void *ptr)
{
	usable_fn fn = atomic_load_explicit(&libc_usable_size, memory_order_acquire);
	return (fn ? fn : resolve_usable_size())(ptr);
}

static void *libc_alloc(size_t size, size_t alignment, bool zero)
{
	if (zero)
		return __libc_calloc(1, size);
	return alignment ? __libc_memalign(alignment, size) : __libc_malloc(size);
}

/* ---- the huge path --------------------------------------------------------------- */

/* A request at or above the threshold: hpalloc's, or glibc's when hpalloc
 * says "yours" (errno as the caller left it).  NULL + ENOMEM only when
 * hpalloc failed and the fallback knob says fail. */
static void *alloc_slow(size_t size, size_t alignment, bool zero)
{
	int saved = errno;
	void *p;
	int rc = hp_huge_alloc(preload_ctx(), size, alignment, zero, &p);

	if (rc == 0)
		return p;
	if (rc < 0)
		return NULL;
	errno = saved;
	return libc_alloc(size, alignment, zero);
}

static inline void *alloc_aligned(size_t alignment, size_t size)
{
	/* an alignment that is not a power of two: glibc's rules (2.36 rounds
	 * it up, later versions refuse it) */
	if (likely(size < hp_huge_threshold()) || (alignment & (alignment - 1)))
		return __libc_memalign(alignment, size);
	return alloc_slow(size, alignment, false);
}

/* ptr is glibc's and size wants the huge path: move it there. */
static void *realloc_into_huge(void *ptr, size_t size)
{
	int saved = errno;
	void *np;
	int rc = hp_huge_alloc(preload_ctx(), size, 0, 0, &np);

	if (rc < 0)
		return NULL; /* the old block is untouched */
	if (rc == 1) {
		errno = saved;
		return __libc_realloc(ptr, size);
	}
	size_t old = libc_usable(ptr);
	memcpy(np, ptr, old < size ? old : size);
	__libc_free(ptr);
	return np;
}

/* ptr is hpalloc's: resized there, or moved to glibc below the threshold. */
static void *realloc_huge(void *ptr, size_t size)
{
	int saved = errno;
	void *np;

	if (size == 0) { /* glibc frees and returns NULL: so do we */
		hp_free(ptr);
		return NULL;
	}
	int rc = hp_huge_realloc(preload_ctx(), ptr, size, &np);
	if (rc == 0)
		return np;
	if (rc < 0)
		return NULL;
	errno = saved;
	np = __libc_malloc(size);
	if (!np)
		return NULL;
	size_t old = hp_usable_size(ptr);
	memcpy(np, ptr, old < size ? old : size);
	hp_free(ptr);
	return np;
}

static void *realloc_any(void *ptr, size_t size)
{
	if (unlikely(maybe_huge(ptr)) && hp_owns(ptr))
		return realloc_huge(ptr, size);
	if (likely(size < hp_huge_threshold()))
		return __libc_realloc(ptr, size); /* NULL ptr: malloc */
	if (!ptr)
		return alloc_slow(size, 0, false);
	return realloc_into_huge(ptr, size);
}

/* ---- the interposed functions ------------------------------------------------------ */

PUBLIC void *malloc(size_t size)
{
	if (likely(size < hp_huge_threshold()))
		return __libc_malloc(size);
	return alloc_slow(size, 0, false);
}

PUBLIC void free(void *ptr)
{
	if (likely(!maybe_huge(ptr)) || !hp_owns(ptr))
		__libc_free(ptr);
	else
		hp_free(ptr);
}

PUBLIC void *calloc(size_t nmemb, size_t size)
{
	size_t total;

	if (unlikely(__builtin_mul_overflow(nmemb, size, &total))) {
		errno = ENOMEM;
		return NULL;
	}
	if (likely(total < hp_huge_threshold()))
		return __libc_calloc(nmemb, size);
	return alloc_slow(total, 0, true);
}

PUBLIC void *realloc(void *ptr, size_t size)
{
	return realloc_any(ptr, size);
}

PUBLIC void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc_any(ptr, total);
}

PUBLIC int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	if (alignment == 0 || alignment % sizeof(void *) || (alignment & (alignment - 1)))
		return EINVAL;
	void *p = alloc_aligned(alignment, size);
	if (!p)
		return ENOMEM;
	*memptr = p;
	return 0;
}

PUBLIC void *aligned_alloc(size_t alignment, size_t size)
{
	return alloc_aligned(alignment, size);
}

PUBLIC void *memalign(size_t alignment, size_t size)
{
	return alloc_aligned(alignment, size);
}

/* valloc and pvalloc are memalign(page, ...) in glibc too; going through
 * __libc_memalign keeps tools that replace glibc's allocator (valgrind
 * aborts on pvalloc) working. */
PUBLIC void *valloc(size_t size)
{
	return alloc_aligned((size_t)getpagesize(), size);
}

PUBLIC void *pvalloc(size_t size)
{
	size_t page = (size_t)getpagesize(), rounded;

	if (__builtin_add_overflow(size, page - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	rounded &= ~(page - 1);
	return alloc_aligned(page, rounded ? rounded : page);
}

PUBLIC size_t malloc_usable_size(void *ptr)
{
	if (unlikely(is_huge(ptr)))
		return hp_usable_size(ptr);
	return libc_usable(ptr);
}

/* ---- start-up -------------------------------------------------------------------------- */

/* `hpctl run --check`: this process runs with hpalloc.  The library owns
 * the line, the file's checks and secure execution (hp_report_activation). */
static void report(void)
{
	char detail[64];
	int saved = errno; /* the program's, even when the file is refused */

	snprintf(detail, sizeof(detail), "threshold %zu", hp_huge_threshold());
	hp_report_activation("preload", 1, detail);
	errno = saved;
}

__attribute__((constructor)) static void preload_init(void)
{
	void *unused;

	preload_ctx();
	resolve_usable_size();
	/* Initialise hpalloc here and now (no thread: see Start-up above).
	 * hp_huge_alloc() does, and answers 1 for a size below every possible
	 * threshold without allocating. */
	hp_huge_alloc(preload_ctx(), 0, 0, 0, &unused);
	report();
}
