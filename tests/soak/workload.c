/* The soak's workload (tests/soak/soak.py drives it; docs/soak.md).
 *
 * N threads allocate, reallocate, grow, shrink, hand over and free blocks of
 * every size class and backend, and fork at random moments.  Every block is
 * filled with a pattern derived from (seed, block id, generation) and
 * checked in full before each free and after each realloc (the bytes both
 * sizes hold); calloc'ed and zero-asked blocks are checked to be zero first.
 * A mismatch prints the block's history and aborts.  The seed is printed at
 * start; the same seed gives every thread the same sequence of choices.
 *
 * Built twice from this file:
 *   soak-workload  the hp_* API (hp_malloc, hp_calloc, hp_realloc, hp_free,
 *                  hp_free_sized, hp_malloc_pagesize 2M/1G, hp_ctx_* with
 *                  NUMA policies, shared blocks), linked with libhpalloc;
 *   soak-plain     (-DSOAK_PLAIN) a plain program: malloc, calloc, realloc,
 *                  reallocarray, posix_memalign, aligned_alloc, memalign,
 *                  free -- run under libhpalloc-preload.so.  It looks up the
 *                  few hp_* calls it needs for the driver (hp_owns,
 *                  hp_usable_size, hp_cache_flush, hp_release_drain,
 *                  hp_backing) at run time and refuses to run without them.
 *
 * The driver talks to the main thread, one command per line on stdin, one
 * reply per line on stdout:
 *   park     every worker finishes the operation it is in and waits; the
 *            live blocks are written to the --list file; reply "parked"
 *   drain    (parked) hp_cache_flush() + hp_release_drain(); the list
 *            again; reply "drained"
 *   resume   the workers go on; reply "resumed"
 *   finish   (parked) every block checked and freed, then flush + drain;
 *            the (empty) list; reply "finished"
 *   forks on|off   fork at random moments, or not; reply "forks on|off"
 *   exit     reply "summary k=v ..." and exit 0
 * End of stdin (the driver is gone) ends the process at once.
 *
 * The --list file, written while every worker is parked:
 *   B <address> <hp_usable_size> <hp_owns> <size> <id>   a private block
 *   S <address> <length>                                 a shared mapping
 *   E                                                    end
 */
#include "hpalloc.h"
#include "../c/kfile.h"
#include "../c/pool.h"
#include "../c/smaps.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define SLOTS 24
#define HIST 12
#define QUEUE 8
#define MAX_THREADS 64
#define MAX_BLOCK (64 * MiB)

/* ---- the library, as the driver needs it ------------------------------- */
/* Linked directly in soak-workload; looked up in the preloaded library in
 * soak-plain (which must not link libhpalloc: it is a plain program). */
static struct {
	int (*owns)(const void *);
	size_t (*usable_size)(const void *);
	void (*cache_flush)(void);
	void (*release_drain)(void);
	int (*backing)(const void *, struct hp_backing *);
	const char *(*backend_name)(int);
} lib;

#ifdef SOAK_PLAIN
static const char *const variant = "plain (malloc & co under libhpalloc-preload.so)";
static void lib_init(void)
{
	lib.owns = (int (*)(const void *))dlsym(RTLD_DEFAULT, "hp_owns");
	lib.usable_size = (size_t (*)(const void *))dlsym(RTLD_DEFAULT, "hp_usable_size");
	lib.cache_flush = (void (*)(void))dlsym(RTLD_DEFAULT, "hp_cache_flush");
	lib.release_drain = (void (*)(void))dlsym(RTLD_DEFAULT, "hp_release_drain");
	lib.backing = (int (*)(const void *, struct hp_backing *))dlsym(RTLD_DEFAULT, "hp_backing");
	lib.backend_name = (const char *(*)(int))dlsym(RTLD_DEFAULT, "hp_backend_name");
	if (!lib.owns || !lib.usable_size || !lib.cache_flush || !lib.release_drain || !lib.backing ||
	    !lib.backend_name) {
		fprintf(stderr, "soak-plain: hp_* not found: run me under libhpalloc-preload.so\n");
		exit(2);
	}
}
#else
static const char *const variant = "hp_* API";
static void lib_init(void)
{
	lib.owns = hp_owns;
	lib.usable_size = hp_usable_size;
	lib.cache_flush = hp_cache_flush;
	lib.release_drain = hp_release_drain;
	lib.backing = hp_backing;
	lib.backend_name = hp_backend_name;
}
#endif

/* ---- options ---------------------------------------------------------------- */
static uint64_t g_seed;
static int g_threads = 4;
static size_t g_budget = 256 * MiB;
static bool g_have_1g;
static const char *g_list = "soak-blocks.txt";
static const char *g_inject = ""; /* corrupt | foreign: prove the checks fail */
static _Atomic bool g_no_fork;   /* the driver turns forks off and on ("forks off") */
static bool g_probe;
static unsigned g_kinds = ~0u;    /* kinds allowed (bits of enum kind): narrowing a failure down */

/* ---- time, random numbers, pattern ------------------------------------------ */
static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
static uint64_t t0_us;

static inline uint64_t mix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

struct rng { uint64_t s; };
static inline uint64_t rnd(struct rng *r) { return mix64(r->s++); }
static inline size_t rnd_below(struct rng *r, size_t n) { return n ? (size_t)(rnd(r) % n) : 0; }
static inline size_t rnd_range(struct rng *r, size_t lo, size_t hi) { return lo + rnd_below(r, hi - lo + 1); }

/* Word w of a block's pattern: distinct per (seed, id, generation) and per
 * position, so a block holding another block's bytes, or its own bytes at
 * the wrong offset, never passes. */
#define STEP 0x9E3779B97F4A7C15ull
static inline uint64_t pattern_base(uint64_t id, uint32_t gen)
{
	return mix64(g_seed ^ mix64(id * 0x100000001B3ull + gen));
}
static inline uint64_t pat_word(uint64_t base, size_t w) { return base + (uint64_t)w * STEP; }
static inline unsigned char pat_byte(uint64_t base, size_t off)
{
	return (unsigned char)(pat_word(base, off / 8) >> (8 * (off % 8)));
}

/* Blocks start 8-byte aligned at least (16 from libc, 64 from hpalloc). */
static void fill(char *p, size_t from, size_t to, uint64_t base)
{
	size_t o = from;
	for (; o < to && o % 8; o++)
		p[o] = (char)pat_byte(base, o);
	uint64_t *w = (uint64_t *)(void *)(p + o);
	size_t n = (to - o) / 8, w0 = o / 8;
	for (size_t i = 0; i < n; i++)
		w[i] = pat_word(base, w0 + i);
	for (o += n * 8; o < to; o++)
		p[o] = (char)pat_byte(base, o);
}

/* Offset of the first byte in [from, to) that is not the pattern (zero
 * when base is NULL), or -1. */
static ptrdiff_t check(const char *p, size_t from, size_t to, const uint64_t *base)
{
	size_t o = from;
	for (; o < to && o % 8; o++)
		if ((unsigned char)p[o] != (base ? pat_byte(*base, o) : 0))
			return (ptrdiff_t)o;
	const uint64_t *w = (const uint64_t *)(const void *)(p + o);
	size_t n = (to - o) / 8, w0 = o / 8;
	for (size_t i = 0; i < n; i++)
		if (w[i] != (base ? pat_word(*base, w0 + i) : 0)) {
			for (o = (w0 + i) * 8; (unsigned char)p[o] == (base ? pat_byte(*base, o) : 0); o++)
				;
			return (ptrdiff_t)o;
		}
	for (o += n * 8; o < to; o++)
		if ((unsigned char)p[o] != (base ? pat_byte(*base, o) : 0))
			return (ptrdiff_t)o;
	return -1;
}

/* ---- blocks and their history ------------------------------------------------- */
enum kind {
	K_MALLOC, K_CALLOC,
#ifdef SOAK_PLAIN
	K_MEMALIGN,
#else
	K_PS2M, K_PS1G, K_CTX, K_SHARED,
#endif
	K_COUNT
};
static const char *const kind_name[K_COUNT] = {
	[K_MALLOC] = "malloc", [K_CALLOC] = "calloc",
#ifdef SOAK_PLAIN
	[K_MEMALIGN] = "aligned",
#else
	[K_PS2M] = "pagesize-2M", [K_PS1G] = "pagesize-1G", [K_CTX] = "ctx", [K_SHARED] = "shared",
#endif
};

struct ev {
	uint64_t t_us;
	const char *what;  /* a literal: "hp_malloc", "hp_realloc", ... */
	void *p;
	size_t size, usable;
	uint32_t gen;
	int16_t thread;    /* -1: a fork child */
};

struct blk {
	char *p;           /* NULL: slot empty */
	size_t size;
	uint64_t id;
	uint32_t gen;
	int kind;
	void *ctx;         /* hp_ctx_* context (K_CTX) */
	const char *ctx_name;
	size_t align;      /* K_MEMALIGN */
	/* shared blocks: a second mapping of the same memory, from the fd */
	int fd;
	char *p2;
	size_t slen;
	struct ev hist[HIST];
	unsigned nhist;
};

struct worker {
	int idx;
	pthread_t th;
	struct rng rng;
	struct blk slot[SLOTS];
	uint64_t allocs, frees, reallocs, forks, verifies, handoffs, nulls, shared, zero_checks;
	uint64_t verified_bytes;
	bool in_child;
};

static struct worker workers[MAX_THREADS];
static _Atomic uint64_t next_id = 1;
static _Atomic size_t live_bytes;       /* sizes asked for, against g_budget */
static _Atomic int one_g_taken;         /* at most one 1 GiB-page block live */
static _Atomic uint64_t next_fork_us;
static _Atomic int injected;

/* What this thread is doing, for the report of a fatal signal. */
static __thread struct worker *cur_worker;
static __thread const char *cur_op;

static void note(struct worker *w, struct blk *b, const char *what, size_t usable)
{
	struct ev *e = &b->hist[b->nhist++ % HIST];
	*e = (struct ev){.t_us = now_us() - t0_us, .what = what, .p = b->p, .size = b->size,
			 .usable = usable, .gen = b->gen, .thread = (int16_t)(w->in_child ? -1 : w->idx)};
}

static void print_history(const struct blk *b)
{
	unsigned n = b->nhist < HIST ? b->nhist : HIST;
	fprintf(stderr, "  history of block %" PRIu64 " (%s%s%s), oldest first:\n", b->id,
		kind_name[b->kind], b->ctx_name ? " " : "", b->ctx_name ? b->ctx_name : "");
	for (unsigned i = b->nhist - n; i < b->nhist; i++) {
		const struct ev *e = &b->hist[i % HIST];
		fprintf(stderr, "    %10.3f s  thread %-3d %-28s %p size %zu usable %zu gen %u\n",
			(double)e->t_us / 1e6, e->thread, e->what, e->p, e->size, e->usable, e->gen);
	}
}

/* A block's contents are wrong: everything known about it, then abort. */
__attribute__((noreturn))
static void mismatch(struct worker *w, struct blk *b, const char *when, const char *at,
		     ptrdiff_t off, size_t len, bool zero)
{
	struct hp_backing hb;
	unsigned char want = zero ? 0 : pat_byte(pattern_base(b->id, b->gen), (size_t)off);
	fprintf(stderr,
		"soak: CONTENTS MISMATCH %s (seed %" PRIu64 ", %s, thread %d%s): block %" PRIu64
		" at %p, byte %td of %zu: expected 0x%02x, found 0x%02x%s\n",
		when, g_seed, variant, w->idx, w->in_child ? ", in a fork child" : "", b->id,
		(void *)at, off, len, want, (unsigned char)at[off], zero ? " (should be zero)" : "");
	if (lib.backing(at, &hb) == 0)
		fprintf(stderr, "  backing now: %s, mapping %zu bytes, page %zu, kernel page %zu\n",
			lib.backend_name(hb.backend), hb.mapping_size, hb.requested_page_size,
			hb.kernel.kernel_page_size);
	print_history(b);
	fflush(stderr);
	if (w->in_child)
		_exit(2);
	abort();
}

static void verify_at(struct worker *w, struct blk *b, const char *at, size_t len, const char *when)
{
	uint64_t base = pattern_base(b->id, b->gen);
	ptrdiff_t off = check(at, 0, len, &base);
	if (off >= 0)
		mismatch(w, b, when, at, off, len, false);
	w->verifies++;
	w->verified_bytes += len;
}

static void verify(struct worker *w, struct blk *b, const char *when)
{
	verify_at(w, b, b->p, b->size, when);
	if (b->p2)
		verify_at(w, b, b->p2, b->size, when); /* the same pages, mapped again */
}

static void check_zero(struct worker *w, struct blk *b, size_t from, const char *when)
{
	ptrdiff_t off = check(b->p, from, b->size, NULL);
	if (off >= 0)
		mismatch(w, b, when, b->p, off, b->size, true);
	w->zero_checks++;
}

/* ---- sizes --------------------------------------------------------------------- */
/* Every class: libc's small sizes, sizes around every threshold the driver
 * sets, odd sizes, exact 2 MiB multiples, large ones. */
static size_t pick_size(struct rng *r)
{
	static const size_t thresholds[] = {256 * KiB, 1 * MiB, 2 * MiB, 4 * MiB};
	switch (rnd_below(r, 14)) {
	case 0: case 1: case 2:
		return rnd_range(r, 1, 4096);
	case 3: case 4:
		return rnd_range(r, 4097, 1 * MiB);
	case 5: case 6: {
		size_t t = thresholds[rnd_below(r, 4)];
		return t - 4096 + rnd_below(r, 8193);
	}
	case 7: case 8: case 9: case 10:
		return rnd_range(r, 1 * MiB, 16 * MiB);
	case 11: case 12:
		return 2 * MiB * rnd_range(r, 1, 16);
	default:
		return rnd_range(r, 16 * MiB, MAX_BLOCK);
	}
}

static bool budget_take(size_t n)
{
	size_t cur = atomic_load(&live_bytes);
	do {
		if (cur + n > g_budget)
			return false;
	} while (!atomic_compare_exchange_weak(&live_bytes, &cur, cur + n));
	return true;
}
static void budget_give(size_t n) { atomic_fetch_sub(&live_bytes, n); }

/* ---- allocation ------------------------------------------------------------------ */
#ifndef SOAK_PLAIN
/* NUMA policies the numa knob accepts here (libnuma may be missing). */
static const char *const policies[] = {"default", "local", "interleave", "bind:0", "preferred:0"};
static void *ctx_plain[5], *ctx_2m[5];
static int npolicies;

static void ctx_init(void)
{
	void *two = hp_ctx_pagesize(2 * MiB);
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
		void *c = hp_ctx_numa(NULL, policies[i]);
		if (!c)
			continue;
		ctx_plain[npolicies] = c;
		ctx_2m[npolicies] = two ? hp_ctx_numa(two, policies[i]) : NULL;
		npolicies++;
	}
}
#endif

/* The allocation b describes (kind, size, ...) was NULL: only ENOMEM is a
 * possible answer (a short pool under fallback=fail, a huge request the
 * memory cgroup refuses), and it is counted. */
static bool null_ok(struct worker *w, const char *what, size_t size)
{
	if (errno != ENOMEM) {
		fprintf(stderr, "soak: %s(%zu) returned NULL with errno %d (%s), not ENOMEM (seed %" PRIu64 ")\n",
			what, size, errno, strerror(errno), g_seed);
		abort();
	}
	w->nulls++;
	return false;
}

/* What an allocation will ask for, chosen before the budget is taken. */
struct plan {
	int kind;
	size_t size;
	size_t n;      /* calloc: n elements of size / n */
	bool zero;
	size_t pagesize;
	int policy;    /* K_CTX: index into policies */
	bool two;      /* K_CTX: on 2 MiB pages */
	int call;      /* K_MEMALIGN: posix_memalign, aligned_alloc, memalign */
};

static struct plan plan_alloc(struct rng *r)
{
	struct plan pl = {.kind = (int)rnd_below(r, K_COUNT + 3), .size = pick_size(r), .n = 1};

	if (pl.kind >= K_COUNT || !(g_kinds & 1u << pl.kind))
		pl.kind = K_MALLOC; /* the common case, weighted up */
	switch (pl.kind) {
	case K_CALLOC:
		pl.n = rnd_range(r, 1, 16);
		pl.zero = true;
		break;
#ifdef SOAK_PLAIN
	case K_MEMALIGN:
		pl.pagesize = (size_t)1 << rnd_range(r, 4, 22); /* the alignment: 16 .. 4 MiB */
		pl.call = (int)rnd_below(r, 3);
		if (pl.call == 1) /* aligned_alloc: a multiple of the alignment */
			pl.size = (pl.size + pl.pagesize - 1) / pl.pagesize * pl.pagesize;
		break;
#else
	case K_PS1G:
		if (g_have_1g) {
			pl.pagesize = 1024 * MiB;
			pl.zero = rnd_below(r, 2);
			break;
		}
		pl.kind = K_PS2M; /* no 1 GiB page for this run */
		/* fall through */
	case K_PS2M:
		pl.pagesize = 2 * MiB;
		pl.size = rnd_range(r, 1, 8 * MiB);
		pl.zero = rnd_below(r, 2);
		break;
	case K_CTX:
		pl.policy = (int)rnd_below(r, (size_t)npolicies);
		pl.two = rnd_below(r, 3) == 0 && ctx_2m[pl.policy];
		if (pl.two)
			pl.size = rnd_range(r, 1, 8 * MiB);
		pl.zero = rnd_below(r, 2);
		if (pl.zero)
			pl.n = rnd_range(r, 1, 8);
		break;
	case K_SHARED:
		pl.size = rnd_range(r, 1, 8 * MiB);
		pl.pagesize = rnd_below(r, 2) ? 2 * MiB : 0;
		break;
#endif
	default:
		break;
	}
	pl.size = (pl.size + pl.n - 1) / pl.n * pl.n; /* calloc: n whole elements */
	return pl;
}

#ifndef SOAK_PLAIN
static const char *alloc_shared(struct worker *w, struct blk *b, const struct plan *pl)
{
	struct hp_shared_info si;
	b->p = hp_shared_alloc(pl->size, pl->pagesize, &b->fd);
	if (!b->p)
		return pl->pagesize ? "hp_shared_alloc(2M)" : "hp_shared_alloc";
	if (hp_shared_info(b->p, &si) != 0 || si.size < pl->size || si.fd != b->fd) {
		fprintf(stderr, "soak: hp_shared_info of a new shared block is wrong (seed %" PRIu64 ")\n", g_seed);
		abort();
	}
	b->slen = si.size;
	b->p2 = hp_shared_map(b->fd, &si.size);
	if (!b->p2 || si.size != b->slen) {
		fprintf(stderr, "soak: hp_shared_map of our own block: %s (seed %" PRIu64 ")\n",
			b->p2 ? "wrong size" : strerror(errno), g_seed);
		abort();
	}
	w->shared++;
	return pl->pagesize ? "hp_shared_alloc(2M)" : "hp_shared_alloc";
}
#endif

/* The allocation itself; returns what was called, for the history. */
static const char *alloc_call(struct worker *w, struct blk *b, const struct plan *pl)
{
	(void)w;
	switch (pl->kind) {
#ifdef SOAK_PLAIN
	case K_MALLOC:
		b->p = malloc(pl->size);
		return "malloc";
	case K_CALLOC:
		b->p = calloc(pl->n, pl->size / pl->n);
		return "calloc";
	case K_MEMALIGN: {
		void *p = NULL;
		b->align = pl->pagesize;
		if (pl->call == 0) {
			int rc = posix_memalign(&p, b->align, pl->size);
			if (rc)
				errno = rc;
			b->p = p;
			return "posix_memalign";
		}
		b->p = pl->call == 1 ? aligned_alloc(b->align, pl->size) : memalign(b->align, pl->size);
		return pl->call == 1 ? "aligned_alloc" : "memalign";
	}
#else
	case K_MALLOC:
		b->p = hp_malloc(pl->size);
		return "hp_malloc";
	case K_CALLOC:
		b->p = hp_calloc(pl->n, pl->size / pl->n);
		return "hp_calloc";
	case K_PS2M:
	case K_PS1G:
		b->p = hp_malloc_pagesize(pl->size, pl->pagesize, pl->zero);
		return pl->kind == K_PS2M ? (pl->zero ? "hp_malloc_pagesize(2M, zero)" : "hp_malloc_pagesize(2M)")
					  : (pl->zero ? "hp_malloc_pagesize(1G, zero)" : "hp_malloc_pagesize(1G)");
	case K_CTX:
		b->ctx = pl->two ? ctx_2m[pl->policy] : ctx_plain[pl->policy];
		b->ctx_name = policies[pl->policy];
		if (pl->zero) {
			b->p = hp_ctx_calloc(b->ctx, pl->n, pl->size / pl->n);
			return pl->two ? "hp_ctx_calloc(2M, numa)" : "hp_ctx_calloc(numa)";
		}
		b->p = hp_ctx_malloc(b->ctx, pl->size);
		return pl->two ? "hp_ctx_malloc(2M, numa)" : "hp_ctx_malloc(numa)";
	case K_SHARED:
		return alloc_shared(w, b, pl);
#endif
	default:
		abort();
	}
}

/* Usable size as the program's allocator reports it. */
static size_t usable_of(const struct blk *b)
{
	if (b->p2)
		return b->slen;
#ifdef SOAK_PLAIN
	return malloc_usable_size(b->p);
#else
	return hp_usable_size(b->p);
#endif
}

static bool do_alloc(struct worker *w, struct blk *b)
{
	struct plan pl = plan_alloc(&w->rng);
	bool one_g = false;

#ifndef SOAK_PLAIN
	if (pl.kind == K_PS1G) {
		int expect = 0;
		one_g = atomic_compare_exchange_strong(&one_g_taken, &expect, 1);
		if (!one_g)
			return false; /* one 1 GiB-page block at a time: the pool has one page */
	}
#endif
	if (!budget_take(pl.size)) {
		if (one_g)
			atomic_store(&one_g_taken, 0);
		return false;
	}
	*b = (struct blk){.kind = pl.kind, .size = pl.size, .fd = -1,
			  .id = atomic_fetch_add(&next_id, 1)};
	errno = 0;
	const char *what = alloc_call(w, b, &pl);
	if (!b->p) {
		budget_give(pl.size);
		if (one_g)
			atomic_store(&one_g_taken, 0);
		return null_ok(w, what, pl.size);
	}
	size_t usable = usable_of(b);
	note(w, b, what, usable);
	w->allocs++;
	if (usable < pl.size || (b->align && ((uintptr_t)b->p & (b->align - 1)))) {
		fprintf(stderr, "soak: %s(%zu) = %p: usable size %zu, alignment asked %zu (seed %" PRIu64 ")\n",
			what, pl.size, (void *)b->p, usable, b->align, g_seed);
		abort();
	}
	if (pl.zero)
		check_zero(w, b, 0, "after a zeroing allocation");
	fill(b->p, 0, pl.size, pattern_base(b->id, b->gen));
	if (b->p2)
		verify_at(w, b, b->p2, pl.size, "through the second mapping of a new shared block");
	return true;
}

/* ---- free and realloc ------------------------------------------------------------- */
static void release_block(struct worker *w, struct blk *b)
{
	struct rng *r = &w->rng;
	verify(w, b, "before free");
	budget_give(b->size);
#ifdef SOAK_PLAIN
	free(b->p);
#else
	switch (b->kind) {
	case K_SHARED:
		/* either mapping may go first: the memory stays for the other */
		if (rnd_below(r, 2)) {
			char *tmp = b->p;
			b->p = b->p2;
			b->p2 = tmp;
		}
		if (hp_shared_free(b->p2) != 0 || hp_shared_free(b->p) != 0) {
			fprintf(stderr, "soak: hp_shared_free: %s (seed %" PRIu64 ")\n", strerror(errno), g_seed);
			abort();
		}
		break;
	case K_CTX:
		hp_ctx_free(b->ctx, b->p, b->size);
		break;
	default:
		switch (rnd_below(r, 4)) {
		case 0: hp_free(b->p); break;
		case 1: hp_free_sized(b->p, b->size); break;
		case 2: hp_free_sized(b->p, rnd_below(r, 2) ? 0 : b->size * 3 + 1); break; /* a wrong hint */
		default: hp_ctx_free(NULL, b->p, b->size); break;
		}
		if (b->kind == K_PS1G)
			atomic_store(&one_g_taken, 0);
	}
#endif
	(void)r;
	w->frees++;
	b->p = NULL;
}

static size_t realloc_size(struct rng *r, size_t old)
{
	switch (rnd_below(r, 6)) {
	case 0: return old * rnd_range(r, 2, 4);                 /* grow */
	case 1: return old / rnd_range(r, 2, 4) + 1;             /* shrink */
	case 2: return old + rnd_range(r, 1, 2 * MiB);          /* grow a little */
	case 3: return old > 4096 ? old - rnd_below(r, old / 8) : old + 1;
	case 4: return rnd_range(r, 1, 4096);                    /* to libc */
	default: return pick_size(r);
	}
}

static void do_realloc(struct worker *w, struct blk *b)
{
	struct rng *r = &w->rng;
	size_t old = b->size, size = realloc_size(r, old);

	if (size > MAX_BLOCK)
		size = MAX_BLOCK;
	if (size > old && !budget_take(size - old))
		return;
	verify(w, b, "before realloc");
	errno = 0;
	char *np;
	const char *what;
#ifdef SOAK_PLAIN
	if (rnd_below(r, 4) == 0 && size % 8 == 0) {
		np = reallocarray(b->p, size / 8, 8);
		what = "reallocarray";
	} else {
		np = realloc(b->p, size);
		what = "realloc";
	}
	b->align = 0; /* realloc keeps only malloc's alignment */
	b->kind = K_MALLOC;
#else
	if (b->kind == K_CTX) {
		np = hp_ctx_realloc(b->ctx, b->p, size);
		what = "hp_ctx_realloc";
	} else {
		np = hp_realloc(b->p, size);
		what = "hp_realloc";
	}
#endif
	if (!np) {
		if (size > old)
			budget_give(size - old);
		null_ok(w, what, size);
		verify(w, b, "after a failed realloc (the old block must be intact)");
		return;
	}
	w->reallocs++;
#ifndef SOAK_PLAIN
	if (np != b->p && b->kind != K_CTX) {
		if (b->kind == K_PS1G)
			atomic_store(&one_g_taken, 0); /* its 1 GiB page is on its way back */
		b->kind = K_MALLOC;
	}
#endif
	b->p = np;
	b->size = size;
	if (size < old)
		budget_give(old - size);
	size_t keep = old < size ? old : size;
	note(w, b, what, usable_of(b));
	verify_at(w, b, np, keep, "after realloc (the bytes both sizes hold)");
	if (size > old)
		fill(np, old, size, pattern_base(b->id, b->gen));
}

/* ---- hand-over between threads ---------------------------------------------------- */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blk queue[QUEUE];
static int queued;

static void handoff(struct worker *w, struct blk *b)
{
	pthread_mutex_lock(&queue_lock);
	if (queued < QUEUE) {
		note(w, b, "handed to the queue", 0);
		queue[queued++] = *b;
		b->p = NULL;
		w->handoffs++;
	}
	pthread_mutex_unlock(&queue_lock);
}

static void adopt(struct worker *w, struct blk *b)
{
	pthread_mutex_lock(&queue_lock);
	if (queued > 0)
		*b = queue[--queued];
	pthread_mutex_unlock(&queue_lock);
	if (b->p) {
		note(w, b, "adopted from the queue", 0);
		verify(w, b, "after a hand-over between threads");
	}
}

/* ---- fork ---------------------------------------------------------------------------- */
/* In the child (one thread: the one that forked).  Only this thread's own
 * blocks are looked at: another thread may have been writing its blocks
 * when fork() copied them.  Private hugetlb blocks are not read: when the
 * pool is short, the kernel gives the parent's write to a page it shares
 * with a child to the parent (the owner of the reservation) and unmaps
 * the child's copy -- a SIGBUS here would be the kernel's rule, not a bug. */
__attribute__((noreturn))
static void child_main(struct worker *w)
{
	struct rng *r = &w->rng;
	struct hp_backing hb;
	int looked = 0;

	w->in_child = true;
	cur_op = "fork child";
	alarm(50); /* a hang here is a bug: SIGALRM tells the parent */
	r->s ^= 0xC0FFEEull;
	int first = (int)rnd_below(r, SLOTS);
	for (int i = 0; i < SLOTS && looked < 4; i++) {
		struct blk *b = &w->slot[(first + i) % SLOTS];
		if (!b->p)
			continue;
#ifndef SOAK_PLAIN
		if (b->kind == K_SHARED) {
			/* the parent sees what the child writes: gen+1 (the parent
			 * checks it after the child exits) */
			verify(w, b, "inherited shared block, in a fork child");
			b->gen++;
			fill(b->p, 0, b->size, pattern_base(b->id, b->gen));
			verify_at(w, b, b->p2, b->size, "child's write through the other mapping");
			looked++;
			continue;
		}
#endif
		if (lib.backing(b->p, &hb) != 0 || hb.backend == HP_BACKEND_HUGETLB)
			continue;
		verify(w, b, "inherited by a fork child");
		looked++;
	}
	/* allocate and free a little of its own */
	for (int i = 0; i < 4; i++) {
		struct blk b = {.id = atomic_fetch_add(&next_id, 1), .fd = -1};
		static const size_t sizes[] = {100, 300 * KiB, 3 * MiB, 9 * MiB};
		b.size = sizes[i] + rnd_below(r, 4096);
#ifdef SOAK_PLAIN
		b.p = malloc(b.size);
#else
		b.p = i == 3 && rnd_below(r, 2) ? hp_malloc_pagesize(b.size, 2 * MiB, 0) : hp_malloc(b.size);
#endif
		if (!b.p)
			continue;
		note(w, &b, "allocated in a fork child", usable_of(&b));
		fill(b.p, 0, b.size, pattern_base(b.id, b.gen));
		verify(w, &b, "a fork child's own block");
#ifdef SOAK_PLAIN
		free(b.p);
#else
		hp_free(b.p);
#endif
	}
	/* free or grow an inherited block: the child's copy goes, never the parent's */
	for (int i = 0; i < SLOTS; i++) {
		struct blk *b = &w->slot[i];
		if (!b->p || b->p2 || lib.backing(b->p, &hb) != 0 || hb.backend == HP_BACKEND_HUGETLB)
			continue;
		if (rnd_below(r, 2)) {
#ifdef SOAK_PLAIN
			char *np = realloc(b->p, b->size + 5 * MiB);
#else
			char *np = hp_realloc(b->p, b->size + 5 * MiB);
#endif
			if (np) {
				b->p = np;
				note(w, b, "grown in a fork child", usable_of(b));
				verify(w, b, "after a fork child grew an inherited block");
			}
		}
		verify(w, b, "before a fork child frees an inherited block");
#ifdef SOAK_PLAIN
		free(b->p);
#else
		hp_free(b->p);
#endif
		break;
	}
#ifdef __SANITIZE_ADDRESS__
	_exit(0); /* LeakSanitizer would see the other threads' blocks unreached */
#else
	exit(0); /* the library's exit path, in a child of a threaded process */
#endif
}

static void do_fork(struct worker *w)
{
	pid_t pid = fork();
	if (pid < 0) {
		w->nulls++; /* EAGAIN/ENOMEM: the memory cgroup may refuse */
		return;
	}
	if (pid == 0)
		child_main(w);
	w->forks++;
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			perror("soak: waitpid");
			abort();
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "soak: fork child %d of thread %d failed: %s %d (seed %" PRIu64 ")%s\n", (int)pid,
			w->idx, WIFEXITED(status) ? "exit status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), g_seed,
			WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " -- hung for 50 s" : "");
		abort();
	}
#ifndef SOAK_PLAIN
	/* what the child wrote into shared blocks is ours to see now */
	for (int i = 0; i < SLOTS; i++) {
		struct blk *b = &w->slot[i];
		if (!b->p || b->kind != K_SHARED)
			continue;
		uint64_t base = pattern_base(b->id, b->gen + 1);
		if (check(b->p, 0, b->size, &base) == -1) {
			b->gen++;
			note(w, b, "rewritten by a fork child", 0);
		}
		verify(w, b, "after a fork child (a shared block: the child's write or ours)");
	}
#endif
}

/* ---- proving the checks fail (--inject) --------------------------------------------------- */
static void inject(struct worker *w)
{
	int expect = 0;
	if (!*g_inject || now_us() - t0_us < 2000000 || !atomic_compare_exchange_strong(&injected, &expect, 1))
		return;
	if (!strcmp(g_inject, "corrupt")) {
		for (int i = 0; i < SLOTS; i++)
			if (w->slot[i].p && w->slot[i].size > 100) {
				w->slot[i].p[w->slot[i].size / 2] ^= 0x5a;
				fprintf(stderr, "soak: injected: one byte of block %" PRIu64 " flipped\n", w->slot[i].id);
				return;
			}
		atomic_store(&injected, 0);
	} else if (!strcmp(g_inject, "foreign")) {
		/* a huge mapping that is no block of hpalloc's */
		size_t len = 8 * MiB;
		char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			abort();
		char *a = (char *)(((uintptr_t)m + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
		madvise(a, 4 * MiB, MADV_HUGEPAGE);
		memset(a, 1, 4 * MiB);
		fprintf(stderr, "soak: injected: a foreign huge mapping at %p\n", (void *)a);
	}
}

/* ---- a fatal signal: say where, and whose block it was ---------------------------------- */
/* Not async-signal-safe (stdio): the process is dying anyway, and what it
 * says is the reproduction. */
static const struct blk *block_at(const struct worker *w, uintptr_t a)
{
	for (int i = 0; w && i < SLOTS; i++) {
		const struct blk *b = &w->slot[i];
		if (b->p && a >= (uintptr_t)b->p && a < (uintptr_t)b->p + (b->size ? b->size : 1))
			return b;
		if (b->p2 && a >= (uintptr_t)b->p2 && a < (uintptr_t)b->p2 + b->size)
			return b;
	}
	return NULL;
}

static void fatal_signal(int sig, siginfo_t *si, void *uc)
{
	struct worker *w = cur_worker;
	uintptr_t a = (uintptr_t)si->si_addr;
	const struct blk *b = block_at(w, a);

	(void)uc;
	fprintf(stderr, "soak: %s at %p (code %d) in %s, thread %d%s, during %s (seed %" PRIu64 ")\n",
		sig == SIGBUS ? "SIGBUS" : "SIGSEGV", si->si_addr, si->si_code, variant, w ? w->idx : -1,
		w && w->in_child ? " in a fork child" : "", cur_op ? cur_op : "?", g_seed);
	if (b) {
		fprintf(stderr, "  in block %" PRIu64 " at %p, %zu bytes, offset %zu\n", b->id, (void *)b->p, b->size,
			(size_t)(a - (uintptr_t)b->p));
		print_history(b);
	}
	harness_smaps_print(a, STDERR_FILENO);
	harness_pools_print(stderr);
	fflush(stderr);
	/* SA_RESETHAND: returning faults again, with the default action */
}

static void catch_fatal_signals(void)
{
	struct sigaction sa = {.sa_sigaction = fatal_signal, .sa_flags = SA_SIGINFO | SA_RESETHAND};
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
}

/* ---- the workers --------------------------------------------------------------------------- */
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;   /* workers wait */
static pthread_cond_t parked_cond = PTHREAD_COND_INITIALIZER; /* main waits */
static _Atomic int park_req;
static int nparked;

static void maybe_park(void)
{
	if (!atomic_load_explicit(&park_req, memory_order_acquire))
		return;
	pthread_mutex_lock(&park_lock);
	nparked++;
	pthread_cond_signal(&parked_cond);
	while (atomic_load(&park_req))
		pthread_cond_wait(&park_cond, &park_lock);
	nparked--;
	pthread_mutex_unlock(&park_lock);
}

static bool fork_due(struct worker *w)
{
	uint64_t now = now_us(), due = atomic_load(&next_fork_us);
	return !atomic_load_explicit(&g_no_fork, memory_order_relaxed) && now >= due &&
	       atomic_compare_exchange_strong(&next_fork_us, &due, now + rnd_range(&w->rng, 100000, 1500000));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rng *r = &w->rng;

	cur_worker = w;
	for (;;) {
		cur_op = "parking";
		maybe_park();
		inject(w);
		if (fork_due(w)) {
			cur_op = "fork";
			do_fork(w);
			continue;
		}
		struct blk *b = &w->slot[rnd_below(r, SLOTS)];
		if (!b->p) {
			cur_op = "allocation";
			if (rnd_below(r, 8) == 0)
				adopt(w, b);
			else if (!do_alloc(w, b))
				b->p = NULL;
			continue;
		}
		cur_op = "free, realloc or check";
		switch (rnd_below(r, 10)) {
		case 0: case 1: case 2: case 3:
			release_block(w, b);
			break;
		case 4: case 5: case 6:
#ifndef SOAK_PLAIN
			if (b->kind == K_SHARED) {
				verify(w, b, "a periodic look");
				break;
			}
#endif
			do_realloc(w, b);
			break;
		case 7:
			handoff(w, b);
			break;
		default:
			verify(w, b, "a periodic look");
			note(w, b, "checked", 0);
		}
	}
	return NULL;
}

/* ---- the driver's commands ------------------------------------------------------------------- */
/* Replies go out with write(2), never through a stdio buffer a fork child
 * could copy and flush a second time. */
__attribute__((format(printf, 1, 2)))
static void reply(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	for (char *p = buf; n > 0;) {
		ssize_t k = write(1, p, (size_t)n);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			_exit(3); /* the driver is gone */
		}
		p += k;
		n -= (int)k;
	}
}

static void list_block(FILE *f, const struct blk *b)
{
	if (!b->p)
		return;
	if (b->p2) {
		fprintf(f, "S %p %zu\nS %p %zu\n", (void *)b->p, b->slen, (void *)b->p2, b->slen);
		return;
	}
	int huge = lib.owns(b->p);
	/* hp_usable_size() of a huge block is its mapping's length; in
	 * soak-plain a small block is glibc's, which hpalloc knows nothing of */
	fprintf(f, "B %p %zu %d %zu %" PRIu64 "\n", (void *)b->p, huge ? lib.usable_size(b->p) : 0, huge,
		b->size, b->id);
}

static void write_list(void)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", g_list);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		perror(tmp);
		exit(2);
	}
	for (int t = 0; t < g_threads; t++)
		for (int i = 0; i < SLOTS; i++)
			list_block(f, &workers[t].slot[i]);
	for (int i = 0; i < queued; i++)
		list_block(f, &queue[i]);
	fprintf(f, "E\n");
	if (fclose(f) != 0 || rename(tmp, g_list) != 0) {
		perror(g_list);
		exit(2);
	}
}

static void park_all(void)
{
	pthread_mutex_lock(&park_lock);
	atomic_store_explicit(&park_req, 1, memory_order_release);
	while (nparked < g_threads)
		pthread_cond_wait(&parked_cond, &park_lock);
	pthread_mutex_unlock(&park_lock);
}

static void resume_all(void)
{
	pthread_mutex_lock(&park_lock);
	atomic_store(&park_req, 0);
	pthread_cond_broadcast(&park_cond);
	pthread_mutex_unlock(&park_lock);
}

/* Every block checked and freed (the workers are parked: main may touch
 * their slots and the queue). */
static void finish_all(void)
{
	for (int t = 0; t < g_threads; t++)
		for (int i = 0; i < SLOTS; i++)
			if (workers[t].slot[i].p)
				release_block(&workers[t], &workers[t].slot[i]);
	while (queued > 0)
		release_block(&workers[0], &queue[--queued]);
	lib.cache_flush();
	lib.release_drain();
}

static void summary(void)
{
	uint64_t s[10] = {0};
	for (int t = 0; t < g_threads; t++) {
		struct worker *w = &workers[t];
		uint64_t v[10] = {w->allocs, w->frees, w->reallocs, w->forks, w->verifies, w->handoffs,
				  w->nulls, w->shared, w->zero_checks, w->verified_bytes};
		for (int i = 0; i < 10; i++)
			s[i] += v[i];
	}
	reply("summary allocs=%" PRIu64 " frees=%" PRIu64 " reallocs=%" PRIu64 " forks=%" PRIu64
	      " verifies=%" PRIu64 " handoffs=%" PRIu64 " enomem=%" PRIu64 " shared=%" PRIu64
	      " zero_checks=%" PRIu64 " verified_bytes=%" PRIu64,
	      s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]);
}

static void command_loop(void)
{
	char line[256];
	bool parked = false;

	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strcmp(line, "park")) {
			if (!parked)
				park_all();
			parked = true;
			write_list();
			reply("parked");
		} else if (!strcmp(line, "resume")) {
			resume_all();
			parked = false;
			reply("resumed");
		} else if (!strcmp(line, "drain") && parked) {
			lib.cache_flush();
			lib.release_drain();
			write_list();
			reply("drained");
		} else if (!strcmp(line, "finish") && parked) {
			finish_all();
			write_list();
			reply("finished");
		} else if (!strcmp(line, "forks on") || !strcmp(line, "forks off")) {
			atomic_store(&g_no_fork, line[7] == 'f');
			reply("forks %s", line + 6);
		} else if (!strcmp(line, "exit") && parked) {
			summary();
			fflush(NULL);
			exit(0);
		} else {
			reply("error unknown or untimely command '%s'", line);
		}
	}
	_exit(3); /* end of stdin: the driver is gone */
}

/* ---- --probe-resv: the kernel's hugetlb reserve count across fork ------------------------------
 * Linux 6.18 here: when a process unmaps a faulted page of a private
 * hugetlb mapping that a fork child still maps, resv_hugepages drops by one
 * for as long as the child lives (the page's "restore reserve" is deferred
 * to its free, the unmap's reserve release is not).  The count goes below
 * zero; free - reserved then overstates the pool, mmap reservations succeed
 * that no page backs, and a process touching its reserved pages dies of
 * SIGBUS.  Prints "resv-underflow N" (N pages, 0: this kernel is fine). */
static long long read_resv(size_t pagesize)
{
	char path[160];
	long v;
	harness_pool_path(pagesize, "resv_hugepages", path, sizeof(path));
	/* wraps to negative, as the kernel's counter does */
	return harness_read_long_at(path, &v) == 0 ? v : LLONG_MIN;
}

static int probe_resv(void)
{
	size_t ps = 2 * MiB;
	int gate[2];
	long long before = read_resv(ps);
	char *p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (before == LLONG_MIN || p == MAP_FAILED || pipe(gate) != 0) {
		reply("resv-underflow unknown (%s)", p == MAP_FAILED ? "no free 2 MiB page" : "no pool counters");
		return 2;
	}
	memset(p, 1, ps);
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		close(gate[1]);
		while (read(gate[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	munmap(p, ps);
	long long during = read_resv(ps);
	close(gate[1]);
	waitpid(pid, NULL, 0);
	long long after = read_resv(ps);
	reply("resv-underflow %lld (reserve count %lld before, %lld while the child lived, %lld after)",
	      before - during > 0 ? before - during : 0, before, during, after);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: soak-workload --seed N [--threads N] [--budget BYTES] [--have-1g] "
			"[--list FILE] [--inject corrupt|foreign] [--no-fork] [--kinds MASK]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	bool seeded = false;
	for (int i = 1; i < argc; i++) {
		char a[64];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL, *eq = strchr(argv[i], '=');
		snprintf(a, sizeof(a), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
		if (eq) { /* --option=value */
			v = eq + 1;
			i--;
		}
		if (!strcmp(a, "--have-1g") || !strcmp(a, "--no-fork") || !strcmp(a, "--probe-resv")) {
			if (!strcmp(a, "--no-fork"))
				atomic_store(&g_no_fork, true);
			else
				*(!strcmp(a, "--have-1g") ? &g_have_1g : &g_probe) = true;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--seed"))
			g_seed = strtoull(v, NULL, 0), seeded = true;
		else if (!strcmp(a, "--threads"))
			g_threads = atoi(v);
		else if (!strcmp(a, "--budget"))
			g_budget = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--list"))
			g_list = v;
		else if (!strcmp(a, "--inject"))
			g_inject = v;
		else if (!strcmp(a, "--kinds"))
			g_kinds = (unsigned)strtoul(v, NULL, 0);
		else
			usage();
	}
	if (g_probe)
		return probe_resv();
	if (!seeded || g_threads < 1 || g_threads > MAX_THREADS)
		usage();
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the driver */
	setvbuf(stdout, NULL, _IONBF, 0);
	lib_init();
	catch_fatal_signals();
	t0_us = now_us();
	atomic_store(&next_fork_us, t0_us + 200000);
	fprintf(stderr, "soak-workload: %s, seed %" PRIu64 ", %d threads, budget %zu bytes%s\n", variant, g_seed,
		g_threads, g_budget, g_have_1g ? ", 1 GiB pages" : "");
#ifndef SOAK_PLAIN
	ctx_init();
#endif
	for (int t = 0; t < g_threads; t++) {
		workers[t].idx = t;
		workers[t].rng.s = mix64(g_seed + 0x1000u * (uint64_t)(t + 1));
		for (int i = 0; i < SLOTS; i++)
			workers[t].slot[i].fd = -1;
		if (pthread_create(&workers[t].th, NULL, worker_main, &workers[t]) != 0) {
			fprintf(stderr, "soak: cannot start thread %d\n", t);
			return 2;
		}
	}
	command_loop();
	return 0;
}
