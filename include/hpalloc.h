/* hpalloc — huge-page backed memory for large (NumPy) arrays.
 *
 * One public header, prefix hp_.  Every function is thread-safe and
 * fork-safe.  Failures return NULL or -1 with errno set; the library never
 * aborts and never prints unless the `verbose` knob asks it to.  Page
 * sizes in bytes are called `page_size` (parameters and fields);
 * `pagesize` is the knob's name, which hp_malloc_pagesize() and
 * hp_ctx_pagesize() carry.
 */
#ifndef HPALLOC_H
#define HPALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HP_API __attribute__((visibility("default")))
#else
#define HP_API
#endif

/* ---- allocation -------------------------------------------------------
 * Below the `threshold` knob: libc memory, 64-byte aligned.  At or above it:
 * huge pages according to `mode` (hugetlb, thp, auto) and `fallback`.
 * Pointers are routed by address on free, so a wrong size hint, or knobs
 * changed between allocation and free, never misroute a block. */
HP_API void *hp_malloc(size_t size);
HP_API void *hp_calloc(size_t nmemb, size_t size);
HP_API void *hp_realloc(void *ptr, size_t size);
HP_API void hp_free(void *ptr);
/* `size` is only a hint (NumPy passes wrong sizes for shapes containing 0). */
HP_API void hp_free_sized(void *ptr, size_t size);
HP_API size_t hp_usable_size(const void *ptr);

/* An allocation on hugetlb pages of `page_size` bytes (2 MiB or 1 GiB; 0 = the
 * `pagesize` knob) whatever the size and `threshold`.  Pool short: the
 * `fallback` knob decides.  zero != 0 returns zeroed memory. */
HP_API void *hp_malloc_pagesize(size_t size, size_t page_size, int zero);

/* ---- NEP 49 shaped entry points ----------------------------------------
 * Signatures of NumPy's PyDataMemAllocator, so the NumPy handler is a table
 * of these and nothing else.  ctx is NULL (follow the knobs) or a context
 * from hp_ctx(), hp_ctx_pagesize() or hp_ctx_numa(). */
HP_API void *hp_ctx_malloc(void *ctx, size_t size);
HP_API void *hp_ctx_calloc(void *ctx, size_t nelem, size_t elsize);
HP_API void *hp_ctx_realloc(void *ctx, void *ptr, size_t new_size);
HP_API void hp_ctx_free(void *ctx, void *ptr, size_t size);
/* An immortal context forcing hugetlb pages of `page_size` (2 MiB or 1 GiB):
 * allocations through it ignore `threshold` and `mode`.  NULL + EINVAL for
 * a page size the kernel does not offer.  Same as hp_ctx(HP_ORIGIN_API, page_size). */
HP_API void *hp_ctx_pagesize(size_t page_size);

/* Who asked for a block: every adapter allocates through a context of its
 * origin, so the stats can say where the huge bytes came from. */
enum hp_origin {
	HP_ORIGIN_API = 0,  /* hp_malloc & co, called directly          */
	HP_ORIGIN_NUMPY,    /* NumPy data-memory handler (NEP 49)       */
	HP_ORIGIN_PYTHON,   /* CPython's raw memory domain              */
	HP_ORIGIN_TORCH,    /* PyTorch's CPU allocator                  */
	HP_ORIGIN_NUMBA,    /* Numba's NRT external allocator           */
	HP_ORIGIN_PRELOAD,  /* libhpalloc-preload.so (malloc & co)      */
	HP_ORIGIN_COUNT
};
HP_API const char *hp_origin_name(int origin); /* "api" "numpy" "python" ... */
/* The immortal context of an origin: page_size 0 follows the knobs like
 * hp_malloc; 2 MiB or 1 GiB forces hugetlb pages as hp_ctx_pagesize does.
 * NULL + EINVAL for an unknown origin or a page size the kernel lacks. */
HP_API void *hp_ctx(int origin, size_t page_size);

/* ---- the huge path alone, for interposers --------------------------------
 * For wrappers that keep an ordinary allocator of their own below the
 * threshold (CPython's raw domain, the preload library): these never hand
 * out libc memory.  Return 0 with the block in *out; 1 when the request is
 * not for the huge path (below threshold, mode=off, alignment above 2 MiB,
 * or fallback=small after a short pool): use your own allocator, nothing
 * changed; -1 + ENOMEM when the huge path failed (fallback=fail).
 * hp_huge_realloc() resizes a block hp_owns(): on 1 or -1 the block is
 * untouched (on 1 the caller moves it: allocate, copy, hp_free()). */
HP_API int hp_huge_alloc(void *ctx, size_t size, size_t alignment, int zero, void **out);
HP_API int hp_huge_realloc(void *ctx, void *ptr, size_t size, void **out);
/* 1 if ptr is the start of a live huge block of hpalloc's, else 0.  Cheap
 * for pointers not 2 MiB aligned (no lock). */
HP_API int hp_owns(const void *ptr);

/* ---- the interposers' fast path -------------------------------------------
 * The smallest size hp_huge_alloc() may put on huge pages for a context
 * following the knobs, right now: the `threshold` knob; SIZE_MAX with
 * mode=off, before the library has read its knobs (the first hp_* call that
 * allocates does), and in hpalloc's own code (a malloc its initialisation
 * or janitor makes).  One load, no lock, no initialisation: an interposer
 * sends smaller requests to its own allocator without calling anything
 * else.  Every huge block starts on a 2 MiB boundary, so a pointer that is
 * not 2 MiB aligned is never hpalloc's (no need to ask hp_owns()). */
HP_API size_t hp_huge_threshold(void);

/* ---- activation report (`hpctl run --check`) --------------------------------
 * Say whether hpalloc took effect in this process for adapter (one word:
 * "preload", "numpy"...), with an optional detail: one line appended to
 * the file HPALLOC_REPORT names, if the file passes hpalloc's checks.
 * Nothing in secure execution or without HPALLOC_REPORT.  1 written, 0
 * nothing to write, -1 + errno (EINVAL: adapter is not one word; the file
 * refused or unwritable).  Never blocks on the file, never a cancellation
 * point; errno unchanged unless -1. */
HP_API int hp_report_activation(const char *adapter, int ok, const char *detail);

/* 1 in secure execution (setuid, setgid, file capabilities: AT_SECURE),
 * where hpalloc honours no HPALLOC_* variable and no control directory and
 * writes no report; else 0.  The library's one test, for an adapter that
 * reads variables of its own (the Python activation: HPALLOC_NUMPY,
 * HPALLOC_ADAPTERS).  Cannot fail; errno unchanged. */
HP_API int hp_secure_execution(void);

/* ---- shared blocks: huge pages several processes map ------------------------
 * A block on a memfd, mapped MAP_SHARED, that other processes map from its
 * descriptor (sent over a UNIX socket, inherited).  Hugetlb pages when
 * page_size (2 MiB, 1 GiB) is given or the knobs say so (mode, pagesize):
 * their pool pages are reserved at creation, so a short pool fails here,
 * never as a SIGBUS later, in any process.  A short pool then goes by the
 * `fallback` knob: thp = shmem with MADV_HUGEPAGE (THP where the kernel's
 * shmem_enabled allows it), small = ordinary shared memory, fail = NULL +
 * ENOMEM.  Shared blocks are not cached and not freed by hp_free(). */
struct hp_shared_info {
	void *addr;          /* start of the block                           */
	size_t size;         /* its length (the file's size)                 */
	int fd;              /* its descriptor, owned by the block           */
	int backend;         /* HP_BACKEND_HUGETLB, _THP (advised), _SMALL   */
	size_t page_size;    /* hugetlb page size, else 4096                 */
};
/* A new shared block of at least size bytes (page_size 0: the knobs); its
 * descriptor (close-on-exec, owned by the block) in *fd_out if not NULL. */
HP_API void *hp_shared_alloc(size_t size, size_t page_size, int *fd_out);
/* Map the whole block behind fd (from another process); fd stays the
 * caller's (the block keeps a duplicate).  Its size in *size_out. */
HP_API void *hp_shared_map(int fd, size_t *size_out);
/* Unmap this process's mapping and close its descriptor; the memory goes
 * when no process maps it or holds a descriptor.  -1 + EINVAL if ptr is not
 * the start of a shared block. */
HP_API int hp_shared_free(void *ptr);
/* The shared block containing ptr (interior pointers work); -1 + ENOENT. */
HP_API int hp_shared_info(const void *ptr, struct hp_shared_info *out);

/* ---- where memory lives ------------------------------------------------ */
enum hp_backend {
	HP_BACKEND_SMALL = 0, /* libc (ordinary path) */
	HP_BACKEND_THP = 1,   /* own 2 MiB aligned mapping + MADV_HUGEPAGE */
	HP_BACKEND_HUGETLB = 2, /* MAP_HUGETLB */
	HP_BACKEND_COUNT
};
HP_API const char *hp_backend_name(int backend); /* "small" "thp" "hugetlb" */

/* What the kernel reports, from /proc/self/smaps, for a range. */
struct hp_kernel_backing {
	size_t kernel_page_size; /* KernelPageSize of the (first) mapping  */
	size_t rss_bytes;        /* Rss summed over the range's mappings   */
	size_t anon_huge_bytes;  /* AnonHugePages + ShmemPmdMapped (THP)   */
	size_t hugetlb_bytes;    /* Private_Hugetlb + Shared_Hugetlb       */
	size_t huge_bytes;       /* anon_huge_bytes + hugetlb_bytes        */
	int thp_eligible;        /* "hg" in VmFlags (MADV_HUGEPAGE)        */
};
/* Sum of the smaps entries overlapping [addr, addr+len). -1 + errno. */
HP_API int hp_kernel_backing(const void *addr, size_t len,
			     struct hp_kernel_backing *out);

struct hp_backing {
	int backend;             /* enum hp_backend                        */
	size_t usable_size;      /* hp_usable_size() of a huge block; 0 for
				    small ones (libc memory is not tracked) */
	size_t mapping_size;     /* bytes mapped for it (0 for small)      */
	size_t requested_page_size; /* page size hpalloc asked for         */
	struct hp_kernel_backing kernel; /* smaps, over the block's range  */
};
/* Backing of the hpalloc block containing ptr (interior pointers work).
 * -1 + EINVAL if ptr is NULL. */
HP_API int hp_backing(const void *ptr, struct hp_backing *out);

/* ---- statistics ---------------------------------------------------------
 * A snapshot is an array of counters indexed by enum hp_stat; names come
 * from hp_stat_name(), so every consumer (hpctl, Python, the published
 * per-process file) prints the same table. */
enum hp_stat {
	HP_STAT_SMALL_LIVE_BYTES,
	HP_STAT_SMALL_LIVE_BLOCKS,
	HP_STAT_THP_LIVE_BYTES,
	HP_STAT_THP_LIVE_BLOCKS,
	HP_STAT_HUGETLB_LIVE_BYTES,
	HP_STAT_HUGETLB_LIVE_BLOCKS,
	HP_STAT_MAPPED_BYTES,     /* huge mappings incl. cached ones      */
	HP_STAT_CACHED_BYTES,
	HP_STAT_CACHED_BLOCKS,
	HP_STAT_CACHE_HITS,
	HP_STAT_CACHE_MISSES,
	HP_STAT_CACHE_EVICTIONS,  /* out of the cache before their decay:
				     cache_max, cache_rss_max,
				     hp_cache_flush(), a fork's child     */
	HP_STAT_CACHE_DECAYS,     /* released after cache_decay_ms idle   */
	HP_STAT_FALLBACKS,        /* hugetlb failed, fallback used        */
	HP_STAT_FAILURES,         /* NULL returned                        */
	HP_STAT_RELEASED_BYTES,   /* returned to the kernel               */
	HP_STAT_URING_RELEASES,   /* releases submitted to io_uring       */
	HP_STAT_SYNC_RELEASES,    /* releases done in the calling thread  */
	HP_STAT_REALLOC_INPLACE,  /* grown/shrunk without copying         */
	HP_STAT_REALLOC_COPIES,
	HP_STAT_CONFIG_GENERATION, /* bumps on every effective knob change */
	HP_STAT_CONFIG_REJECTS,   /* rejected knob values / control files */
	/* live huge (THP + hugetlb) bytes by origin (enum hp_origin) */
	HP_STAT_API_HUGE_BYTES,
	HP_STAT_NUMPY_HUGE_BYTES,
	HP_STAT_PYTHON_HUGE_BYTES,
	HP_STAT_TORCH_HUGE_BYTES,
	HP_STAT_NUMBA_HUGE_BYTES,
	HP_STAT_PRELOAD_HUGE_BYTES,
	HP_STAT_SHARED_LIVE_BYTES,  /* shared (memfd) blocks mapped here   */
	HP_STAT_SHARED_LIVE_BLOCKS,
	HP_STAT_URING_ACTIVE,       /* gauge: 1 while releases go through io_uring */
	HP_STAT_JANITOR_ACTIVE,     /* gauge: 1 while the janitor thread runs */
	HP_STAT_SHARED_FALLBACKS,   /* shared blocks not on hugetlb: pool short */
	HP_STAT_NUMA_REFUSED,       /* blocks unmapped: their placement could not be applied */
	HP_STAT_CACHE_DECAY_MS,     /* gauge: the decay in force, cache_decay_ms or more (learnt) */
	HP_STAT_CACHE_CUTS,         /* cached blocks cut to serve a smaller request */
	HP_STAT_CACHE_JOINS,        /* cached pieces joined to serve a larger one */
	HP_STAT_CACHED_RECLAIMABLE_BYTES, /* gauge: of cached_bytes, what the kernel may take
					     back under memory pressure (MADV_FREE) */
	HP_STAT_POPULATE_AHEAD_BYTES, /* faulted in by populate workers ahead of the program */
	HP_STAT_POPULATE_SAVED_US,  /* estimate: the workers' time on chunks the program
				       then went past (what its own faults would have cost) */
	HP_STAT_POPULATE_THREADS,   /* gauge: populate workers running */
	HP_STAT_MEMCG_LIMIT_BYTES,  /* gauge: the memory cgroup's limit that binds, 0 if none
				       (or a limit of 0: the bound is 0 then too) */
	HP_STAT_MEMCG_CACHE_BOUND,  /* gauge: what the cache may keep under that limit (its
				       share of the headroom), as last worked out */
	HP_STAT_MEMCG_RELEASED_BYTES, /* cached (or freed) THP bytes given back to keep
					 the cache under that bound */
	HP_STAT_LIBC_TRIMS,         /* times libc gave back the free memory it held
				       (malloc_trim) before a fresh block that did
				       not fit under that limit */
	HP_STAT_THP_SPLITS_SEEN,    /* huge pages the kernel split, machine-wide
				       (/proc/vmstat thp_split_page), while this
				       process held THP blocks */
	HP_STAT_THP_UNDERUSED_SPLITS_SEEN, /* of those, split as under-used (pages
				       of zeros: thp_underused_split_page, 6.12+) */
	HP_STAT_MEMCG_LIBC_BLOCKS,  /* requests for a fresh THP block that did not fit
				       under that limit, served from the free memory
				       libc held (as without hpalloc) */
	HP_STAT_POPULATE_SMALL_FIRST, /* fresh blocks the populate workers faulted at
				       4 KiB first (knob populate_pages), to collapse */
	HP_STAT_POPULATE_COLLAPSED_BYTES, /* of those, bytes the workers collapsed to
					     2 MiB pages behind the program */
	HP_STAT_POPULATE_SMALL_DROPPED_BYTES, /* of those, freed before their collapse:
					     bytes of the ranges the cache dropped
					     (the 4 KiB pages in them) as they went in */
	HP_STAT_POPULATE_CPU_US,    /* the populate workers' CPU time: faults ahead,
				       looks, collapses (what populating cost) */
	HP_STAT_POPULATE_BUSY,      /* times the workers (populate=auto) stood back
				       because no CPU was free for them */
	HP_STAT_POPULATE_2M_US,     /* gauge: a worker's CPU time to fault 2 MiB as a
				       huge page here, as last measured (0: not yet) */
	HP_STAT_POPULATE_4K_US,     /* gauge: the same as 512 4 KiB pages (0: not yet) */
	HP_STAT_POPULATE_START,     /* gauge: how populate_pages=measured starts the
				       next fresh block: 0 not measured yet (4 KiB first,
				       sampling), 1 huge pages, 2 4 KiB pages first */
	HP_STAT_STRANDED_RESERVATIONS, /* reservations a move the kernel refused
				       left mapped for good (address space, no
				       memory); bounded: past the bound nothing
				       is moved any more */
	HP_STAT_COUNT
};
/* Room for counters added later without changing the struct's size. */
#define HP_STAT_CAPACITY 64
struct hp_stats {
	uint64_t v[HP_STAT_CAPACITY]; /* entries >= HP_STAT_COUNT are 0 */
};
HP_API int hp_stats_get(struct hp_stats *out);
HP_API const char *hp_stat_name(int stat); /* "thp_live_bytes", NULL if out of range */

/* ---- knobs ---------------------------------------------------------------
 * One table in the library defines every knob (name, type, default, bounds,
 * parser, canonical printer, help).  Environment (HPALLOC_<KNOB>), control
 * directory, hpctl and Python all go through these calls. */
enum hp_source {
	HP_SOURCE_DEFAULT = 0,
	HP_SOURCE_CONTROL, /* control directory file                 */
	HP_SOURCE_ENV,     /* HPALLOC_<KNOB>                         */
	HP_SOURCE_PROCESS, /* per-process override: hp_knob_set, hpctl -p */
	HP_SOURCE_COUNT
};
HP_API const char *hp_source_name(int source); /* "default" "control" "env" "process" */

#define HP_KNOB_VALUE_MAX 64
#define HP_KNOB_ERROR_MAX 256

struct hp_knob_info {
	const char *name;       /* "threshold"                                */
	const char *type;       /* "choice" "size" "integer" "policy" (numa)  */
	const char *help;       /* one line                                   */
	const char *accepted;   /* what is accepted, for error messages       */
	const char *choices;    /* "auto hugetlb thp off" or NULL             */
	char default_value[HP_KNOB_VALUE_MAX];
	char value[HP_KNOB_VALUE_MAX]; /* effective value, canonical form      */
	int source;             /* enum hp_source of the effective value      */
	char rejected[HP_KNOB_ERROR_MAX]; /* last rejected input and why, or "" */
};

HP_API int hp_knob_count(void);
HP_API int hp_knob_index(const char *name); /* -1 + ENOENT if unknown */
HP_API int hp_knob_info(int index, struct hp_knob_info *out);
/* Validate without applying: canonical form into canon, or -1 with a
 * message naming the knob, the bad value and what is accepted in err. */
HP_API int hp_knob_parse(const char *name, const char *text,
			 char *canon, size_t canon_len,
			 char *err, size_t err_len);
/* One "KNOB=VALUE" word (hpctl's command line, a Dask option): the knob's
 * index, the value's canonical form into canon; or -1 + EINVAL with the
 * message in err (no '=', no name, unknown knob, bad value). */
HP_API int hp_knob_parse_assignment(const char *word, char *canon, size_t canon_len,
				    char *err, size_t err_len);
/* Body of the knob's control file for a canonical value, ending in "\n":
 * "auto [hugetlb] thp off\n" for choices, "4M\n" for sizes. */
HP_API int hp_knob_render(const char *name, const char *canon,
			  char *buf, size_t buf_len);
/* Inverse of render for a control file body: accepts a plain value or a
 * bracketed choice list with exactly one bracketed valid choice. */
HP_API int hp_knob_parse_file(const char *name, const char *body,
			      char *canon, size_t canon_len,
			      char *err, size_t err_len);
/* Per-process override (highest precedence).  Invalid: -1 + EINVAL, nothing
 * changes. */
HP_API int hp_knob_set(const char *name, const char *text);
/* Drop the per-process override of one knob (NULL: all). */
HP_API int hp_knob_unset(const char *name);
/* Effective value, canonical, into buf; returns its source or -1. */
HP_API int hp_knob_get(const char *name, char *buf, size_t len);

/* Sizes: plain bytes or binary K/M/G/T suffix ("4M" = 4194304).  Rejects
 * negatives, overflow, empty, unknown suffixes, trailing junk. */
HP_API int hp_parse_size(const char *text, uint64_t *out);
/* Canonical size: largest exact binary suffix ("4M", "1536K", "100"). */
HP_API int hp_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- maintenance ---------------------------------------------------------- */
/* Wait until every asynchronous release submitted so far has completed. */
HP_API void hp_release_drain(void);
/* Release every cached block now (e.g. before measuring RSS). */
HP_API void hp_cache_flush(void);
/* Re-read the control directory now (the library also does it by itself
 * about every 250 ms, from the process's first huge block on: its
 * background thread does). */
HP_API void hp_control_reload(void);

HP_API const char *hp_version(void);

/* ---- processes using hpalloc ---------------------------------------------
 * Every process using hpalloc publishes its counters and knobs in the control
 * directory (<dir>/proc/<pid>/stats, rewritten by its janitor when they
 * change).  These calls read the entries back; the format, and the rule for
 * when an entry is stale, are the library's alone.  An entry is removed only
 * on proof, from the publisher's own pid namespace, that its process is gone
 * (kill(pid, 0) says ESRCH, or the pid now belongs to a process with another
 * start time); where that cannot be known (no /proc, another pid namespace)
 * it is kept and reported with alive = -1. */
#define HP_PROC_KNOBS_MAX 32
#define HP_PROC_COMM_MAX 64
struct hp_proc_knob {
	char name[32];
	char value[HP_KNOB_VALUE_MAX];     /* effective value, canonical     */
	int source;                        /* enum hp_source, -1 if unknown  */
	char rejected[HP_KNOB_ERROR_MAX];  /* last rejected input, or ""     */
};
struct hp_proc {
	long pid;                       /* as the publisher sees itself      */
	unsigned long long start_time;  /* field 22 of /proc/<pid>/stat, 0 = unknown */
	char comm[HP_PROC_COMM_MAX];
	int alive;                      /* 1 checked, -1 cannot be checked here */
	uint64_t stat_mask;             /* bit s: counter s was published    */
	struct hp_stats stats;          /* by enum hp_stat                   */
	int nknobs;
	struct hp_proc_knob knobs[HP_PROC_KNOBS_MAX];
};
/* The entry of process pid.  -1 + ENOENT: none (not using hpalloc, or
 * another control directory); ESRCH: its process is gone (the entry was
 * removed); EINVAL: not a valid entry. */
HP_API int hp_proc_get(long pid, struct hp_proc *out);
struct hp_proc_list {
	struct hp_proc *procs;  /* sorted by pid                              */
	size_t count;
	long *pruned;           /* entries removed: their process is gone     */
	size_t npruned;
};
/* Every valid entry; stale ones are removed on the way.  Release the list
 * with hp_proc_list_free(). */
HP_API int hp_proc_list(struct hp_proc_list *out);
HP_API void hp_proc_list_free(struct hp_proc_list *list);
/* This process's own entry, live (what it would publish now: every
 * counter, the effective knobs; alive = 1), whether or not it publishes. */
HP_API int hp_proc_self(struct hp_proc *out);
/* Entries in Prometheus' text exposition format (0.0.4): one family per
 * quantity (hpalloc_ prefix, _bytes/_seconds, counters ending in _total),
 * each sample labelled with the process's pid and comm; hpalloc_knob_info
 * gives the effective knobs.  A malloc'ed, NUL-terminated text (its length
 * in *len unless NULL) for the caller to free(); NULL + ENOMEM, or EINVAL
 * for procs NULL with count > 0.  See hp_proc_get(3) for the names. */
HP_API char *hp_proc_prometheus(const struct hp_proc *procs, size_t count, size_t *len);
/* The processes started with the environment variable var set, whether or
 * not they publish (one that never had a huge block has no entry yet): each
 * process of this pid namespace whose environment as it was started
 * (/proc/<pid>/environ: what setenv() does later does not show) sets var.
 * A process we may not read (another user's) or that is gone is left out.
 * *out a malloc'ed array sorted by pid (NULL when there are none), *count
 * entries, for the caller to free(); value and comm read as the entries'
 * strings do (not printable UTF-8: '?').  -1 + errno, *out and *count as
 * they were: EINVAL for var NULL, empty or containing '=' (or out or
 * count NULL); ENOENT: no /proc of this pid namespace; ENOMEM. */
#define HP_PROC_MARK_MAX 256
struct hp_proc_mark {
	long pid;
	char value[HP_PROC_MARK_MAX];   /* var's value, cut to fit          */
	char comm[HP_PROC_COMM_MAX];    /* /proc/<pid>/comm, "" if unknown  */
};
HP_API int hp_proc_marked(const char *var, struct hp_proc_mark **out, size_t *count);

/* ---- NUMA placement ------------------------------------------------------
 * The `numa` knob places hpalloc's own huge mappings (mbind before their
 * first touch; never libc's memory): default (the kernel's policy), local,
 * interleave, interleave:NODES, bind:NODES, preferred:NODE -- NODES like
 * "0,2-3", nodes 0 to 31.  A block placed under one policy is never reused
 * for a request under another.  See hpalloc(7) and hp_ctx_numa(3). */

/* The immortal context that allocates like ctx (its origin and page size;
 * NULL: hp_ctx(HP_ORIGIN_API, 0)) but places its huge blocks by `policy`,
 * a value of the numa knob, whatever the knob says.  The same ctx and
 * policy always give the same context.  NULL + EINVAL for a policy the
 * numa knob refuses (hp_knob_parse("numa", ...) says why). */
HP_API void *hp_ctx_numa(void *ctx, const char *policy);

#define HP_NUMA_NODES 64
/* What /proc/self/numa_maps says for a range. */
struct hp_kernel_numa {
	char policy[HP_KNOB_VALUE_MAX]; /* of the first mapping, as numa_maps
					   writes it: "default", "bind:0",
					   "interleave:0-1", "prefer:0", "local" */
	int mappings;             /* numa_maps entries over the range       */
	int mixed;                /* 1 if they do not all show that policy  */
	size_t page_size;         /* kernelpagesize_kB of the first, bytes  */
	uint64_t node_pages[HP_NUMA_NODES]; /* pages (of page_size) on node n */
	uint64_t other_node_pages;  /* on nodes >= HP_NUMA_NODES            */
};
/* Sum of the numa_maps entries overlapping [addr, addr+len).  -1 + errno
 * (ENOENT: no mapping there; numa_maps missing on kernels without NUMA). */
HP_API int hp_kernel_numa(const void *addr, size_t len, struct hp_kernel_numa *out);

struct hp_backing_numa {
	char policy[HP_KNOB_VALUE_MAX]; /* the placement hpalloc gave the block,
					   as the numa knob writes it ("bind:0",
					   "default"); "" for memory not in a
					   private huge block (shared ones too) */
	struct hp_kernel_numa kernel;   /* numa_maps over the block (over the
					   page of ptr for other memory) */
};
/* Placement of the private huge block containing ptr.  Shared blocks, which
 * the numa knob does not place, are reported as other memory: policy "",
 * numa_maps over the page of ptr.  -1 + errno. */
HP_API int hp_backing_numa(const void *ptr, struct hp_backing_numa *out);

#ifdef __cplusplus
}
#endif
#endif /* HPALLOC_H */
