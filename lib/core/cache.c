/* The reuse cache for freed huge blocks -- NumPy's npy_alloc_cache idea,
 * for large blocks -- and the one owner of what it may keep and when it
 * gives back, as tcmalloc's HugeCache owns its limit and its release.
 * Buckets by mapping length (4 classes per power of two), most recently
 * freed first; one LRU list for the bounds and for decay.
 *
 * What it may keep, each rule here, and one answer for all of them
 * (room_now; over_room takes out what it has no place for) -- the facts
 * it needs are others' measures: memcg.c the cgroup's limit and working
 * set, smaps.c the process's resident memory, small.c what libc has learnt:
 *   - cache_max, the oldest out first (trim_to);
 *   - in a memory cgroup with a limit, a share of its headroom
 *     (memcg_bound; the cache_memcg knob);
 *   - while the process's resident memory is over cache_rss_max, nothing
 *     new, and the excess back (over_rss, watch_rss);
 *   - idle blocks for the learned decay (trim_idle);
 *   - of THP blocks, resident only what libc would have kept; the rest is
 *     offered to the kernel as it enters (libc_would_keep, cache_offer);
 *   - no block with a protection or advice of its user's that was not
 *     undone as it entered (cache_before_put: each comes in read-write,
 *     b->clean).
 * When it gives back: as a block enters (cache_put); before a fresh
 * mapping (cache_before_map: the cgroup's share and cache_rss_max, and
 * glibc's free memory when the block does not fit under the cgroup's
 * limit -- or, when glibc holds enough of it, no mapping: the request
 * goes there); at every janitor round (cache_watch), or on free without a
 * janitor (heap.c retire_locked calls cache_expire).  Others do the
 * giving: release.c unmaps what the cache hands it, os.c's os_lazyfree
 * offers pages, small.c's small_libc_give_back has glibc trim.  Other
 * give-backs are not limits: their callers ask for them (cache_empty:
 * heap.c's short hugetlb pool, hp_cache_flush, a forked child).
 *
 * Threads and locks -- who calls what with which lock:
 *   - with hp_heap_lock held (heap.c's: registry and cache together):
 *     cache_take*, cache_put, cache_expire, cache_missed -- from heap.c
 *     and pieces.c.  They never touch memory through the kernel: whatever
 *     must go is handed to release.c (give: release_adopt) under the same
 *     lock, for the caller's release_flush.  The one system call they may
 *     make is a log line's write (the learning decay's, with verbose=2):
 *     the application threads that reach one run with cancellation
 *     disabled (HP_NOCANCEL_BEGIN), the other is the janitor, hpalloc's
 *     own.
 *   - without it, because they read files or advise the kernel first:
 *     cache_before_map (the allocating thread, before mmap),
 *     cache_before_put and cache_offer (the freeing or cutting thread, on
 *     a block that is still its alone), cache_watch (the janitor alone).
 *     Those that give back take hp_heap_lock themselves for the cache's
 *     part, give under it and release_flush after it (give_back,
 *     cache_empty, cache_put_unlocked).
 *   - atomics between the two: kept_bytes (cache_offer reserves, the
 *     locked side frees), over_rss (the janitor writes, cache_put reads),
 *     rss_idle and fills (cache_put wakes the janitor through them). */
#include "internal.h"

#define NBUCKETS (4 * 64)

static struct hp_block *buckets[NBUCKETS];
static struct hp_block *lru_oldest, *lru_newest;
static size_t cached_bytes;
/* Of cached_bytes, the THP blocks': what a memory cgroup is charged for,
 * and what memcg_bound() applies to (hugetlb pool pages are not). */
static size_t charged_bytes;

static bool charged(const struct hp_block *b)
{
	return b->map.backend == HP_BACKEND_THP;
}

/* ---- a memory cgroup's share ---------------------------------------------------
 * A container, a systemd unit, a Kubernetes pod, a Dask worker: each is a
 * memory cgroup with a limit, and what the cache keeps after a free stays
 * charged to it.  MADV_FREE (cache_offer) lets the kernel take those pages
 * back, but only once the charge reaches the limit: then the cgroup sits
 * at its limit, every further charge reclaims first (the process is
 * throttled), and the huge pages it takes come back split (measured,
 * bench/results/pressure: the limit hit 14,000 and 184,000 times per
 * process, reuse twice as slow as mapping afresh; the peers give the
 * memory back at free and never get there).  So in a cgroup with a limit
 * the cache keeps at most a share of the headroom, what would be free
 * under the limit if the cache were empty:
 *
 *     cached THP bytes <= MEMCG_CACHE_SHARE_PCT % of (limit - working set + cached THP bytes)
 *
 * At 25 % the program can grow by three times what the cache holds before
 * the kernel has anything to reclaim, and the janitor has that long to
 * give it back.  Measured (make bench's reuse-pressure row: 4 x 64 MiB
 * freed, then 256 MiB of libc's memory, 128 MiB under the limit): at 50 %
 * the cache kept 192 MiB, the program's regrowth met the limit, 27-313
 * limit hits in most processes and reuse 2x NumPy's default; at 25 %
 * none, and reuse level with it or faster.
 * memcg_bound() is the rule, applied when a block enters the cache
 * (cache_put), before a fresh THP mapping (cache_before_map) and at every
 * janitor round (cache_expire), oldest blocks out first.  Only THP blocks
 * count: hugetlb pool pages are not charged to a memory cgroup.  memcg.c
 * measures (which cgroup, its limit, its working set, what is free under
 * it); the cache_memcg knob switches the bound off. */

/* A reading of the usage younger than this serves a free (a 1 MiB
 * temporary freed thousands of times a second must not read a file each
 * time): it decides what the cache keeps, which the janitor corrects.  A
 * fresh mapping reads now (memcg_before_map says why). */
#define MEMCG_FRESH_MS 5

static bool memcg_bound_on(void)
{
	return hp_knob(KNOB_CACHE_MEMCG);
}

/* How many bytes of THP blocks the cache may keep when it would hold
 * charged bytes of them, from memcg.c's last reading (no system call: the
 * heap lock may be held); SIZE_MAX: no bound (no limit, unknown, or the
 * knob off).  The gauge memcg_cache_bound says it, 0 for none. */
static size_t memcg_bound(size_t charged)
{
	size_t free = memcg_headroom_last();
	if (!memcg_bound_on() || free == SIZE_MAX) {
		atomic_store_explicit(&hp_counters[HP_STAT_MEMCG_CACHE_BOUND], 0, memory_order_relaxed);
		return SIZE_MAX;
	}
	size_t headroom = free > SIZE_MAX - charged ? SIZE_MAX : free + charged;
	size_t bound = headroom / 100 * MEMCG_CACHE_SHARE_PCT;
	atomic_store_explicit(&hp_counters[HP_STAT_MEMCG_CACHE_BOUND], bound, memory_order_relaxed);
	return bound;
}

/* ---- blocks left resident ----------------------------------------------------
 * A cached block that keeps its pages resident makes a process under a
 * memory limit (a container's cgroup, no swap) be killed where libc's
 * allocator, which gave them back, would live (issue 25).  So every THP
 * block is offered to the kernel as it enters the cache (cache_offer:
 * os_lazyfree, MADV_FREE): under pressure the kernel drops its pages like
 * clean page cache, and otherwise a reuse finds them as they were --
 * jemalloc's "muzzy" pages.  Done in the thread that caches the block,
 * outside hp_heap_lock, while the block is that thread's alone and before
 * anybody can take it from the cache: a lazy free issued later (the
 * janitor's) could race a new owner's writes and discard them.  hugetlb
 * blocks are not offered: pool pages are not the memory cgroup's
 * (hpalloc(7) says what a cached one costs a cgroup).
 *
 * libc does not give everything back either: a block no larger than the
 * mmap threshold it has learnt (small.c small_libc_learnt) it serves from
 * its heap, and it keeps up to twice that free at the top of the heap (its
 * trim threshold) -- resident, not the kernel's to take.  The offer is paid
 * at every reuse: the advice cleans and ages the block's page table
 * entries and flushes them from the TLB, and the next writes set each
 * dirty bit again.  Measured on the development VM
 * (tests/c/cache_libc_keeps.c says how to see it): ~90 us per MiB on 4 KiB
 * pages, ~1 us per 2 MiB huge page, per reuse -- `d = a + b` on 1 MiB
 * arrays took 1.9x its in-place loop with the offer and 1.02x without it.
 * So a cached block libc would have kept too stays as it is, up to what
 * libc would keep in all (libc_would_keep); larger blocks, and the rest,
 * are offered.  The bytes so kept are reserved atomically when the block
 * is offered, and given back when it leaves the cache -- taken, cut or
 * joined, decayed, evicted, released -- or is not cached after all. */
static _Atomic size_t kept_bytes;

/* A cached block of len bytes, with kept bytes of cached blocks already
 * left resident: libc would have kept it too. */
static bool libc_would_keep(size_t len, size_t kept)
{
	size_t learnt = small_libc_learnt();
	return len <= learnt && kept + len <= 2 * learnt;
}

static bool keep_resident(struct hp_block *b)
{
	size_t kept = atomic_load_explicit(&kept_bytes, memory_order_relaxed);

	if (b->map.backend != HP_BACKEND_THP)
		return false;
	do {
		if (!libc_would_keep(b->map.len, kept))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&kept_bytes, &kept, kept + b->map.len,
							memory_order_relaxed, memory_order_relaxed));
	b->kept = true;
	return true;
}

void cache_offer(struct hp_block *b)
{
	b->reclaimable = keep_resident(b) ? 0 : os_lazyfree(&b->map);
	if (b->reclaimable > b->lazy) { /* its pages now sit where page cache does (memcg.c) */
		memcg_lazy_add(b->reclaimable - b->lazy);
		b->lazy = b->reclaimable;
	}
}

/* A guess without the lock: cache_max may change meanwhile, and
 * b->reclaimable stays true either way.  [base_off, +base_len): pages a
 * populate job faulted at 4 KiB first and had not collapsed yet
 * (populate_forget): kept, the block would be handed out on them again
 * and again, as long as it is reused; dropped, its next owner faults that
 * part on huge pages, once.  On a VM that reports free memory those are
 * cold 2 MiB pages (the 4 KiB ones given back here do not make a warm one):
 * the cost moves to the first reuse, docs/benchmarks.md has it measured.
 *
 * And what the program set on the block that glibc's munmap would have
 * cleared is undone (os_reset; issue 45: a page left read-only faulted
 * the block's next user): here, the one door a user's block comes in by,
 * so a cached block -- taken whole, cut or joined -- is read-write and
 * carries nobody's advice.  Its protection always: one mprotect, the one
 * system call a block libc would have kept pays (measured, a 1 MiB block
 * freed and taken again: 0.23 us a round without it, 0.50 us with it).
 * The fork advice (MADV_DONTFORK, MADV_WIPEONFORK, two madvises more;
 * 64 MiB freed and taken again: 4.4 us a round before, 5.45 us with all
 * three) where glibc would have unmapped the block: not for one
 * cache_offer() keeps resident because libc would have kept it -- glibc's
 * heap keeps such advice for its next user too -- while the others pay a
 * MADV_FREE already.  Only a block so made clean is cached (cache_put): one
 * whose state cannot be undone is released, and so is one this guess
 * passed by while cache_max was raised meanwhile. */
void cache_before_put(struct hp_block *b, size_t base_off, size_t base_len)
{
	if (b->map.len > (size_t)hp_knob(KNOB_CACHE_MAX))
		return; /* it will not be cached */
	if (b->map.backend == HP_BACKEND_THP) {
		stat_add(HP_STAT_POPULATE_SMALL_DROPPED_BYTES, os_drop(&b->map, base_off, base_len));
		if (memcg_bound_on())
			memcg_headroom(MEMCG_FRESH_MS); /* the usage, for cache_put's bound */
		cache_offer(b);
	}
	b->clean = os_reset(&b->map, !b->kept) == 0;
}

static int bucket_of(size_t len)
{
	int k = 63 - __builtin_clzll((unsigned long long)len);
	int sub = k >= 2 ? (int)((len >> (k - 2)) & 3) : 0;
	return 4 * k + sub;
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

/* hp_heap_lock held: the one hand-off of blocks leaving the cache to
 * release.c, under the lock that took them out (a fork never finds a block
 * owned by nobody); the caller's release_flush(), once unlocked, sends
 * them on their way. */
static inline void give(struct hp_block *list)
{
	if (list)
		release_adopt(list);
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

/* Oldest THP blocks out until charged_bytes <= limit: memcg_bound(). */
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

/* cache_rss_max: set by the janitor (watch_rss), read here under the heap
 * lock with no system call. */
static _Atomic bool over_rss;

/* The janitor's last word, unless the bound is off since (then at once). */
static bool over_rss_bound(void)
{
	return atomic_load_explicit(&over_rss, memory_order_relaxed) &&
	       (size_t)hp_knob(KNOB_CACHE_RSS_MAX) != 0;
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

/* Blocks idle longer than idle_ms, the oldest first; the decay learns
 * from them (decayed). */
static struct hp_block *trim_idle(uint64_t idle_ms, uint64_t now_ms, struct hp_block *out)
{
	bool any = false;

	while (lru_oldest && lru_oldest->cached_at_ms + idle_ms <= now_ms) {
		struct hp_block *b = lru_oldest;
		unlink_block(b);
		stat_add(HP_STAT_CACHE_DECAYS, 1);
		out = push(out, b);
		any = true;
	}
	if (any)
		decayed(now_ms);
	return out;
}

/* ---- what the cache may keep now -----------------------------------------------------
 * The rules above as one answer, asked by every entry point that decides
 * what stays (cache_put, cache_expire, the give-backs below): room_now()
 * says it, over_room() takes out what it does not allow, for release.c
 * (give).  A block's own rules stay the block's, decided as it enters:
 * whether it is clean (cache_before_put) and whether it stays resident,
 * as libc would have kept it, or is offered (keep_resident). */
struct room {
	size_t bytes;     /* all cached blocks: cache_max, less a measured excess over cache_rss_max */
	size_t charged;   /* cached THP blocks: a memory cgroup's share, memcg_bound(); SIZE_MAX: none */
	uint64_t idle_ms; /* a block idle longer goes: the decay in force */
	bool fresh;       /* a freed block may come in: not over cache_rss_max (over_rss) */
};

/* hp_heap_lock held: what the cache may keep now, holding charged bytes
 * of THP blocks, with rss_excess bytes to give back for cache_rss_max;
 * idle: the decay too (a free caches at once, and leaves it to
 * cache_expire). */
static inline __attribute__((always_inline)) struct room room_now(size_t charged, size_t rss_excess,
								   bool idle)
{
	size_t max = (size_t)hp_knob(KNOB_CACHE_MAX);
	if (unlikely(rss_excess))
		max = cached_bytes <= rss_excess ? 0 : cached_bytes - rss_excess < max ? cached_bytes - rss_excess : max;
	return (struct room){
		.bytes = max,
		.charged = memcg_bound(charged),
		.idle_ms = idle ? decay_in_force() : UINT64_MAX,
		.fresh = !over_rss_bound(),
	};
}

/* hp_heap_lock held: the blocks the room has no place for, out of the
 * cache (for give); *next_deadline_ms (if asked, with the decay in the
 * room) when the oldest left is due to decay.  Both inlined: cache_put is
 * on every free's path, and out of line they cost it 50 instructions (make
 * bench-paths). */
static inline __attribute__((always_inline)) struct hp_block *
over_room(struct room r, uint64_t now_ms, uint64_t *next_deadline_ms)
{
	struct hp_block *out = trim_to(r.bytes, NULL);
	if (r.charged != SIZE_MAX)
		out = trim_charged_to(r.charged, out);
	if (r.idle_ms != UINT64_MAX)
		out = trim_idle(r.idle_ms, now_ms, out);
	if (next_deadline_ms)
		*next_deadline_ms = lru_oldest ? lru_oldest->cached_at_ms + r.idle_ms : UINT64_MAX;
	return out;
}

void cache_expire(uint64_t now_ms, uint64_t *next_deadline_ms)
{
	give(over_room(room_now(charged_bytes, 0, true), now_ms, next_deadline_ms));
}

static void filled(void);

/* hp_heap_lock held: b in, the newest of its bucket and of the LRU. */
static void insert(struct hp_block *b, uint64_t now_ms)
{
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
		filled();
	cached_bytes += b->map.len;
	if (charged(b))
		charged_bytes += b->map.len;
	stat_add(HP_STAT_CACHED_BYTES, b->map.len);
	stat_add(HP_STAT_CACHED_BLOCKS, 1);
	stat_add(HP_STAT_CACHED_RECLAIMABLE_BYTES, b->reclaimable);
}

void cache_put(struct hp_block *b, uint64_t now_ms)
{
	/* the headroom counts b: its pages move from live to cached */
	struct room r = room_now(charged_bytes + (charged(b) ? b->map.len : 0), 0, false);
	struct hp_block *out;

	if (!b->clean || !r.fresh || b->map.len > r.bytes || (charged(b) && b->map.len > r.charged)) {
		if (b->clean && r.fresh && b->map.len <= r.bytes && charged(b))
			stat_add(HP_STAT_MEMCG_RELEASED_BYTES, b->map.len); /* the cgroup's share alone refused it */
		unkeep(b);
		b->next = NULL;
		out = b;
	} else { /* room for b beside the others */
		r.bytes -= b->map.len;
		if (charged(b) && r.charged != SIZE_MAX)
			r.charged -= b->map.len;
		out = over_room(r, now_ms, NULL);
		insert(b, now_ms);
	}
	give(out);
}

/* ---- giving back, outside the lock ------------------------------------------------
 * The entry points below are called without hp_heap_lock: they measure
 * first (files, statm: no lock held), then take the lock for the cache's
 * part alone, give what leaves under it and send it on after
 * (release_flush; sync: in this thread, never through the ring). */

/* What room_now() has no place for, with rss_excess bytes over
 * cache_rss_max to give back, the oldest first. */
static void give_back(size_t rss_excess, bool sync, uint64_t *next_deadline_ms)
{
	pthread_mutex_lock(&hp_heap_lock);
	give(over_room(room_now(charged_bytes, rss_excess, true), hp_now_ms(), next_deadline_ms));
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(sync);
}

void cache_put_unlocked(struct hp_block *b)
{
	cache_offer(b);
	pthread_mutex_lock(&hp_heap_lock);
	cache_put(b, hp_now_ms());
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(false);
}

void cache_empty(int backend, bool sync)
{
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *out = NULL;
	for (struct hp_block *b = lru_oldest, *next; b; b = next) {
		next = b->lru_next;
		if (backend < 0 || b->map.backend == backend) {
			unlink_block(b);
			out = push(out, b);
		}
	}
	give(out);
	pthread_mutex_unlock(&hp_heap_lock);
	release_flush(sync);
}

/* A fresh block fits under a memory cgroup's limit only with this much to
 * spare: the block's page tables, the program's other memory and its other
 * threads' blocks are charged between the reading and the block's faults.
 * Charged up to the limit exactly, the next page fault finds nothing the
 * kernel can take back (no swap; libc's free heap is not reclaimable) and
 * the OOM killer kills the process (tests/c/memcg_libc_hole.c). */
#define MEMCG_MAP_SLACK (16 * HP_MiB)

/* A memory cgroup's limit: a fresh THP block (its pages will be charged to
 * the cgroup; a hugetlb block's are the pool's) counts as used from now
 * on, the cache is brought within its share, and if the block does not fit
 * in what is free, libc gives back the free memory it holds -- else the
 * kernel has nothing to reclaim for it (small.c small_libc_give_back says
 * what and why).  Unless libc holds free memory enough for the block and
 * may serve it (libc_may): then nothing is done and false returned. */
static bool memcg_before_map(size_t size, bool libc_may)
{
	if (!memcg_bound_on())
		return true;
	/* Read now, by this thread: another thread's reading of a moment ago
	 * (a populate worker reads every millisecond while the program writes
	 * its last block, the janitor every tick) misses what was charged
	 * since -- that last block, written after it.  On such a reading a
	 * fresh block was mapped beside libc's free memory instead of taken
	 * from it, and met the limit (make bench's reuse row on NumPy 2.x: an
	 * OOM kill in about 1 of 20 processes; tests/c/memcg_files.c
	 * test_reading_taken_now).  A fresh mapping faults a MiB or more: the
	 * two files read are a small part of its cost. */
	size_t free = memcg_headroom(0);
	if (free == SIZE_MAX)
		return true; /* no limit */
	bool fits = free >= size && free - size >= MEMCG_MAP_SLACK;
	if (!fits && libc_may && small_libc_has_free(size))
		return false;
	memcg_charging(size);
	if (atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed))
		give_back(0, true, NULL); /* within memcg_bound() of what is free now */
	if (!fits)
		small_libc_give_back();
	return true;
}

/* cache_rss_max, and a memory cgroup's limit: a fresh mapping must not
 * take the process over the bound while the cache holds memory it could
 * give back first -- so it gives that back now, in the allocating thread,
 * before the new pages fault in (the janitor, 100 ms later, would be after
 * a memory monitor saw the peak, or the cgroup reclaimed).  In a cgroup
 * without room for the block, memory libc holds free is better than a
 * fresh block charged on top of it: the program without hpalloc would
 * have had its buffer from there (glibc looks in its free lists before it
 * maps).  So when libc holds enough and the caller lets it (libc_may),
 * false: the caller takes the request to libc. */
bool cache_before_map(int backend, size_t size, bool libc_may)
{
	if (backend == HP_BACKEND_THP && !memcg_before_map(size, libc_may))
		return false;
	size_t limit = (size_t)hp_knob(KNOB_CACHE_RSS_MAX);
	if (!limit || !atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed))
		return true;
	size_t rss = hp_self_rss();
	if (rss + size > limit)
		give_back(rss + size - limit, true, NULL);
	return true;
}

/* ---- the janitor's watch ------------------------------------------------------------
 * cache_rss_max: a process over it (resident memory, as Dask's memory
 * manager and the OOM killer see it) gets the excess back from the cache,
 * and the cache keeps nothing new until it is under again (over_rss).
 * Read by the janitor, off every lock and the allocation path; before a
 * fresh mapping cache_before_map() holds it too, janitor or not.  An
 * unreadable statm (no /proc) reads as 0: no bound.
 *
 * With nothing cached, the process under the bound, and no block cached
 * since the last look, there is nothing to give back, so no reading of
 * /proc/self/statm every watch tick -- the janitor waits its ordinary tick,
 * and the block that fills the cache again wakes it (filled).  rss_idle:
 * it waits so; fills: blocks that found the cache empty (a program reusing
 * one block fills it on every free: that keeps the janitor watching rather
 * than woken each time).  All three are the janitor's but for filled(),
 * which cache_put calls. */
static _Atomic bool rss_idle;
static _Atomic uint64_t fills;

static void filled(void)
{
	atomic_fetch_add_explicit(&fills, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst); /* the count, then rss_idle: see rss_quiet */
	if (atomic_load_explicit(&rss_idle, memory_order_relaxed) &&
	    atomic_exchange_explicit(&rss_idle, false, memory_order_relaxed))
		background_wake();
}

/* Whether the bound has nothing to look at (see rss_idle). */
static bool rss_quiet(bool over)
{
	static uint64_t seen; /* fills at the last look */
	uint64_t now = atomic_load_explicit(&fills, memory_order_relaxed);
	bool quiet = !over && now == seen &&
		     !atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed);
	seen = now;
	if (!quiet)
		return false;
	atomic_store_explicit(&rss_idle, true, memory_order_relaxed);
	/* a block cached after the load above either sees rss_idle and wakes
	 * the janitor, or its count is seen here */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&fills, memory_order_relaxed) == seen)
		return true;
	atomic_store_explicit(&rss_idle, false, memory_order_relaxed);
	return false;
}

/* Whether to look again soon. */
static bool watch_rss(void)
{
	static bool over;
	size_t limit = (size_t)hp_knob(KNOB_CACHE_RSS_MAX);
	if (!limit || rss_quiet(over)) {
		over = false;
		atomic_store_explicit(&over_rss, false, memory_order_relaxed);
		return false;
	}
	size_t rss = hp_self_rss();
	over = rss > limit;
	atomic_store_explicit(&over_rss, over, memory_order_relaxed);
	if (over)
		give_back(rss - limit, false, NULL);
	return true;
}

bool cache_watch(uint64_t *next_deadline_ms)
{
	/* memcg.c reads the cgroup again first: cache_expire applies its bound */
	bool watch = memcg_follow() && memcg_bound_on() &&
		     atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed);
	give_back(0, false, next_deadline_ms);
	return watch | watch_rss();
}

/* A forked child has no janitor to wake until its first huge block starts
 * one. */
void cache_forked(void)
{
	atomic_store(&rss_idle, false);
}
