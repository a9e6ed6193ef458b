/* Giving blocks back to the kernel: who owns a block on its way out.
 *
 * A huge block has exactly one owner at every moment:
 *   live       the registry (registry.c): the application may touch it,
 *              and populate.c's workers until populate_forget(), which
 *              whoever takes it out of the registry calls first;
 *   cached     cache.c, under hp_heap_lock: nobody touches its pages;
 *   releasing  this file, from release_adopt() -- called with hp_heap_lock
 *              held, at the very moment the block leaves the registry or
 *              the cache -- until its mapping is gone and its record freed.
 * Releasing blocks are on one of two lists, under rel_lock:
 *   pending    adopted, not yet sent anywhere (release_flush() sends them,
 *              or leaves them to the janitor's release_pump());
 *   in_ring    MADV_DONTNEED entries for it are prepared in the io_uring
 *              (ring.c) from the first one on: only its last completion
 *              (release_entry_done(), janitor thread) unmaps it.  A failed
 *              submit changes nothing of that: the entries are still queued.
 * The synchronous release unmaps with rel_lock held, and so does the last
 * completion: a fork therefore finds every listed block still mapped, and
 * the child unmaps its copies of all of them (release_fork), while no
 * address the parent already gave back is ever touched.
 *
 * Which way a block goes: the ring when the janitor has set one up (it
 * reaps), the `uring` knob is on, the ring is not backlogged by a failed
 * submit and the process is in no memory cgroup with a limit; else
 * synchronously, in the calling thread.  This file knows no ring: ring.c
 * (threads/) lends it one, as a struct release_way, once the janitor has
 * set it up (release_lend); until then every release is synchronous.  Under a limit, memory in flight
 * stays charged until the ring is done, and a fresh block faulted
 * meanwhile gets pages the host took back (cold: 3-4x dearer here) instead
 * of those: make bench's reuse-pressure row had 190-280 ms rounds against
 * NumPy's default 32 ms, 25-35 ms released synchronously.  Only the janitor uses
 * the ring (ring.c says why): another thread leaves its blocks pending and
 * wakes it, and the janitor moves them into the ring (release_pump).  A
 * ring that is gone (its descriptor closed by the program) hands back what
 * it held, and every release is synchronous from then on.
 * hp_release_drain() waits until both lists are empty. */
#include "internal.h"

#include <stdlib.h>

static pthread_mutex_t rel_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t drained = PTHREAD_COND_INITIALIZER;
static struct hp_block *pending;  /* linked by next */
static struct hp_block *in_ring;  /* linked by ring_prev/ring_next */
static _Atomic bool busy;         /* either list non-empty (lock-free peek) */
static _Atomic(const struct release_way *) way; /* the ring lent, or NULL */

void release_lend(const struct release_way *w)
{
	atomic_store_explicit(&way, w, memory_order_release);
}

static void update_busy_locked(void)
{
	bool now = pending || in_ring;
	atomic_store_explicit(&busy, now, memory_order_relaxed);
	if (!now)
		pthread_cond_broadcast(&drained);
}

void release_adopt(struct hp_block *list)
{
	if (!list)
		return;
	pthread_mutex_lock(&rel_lock);
	while (list) {
		struct hp_block *b = list;
		list = list->next;
		if (b->map.backend == HP_BACKEND_THP)
			memcg_releasing(b->map.len); /* its charge goes: memcg.c */
		b->next = pending;
		pending = b;
	}
	update_busy_locked();
	pthread_mutex_unlock(&rel_lock);
}

/* rel_lock held: the block's mapping goes, then its record. */
static void unmap_locked(struct hp_block *b)
{
	os_unmap(&b->map);
	memcg_lazy_sub(b->lazy);
	stat_sub(HP_STAT_MAPPED_BYTES, b->map.len);
	stat_add(HP_STAT_RELEASED_BYTES, b->map.len);
	free(b);
}

static void ring_link_locked(const struct release_way *w, struct hp_block *b)
{
	b->entries_left = w->entries(b->map.len);
	b->ring_prev = NULL;
	b->ring_next = in_ring;
	if (in_ring)
		in_ring->ring_prev = b;
	in_ring = b;
}

static void ring_unlink_locked(struct hp_block *b)
{
	if (b->ring_prev)
		b->ring_prev->ring_next = b->ring_next;
	else
		in_ring = b->ring_next;
	if (b->ring_next)
		b->ring_next->ring_prev = b->ring_prev;
}

/* The ring lent, when it takes blocks now and they may go that way. */
static const struct release_way *ring_wanted(bool sync)
{
	const struct release_way *w = atomic_load_explicit(&way, memory_order_acquire);
	return !sync && w && w->takes() && hp_knob(KNOB_URING) && !memcg_limited() ? w : NULL;
}

/* rel_lock held: into the ring (linked first: it is the ring's from its
 * first prepared entry), else unmapped right here.  The janitor's only. */
static void send_locked(struct hp_block *b)
{
	const struct release_way *w = ring_wanted(false);
	if (w) {
		ring_link_locked(w, b);
		if (w->queue(b)) {
			stat_add(HP_STAT_URING_RELEASES, 1);
			return;
		}
		ring_unlink_locked(b); /* nothing was prepared: still ours alone */
	}
	stat_add(HP_STAT_SYNC_RELEASES, 1);
	unmap_locked(b);
}

/* The ring's way: the blocks wait for the janitor, which is woken.  Else
 * they are unmapped here and now. */
void release_flush(bool sync)
{
	if (!atomic_load_explicit(&busy, memory_order_relaxed))
		return;
	const struct release_way *w = ring_wanted(sync);
	if (w) {
		w->kick();
		return;
	}
	pthread_mutex_lock(&rel_lock);
	while (pending) {
		struct hp_block *b = pending;
		pending = b->next;
		stat_add(HP_STAT_SYNC_RELEASES, 1);
		unmap_locked(b);
	}
	update_busy_locked();
	pthread_mutex_unlock(&rel_lock);
}

void release_pump(void)
{
	if (atomic_load_explicit(&busy, memory_order_relaxed)) {
		pthread_mutex_lock(&rel_lock);
		while (pending) {
			struct hp_block *b = pending;
			pending = b->next;
			send_locked(b);
		}
		update_busy_locked();
		pthread_mutex_unlock(&rel_lock);
	}
}

/* Janitor thread: one entry of b is done.  If madvise failed, munmap frees
 * the pages just the same. */
void release_entry_done(struct hp_block *b, int res)
{
	(void)res;
	pthread_mutex_lock(&rel_lock);
	if (--b->entries_left == 0) {
		ring_unlink_locked(b);
		unmap_locked(b);
		update_busy_locked();
	}
	pthread_mutex_unlock(&rel_lock);
}

/* The ring is gone with completions that will never be seen: its blocks
 * leave the list, still mapped (a late MADV_DONTNEED can only hit them,
 * and their addresses are never handed out again). */
void release_abandon_ring(void)
{
	pthread_mutex_lock(&rel_lock);
	while (in_ring) {
		struct hp_block *b = in_ring;
		in_ring = b->ring_next;
		free(b);
	}
	update_busy_locked();
	pthread_mutex_unlock(&rel_lock);
}

/* pthread_cond_wait is a cancellation point, and a thread cancelled in it
 * would end holding rel_lock: every later release, and fork, would wait
 * for it forever.  Draining is no cancellation point (as no malloc is):
 * a cancel that arrives meanwhile acts at the caller's next one. */
void release_drain(void)
{
	HP_NOCANCEL_BEGIN;
	release_flush(false);
	pthread_mutex_lock(&rel_lock);
	while (pending || in_ring)
		pthread_cond_wait(&drained, &rel_lock);
	pthread_mutex_unlock(&rel_lock);
	HP_NOCANCEL_END;
}

void hp_release_drain(void)
{
	HP_ERRNO_SAVE;
	hp_init();
	release_drain();
	HP_ERRNO_RESTORE;
}

/* A child has the parent's listed blocks mapped (nothing on the lists is
 * unmapped yet, see above) and no janitor to reap: it unmaps its copies. */
void release_fork(int phase)
{
	fork_mutex(&rel_lock, phase);
	if (phase != FORK_CHILD)
		return;
	pthread_cond_init(&drained, NULL);
	while (in_ring) {
		struct hp_block *b = in_ring;
		in_ring = b->ring_next;
		unmap_locked(b);
	}
	while (pending) {
		struct hp_block *b = pending;
		pending = b->next;
		unmap_locked(b);
	}
	atomic_store(&busy, false);
}
