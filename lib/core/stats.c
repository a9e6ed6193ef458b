/* Counters.  Huge-path counters are relaxed atomics (that path already
 * takes a lock and makes syscalls).  The small path counts into per-thread
 * slots instead, so it adds no shared cache-line traffic; a snapshot sums
 * the slots of live threads plus what exited threads left behind. */
#include "stats.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

_Atomic uint64_t hp_counters[HP_STAT_COUNT];

static const char *const stat_names[HP_STAT_COUNT] = {
	[HP_STAT_SMALL_LIVE_BYTES] = "small_live_bytes",
	[HP_STAT_SMALL_LIVE_BLOCKS] = "small_live_blocks",
	[HP_STAT_THP_LIVE_BYTES] = "thp_live_bytes",
	[HP_STAT_THP_LIVE_BLOCKS] = "thp_live_blocks",
	[HP_STAT_HUGETLB_LIVE_BYTES] = "hugetlb_live_bytes",
	[HP_STAT_HUGETLB_LIVE_BLOCKS] = "hugetlb_live_blocks",
	[HP_STAT_MAPPED_BYTES] = "mapped_bytes",
	[HP_STAT_CACHED_BYTES] = "cached_bytes",
	[HP_STAT_CACHED_BLOCKS] = "cached_blocks",
	[HP_STAT_CACHE_HITS] = "cache_hits",
	[HP_STAT_CACHE_MISSES] = "cache_misses",
	[HP_STAT_CACHE_EVICTIONS] = "cache_evictions",
	[HP_STAT_CACHE_DECAYS] = "cache_decays",
	[HP_STAT_FALLBACKS] = "fallbacks",
	[HP_STAT_FAILURES] = "failures",
	[HP_STAT_RELEASED_BYTES] = "released_bytes",
	[HP_STAT_URING_RELEASES] = "uring_releases",
	[HP_STAT_SYNC_RELEASES] = "sync_releases",
	[HP_STAT_REALLOC_INPLACE] = "realloc_inplace",
	[HP_STAT_REALLOC_COPIES] = "realloc_copies",
	[HP_STAT_CONFIG_GENERATION] = "config_generation",
	[HP_STAT_CONFIG_REJECTS] = "config_rejects",
	[HP_STAT_API_HUGE_BYTES] = "api_huge_bytes",
	[HP_STAT_NUMPY_HUGE_BYTES] = "numpy_huge_bytes",
	[HP_STAT_PYTHON_HUGE_BYTES] = "python_huge_bytes",
	[HP_STAT_TORCH_HUGE_BYTES] = "torch_huge_bytes",
	[HP_STAT_NUMBA_HUGE_BYTES] = "numba_huge_bytes",
	[HP_STAT_PRELOAD_HUGE_BYTES] = "preload_huge_bytes",
	[HP_STAT_SHARED_LIVE_BYTES] = "shared_live_bytes",
	[HP_STAT_SHARED_LIVE_BLOCKS] = "shared_live_blocks",
	[HP_STAT_URING_ACTIVE] = "uring_active",
	[HP_STAT_JANITOR_ACTIVE] = "janitor_active",
	[HP_STAT_SHARED_FALLBACKS] = "shared_fallbacks",
	[HP_STAT_NUMA_REFUSED] = "numa_refused",
	[HP_STAT_CACHE_DECAY_MS] = "cache_decay_ms_in_force",
	[HP_STAT_CACHE_CUTS] = "cache_cuts",
	[HP_STAT_CACHE_JOINS] = "cache_joins",
	[HP_STAT_CACHED_RECLAIMABLE_BYTES] = "cached_reclaimable_bytes",
	[HP_STAT_POPULATE_AHEAD_BYTES] = "populate_ahead_bytes",
	[HP_STAT_POPULATE_SAVED_US] = "populate_saved_us",
	[HP_STAT_POPULATE_THREADS] = "populate_threads",
	[HP_STAT_MEMCG_LIMIT_BYTES] = "memcg_limit_bytes",
	[HP_STAT_MEMCG_CACHE_BOUND] = "memcg_cache_bound",
	[HP_STAT_MEMCG_RELEASED_BYTES] = "memcg_released_bytes",
	[HP_STAT_LIBC_TRIMS] = "libc_trims",
	[HP_STAT_THP_SPLITS_SEEN] = "thp_splits_seen",
	[HP_STAT_THP_UNDERUSED_SPLITS_SEEN] = "thp_underused_splits_seen",
	[HP_STAT_MEMCG_LIBC_BLOCKS] = "memcg_libc_blocks",
	[HP_STAT_POPULATE_SMALL_FIRST] = "populate_small_first",
	[HP_STAT_POPULATE_COLLAPSED_BYTES] = "populate_collapsed_bytes",
	[HP_STAT_POPULATE_SMALL_DROPPED_BYTES] = "populate_small_dropped_bytes",
	[HP_STAT_POPULATE_CPU_US] = "populate_cpu_us",
	[HP_STAT_POPULATE_BUSY] = "populate_busy",
	[HP_STAT_POPULATE_2M_US] = "populate_2m_us",
	[HP_STAT_POPULATE_4K_US] = "populate_4k_us",
	[HP_STAT_POPULATE_START] = "populate_start",
	[HP_STAT_STRANDED_RESERVATIONS] = "stranded_reservations",
};
_Static_assert(HP_STAT_COUNT <= HP_STAT_CAPACITY, "struct hp_stats is full");
_Static_assert(HP_STAT_API_HUGE_BYTES + HP_ORIGIN_COUNT == HP_STAT_SHARED_LIVE_BYTES,
	       "one huge-bytes counter per origin, in enum hp_origin's order");

static const char *const origin_names[HP_ORIGIN_COUNT] = {
	[HP_ORIGIN_API] = "api",
	[HP_ORIGIN_NUMPY] = "numpy",
	[HP_ORIGIN_PYTHON] = "python",
	[HP_ORIGIN_TORCH] = "torch",
	[HP_ORIGIN_NUMBA] = "numba",
	[HP_ORIGIN_PRELOAD] = "preload",
};

/* ---- per-thread small-path counters ---------------------------------------- */

struct small_slot {
	_Atomic int64_t bytes, blocks; /* written only by the owning thread */
	struct small_slot *next;
};
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct small_slot *slots;
static _Atomic int64_t exited_bytes, exited_blocks;
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static __thread struct small_slot *my_slot __attribute__((tls_model("initial-exec")));
/* Set when this thread's slot was retired: thread-local destructors that
 * run after ours (another library's, freeing hpalloc memory) count straight
 * into what exited threads left behind, never into the freed slot. */
static __thread bool slot_dead __attribute__((tls_model("initial-exec")));

/* The count moves from the slot to the leftovers under slots_lock, as
 * hp_stats_get() reads both: a snapshot sees it once, in one or the other. */
static void slot_retire(void *arg)
{
	struct small_slot *s = arg, **pp;

	pthread_mutex_lock(&slots_lock);
	for (pp = &slots; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	atomic_fetch_add(&exited_bytes, atomic_load(&s->bytes));
	atomic_fetch_add(&exited_blocks, atomic_load(&s->blocks));
	pthread_mutex_unlock(&slots_lock);
	free(s);
	my_slot = NULL; /* destructors run in the exiting thread itself */
	slot_dead = true;
}

static void slot_key_create(void)
{
	pthread_key_create(&slot_key, slot_retire);
}

static struct small_slot *slot_get(void)
{
	if (likely(my_slot != NULL) || slot_dead)
		return my_slot;
	struct small_slot *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL; /* counting is best effort; allocation is not */
	pthread_once(&slot_once, slot_key_create);
	pthread_setspecific(slot_key, s);
	pthread_mutex_lock(&slots_lock);
	s->next = slots;
	slots = s;
	pthread_mutex_unlock(&slots_lock);
	return my_slot = s;
}

static inline void slot_add(int64_t bytes, int64_t blocks)
{
	struct small_slot *s = slot_get();
	if (unlikely(!s)) {
		atomic_fetch_add(&exited_bytes, bytes);
		atomic_fetch_add(&exited_blocks, blocks);
		return;
	}
	/* single writer: a plain load+store, no locked instruction */
	atomic_store_explicit(&s->bytes, atomic_load_explicit(&s->bytes, memory_order_relaxed) + bytes,
			      memory_order_relaxed);
	atomic_store_explicit(&s->blocks, atomic_load_explicit(&s->blocks, memory_order_relaxed) + blocks,
			      memory_order_relaxed);
}

static const int live_bytes_stat[HP_BACKEND_COUNT] = {
	HP_STAT_SMALL_LIVE_BYTES, HP_STAT_THP_LIVE_BYTES, HP_STAT_HUGETLB_LIVE_BYTES};

/* A counter of this file's moved by a signed delta: the counters are
 * modular, so a negative delta added subtracts it. */
static inline void gauge_move(int s, int64_t delta)
{
	atomic_fetch_add_explicit(&hp_counters[s], (uint64_t)delta, memory_order_relaxed);
}

/* The live gauges of a backend: bytes and blocks (the small path's in this
 * thread's slot). */
static inline void live_move(int backend, int64_t bytes, int64_t blocks)
{
	if (backend == HP_BACKEND_SMALL) {
		slot_add(bytes, blocks);
		return;
	}
	gauge_move(live_bytes_stat[backend], bytes);
	gauge_move(live_bytes_stat[backend] + 1, blocks);
}

void stats_live_add(int backend, size_t bytes)
{
	live_move(backend, (int64_t)bytes, 1);
}

void stats_live_sub(int backend, size_t bytes)
{
	live_move(backend, -(int64_t)bytes, -1);
}

/* A huge block becomes live (or stops being live): by backend and origin. */
void stats_block_live(const struct hp_block *b, bool live)
{
	int64_t bytes = (int64_t)b->map.len;
	if (live) {
		live_move(b->map.backend, bytes, 1);
		gauge_move(HP_STAT_API_HUGE_BYTES + b->origin, bytes);
	} else {
		live_move(b->map.backend, -bytes, -1);
		gauge_move(HP_STAT_API_HUGE_BYTES + b->origin, -bytes);
	}
}

void stats_fork(int phase)
{
	fork_mutex(&slots_lock, phase);
}

int hp_stats_get(struct hp_stats *out)
{
	if (!out) {
		errno = EINVAL;
		return -1;
	}
	hp_init();
	*out = (struct hp_stats){{0}};
	for (int i = 0; i < HP_STAT_COUNT; i++)
		out->v[i] = atomic_load_explicit(&hp_counters[i], memory_order_relaxed);
	pthread_mutex_lock(&slots_lock);
	int64_t bytes = atomic_load(&exited_bytes), blocks = atomic_load(&exited_blocks);
	for (struct small_slot *s = slots; s; s = s->next) {
		bytes += atomic_load_explicit(&s->bytes, memory_order_relaxed);
		blocks += atomic_load_explicit(&s->blocks, memory_order_relaxed);
	}
	pthread_mutex_unlock(&slots_lock);
	out->v[HP_STAT_SMALL_LIVE_BYTES] = bytes > 0 ? (uint64_t)bytes : 0;
	out->v[HP_STAT_SMALL_LIVE_BLOCKS] = blocks > 0 ? (uint64_t)blocks : 0;
	out->v[HP_STAT_STRANDED_RESERVATIONS] = prim_stranded(); /* the door's own count */
	return 0;
}

const char *hp_stat_name(int stat)
{
	return stat >= 0 && stat < HP_STAT_COUNT ? stat_names[stat] : NULL;
}

const char *hp_origin_name(int origin)
{
	return origin >= 0 && origin < HP_ORIGIN_COUNT ? origin_names[origin] : NULL;
}

const char *hp_backend_name(int backend)
{
	static const char *const names[HP_BACKEND_COUNT] = {"small", "thp", "hugetlb"};
	return backend >= 0 && backend < HP_BACKEND_COUNT ? names[backend] : NULL;
}
