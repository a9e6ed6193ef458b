/* Private interfaces between the files of lib/.  Not installed.
 * docs/architecture.md follows hp_malloc, hp_free, realloc and the janitor
 * through these files and gives the lock order.
 *
 * Who owns what, by layer (one folder each; a layer calls the layers
 * below it, tests/layers.sh says which calls still run up and fails on any
 * other; docs/architecture.md, "The layers"):
 *
 * lib/base.h   the words every layer shares: sizes, alignment, visibility
 *
 * door/ -- the kernel
 *   prim.c     the only door to the kernel: every memory system call (the
 *              io_uring entries of ring.c's releases too), every read of
 *              sysfs and /proc (prim.h; private.h: hpctl's); calls nothing
 *              of lib/
 *
 * core/ -- the allocator, and the measures its decisions take
 *   knobs.c    the knob table: parse, print, layers (default < control < env < process)
 *   stats.c    counters
 *   lifecycle.c  lazy init, the fork hooks of every module (one table), exit,
 *              the secure-execution test (hp_secure_exec)
 *   heap.c     hp_malloc & co: routing by size and address, block sourcing
 *              (cache, pieces, fresh mappings, fallback), realloc,
 *              allocation through a context (hp_ctx_malloc & co),
 *              hp_cache_flush
 *   registry.c  the live huge blocks, by the address they start at
 *   context.c  contexts: what hp_ctx, hp_ctx_pagesize and hp_ctx_numa give
 *              (origin, forced page size, placement), interned for good
 *   pieces.c   the cache's THP memory for any size: cached blocks cut,
 *              cached pieces of one mapping joined, a block grown over them
 *   backing.c  the backing reports (hp_backing, hp_backing_numa): the
 *              block an address lies in, and what the kernel says of it
 *   huge_api.c  the huge path alone, for interposers (hp_huge_threshold,
 *              hp_huge_alloc, hp_huge_realloc, hp_owns)
 *   small.c    the ordinary path: libc memory, 64-byte aligned, per-thread cache
 *   policy.c   where a huge block comes from, private or shared: backend,
 *              page size, mode=auto's pool rule, the fallback; the rules
 *              reuse and realloc obey (waste 1/8, half fits, largest block)
 *   os.c       private blocks' mappings: THP alignment, the guard after each
 *              block, cut, join, grow; hugetlb page sizes, how full their
 *              pools are, how many pages this process's hugetlb blocks hold
 *   cache.c    size-bucketed reuse cache of huge blocks, and all it may
 *              keep and when it gives back (room_now): cache_max, decay,
 *              the memory cgroup's share, cache_rss_max, blocks left
 *              resident; before a fresh mapping, on free, the janitor's watch
 *   memcg.c    the process's memory cgroup, measured: which one, its limit,
 *              its working set (usage less inactive page cache), what is
 *              free under it; the bounds on the process's memory as one
 *              answer (memcg_bounded, memcg_room)
 *   release.c  blocks on their way back to the kernel: who owns them, which
 *              way they go (ring or synchronous), drain
 *   smaps.c    what the kernel says (/proc/self/smaps, statm: prim.c reads)
 *   numa.c     NUMA placement: the numa knob's policies, the nodes there
 *              are, which pool pages a policy may use, which policy a block
 *              gets (os.c's os_mbind applies it)
 *   numa_maps.c  what the kernel says about placement (/proc/self/numa_maps,
 *              prim.c reads)
 *   shared.c   shared blocks: memfd huge pages other processes map
 *   private.h  the library's hidden functions hpctl may call (with the
 *              public hpalloc.h, all hpctl sees of lib/)
 *
 * control/ -- the control plane: what other processes and hpctl see
 *   control.c  control directory: where it is, live reload of knob files
 *   securedir.c  the rules a directory or file must pass before hpalloc
 *              trusts it, and atomic writes: for control.c, publish.c,
 *              peers.c and hpctl
 *   publish.c  per-process stats file: writing it (format: below)
 *   peers.c    reading those files back (hp_proc_*), when one is stale
 *   metrics.c  those entries in Prometheus' text format (hp_proc_prometheus)
 *   report.c   the activation report of `hpctl run --check`: its line,
 *              written (hp_report_activation) and read (report_parse_line)
 *
 * threads/ -- hpalloc's own threads, and what only they measure
 *   janitor.c  the background thread and its schedule: reaping, decay,
 *              control polling, stats publishing
 *   ring.c     the io_uring: probe, setup, submit, reap (transport only)
 *   populate.c  worker threads faulting fresh blocks in ahead of a program
 *              touching them from their start (readahead-like)
 *   thp.c      the kernel's THP settings (and multi-size THP): which page
 *              sizes serve hpalloc's madvised mappings; the splits the
 *              kernel made while we held THP blocks (/proc/vmstat)
 *
 * preload/preload.c  not part of libhpalloc: libhpalloc-preload.so, malloc
 *              & co interposed, on the public API alone (hp_huge_*, hp_owns)
 *
 * Who may touch a huge block when: see the top of release.c (live in
 * registry.c, cached in cache.c, releasing in release.c; exactly one at a
 * time, handed over under hp_heap_lock).
 */
#ifndef HP_INTERNAL_H
#define HP_INTERNAL_H

#include "hpalloc.h"
#include "../base.h"      /* sizes, alignment, visibility */
#include "private.h"      /* what hpctl may call too */
#include "../door/prim.h" /* the kernel calls: memory syscalls, sysfs, /proc */
#include "stats.h"        /* the counters */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* ---- knobs.c ---------------------------------------------------------- */
enum hp_knob_id {
	KNOB_MODE,
	KNOB_THRESHOLD,
	KNOB_PAGESIZE,
	KNOB_FALLBACK,
	KNOB_CACHE_MAX,
	KNOB_CACHE_DECAY_MS,
	KNOB_URING,
	KNOB_VERBOSE,
	KNOB_NUMA,
	KNOB_CACHE_RSS_MAX,
	KNOB_POPULATE,
	KNOB_CACHE_MEMCG,
	KNOB_GUARD,
	KNOB_POPULATE_PAGES,
#ifdef HP_TEST_KNOB
	KNOB_TEST, /* the test-only build's knob (tests/cli/knob-two-places.sh) */
#endif
	KNOB_COUNT
};
enum hp_mode { MODE_AUTO, MODE_HUGETLB, MODE_THP, MODE_OFF };
enum hp_fallback { FALLBACK_THP, FALLBACK_SMALL, FALLBACK_FAIL };
enum hp_guard { GUARD_READ, GUARD_FAULT };
enum hp_populate_pages { POP_PAGES_AUTO, POP_PAGES_2M, POP_PAGES_4K, POP_PAGES_MEASURED };
/* pagesize knob value: 0 = auto, else bytes */
/* populate knob value: 0 = off, 1..HP_POPULATE_MAX threads, or auto */
#define HP_POPULATE_MAX 64
#define HP_POPULATE_AUTO 0xffff

/* Every knob's effective value as its row of the table stores it (a
 * choice's index, bytes, milliseconds, threads, a hp_numa_t), written by
 * knobs.c under its lock, read lock-free on the allocation path: a knob is
 * an enum entry and a row of the table, nothing more. */
HP_HIDDEN extern _Atomic uint64_t hp_knob_values[KNOB_COUNT];
static inline uint64_t hp_knob(enum hp_knob_id knob)
{
	return atomic_load_explicit(&hp_knob_values[knob], memory_order_relaxed);
}

HP_HIDDEN void knobs_init(bool with_env);  /* defaults (+ environment) */
/* Set (canon != NULL) or clear (canon == NULL) one layer of a knob and
 * recompute the effective value.  canon must be canonical (from parse). */
HP_HIDDEN int knobs_set_layer(int knob, int source, const char *canon);
HP_HIDDEN void knobs_clear_source(int source); /* drop a whole layer */
/* Record why an input was refused: visible in hp_knob_info().rejected,
 * counted in stats, logged when verbose. */
HP_HIDDEN void knobs_note_reject(int knob, const char *why);
HP_HIDDEN const char *knob_name(int knob);
/* The knob's parser (the one parser of every knob value): the value as the
 * table stores it, or -1 + EINVAL with the message in err. */
HP_HIDDEN int knobs_parse(int knob, const char *text, uint64_t *out, char *err, size_t err_len);

/* ---- log (knobs.c) -------------------------------------------------------- */
HP_HIDDEN void hp_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- numa.c: placement policies --------------------------------------------- */
/* A placement policy, as the numa knob stores it: the mode in bits 32-39,
 * the nodes it names in bits 0-31 (bit n = node n; a policy names nodes
 * 0..31 at most, and its canonical text must fit HP_KNOB_VALUE_MAX).
 * Interleave without nodes means every node the process may use.  0 is
 * `default`: hpalloc sets nothing and the kernel's policy applies. */
typedef uint64_t hp_numa_t;
enum hp_numa_mode { NUMA_DEFAULT, NUMA_LOCAL, NUMA_INTERLEAVE, NUMA_BIND, NUMA_PREFERRED };
#define NUMA_NODE_BITS 32
#define HP_NUMA_DEFAULT ((hp_numa_t)0)
static inline int numa_mode(hp_numa_t p) { return (int)(p >> 32); }
static inline uint32_t numa_nodes(hp_numa_t p) { return (uint32_t)p; }
static inline hp_numa_t numa_make(int mode, uint32_t nodes)
{
	return (hp_numa_t)mode << 32 | nodes;
}
/* The numa knob's grammar (the table's parser and printer call these). */
HP_HIDDEN int numa_parse(const char *word, hp_numa_t *out, char *why, size_t why_len);
HP_HIDDEN void numa_format(hp_numa_t p, char *buf, size_t len);
/* Pages of pagesize's pool that a block placed by p may draw on right now
 * (see numa.c for what "available" means per node); -1 unknown. */
HP_HIDDEN long numa_pool_available(hp_numa_t p, size_t pagesize);
/* Where another thread's faults in a block must land so that its pages go
 * where the allocating thread's own faults would put them (populate.c's
 * workers; numa.c says when that takes anything). */
#define HP_NUMA_MASK_WORDS (1024 / (8 * sizeof(unsigned long)))
struct numa_home {
	bool follow;  /* the block's placement depends on who faults, on a machine of 2+ nodes */
	int node;     /* the allocating thread's node then (-1 unknown) */
	int mode;     /* its own policy (get_mempolicy), -1 unknown */
	bool local;   /* the block's policy is local: the faulting CPU's node */
	unsigned long nodes[HP_NUMA_MASK_WORDS];
};
/* In the allocating thread, for a block placed by p. */
HP_HIDDEN void numa_home_capture(hp_numa_t p, struct numa_home *o);
/* In the faulting thread, before it faults for o's block (NULL: for a block
 * that needs nothing, where it drops what it took on before): 0, or -1 if
 * it cannot fault there (then it must not fault at all). */
HP_HIDDEN int numa_home_follow(const struct numa_home *o);

/* ---- os.c ------------------------------------------------------------------ */
/* A mapping hpalloc owns.  addr is aligned to the page size it asked for. */
struct hp_map {
	void *addr;
	size_t len;      /* mapped bytes, a multiple of kernel_page_size */
	/* What smaps calls KernelPageSize: 2M/1G for hugetlb, 4096 for THP,
	 * whose 2 MiB pages the kernel may give or not (the 2 MiB hpalloc asks
	 * for is hp_backing's requested_page_size). */
	size_t kernel_page_size;
	int backend;     /* HP_BACKEND_THP or HP_BACKEND_HUGETLB */
	hp_numa_t numa;  /* placement it was given (0: the kernel's) */
};
HP_HIDDEN int os_map_thp(size_t size, struct hp_map *out);
HP_HIDDEN int os_map_hugetlb(size_t size, size_t pagesize, struct hp_map *out);
HP_HIDDEN int os_unmap(const struct hp_map *m);
/* Grow a THP mapping without copying (in place, else moved to a 2 MiB
 * aligned place).  On success *m is updated. */
HP_HIDDEN int os_remap_thp(struct hp_map *m, size_t new_size);
/* Every private huge block is followed by a guard of at least this many
 * bytes that no block uses: readable (zeros), never writable (os.c says
 * why). */
#define HP_GUARD HP_THP_SIZE
/* The bytes a block of len bytes and its guard span: the guard runs to the
 * 2 MiB boundary at least HP_GUARD past the block. */
static inline size_t os_span(size_t len)
{
	return hp_align_up(len + HP_GUARD, HP_THP_SIZE);
}
/* Where the next piece of a cut THP mapping would start. */
static inline char *os_thp_end(const struct hp_map *m)
{
	return (char *)m->addr + os_span(m->len);
}
/* Cut a THP mapping in two without a page moving: *m keeps its first
 * front_len bytes (a multiple of 2 MiB, so its guard is one whole huge page
 * and *back starts on a 2 MiB boundary) and the 2 MiB after them become its
 * guard, their pages dropped (a guard reads as zeros); *back gets the
 * rest, with the old guard.  To
 * the kernel they stay pieces of one mapping: os_thp_join() makes them one
 * VMA again. */
HP_HIDDEN int os_thp_split(struct hp_map *m, size_t front_len, struct hp_map *back);
/* *front grows over its guard onto *back, which starts at os_thp_end(front)
 * and was cut from the same mapping. */
HP_HIDDEN int os_thp_join(struct hp_map *front, const struct hp_map *back);
HP_HIDDEN bool os_pagesize_supported(size_t pagesize);
/* The hugetlb page sizes the kernel offers, largest first: their number. */
HP_HIDDEN int os_pagesizes(const size_t **desc);
/* Free pages of the hugetlb pool of pagesize (free - reserved), -1 unknown. */
HP_HIDDEN long os_pool_available(size_t pagesize);
/* Pages of pagesize in this process's private hugetlb mappings. */
HP_HIDDEN size_t os_private_pages(size_t pagesize);
/* mbind(2) of m's whole mapping (with its guard, so a THP
 * block can still grow in place) to mode over nodes; -1 + errno, logged.
 * os.c's because the guard is (numa.c decides mode and nodes). */
HP_HIDDEN int os_mbind(const struct hp_map *m, int mode, const unsigned long *nodes,
		       unsigned long maxnode);
/* Fault every page of m in now (MADV_POPULATE_WRITE); 0 also where the
 * kernel cannot (before 5.14), -1 + errno if a page could not be had. */
HP_HIDDEN int os_populate(const struct hp_map *m);

/* A THP block going into the cache: its pages become the kernel's to take
 * under memory pressure (MADV_FREE; Linux 4.5), reclaimed like clean file
 * pages also without swap (memcg reclaim included), and until then reused
 * as they are -- the first write to a page keeps it.  A page the kernel
 * took comes back zeroed at the next touch.  Synchronous, on a block that
 * nobody else can reach (a lazy free racing a new owner's writes would
 * discard them).  The bytes it now covers (all but a huge page its guard
 * cuts, os.c says why), 0 for hugetlb (not anonymous memory, and not
 * charged to a memory cgroup) or where the kernel refused. */
HP_HIDDEN size_t os_lazyfree(const struct hp_map *m);

/* A block entering the cache (its user's still): its protection back to
 * read-write, and with fork_advice MADV_DONTFORK and MADV_WIPEONFORK
 * undone (os.c says what else a program may have set, and why it stays).
 * -1 + errno (logged) if the kernel refused: the block must not be cached. */
HP_HIDDEN int os_reset(const struct hp_map *m, bool fork_advice);

/* Bytes [off, off + len) of THP block m dropped now (MADV_DONTNEED): they
 * read as zeros and are faulted afresh at the next touch, on huge pages
 * where the block's advice allows.  off a multiple of 2 MiB (advice on part
 * of a huge page splits it), on a block nobody else can reach.  The bytes
 * dropped: len, or 0 where the kernel refused. */
HP_HIDDEN size_t os_drop(const struct hp_map *m, size_t off, size_t len);

/* ---- numa.c: a mapping placed -------------------------------------------------- */
/* Give a fresh mapping (never touched) placement p: mbind, and for a bind
 * on hugetlb pages the pages faulted now, so a node without free pages is
 * a failed allocation instead of a SIGBUS at first touch.  -1 + errno
 * (ENOMEM: no page where p allows); the mapping is then unchanged or
 * partly placed, and the caller unmaps it. */
HP_HIDDEN int numa_place(struct hp_map *m, hp_numa_t p);

/* ---- blocks, heap.c ---------------------------------------------------------- */
struct hp_block {
	struct hp_map map;
	size_t size;              /* usable size handed out            */
	bool dirty;               /* pages may hold old data           */
	int origin;               /* enum hp_origin, for the stats     */
	unsigned fork_gen;        /* heap_fork_gen when it was mapped  */
	size_t entries_left;       /* ring entries not yet completed    */
	uint64_t cached_at_ms;    /* when it entered the cache         */
	size_t reclaimable;       /* os_lazyfree() gave these, while cached */
	bool kept;                /* cached and not offered: cache_offer() */
	bool clean;               /* no protection or advice of a user's (os_reset): only such are cached */
	size_t lazy;              /* bytes offered since it was mapped (memcg_lazy_add) */
	uint64_t kind;            /* cache_kind() of its map           */
	uint64_t family;          /* the mapping it was cut from (THP)  */
	struct hp_block *hnext;   /* registry hash chain               */
	struct hp_block *prev, *next; /* cache bucket; release hand-off   */
	struct hp_block *lru_prev, *lru_next;   /* cache.c's LRU      */
	struct hp_block *ring_prev, *ring_next; /* release.c's in_ring */
	int bucket;
};
HP_HIDDEN extern pthread_mutex_t hp_heap_lock; /* registry + cache */

/* ---- registry.c: the live huge blocks (its first comment: who may touch them when) -- */
/* Every huge block starts on a 2 MiB boundary: no other pointer is one. */
static inline bool maybe_huge(const void *p)
{
	return ((uintptr_t)p & (HP_THP_SIZE - 1)) == 0;
}
HP_HIDDEN void reg_insert(struct hp_block *b);
/* The block starting at addr, taken out of the registry if remove; NULL. */
HP_HIDDEN struct hp_block *reg_find(const void *addr, bool remove);
/* The live huge block ptr is, or NULL (small, or not ours). */
HP_HIDDEN struct hp_block *reg_lookup(const void *ptr);
/* The block whose mapping contains addr (slow: for reports). */
HP_HIDDEN struct hp_block *reg_find_containing(const void *addr);

/* ---- pieces.c: the cache's THP memory cut and joined (its first comment) ---------- */
/* A number no other mapping of this process has: a new mapping's family. */
HP_HIDDEN uint64_t pieces_new_family(void);
/* A THP block of kind (THP, numa) for size, cut from a larger cached one
 * or joined from cached pieces of one family and cut; NULL if none. */
HP_HIDDEN struct hp_block *thp_from_pieces(size_t size, hp_numa_t numa);
/* THP block b (the caller's, not inherited) grown toward size over the
 * cached pieces of its family that follow it. */
HP_HIDDEN void grow_over_cache(struct hp_block *b, size_t size);

/* ---- context.c: contexts (hp_ctx, hp_ctx_pagesize, hp_ctx_numa) ------------------
 * Who allocates (origin, for the stats) and, when pagesize is not 0,
 * hugetlb pages of that size forced whatever threshold and mode say; a
 * derived one (hp_ctx_numa) also places its blocks by its own policy
 * instead of the numa knob's.  All of them live as long as the process
 * and are never written once handed out (context.c says how). */
struct hp_ctx {
	int origin;
	size_t pagesize;
	bool has_numa;         /* numa below, not the knob's */
	hp_numa_t numa;
	struct hp_ctx *next;   /* interned derived contexts */
};
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
	return hp_knob(KNOB_NUMA);
}

/* ---- small.c: blocks below threshold -------------------------------------- */
HP_HIDDEN void *small_alloc(size_t size, bool zero);
HP_HIDDEN void small_free(void *p);
HP_HIDDEN void *small_realloc(void *p, size_t size);
HP_HIDDEN size_t small_size(const void *p);   /* as requested */
HP_HIDDEN size_t small_usable(const void *p);
/* A huge block of size was freed: let libc learn from it what it would
 * have learnt had the block been its own (small.c says what and why). */
HP_HIDDEN void small_libc_learn(size_t size);
/* The mmap threshold libc has learnt from hpalloc's frees so far: the
 * largest huge block freed, up to glibc's cap; 0 before any. */
HP_HIDDEN size_t small_libc_learnt(void);
/* A fresh block would not fit under the memory cgroup's limit (cache.c
 * decides): libc gives back the free memory it holds (small.c says why). */
HP_HIDDEN void small_libc_give_back(void);
/* libc would serve size from memory it holds free (no new charge). */
HP_HIDDEN bool small_libc_has_free(size_t size);

/* ---- cache.c: the reuse cache and what it may keep (its first comment: who calls
 * what with which lock) ---------------------------------------------------------- */
/* What a cached block is looked up by: its backend and its placement (a
 * block placed under one policy never serves another), one word so the
 * lookup costs one comparison (bench/numa_cost.sh). */
static inline uint64_t cache_kind(int backend, hp_numa_t numa)
{
	return numa << 8 | (unsigned)backend;
}
/* With hp_heap_lock held, no system call (but the decay's log line): */
/* A block of that kind with min_ps <= page size <= max_ps that fits size. */
HP_HIDDEN struct hp_block *cache_take(uint64_t kind, size_t min_ps, size_t max_ps, size_t size);
/* Takes ownership of b; what leaves the cache (b itself, if it has no
 * room for it) is handed to release.c (release_adopt), for the caller's
 * release_flush() after unlocking.  b->reclaimable says what cache_offer()
 * gave of it (the caller's, before locking). */
HP_HIDDEN void cache_put(struct hp_block *b, uint64_t now_ms);
/* Blocks past their decay, and any excess over the bounds, to release.c
 * (as cache_put); the next deadline.  A free without a janitor. */
HP_HIDDEN void cache_expire(uint64_t now_ms, uint64_t *next_deadline_ms);
/* The learned decay grows up to this many times the cache_decay_ms knob
 * (cache.c says how).  A bare number: knobs.c spells it in the knob's help
 * (HP_STRINGIFY). */
#define CACHE_DECAY_GROWTH 32
/* A block had to be mapped afresh: the decay in force learns from it. */
HP_HIDDEN void cache_missed(uint64_t now_ms);
/* For pieces.c, which cuts what it takes: a block of kind at least
 * len long, whatever it wastes; the block of family starting at addr;
 * cached pieces of kind lying side by side in one family, as many from the
 * first as span len (linked by ->next in address order), or NULL. */
HP_HIDDEN struct hp_block *cache_take_at_least(uint64_t kind, size_t len);
HP_HIDDEN struct hp_block *cache_take_at(uint64_t family, const void *addr);
HP_HIDDEN struct hp_block *cache_take_run(uint64_t kind, size_t len);
/* Without hp_heap_lock (they read files, or take it themselves): */
/* Every cached block of backend (< 0: of any) back to the kernel, sync:
 * in this thread (hp_cache_flush, a forked child, a short hugetlb pool). */
HP_HIDDEN void cache_empty(int backend, bool sync);
/* b (the caller's, cut or joined by pieces.c) offered and cached. */
HP_HIDDEN void cache_put_unlocked(struct hp_block *b);
/* A fresh block of backend and size is about to be mapped: the cache gives
 * back first what would take the process over cache_rss_max or past its
 * memory cgroup's share, and has libc give back its free memory if the
 * block does not fit under the cgroup's limit (heap.c new_block) -- or,
 * with libc_may, false when it does not fit and libc holds free memory
 * enough for it: no mapping, the request goes to libc. */
HP_HIDDEN bool cache_before_map(int backend, size_t size, bool libc_may);
/* hp_free: b (live, the caller's alone, not inherited) may be cached: if
 * so, a fresh look at the cgroup's usage, and cache_offer(). */
HP_HIDDEN void cache_before_put(struct hp_block *b, size_t base_off, size_t base_len);
/* THP block b (the caller's, about to be cached) is offered to the kernel
 * (MADV_FREE), unless libc would have kept it resident (cache.c says why). */
HP_HIDDEN void cache_offer(struct hp_block *b);
/* The janitor's round: the cgroup read again, decay and bounds applied,
 * resident memory against cache_rss_max; *next_deadline_ms for the decay;
 * true while a bound should be looked at again soon. */
HP_HIDDEN bool cache_watch(uint64_t *next_deadline_ms);
/* A forked child (heap_fork): no janitor to wake yet. */
HP_HIDDEN void cache_forked(void);

/* ---- policy.c: where a huge block comes from (its first comment: the rules) ---- */
/* The largest block hpalloc hands out (private or shared), larger than any
 * x86-64 address space: sizes above it are refused before rounding up to
 * a page can wrap. */
#define HP_MAX_BLOCK ((size_t)1 << 46)

/* The waste rule: what serves a request of need bytes (rounded up to its
 * page size) is at most 1/POLICY_WASTE_DIVISOR longer -- a page size, a
 * cached block -- so at most policy_longest(need) bytes.  A bare number:
 * knobs.c spells it in the pagesize knob's help (HP_STRINGIFY). */
#define POLICY_WASTE_DIVISOR 8
static inline bool policy_fits(size_t len, size_t need)
{
	return len >= need && len - need <= need / POLICY_WASTE_DIVISOR;
}
static inline size_t policy_longest(size_t need)
{
	return need + need / POLICY_WASTE_DIVISOR;
}
/* Half fits: a live block of len bytes resized to size stays as it is
 * while it holds size and is at most twice it (realloc, heap.c). */
static inline bool policy_keeps(size_t len, size_t size)
{
	return size <= len && size >= len / 2;
}
/* A kind of cached block that may serve a request, and the range of its
 * page sizes. */
struct hp_cache_search {
	uint64_t kind; /* cache_kind() */
	size_t min_ps, max_ps;
};
/* What to map: a backend and, for hugetlb, the page size (0 otherwise). */
struct hp_plan {
	int backend;
	size_t pagesize;
};
/* Where the cache may serve a private block from, in order: how many
 * looks out[] holds (0: mode=thp, which looks among THP blocks later). */
HP_HIDDEN int policy_cache_searches(const struct hp_ctx *ctx, hp_numa_t numa, struct hp_cache_search out[2]);
/* What to map for a private block the cache did not serve. */
HP_HIDDEN struct hp_plan policy_plan(size_t size, const struct hp_ctx *ctx, hp_numa_t numa);
/* A hugetlb block bound to nodes can have their free pages. */
HP_HIDDEN bool policy_nodes_can_serve(struct hp_plan p, size_t size, hp_numa_t numa);
/* The hugetlb page size the pagesize knob gives a request of size placed
 * by p (hp_malloc_pagesize with 0); 0 if the kernel offers none. */
HP_HIDDEN size_t policy_pagesize(size_t size, hp_numa_t p);
/* What a request gets when hugetlb pages could not be had (the fallback
 * knob): HP_BACKEND_THP, HP_BACKEND_SMALL, or -1 for nothing (ENOMEM). */
HP_HIDDEN int policy_fallback(void);
/* What to make a shared block of: hugetlb pages of a page size (pagesize
 * if not 0, else the knobs'), or shmem (THP: advised for THP; SMALL: not). */
HP_HIDDEN struct hp_plan policy_shared_plan(size_t size, size_t pagesize);
/* mode=auto's rule: the pool of pagesize can serve a block of size placed
 * by p right now and keep a free page for the copy of every page of this
 * process's private hugetlb blocks, which a fork's copy-on-write needs;
 * a private block (private_block) needs room for its own copy too (policy.c
 * says why; tests/c/numa_pools asks it on staged pools). */
HP_HIDDEN bool policy_pool_ready(size_t pagesize, size_t size, hp_numa_t p, bool private_block);
/* At fork: a pool that cannot give fork's copies of this process's private
 * hugetlb pages (policy.c says why): its page size, the pages held, the
 * room there is. */
HP_HIDDEN bool policy_fork_short(size_t *pagesize, size_t *pages, long *room);
/* ---- memcg.c: the memory cgroup, measured (its first comment) --------------------
 * cache.c's rule, named here for knobs.c: in a memory cgroup with a limit,
 * cached THP bytes stay within MEMCG_CACHE_SHARE_PCT percent of the
 * headroom -- limit - working set + cached THP bytes, what would be free
 * under the limit if the cache were empty.  A bare number: knobs.c spells
 * it in the knob's help. */
#define MEMCG_CACHE_SHARE_PCT 25
/* The first huge mapping of a process (memcg_headroom before a THP block,
 * else janitor_start): find its cgroup. */
HP_HIDDEN void memcg_start(void);
/* The janitor, every round (cache_watch): the cgroup and its limits again,
 * the usage if limited; whether a limit binds. */
HP_HIDDEN bool memcg_follow(void);
/* What is free under the binding level's limit (limit - working set), from a
 * reading at most max_age_ms old (read again here if older; files are
 * read: no lock held by the caller); SIZE_MAX without a known limit.  A
 * measure only: cache.c's and populate.c's rules decide what it allows. */
HP_HIDDEN size_t memcg_headroom(unsigned max_age_ms);
/* A limit binds the process, as last looked (one relaxed load). */
HP_HIDDEN bool memcg_limited(void);
/* The bounds on the process's memory (memcg.c's "bounds" section): whether
 * one holds now -- the cgroup's limit as last looked, or the resident bound
 * (cache_rss_max) -- and what is free under the tighter of the two, the
 * cgroup's from a reading at most max_age_ms old (files are read: no lock
 * held); SIZE_MAX: no bound. */
HP_HIDDEN bool memcg_bounded(void);
HP_HIDDEN size_t memcg_room(unsigned max_age_ms);
/* The same from the last reading alone: no system call (hp_heap_lock may
 * be held). */
HP_HIDDEN size_t memcg_headroom_last(void);
/* THP bytes on their way back to the kernel (release_adopt): free under
 * the limit from now on, until the next reading. */
HP_HIDDEN void memcg_releasing(size_t bytes);
/* A fresh THP block of bytes about to be charged (cache.c
 * cache_before_map): used from now on, until the next reading. */
HP_HIDDEN void memcg_charging(size_t bytes);
/* Pages of this process given MADV_FREE (cache.c cache_offer), until
 * unmapped (release.c): they sit on the kernel's inactive file list, which
 * memcg.c's working set must not count them in as page cache. */
HP_HIDDEN void memcg_lazy_add(size_t bytes);
HP_HIDDEN void memcg_lazy_sub(size_t bytes);

/* ---- shared.c ---------------------------------------------------------------- */
/* The shared block containing addr, as a mapping (for backing.c). */
HP_HIDDEN bool shared_lookup(const void *addr, struct hp_map *out);

/* ---- heap.c (for huge_api.c) ---------------------------------------------------- */
/* A request of size goes to the huge path (threshold, mode=off). */
static inline bool wants_huge(size_t size)
{
	return size >= (size_t)hp_knob(KNOB_THRESHOLD) &&
	       (int)hp_knob(KNOB_MODE) != MODE_OFF;
}
/* The huge path alone: a registered block, or NULL -- with *to_small set
 * when fallback=small sends the request to the caller's ordinary path,
 * else ENOMEM.  The caller disables cancellation. */
HP_HIDDEN void *huge_try(size_t size, const struct hp_ctx *ctx, bool zero, bool *to_small);
/* Live block b resized to hold size without copying (its address), or
 * NULL: it must be copied (b is still live and registered). */
HP_HIDDEN void *resize_in_place(struct hp_block *b, size_t size, const struct hp_ctx *ctx);

/* ---- release.c ------------------------------------------------------------------ */
/* Take a list (linked by ->next) of blocks that just left the registry or
 * the cache; call with hp_heap_lock held, so no fork ever finds a block
 * owned by nobody.  release_flush() then sends every adopted block on its
 * way (sync: never through the ring). */
HP_HIDDEN void release_adopt(struct hp_block *list);
HP_HIDDEN void release_flush(bool sync);
HP_HIDDEN void release_drain(void);        /* until nothing is releasing */
HP_HIDDEN void release_pump(void);         /* janitor: pending into the ring */
HP_HIDDEN void release_entry_done(struct hp_block *b, int res); /* ring.c */
HP_HIDDEN void release_abandon_ring(void); /* ring.c: a gone ring's lost completions */
/* The asynchronous way a layer above lends release.c: ring.c's io_uring,
 * once the janitor has set it up.  Until one is lent, and whenever it
 * does not take blocks, releases are synchronous. */
struct release_way {
	bool (*takes)(void);               /* any thread: set up, not gone, no backlog */
	size_t (*entries)(size_t len);     /* entries a block of len needs */
	/* rel_lock held: prepare b's entries; false if none could be prepared
	 * (no room, backlog, gone), b untouched */
	bool (*queue)(struct hp_block *b);
	void (*kick)(void);                /* pending blocks wait: wake whoever pumps */
};
HP_HIDDEN void release_lend(const struct release_way *w);

/* ---- ring.c: the janitor thread's alone (ring.c says why; ring_probe: private.h) -- */
/* Set up, unplug its fd, then ready, and lent to release.c. */
HP_HIDDEN void ring_start(void);
HP_HIDDEN bool ring_backlogged(void);      /* any thread: a submit failed, retry pending */
HP_HIDDEN void ring_submit(void);          /* what is prepared, a backlog */
/* Wait up to timeout_ms for a completion while the kernel has entries,
 * then reap; false if it did not wait (the caller waits elsewhere). */
HP_HIDDEN bool ring_wait(uint64_t timeout_ms);
HP_HIDDEN void ring_collect(void);         /* a gone ring gives back its blocks */
HP_HIDDEN bool ring_collecting(void);      /* a gone ring still holds some */

/* ---- smaps.c: what the kernel says --------------------------------------------- */
/* The process's resident memory as ps, psutil and Dask count it
 * (/proc/self/statm: hugetlb pages are not in it); 0 if unreadable. */
HP_HIDDEN size_t hp_self_rss(void);

/* ---- thp.c: what the kernel does to huge pages (thp.c's first comment) ---------- */
/* The janitor's: /proc/vmstat's split counters since its last look, added
 * to thp_splits_seen (thp_underused_splits_seen) while holding THP blocks. */
HP_HIDDEN void thp_watch_splits(bool holding);

/* ---- janitor.c ------------------------------------------------------------------ */
/* There is work (a huge block was mapped): start the janitor, once per
 * process and fork generation; a no-op after the first call. */
HP_HIDDEN void janitor_start(void);
HP_HIDDEN void janitor_forbid(void);       /* hpctl: never a janitor */
HP_HIDDEN bool janitor_running(void);
HP_HIDDEN void janitor_wake(void);         /* new cache deadline, blocks to release */

/* ---- populate.c: fresh blocks faulted in ahead of the program (its first comment) -- */
/* A fresh block m, still its allocating thread's alone (before it is
 * published): it gets a job, and is populated ahead once the program is seen to
 * touch it from its start. */
HP_HIDDEN void populate_fresh(const struct hp_map *m);
/* The block at addr leaves the registry (freed, resized): its job ends,
 * and this returns once no worker is inside it.  Cancellation disabled.
 * *base_off, *base_len (may be NULL): the part that may still be on the
 * 4 KiB pages it was faulted at first, not collapsed yet (length 0: none). */
HP_HIDDEN void populate_forget(const void *addr, size_t *base_off, size_t *base_len);
/* The first-touch figures (ns of CPU per 2 MiB faulted as a huge page, as
 * 4 KiB pages; 0: not measured) as if the workers had measured them: tests
 * stage a machine where huge pages are dear, or cheap; 0, 0: a process
 * that has measured nothing yet (its next block probes first). */
HP_HIDDEN void populate_figures_stage(uint64_t huge_ns, uint64_t base_ns);

/* ---- fork: one convention for every module.  Each module with state that
 * fork can tear has a hook `<module>_fork(int phase)`: FORK_PREPARE takes
 * its locks, FORK_PARENT releases them, FORK_CHILD re-initialises them and
 * repairs its state for a process with one thread.  lifecycle.c calls the
 * hooks from one table, in the order the code nests the locks (init >
 * control > publish > knobs > heap > shared > release > ring > janitor >
 * populate > stats > memcg > registry.c's reg_lock, under which nothing is
 * called), the parent and child phases in reverse order; the layers above
 * the core hold their slots in it (control, publish: SLOT_CONTROL; ring,
 * janitor, populate: SLOT_THREADS) and call their own hooks in that
 * order (fork_in_order). */
enum hp_fork_phase { FORK_PREPARE, FORK_PARENT, FORK_CHILD };
static inline void fork_mutex(pthread_mutex_t *m, int phase)
{
	if (phase == FORK_PREPARE)
		pthread_mutex_lock(m);
	else if (phase == FORK_PARENT)
		pthread_mutex_unlock(m);
	else /* its owner may be a thread the child does not have */
		pthread_mutex_init(m, NULL);
}
HP_HIDDEN void knobs_fork(int phase);
HP_HIDDEN void heap_fork(int phase);
HP_HIDDEN void registry_fork(int phase); /* last: see registry.c */
HP_HIDDEN void shared_fork(int phase);
HP_HIDDEN void release_fork(int phase);
HP_HIDDEN void ring_fork(int phase);
HP_HIDDEN void janitor_fork(int phase);
HP_HIDDEN void populate_fork(int phase);
HP_HIDDEN void stats_fork(int phase);
HP_HIDDEN void control_fork(int phase);
HP_HIDDEN void publish_fork(int phase);
HP_HIDDEN void memcg_fork(int phase);

/* ---- cancellation ------------------------------------------------------------------
 * glibc's malloc & co are no cancellation points, and hpalloc's entry
 * points are none either: a thread cancelled inside one would end holding
 * whatever lock it held (init_lock across the control directory's reads,
 * rel_lock in a drain's pthread_cond_wait, hp_heap_lock around a log line)
 * and every later hp_* call of the process would wait for it forever.  So
 * each entry point that can reach a cancellation point (open, read, write
 * of a log line, pthread_cond_wait...) runs with cancellation disabled; a
 * cancel that arrives meanwhile stays pending and acts at the caller's
 * next cancellation point, as after a malloc.  Asynchronous cancellation
 * is as unsafe as glibc's documentation says: nothing here guards it.
 * The small-allocation paths reach none and pay nothing. */
#define HP_NOCANCEL_BEGIN const int hp_cancel_state_ = hp_nocancel_begin()
#define HP_NOCANCEL_END hp_nocancel_end(hp_cancel_state_)
static inline int hp_nocancel_begin(void)
{
	int old = PTHREAD_CANCEL_ENABLE;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}
static inline void hp_nocancel_end(int old)
{
	int ignored;
	pthread_setcancelstate(old, &ignored);
}

/* ---- lifecycle.c: the layers above join the core -----------------------------------
 * The core calls no function of the layers above it (tests/layers.sh).
 * What they must do at its initialisation, around fork and at exit, each
 * layer above gives it as a struct hp_part, and what the core must start,
 * wake or tell the threads of, the threads layer gives it as a struct
 * hp_background: each joins from a constructor of its own (control.c,
 * janitor.c).  Until a layer has joined the core runs without it -- no
 * thread, no control directory -- as it does for the moments before the
 * library's constructors run (a preloaded malloc called from another
 * library's constructor); a part that joins after the core's
 * initialisation is initialised as it joins.  A program that links the
 * core's archive (tests, hpctl) pulls both joins in by AM_LDFLAGS'
 * -Wl,-u (HP_JOIN_ANCHORS). */
enum hp_slot {
	SLOT_CONTROL, /* control/: its locks nest outside knobs.c's */
	SLOT_THREADS, /* threads/: theirs inside release.c's */
	SLOT_COUNT
};
struct hp_part {
	void (*init)(void);         /* once per process, init_lock held */
	void (*fork)(int phase);    /* its modules' fork hooks (fork_in_order) */
	void (*exit)(void);         /* at exit */
	void (*tool_mode)(void);    /* hpctl: nothing of its own (lifecycle_tool_mode) */
};
struct hp_background {
	void (*start)(void);        /* a huge block was mapped: the janitor may start */
	void (*wake)(void);         /* the janitor: a deadline moved, work waits */
	bool (*running)(void);      /* a janitor runs (else the core decays on free) */
	/* a fresh block, still its allocating thread's: the populate workers
	 * may fault it ahead */
	void (*fresh)(const struct hp_map *m);
	/* the block at addr leaves the registry: no worker inside it once this
	 * returns; *base_off, *base_len (may be NULL): its part still on base
	 * pages (populate.c) */
	void (*forget)(const void *addr, size_t *base_off, size_t *base_len);
};
HP_HIDDEN void hp_join(enum hp_slot slot, const struct hp_part *part);
HP_HIDDEN void hp_join_background(const struct hp_background *bg);
HP_HIDDEN extern _Atomic(const struct hp_background *) hp_background;
/* The anchors AM_LDFLAGS' -Wl,-u names, so that a static link of the
 * core's archive pulls in each layer's join (control.c, janitor.c). */
HP_HIDDEN extern const int hp_control_joins, hp_threads_joins;

static inline const struct hp_background *background(void)
{
	return atomic_load_explicit(&hp_background, memory_order_acquire);
}
static inline void background_start(void)
{
	const struct hp_background *bg = background();
	if (bg)
		bg->start();
}
static inline void background_wake(void)
{
	const struct hp_background *bg = background();
	if (bg)
		bg->wake();
}
static inline bool background_running(void)
{
	const struct hp_background *bg = background();
	return bg && bg->running();
}
static inline void background_fresh(const struct hp_map *m)
{
	const struct hp_background *bg = background();
	if (bg)
		bg->fresh(m);
}
static inline void background_forget(const void *addr, size_t *base_off, size_t *base_len)
{
	const struct hp_background *bg = background();
	if (bg) {
		bg->forget(addr, base_off, base_len);
		return;
	}
	if (base_off)
		*base_off = 0;
	if (base_len)
		*base_len = 0;
}
/* A part's fork hook: its modules' hooks, outermost first to prepare,
 * innermost first after (as lifecycle.c's table). */
static inline void fork_in_order(void (*const hooks[])(int), size_t n, int phase)
{
	if (phase == FORK_PREPARE)
		for (size_t i = 0; i < n; i++)
			hooks[i](phase);
	else
		for (size_t i = n; i-- > 0;)
			hooks[i](phase);
}

/* ---- lifecycle.c -------------------------------------------------------------- */
HP_HIDDEN extern _Atomic int hp_initialized;
HP_HIDDEN void hp_init_slow(void);
static inline void hp_init(void)
{
	if (unlikely(!atomic_load_explicit(&hp_initialized, memory_order_acquire)))
		hp_init_slow();
}
HP_HIDDEN uint64_t hp_now_ms(void);
HP_HIDDEN bool hp_secure_exec(void);      /* getauxval(AT_SECURE) */
/* Non-zero while this thread runs hpalloc's own code: its initialisation,
 * the janitor thread (always) and its start, hp_huge_alloc/hp_huge_realloc.  The malloc
 * of an interposer (libhpalloc-preload.so) called from there -- stdio,
 * opendir, liburing, pthread_create, a block record -- must go to libc,
 * never back into the huge path and the locks it may already hold:
 * hp_huge_threshold() says SIZE_MAX and hp_huge_alloc() answers 1. */
HP_HIDDEN extern __thread unsigned hp_inside __attribute__((tls_model("initial-exec")));

/* ---- control.c / publish.c ------------------------------------------------------ */
HP_HIDDEN void control_init(void);      /* first read of the control dir  */
HP_HIDDEN void control_poll(void);      /* called by the janitor, ~250 ms */
HP_HIDDEN const char *control_dir(void);    /* resolved at init, or NULL */
HP_HIDDEN int control_dir_kind(void);       /* how control_dir() was chosen */
HP_HIDDEN void publish_update(void);    /* refresh this process's stats file */
HP_HIDDEN void publish_exit(void);

/* ---- publish.c ------------------------------------------------------------------ */
HP_HIDDEN bool publish_claimed(void);       /* proc/<our pid> is ours */
HP_HIDDEN void publish_disable(void);       /* hpctl does not publish itself */
/* Remove proc/<pid> (stats, overrides) below procfd, never following links. */
HP_HIDDEN int publish_remove_pid_dir(int procfd, pid_t pid);

/* ---- the per-process entry: publish.c writes it, peers.c reads it --------
 * <control dir>/proc/<pid>/stats, at most PUB_MAX bytes, replaced atomically.
 * One record per line, fields separated by one space, the last field of a
 * line running to its end:
 *
 *   hpalloc-stats 1
 *   pid <pid>                              (as the process sees itself)
 *   comm <command name>
 *   start_time <field 22 of /proc/<pid>/stat, 0 if unknown>
 *   pidns <st_dev> <st_ino>                (of /proc/self/ns/pid; absent if unknown)
 *   stat <hp_stat_name> <value>            (every counter)
 *   knob <name> <value> <source>           (every knob, effective value)
 *   rejected <name> <reason>               (knobs with a rejected input)
 *
 * Readers ignore records they do not know, so records can be added. */
#define PUB_MAGIC "hpalloc-stats 1\n"
#define PUB_MAX 16384
struct pub_ns { unsigned long long dev, ino; }; /* identifies a pid namespace */
struct peer_entry {
	struct hp_proc p;
	bool has_ns;
	struct pub_ns ns;  /* the publisher's pid namespace */
};
/* Our pid namespace, from /proc/self/ns/pid; -1 without /proc. */
HP_HIDDEN int peers_pidns_self(struct pub_ns *out);
/* Field 22 of /proc/<pid>/stat (start time in clock ticks). */
HP_HIDDEN int peers_start_time(pid_t pid, unsigned long long *out);
/* Parse proc/<pid>/stats below piddir (no judgement); -1 + errno. */
HP_HIDDEN int peers_read(int piddir, struct peer_entry *e);

#endif
