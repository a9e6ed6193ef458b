/* Private interfaces between the files of lib/.  Not installed.
 * docs/architecture.md follows hp_malloc, hp_free, realloc and the janitor
 * through these files and gives the lock order.
 *
 * Who owns what:
 *   knobs.c    the knob table: parse, print, layers (default < control < env < process)
 *   heap.c     hp_malloc & co: routing by size and address, registry of
 *              huge blocks, block sourcing (cache, pieces cut and joined,
 *              fresh mappings, fallback), realloc, contexts (hp_ctx*), the
 *              huge path alone for interposers (hp_huge_*, hp_owns), the
 *              backing reports (hp_backing*), hp_cache_flush
 *   small.c    the ordinary path: libc memory, 64-byte aligned, per-thread cache
 *   os.c       mmap/munmap/madvise, THP alignment, hugetlb pools (libhugetlbfs)
 *   thp.c      the kernel's THP settings (and multi-size THP): which page
 *              sizes serve hpalloc's madvised mappings
 *   cache.c    size-bucketed reuse cache of huge blocks, bound and decay
 *   release.c  blocks on their way back to the kernel: who owns them, which
 *              way they go (ring or synchronous), drain
 *   ring.c     the io_uring: probe, setup, submit, reap (transport only)
 *   janitor.c  the background thread and its schedule: reaping, decay,
 *              control polling, stats publishing
 *   stats.c    counters
 *   smaps.c    what the kernel says (/proc/self/smaps)
 *   numa.c     NUMA placement: the numa knob's policies, the nodes there
 *              are, which pool pages a policy may use, mbind of our blocks
 *   numa_maps.c  what the kernel says about placement (/proc/self/numa_maps)
 *   shared.c   shared blocks: memfd huge pages other processes map
 *   lifecycle.c  lazy init, the fork hooks of every module (one table), exit,
 *              the secure-execution test (hp_secure_exec)
 *   securedir.c  the rules a directory or file must pass before hpalloc
 *              trusts it, and atomic writes: for control.c, publish.c,
 *              published.c and hpctl
 *   control.c  control directory: where it is, live reload of knob files
 *   publish.c  per-process stats file: writing it (format: below)
 *   report.c   the activation report of `hpctl run --check`: its line,
 *              written (hp_report_activation) and read (report_parse_line)
 *   published.c  reading those files back (hp_proc_*), when one is stale
 *   private.h  the library's hidden functions hpctl may call (with the
 *              public hpalloc.h, all hpctl sees of lib/)
 *   preload.c  not part of libhpalloc: libhpalloc-preload.so, malloc & co
 *              interposed, on the public API alone (hp_huge_*, hp_owns)
 *
 * Who may touch a huge block when: see the top of release.c (live in
 * heap.c's registry, cached in cache.c, releasing in release.c; exactly one
 * at a time, handed over under hp_heap_lock).
 */
#ifndef HP_INTERNAL_H
#define HP_INTERNAL_H

#include "hpalloc.h"
#include "private.h" /* what hpctl may call too */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define HP_KiB ((size_t)1 << 10)
#define HP_MiB ((size_t)1 << 20)
#define HP_GiB ((size_t)1 << 30)
#define HP_SMALL_ALIGN 64
#define HP_THP_SIZE (2 * HP_MiB)
#define HP_BASE_PAGE ((size_t)4096)

/* The largest block hpalloc hands out (private or shared), larger than any
 * x86-64 address space: sizes above it are refused before rounding up to
 * a page can wrap. */
#define HP_MAX_BLOCK ((size_t)1 << 46)

#define HP_STRINGIFY_(x) #x
#define HP_STRINGIFY(x) HP_STRINGIFY_(x) /* a macro's value as a string literal */

static inline size_t hp_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* Successful calls leave errno as they found it: public functions whose
 * work may set errno on the way (probes, fallbacks, lazy init) save it on
 * entry and put it back before a successful return. */
#define HP_ERRNO_SAVE const int hp_saved_errno_ = errno
#define HP_ERRNO_RESTORE (errno = hp_saved_errno_)

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
	KNOB_COUNT
};
enum hp_mode { MODE_AUTO, MODE_HUGETLB, MODE_THP, MODE_OFF };
enum hp_fallback { FALLBACK_THP, FALLBACK_SMALL, FALLBACK_FAIL };
/* pagesize knob value: 0 = auto, else bytes */

/* Effective values, read lock-free on the allocation path. */
struct hp_config {
	_Atomic int mode;
	_Atomic size_t threshold;
	_Atomic size_t pagesize;
	_Atomic int fallback;
	_Atomic size_t cache_max;
	_Atomic uint64_t cache_decay_ms;
	_Atomic int uring;
	_Atomic int verbose;
	_Atomic uint64_t numa;  /* hp_numa_t */
};
HP_HIDDEN extern struct hp_config hp_cfg;

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

/* ---- os.c ------------------------------------------------------------------ */
/* A mapping hpalloc owns.  addr is aligned to the page size it asked for. */
struct hp_map {
	void *addr;
	size_t len;      /* mapped bytes (multiple of page)    */
	size_t pagesize; /* 4096 for thp, 2M/1G for hugetlb  */
	int backend;     /* HP_BACKEND_THP or HP_BACKEND_HUGETLB */
	hp_numa_t numa;  /* placement it was given (0: the kernel's) */
};
/* Give a fresh mapping (never touched) placement p: mbind, and for a bind
 * on hugetlb pages the pages faulted now, so a node without free pages is
 * a failed allocation instead of a SIGBUS at first touch.  -1 + errno
 * (ENOMEM: no page where p allows); the mapping is then unchanged or
 * partly placed, and the caller unmaps it. */
HP_HIDDEN int numa_place(struct hp_map *m, hp_numa_t p);
HP_HIDDEN int os_map_thp(size_t size, struct hp_map *out);
HP_HIDDEN int os_map_hugetlb(size_t size, size_t pagesize, struct hp_map *out);
HP_HIDDEN int os_unmap(const struct hp_map *m);
/* Grow a THP mapping without copying (in place, else moved to a 2 MiB
 * aligned place).  On success *m is updated. */
HP_HIDDEN int os_remap_thp(struct hp_map *m, size_t new_size);
/* A THP mapping is followed by a PROT_NONE guard page (os.c says why). */
#define HP_THP_GUARD HP_BASE_PAGE
/* Where the next piece of a cut THP mapping would start. */
static inline char *os_thp_end(const struct hp_map *m)
{
	return (char *)m->addr + m->len + HP_THP_GUARD;
}
/* Cut a THP mapping in two without a page moving: *m keeps its first
 * front_len bytes (front_len + guard a multiple of 2 MiB, so *back starts
 * on a 2 MiB boundary) and the page after them becomes its guard; *back
 * gets the rest, with the old guard.  To the kernel they stay pieces of
 * one mapping: os_thp_join() makes them one VMA again. */
HP_HIDDEN int os_thp_split(struct hp_map *m, size_t front_len, struct hp_map *back);
/* *front grows over its guard onto *back, which starts at os_thp_end(front)
 * and was cut from the same mapping. */
HP_HIDDEN int os_thp_join(struct hp_map *front, const struct hp_map *back);
HP_HIDDEN bool os_pagesize_supported(size_t pagesize);
/* The page size a sysfs directory named hugepages-<N>kB stands for (the
 * hugetlb pools' and multi-size THP's), or 0 for any other name. */
HP_HIDDEN size_t os_hugepages_dir_size(const char *name);
/* Free pages of the hugetlb pool of pagesize (free - reserved), -1 unknown. */
HP_HIDDEN long os_pool_available(size_t pagesize);
/* Page size for mode=hugetlb/auto given the knob (0 = auto), the request
 * and its placement (auto only takes a size whose pool p may use). */
HP_HIDDEN size_t os_choose_pagesize(size_t knob, size_t size, hp_numa_t p);
/* mode=auto's rule: the pool of pagesize can serve a block of size placed
 * by p right now and still keep a free page for the copy of every page of
 * this process's private hugetlb blocks, which a fork's copy-on-write needs
 * (os.c says why).  os_pool_ready() for a shared block (never copied),
 * os_pool_ready_private() for a private one (its own pages need room too). */
HP_HIDDEN bool os_pool_ready(size_t pagesize, size_t size, hp_numa_t p);
HP_HIDDEN bool os_pool_ready_private(size_t pagesize, size_t size, hp_numa_t p);
/* Tests: read os_pool_counter()'s counters below root (a staged sysfs: root/kernel/
 * mm/hugepages, root/devices/system/node) instead of /sys; NULL: /sys. */
HP_HIDDEN void os_pool_sysfs_root(const char *root);
/* mbind(2) of m's whole mapping (with a THP block's guard page, so the
 * block can still grow in place) to mode over nodes; -1 + errno. */
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

/* ---- thp.c: the kernel's THP settings (and private.h) ------------------------------ */
/* Tests: read a staged copy of the directory instead (NULL: /sys's). */
HP_HIDDEN void thp_sysfs_root(const char *dir);

/* ---- blocks, heap.c ---------------------------------------------------------- */
struct hp_block {
	struct hp_map map;
	size_t size;              /* usable size handed out            */
	bool dirty;               /* pages may hold old data           */
	int origin;               /* enum hp_origin, for the stats     */
	unsigned fork_gen;        /* heap_fork_gen when it was mapped  */
	int release_state;        /* release.c's, while it releases it */
	size_t chunks_left;       /* ring entries not yet completed    */
	uint64_t cached_at_ms;    /* when it entered the cache         */
	size_t reclaimable;       /* os_lazyfree() gave these, while cached */
	uint64_t kind;            /* cache_kind() of its map           */
	uint64_t family;          /* the mapping it was cut from (THP)  */
	struct hp_block *hnext;   /* registry hash chain               */
	struct hp_block *prev, *next; /* cache bucket; release hand-off   */
	struct hp_block *lru_prev, *lru_next; /* cache LRU; in-ring list */
	int bucket;
};
HP_HIDDEN extern pthread_mutex_t hp_heap_lock; /* registry + cache */

/* ---- small.c: blocks below threshold -------------------------------------- */
HP_HIDDEN void *small_alloc(size_t size, bool zero);
HP_HIDDEN void small_free(void *p);
HP_HIDDEN void *small_realloc(void *p, size_t size);
HP_HIDDEN size_t small_size(const void *p);   /* as requested */
HP_HIDDEN size_t small_usable(const void *p);
/* A huge block of size was freed: let libc learn from it what it would
 * have learnt had the block been its own (small.c says what and why). */
HP_HIDDEN void small_libc_learn(size_t size);

/* ---- cache.c (called with hp_heap_lock held) ----------------------------------- */
/* What a cached block is looked up by: its backend and its placement (a
 * block placed under one policy never serves another), one word so the
 * lookup costs one comparison (bench/numa_cost.sh). */
static inline uint64_t cache_kind(int backend, hp_numa_t numa)
{
	return numa << 8 | (unsigned)backend;
}
/* A block of that kind with min_ps <= page size <= max_ps that fits size. */
HP_HIDDEN struct hp_block *cache_take(uint64_t kind, size_t min_ps, size_t max_ps, size_t size);
/* Takes ownership; returns blocks pushed out (to release after unlocking).
 * b->reclaimable says what os_lazyfree() gave of it (the caller's, before
 * locking: heap.c's offer_to_kernel()). */
HP_HIDDEN struct hp_block *cache_put(struct hp_block *b, uint64_t now_ms);
HP_HIDDEN struct hp_block *cache_expire(uint64_t now_ms, uint64_t *next_deadline_ms);
/* The learned decay grows up to this many times the cache_decay_ms knob
 * (cache.c says how).  A bare number: knobs.c spells it in the knob's help
 * (HP_STRINGIFY). */
#define CACHE_DECAY_GROWTH 32
/* A block had to be mapped afresh: the decay in force learns from it. */
HP_HIDDEN void cache_missed(uint64_t now_ms);
HP_HIDDEN struct hp_block *cache_take_all(void);
/* For heap.c's pieces, which cut what they take: a block of kind at least
 * len long, whatever it wastes; the block of family starting at addr;
 * cached pieces of kind lying side by side in one family, as many from the
 * first as span len (linked by ->next in address order), or NULL. */
HP_HIDDEN struct hp_block *cache_take_at_least(uint64_t kind, size_t len);
HP_HIDDEN struct hp_block *cache_take_at(uint64_t family, const void *addr);
HP_HIDDEN struct hp_block *cache_take_run(uint64_t kind, size_t len);
HP_HIDDEN struct hp_block *cache_take_backend(int backend);

/* ---- shared.c ---------------------------------------------------------------- */
/* The shared block containing addr, as a mapping (for hp_backing). */
HP_HIDDEN bool shared_lookup(const void *addr, struct hp_map *out);

/* ---- heap.c (for the janitor) ------------------------------------------------- */
/* Release cached blocks past their decay; *next_deadline_ms for the next. */
HP_HIDDEN void heap_expire(uint64_t *next_deadline_ms);

/* ---- release.c ------------------------------------------------------------------ */
/* Take a list (linked by ->next) of blocks that just left the registry or
 * the cache; call with hp_heap_lock held, so no fork ever finds a block
 * owned by nobody.  release_flush() then sends every adopted block on its
 * way (sync: never through the ring). */
HP_HIDDEN void release_adopt(struct hp_block *list);
HP_HIDDEN void release_flush(bool sync);
HP_HIDDEN void release_drain(void);        /* until nothing is releasing */
HP_HIDDEN bool release_busy(void);         /* something is releasing */
HP_HIDDEN void release_pump(void);         /* janitor: pending into the ring */
HP_HIDDEN void release_chunk_done(struct hp_block *b, int res); /* ring.c */
HP_HIDDEN void release_abandon_ring(void); /* ring.c: a gone ring's lost completions */

/* ---- ring.c: the janitor thread's alone (ring.c says why; ring_probe: private.h) -- */
HP_HIDDEN void ring_start(void);           /* set up, unplug its fd, publish */
HP_HIDDEN bool ring_ready(void);           /* any thread: set up, not gone */
HP_HIDDEN bool ring_backlogged(void);      /* any thread: a submit failed, retry pending */
HP_HIDDEN size_t ring_chunks(size_t len);  /* entries a block of len needs */
/* rel_lock held: prepare b's entries; false if none could be prepared
 * (no room, backlog, gone), b untouched. */
HP_HIDDEN bool ring_queue(struct hp_block *b);
HP_HIDDEN void ring_submit(void);          /* what is prepared, a backlog */
/* Wait up to timeout_ms for a completion while the kernel has entries,
 * then reap; false if it did not wait (the caller waits elsewhere). */
HP_HIDDEN bool ring_wait(uint64_t timeout_ms);
HP_HIDDEN void ring_collect(void);         /* a gone ring gives back its blocks */
HP_HIDDEN bool ring_collecting(void);      /* a gone ring still holds some */

/* ---- janitor.c ------------------------------------------------------------------ */
/* There is work (a huge block was mapped): start the janitor, once per
 * process and fork generation; a no-op after the first call. */
HP_HIDDEN void janitor_start(void);
HP_HIDDEN void janitor_forbid(void);       /* hpctl: never a janitor */
HP_HIDDEN bool janitor_running(void);
HP_HIDDEN void janitor_wake(void);         /* new cache deadline, blocks to release */

/* ---- stats.c ------------------------------------------------------------------- */
HP_HIDDEN extern _Atomic uint64_t hp_counters[HP_STAT_COUNT];
static inline void stat_add(int s, uint64_t n)
{
	atomic_fetch_add_explicit(&hp_counters[s], n, memory_order_relaxed);
}
static inline void stat_sub(int s, uint64_t n)
{
	atomic_fetch_sub_explicit(&hp_counters[s], n, memory_order_relaxed);
}
HP_HIDDEN void stats_live_add(int backend, size_t bytes);
HP_HIDDEN void stats_live_sub(int backend, size_t bytes);
HP_HIDDEN void stats_block_live(const struct hp_block *b, bool live);

/* ---- fork: one convention for every module.  Each module with state that
 * fork can tear has a hook `<module>_fork(int phase)`: FORK_PREPARE takes
 * its locks, FORK_PARENT releases them, FORK_CHILD re-initialises them and
 * repairs its state for a process with one thread.  lifecycle.c calls the
 * hooks from one table, in the order the code nests the locks (init >
 * control > publish > knobs > heap > shared > release > ring > janitor >
 * stats > heap's registry lock, under which nothing is called), the parent
 * and child phases in reverse order. */
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
HP_HIDDEN void heap_registry_fork(int phase); /* last: see heap.c */
HP_HIDDEN void shared_fork(int phase);
HP_HIDDEN void release_fork(int phase);
HP_HIDDEN void ring_fork(int phase);
HP_HIDDEN void janitor_fork(int phase);
HP_HIDDEN void stats_fork(int phase);
HP_HIDDEN void control_fork(int phase);
HP_HIDDEN void publish_fork(int phase);

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

/* ---- the per-process entry: publish.c writes it, published.c reads it --------
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
struct published_entry {
	struct hp_proc p;
	bool has_ns;
	struct pub_ns ns;  /* the publisher's pid namespace */
};
/* Our pid namespace, from /proc/self/ns/pid; -1 without /proc. */
HP_HIDDEN int published_pidns_self(struct pub_ns *out);
/* Field 22 of /proc/<pid>/stat (start time in clock ticks). */
HP_HIDDEN int published_start_time(pid_t pid, unsigned long long *out);
/* Parse proc/<pid>/stats below piddir (no judgement); -1 + errno. */
HP_HIDDEN int published_read(int piddir, struct published_entry *e);

#endif
