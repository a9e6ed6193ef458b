/* Pieces: the cache's THP memory serves any size.
 *
 * Fresh pages cost a fault each and the kernel zeroes every one of them
 * (in a program with many arrays of a few MiB, most of its system time);
 * on a VM that hands freed memory back to its host (free page reporting)
 * they are also the slowest pages to get.  The cache holds pages that are
 * already there, but a block serves only a request of about its own size
 * (cache.c's fits()).  So before anything is mapped afresh, a THP request
 * takes the cache's memory in pieces, as a heap would:
 *   - cut: the front of the smallest cached THP block that holds it (the
 *     rest stays cached);
 *   - join: else a run of cached pieces that lie side by side in one
 *     mapping, made one block again, and cut.
 * And an array that grows (ndarray.resize, a buffer doubling) grows in place
 * over the cached piece that follows it.  Joining is lazy -- a freed piece
 * is cached as it is -- so a program repeating the same sizes gets exact
 * fits with no syscall, and only a request that no block holds pays the
 * mprotects of a join.
 *
 * Pieces are cut so that each starts on a 2 MiB boundary (cut_len), keep the
 * kind (backend, placement) and the family (the mmap they come from) of
 * what they were cut from, and only a family's pieces are joined: they are
 * one anonymous mapping to the kernel, so a joined block is one VMA again,
 * which mremap needs to grow it further.  A block mapped before a fork is
 * never cut or joined (heap.c's inherited(): its pages are not this
 * process's to cache).
 *
 * Thread and lock rules:
 *   - Cutting and joining (os_thp_split, os_thp_join: mprotects, and the
 *     cut's drop of its new guard's pages) run
 *     outside hp_heap_lock, on blocks that are in neither the cache nor the
 *     registry: the calling thread's alone, as heap.c's block sourcing.
 *   - Cached pieces are taken and put back only through cache.c under
 *     hp_heap_lock, one critical section per take or put; between them a
 *     piece is the caller's alone.  A piece goes back to the cache by
 *     cache_put_unlocked(): offered to the kernel first, while it is
 *     still the caller's, and what leaves the cache to make room is
 *     cache.c's to give back.
 *   - family_seq is atomic: any thread maps a new family. */
#include "internal.h"

#include <stdlib.h>

static _Atomic uint64_t family_seq;

uint64_t pieces_new_family(void)
{
	return atomic_fetch_add_explicit(&family_seq, 1, memory_order_relaxed) + 1;
}

/* The length of a piece cut to hold size: whole huge pages, so its guard
 * (os.c) is one huge page and ends on a 2 MiB boundary, where the next
 * piece starts. */
static size_t cut_len(size_t size)
{
	return hp_align_up(size + HP_GUARD, HP_THP_SIZE) - HP_GUARD;
}

/* THP block b keeps what holds size; a tail of 2 MiB or more goes to the
 * cache.  Best effort: b may stay whole (no memory for the record, or the
 * mprotect failed) -- larger than asked, never wrong. */
static void cut_tail(struct hp_block *b, size_t size)
{
	size_t len = cut_len(size);
	if (len + HP_GUARD + HP_THP_SIZE > b->map.len)
		return;
	struct hp_block *tail = calloc(1, sizeof(*tail));
	if (!tail)
		return;
	size_t whole = b->map.len;
	if (os_thp_split(&b->map, len, &tail->map) < 0) {
		free(tail);
		return;
	}
	tail->kind = b->kind;
	tail->family = b->family;
	tail->fork_gen = b->fork_gen;
	tail->dirty = true;
	tail->clean = true; /* cached memory no user had since its reset (grown over: past b's old guard) */
	stat_sub(HP_STAT_MAPPED_BYTES, whole - b->map.len - tail->map.len); /* b's guard now */
	stat_add(HP_STAT_CACHE_CUTS, 1);
	cache_put_unlocked(tail);
}

/* b (the caller's) joined with the piece that follows it; false and both
 * unchanged if the kernel refused. */
static bool join_next(struct hp_block *b, struct hp_block *next)
{
	size_t apart = b->map.len + next->map.len;
	if (os_thp_join(&b->map, &next->map) < 0)
		return false;
	b->lazy += next->lazy; /* its offered pages are b's now (memcg.c) */
	/* b's guard is part of it again: 2 MiB after a cut, up to 4 MiB - 4 KiB
	 * after a shrink to a length short of a 2 MiB boundary (os_span) */
	stat_add(HP_STAT_MAPPED_BYTES, b->map.len - apart);
	stat_add(HP_STAT_CACHE_JOINS, 1);
	free(next);
	return true;
}

/* The run of pieces (linked in address order) made one block.  If a join
 * fails, the pieces not joined go back to the cache and the block is as
 * long as the joins made it. */
static struct hp_block *join_run(struct hp_block *run)
{
	struct hp_block *b = run, *next;

	for (run = run->next; run; run = next) {
		next = run->next;
		if (!join_next(b, run))
			break;
	}
	b->next = NULL;
	for (; run; run = next) {
		next = run->next;
		cache_put_unlocked(run);
	}
	return b;
}

/* A THP block for size from the cache's pieces (see above), or NULL. */
struct hp_block *thp_from_pieces(size_t size, hp_numa_t numa)
{
	uint64_t kind = cache_kind(HP_BACKEND_THP, numa);
	size_t need = hp_align_up(size, HP_BASE_PAGE);

	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = cache_take_at_least(kind, need);
	struct hp_block *run = b ? NULL : cache_take_run(kind, need);
	pthread_mutex_unlock(&hp_heap_lock);
	if (run && (b = join_run(run))->map.len < need) {
		cache_put_unlocked(b); /* a join failed short of size */
		return NULL;
	}
	if (b)
		cut_tail(b, size);
	return b;
}

/* THP block b (the caller's) grown toward size over the cached pieces of its
 * family that follow it; what it took beyond size back into the cache. */
void grow_over_cache(struct hp_block *b, size_t size)
{
	bool grew = false;

	while (b->map.len < size) {
		pthread_mutex_lock(&hp_heap_lock);
		struct hp_block *next = cache_take_at(b->family, os_thp_end(&b->map));
		pthread_mutex_unlock(&hp_heap_lock);
		if (!next)
			break;
		if (!join_next(b, next)) {
			cache_put_unlocked(next);
			break;
		}
		grew = true;
	}
	if (grew)
		cut_tail(b, size);
}
