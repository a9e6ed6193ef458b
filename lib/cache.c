/* Reuse cache for freed huge blocks: NumPy's npy_alloc_cache idea, for
 * large blocks.  Buckets by mapping length (4 classes per power of two),
 * most recently freed first; one LRU list for the bounds (cache_max, and
 * memcg.c's share of a memory cgroup's headroom) and for decay.  All
 * functions but cache_keep_resident() (atomic) run with hp_heap_lock held
 * and never touch memory through the kernel: whatever must go is returned
 * as a list for the caller to release.  The one system call they may make
 * is a log line's write (the learning decay's, with verbose=2): the
 * application threads that reach one run with cancellation disabled
 * (HP_NOCANCEL_BEGIN), the other is the janitor, hpalloc's own. */
#include "internal.h"

#define NBUCKETS (4 * 64)

static struct hp_block *buckets[NBUCKETS];
static struct hp_block *lru_oldest, *lru_newest;
static size_t cached_bytes;
/* Of cached_bytes, the THP blocks': what a memory cgroup is charged for,
 * and what memcg.c's bound applies to (hugetlb pool pages are not). */
static size_t charged_bytes;

static bool charged(const struct hp_block *b)
{
	return b->map.backend == HP_BACKEND_THP;
}

static int bucket_of(size_t len)
{
	int k = 63 - __builtin_clzll((unsigned long long)len);
	int sub = k >= 2 ? (int)((len >> (k - 2)) & 3) : 0;
	return 4 * k + sub;
}

/* ---- blocks left resident ----------------------------------------------------
 * A THP block is offered to the kernel before it is cached, in the thread
 * that frees it and outside hp_heap_lock (heap.c's offer_to_kernel() says
 * why), unless libc would have kept it (policy_libc_would_keep()).  The
 * bytes so kept are reserved then, atomically, and given back when the
 * block leaves the cache -- taken, cut or joined, decayed, evicted,
 * released -- or is not cached after all. */
static _Atomic size_t kept_bytes;

bool cache_keep_resident(struct hp_block *b)
{
	size_t kept = atomic_load_explicit(&kept_bytes, memory_order_relaxed);

	if (b->map.backend != HP_BACKEND_THP)
		return false;
	do {
		if (!policy_libc_would_keep(b->map.len, kept))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&kept_bytes, &kept, kept + b->map.len,
							memory_order_relaxed, memory_order_relaxed));
	b->kept = true;
	return true;
}

static void unkeep(struct hp_block *b)
{
	if (b->kept)
		atomic_fetch_sub_explicit(&kept_bytes, b->map.len, memory_order_relaxed);
	b->kept = false;
}

static void unlink_block(struct hp_block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		buckets[b->bucket] = b->next;
	if (b->next)
		b->next->prev = b->prev;
	if (b->lru_prev)
		b->lru_prev->lru_next = b->lru_next;
	else
		lru_oldest = b->lru_next;
	if (b->lru_next)
		b->lru_next->lru_prev = b->lru_prev;
	else
		lru_newest = b->lru_prev;
	b->prev = b->next = b->lru_prev = b->lru_next = NULL;
	cached_bytes -= b->map.len;
	if (charged(b))
		charged_bytes -= b->map.len;
	stat_sub(HP_STAT_CACHED_BYTES, b->map.len);
	stat_sub(HP_STAT_CACHED_RECLAIMABLE_BYTES, b->reclaimable);
	b->reclaimable = 0; /* its next owner writes: the kernel keeps those pages */
	unkeep(b);
	stat_sub(HP_STAT_CACHED_BLOCKS, 1);
}

/* A cached block fits if it is of the wanted kind and placement (a block
 * placed under one policy never serves another), of a page size asked for,
 * and obeys policy.c's waste rule for the request rounded to its page size
 * (so reuse never inflates RSS much). */
static bool fits(const struct hp_block *b, uint64_t kind, size_t min_ps, size_t max_ps, size_t size)
{
	size_t need = hp_align_up(size, b->map.kernel_page_size);
	return b->kind == kind && b->map.kernel_page_size >= min_ps && b->map.kernel_page_size <= max_ps &&
	       policy_fits(b->map.len, need);
}

struct hp_block *cache_take(uint64_t kind, size_t min_ps, size_t max_ps, size_t size)
{
	/* no fitting block is longer than the waste rule allows for the request
	 * rounded up to the largest page size it may have (1 GiB at most) */
	size_t largest = policy_longest(size + (max_ps < HP_GiB ? max_ps : HP_GiB));
	int last = bucket_of(largest);

	for (int i = bucket_of(size); i < NBUCKETS && i <= last; i++)
		for (struct hp_block *b = buckets[i]; b; b = b->next)
			if (fits(b, kind, min_ps, max_ps, size)) {
				unlink_block(b);
				return b;
			}
	return NULL;
}

struct hp_block *cache_take_at_least(uint64_t kind, size_t len)
{
	for (int i = bucket_of(len); i < NBUCKETS; i++)
		for (struct hp_block *b = buckets[i]; b; b = b->next)
			if (b->kind == kind && b->map.len >= len) {
				unlink_block(b);
				return b;
			}
	return NULL;
}

/* Walks of the whole cache: only growth and the pieces' path (pieces.c) ask,
 * both instead of mapping fresh memory, and the cache holds few blocks
 * (cache_max over threshold at most). */
static struct hp_block *find_at(uint64_t family, const void *addr)
{
	for (struct hp_block *b = lru_newest; b; b = b->lru_prev)
		if (b->family == family && b->map.addr == addr)
			return b;
	return NULL;
}

struct hp_block *cache_take_at(uint64_t family, const void *addr)
{
	struct hp_block *b = find_at(family, addr);
	if (b)
		unlink_block(b);
	return b;
}

/* The cached piece of b's family that b follows: it ends (guard included)
 * where b starts. */
static struct hp_block *find_before(const struct hp_block *b)
{
	for (struct hp_block *a = lru_newest; a; a = a->lru_prev)
		if (a->family == b->family && os_thp_end(&a->map) == (char *)b->map.addr)
			return a;
	return NULL;
}

/* The pieces of a run from its first up to the one that makes it span len,
 * out of the cache and linked by ->next in address order. */
static struct hp_block *take_run_from(struct hp_block *first, size_t len)
{
	struct hp_block *head = NULL, **tail = &head;

	for (struct hp_block *b = first, *next; b; b = next) {
		next = find_at(b->family, os_thp_end(&b->map));
		unlink_block(b);
		*tail = b;
		tail = &b->next;
		if ((size_t)((char *)b->map.addr + b->map.len - (char *)first->map.addr) >= len)
			break;
	}
	*tail = NULL;
	return head;
}

struct hp_block *cache_take_run(uint64_t kind, size_t len)
{
	size_t total = 0;
	for (struct hp_block *b = lru_newest; b; b = b->lru_prev)
		if (b->kind == kind)
			total += os_span(b->map.len);
	if (total < len)
		return NULL; /* the common case of a miss: one pass */
	/* the newest first: its pages are the likeliest to be warm */
	for (struct hp_block *first = lru_newest; first; first = first->lru_prev) {
		if (first->kind != kind || find_before(first))
			continue; /* not the start of a run */
		size_t span = first->map.len;
		for (struct hp_block *b = first; span < len && (b = find_at(b->family, os_thp_end(&b->map)));)
			span = (size_t)((char *)b->map.addr + b->map.len - (char *)first->map.addr);
		if (span >= len)
			return take_run_from(first, len);
	}
	return NULL;
}

static struct hp_block *push(struct hp_block *list, struct hp_block *b)
{
	b->next = list;
	return b;
}

/* Oldest blocks out until cached_bytes <= limit. */
static struct hp_block *trim_to(size_t limit, struct hp_block *out)
{
	while (cached_bytes > limit && lru_oldest) {
		struct hp_block *b = lru_oldest;
		unlink_block(b);
		stat_add(HP_STAT_CACHE_EVICTIONS, 1);
		out = push(out, b);
	}
	return out;
}

/* Oldest THP blocks out until charged_bytes <= limit: memcg.c's bound. */
static struct hp_block *trim_charged_to(size_t limit, struct hp_block *out)
{
	for (struct hp_block *b = lru_oldest, *next; b && charged_bytes > limit; b = next) {
		next = b->lru_next;
		if (!charged(b))
			continue;
		unlink_block(b);
		stat_add(HP_STAT_MEMCG_RELEASED_BYTES, b->map.len);
		out = push(out, b);
	}
	return out;
}

struct hp_block *cache_take_over_memcg(void)
{
	return trim_charged_to(memcg_cache_bound(charged_bytes), NULL);
}

/* Set by the janitor, which reads the process's resident memory outside any
 * lock (cache_rss_max); read here, under the heap lock, with no syscall. */
static _Atomic bool over_rss;

void cache_set_over_rss(bool over)
{
	atomic_store_explicit(&over_rss, over, memory_order_relaxed);
}

/* The janitor's last word, unless the bound is off since (then at once). */
static bool over_rss_bound(void)
{
	return atomic_load_explicit(&over_rss, memory_order_relaxed) &&
	       (size_t)hp_knob(KNOB_CACHE_RSS_MAX) != 0;
}

struct hp_block *cache_take_oldest(size_t bytes)
{
	return trim_to(cached_bytes > bytes ? cached_bytes - bytes : 0, NULL);
}

struct hp_block *cache_put(struct hp_block *b, uint64_t now_ms)
{
	size_t max = over_rss_bound() ? 0 : (size_t)hp_knob(KNOB_CACHE_MAX);
	/* the headroom counts b: its pages move from live to cached */
	size_t memcg_max = charged(b) ? memcg_cache_bound(charged_bytes + b->map.len) : SIZE_MAX;

	if (b->map.len > max || b->map.len > memcg_max) {
		if (b->map.len <= max)
			stat_add(HP_STAT_MEMCG_RELEASED_BYTES, b->map.len);
		unkeep(b);
		b->next = NULL;
		return b;
	}
	struct hp_block *out = trim_to(max - b->map.len, NULL);
	if (memcg_max != SIZE_MAX)
		out = trim_charged_to(memcg_max - b->map.len, out);
	b->cached_at_ms = now_ms;
	b->bucket = bucket_of(b->map.len);
	b->prev = NULL;
	b->next = buckets[b->bucket];
	if (b->next)
		b->next->prev = b;
	buckets[b->bucket] = b;
	b->lru_next = NULL;
	b->lru_prev = lru_newest;
	if (lru_newest)
		lru_newest->lru_next = b;
	else
		lru_oldest = b;
	lru_newest = b;
	if (!cached_bytes)
		janitor_cache_filled();
	cached_bytes += b->map.len;
	if (charged(b))
		charged_bytes += b->map.len;
	stat_add(HP_STAT_CACHED_BYTES, b->map.len);
	stat_add(HP_STAT_CACHED_BLOCKS, 1);
	stat_add(HP_STAT_CACHED_RECLAIMABLE_BYTES, b->reclaimable);
	return out;
}

/* ---- decay that learns -------------------------------------------------------
 * cache_decay_ms is how long an idle block stays when giving it back costs
 * nothing.  A program that maps fresh memory after the cache gave some back
 * (within the window, CACHE_DECAY_GROWTH times the knob: a test suite's
 * next test seconds later) pays twice -- the release, then the faults; on a VM that
 * reports freed pages to its host, pages that must come back from the host.
 * Each such miss doubles the decay in force, up to
 * CACHE_DECAY_GROWTH times the knob; a decay after a whole window without one
 * halves it, down to the knob.  So a program that keeps coming back for
 * memory keeps it, one that is done with it gets it back within a few
 * windows, and cache_max bounds both.  The decay in force is the gauge
 * cache_decay_ms_in_force; changing any knob starts over from the knob.
 * CACHE_DECAY_GROWTH is internal.h's: knobs.c's help text names it too. */

static uint64_t decay_knob_seen, decay_ms;
static uint64_t last_decay_ms, last_regret_ms; /* 0: none yet */

static void set_decay(uint64_t ms)
{
	decay_ms = ms;
	atomic_store_explicit(&hp_counters[HP_STAT_CACHE_DECAY_MS], ms, memory_order_relaxed);
}

/* Any knob change (the generation moves) starts over from the knob. */
static uint64_t decay_in_force(void)
{
	static uint64_t gen_seen = UINT64_MAX;
	uint64_t gen = atomic_load_explicit(&hp_counters[HP_STAT_CONFIG_GENERATION], memory_order_relaxed);
	if (gen != gen_seen) {
		gen_seen = gen;
		decay_knob_seen = hp_knob(KNOB_CACHE_DECAY_MS);
		set_decay(decay_knob_seen);
		last_decay_ms = last_regret_ms = 0;
	}
	return decay_ms;
}

static uint64_t window_ms(void)
{
	return decay_knob_seen * CACHE_DECAY_GROWTH;
}

void cache_missed(uint64_t now_ms)
{
	uint64_t decay = decay_in_force();
	if (!last_decay_ms || now_ms - last_decay_ms > window_ms())
		return;
	last_regret_ms = now_ms;
	if (decay < window_ms()) {
		set_decay(decay * 2 < window_ms() ? decay * 2 : window_ms());
		hp_log(2, "fresh memory %llu ms after a decay: cached blocks now decay after %llu ms",
		       (unsigned long long)(now_ms - last_decay_ms), (unsigned long long)decay_ms);
	}
}

static void decayed(uint64_t now_ms)
{
	if (decay_ms > decay_knob_seen && (!last_regret_ms || now_ms - last_regret_ms > window_ms())) {
		set_decay(decay_ms / 2 > decay_knob_seen ? decay_ms / 2 : decay_knob_seen);
		last_regret_ms = now_ms; /* the next halving a window later */
		hp_log(2, "no fresh memory needed for a while: cached blocks now decay after %llu ms",
		       (unsigned long long)decay_ms);
	}
	last_decay_ms = now_ms;
}

/* Blocks idle past the decay in force, and any excess over a lowered
 * cache_max or over memcg.c's bound (which the janitor just read). */
struct hp_block *cache_expire(uint64_t now_ms, uint64_t *next_deadline_ms)
{
	uint64_t decay = decay_in_force();
	struct hp_block *out = trim_to((size_t)hp_knob(KNOB_CACHE_MAX), NULL);
	out = trim_charged_to(memcg_cache_bound(charged_bytes), out);
	bool any = false;

	while (lru_oldest && lru_oldest->cached_at_ms + decay <= now_ms) {
		struct hp_block *b = lru_oldest;
		unlink_block(b);
		stat_add(HP_STAT_CACHE_DECAYS, 1);
		out = push(out, b);
		any = true;
	}
	if (any)
		decayed(now_ms);
	*next_deadline_ms = lru_oldest ? lru_oldest->cached_at_ms + decay : UINT64_MAX;
	return out;
}

struct hp_block *cache_take_all(void)
{
	return trim_to(0, NULL);
}

struct hp_block *cache_take_backend(int backend)
{
	struct hp_block *out = NULL, *b = lru_oldest;
	while (b) {
		struct hp_block *next = b->lru_next;
		if (b->map.backend == backend) {
			unlink_block(b);
			out = push(out, b);
		}
		b = next;
	}
	return out;
}
