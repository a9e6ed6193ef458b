/* Giving pages back to the kernel, and the janitor thread.
 *
 * With io_uring (knob uring=on, and the kernel lets us), a freeing thread
 * only queues IORING_OP_MADVISE(MADV_DONTNEED) for the block and returns:
 * the kernel frees the pages in an io-wq worker.  The janitor reaps the
 * completions and unmaps the now empty ranges (cheap).  Without io_uring
 * the caller munmaps itself.
 *
 * The janitor also ticks at least every TICK_MS: cache decay, control
 * directory polling and stats publishing happen there, off the allocation
 * path.  It waits on the ring when there is one (a NOP wakes it), else on a
 * condition variable. */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#define TICK_MS 250
#define CHUNK ((size_t)1 << 30) /* io_uring madvise length is 32-bit */
#define WAKE_TAG 1              /* user_data of wake-up NOPs */

static pthread_mutex_t rel_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rel_cond = PTHREAD_COND_INITIALIZER;  /* janitor wake (no ring) */
static pthread_cond_t drain_cond = PTHREAD_COND_INITIALIZER;
static struct hp_block *in_flight; /* linked by prev/next */
static bool janitor_running, wake_pending;
static pthread_t janitor;

#ifdef HAVE_LIBURING
static struct io_uring ring;
static bool ring_ok;
#endif

bool release_uring_available(void)
{
#ifdef HAVE_LIBURING
	return ring_ok;
#else
	return false;
#endif
}

static void free_record(struct hp_block *b)
{
	os_unmap(&b->map);
	stat_sub(HP_STAT_MAPPED_BYTES, b->map.len);
	free(b);
}

static void release_sync(struct hp_block *b)
{
	stat_add(HP_STAT_SYNC_RELEASES, 1);
	free_record(b);
}

#ifdef HAVE_LIBURING
/* Called with rel_lock held.  Queue DONTNEED for every chunk; the block
 * counts its pending chunks in `bucket` (unused while not cached). */
static bool submit_release(struct hp_block *b)
{
	size_t chunks = (b->map.len + CHUNK - 1) / CHUNK;
	if (io_uring_sq_space_left(&ring) < chunks)
		io_uring_submit(&ring);
	if (io_uring_sq_space_left(&ring) < chunks)
		return false;
	b->bucket = (int)chunks;
	for (size_t off = 0; off < b->map.len; off += CHUNK) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		size_t len = b->map.len - off < CHUNK ? b->map.len - off : CHUNK;
		io_uring_prep_madvise(sqe, (char *)b->map.addr + off, (off_t)len, MADV_DONTNEED);
		sqe->flags |= IOSQE_ASYNC; /* never do the work inline in this thread */
		io_uring_sqe_set_data(sqe, b);
	}
	if (io_uring_submit(&ring) < 0)
		return false; /* SQEs stay queued: resubmitted with the next batch */
	b->prev = NULL;
	b->next = in_flight;
	if (in_flight)
		in_flight->prev = b;
	in_flight = b;
	return true;
}
#endif

void release_blocks_now(struct hp_block *list)
{
	while (list) {
		struct hp_block *b = list;
		list = list->next;
		stat_add(HP_STAT_RELEASED_BYTES, b->map.len);
		release_sync(b);
	}
}

bool release_pending(void)
{
	pthread_mutex_lock(&rel_lock);
	bool pending = in_flight != NULL;
	pthread_mutex_unlock(&rel_lock);
	return pending;
}

void release_blocks(struct hp_block *list)
{
	while (list) {
		struct hp_block *b = list;
		list = list->next;
		stat_add(HP_STAT_RELEASED_BYTES, b->map.len);
#ifdef HAVE_LIBURING
		if (ring_ok && atomic_load_explicit(&hp_cfg.uring, memory_order_relaxed)) {
			pthread_mutex_lock(&rel_lock);
			bool queued = ring_ok && submit_release(b);
			pthread_mutex_unlock(&rel_lock);
			if (queued) {
				stat_add(HP_STAT_URING_RELEASES, 1);
				continue;
			}
		}
#endif
		release_sync(b);
	}
}

#ifdef HAVE_LIBURING
/* Janitor only: one completion.  A block is unmapped when its last chunk
 * is done (if madvise failed, munmap frees the pages just the same). */
static void complete(struct io_uring_cqe *cqe)
{
	struct hp_block *b = io_uring_cqe_get_data(cqe);
	if ((uintptr_t)b == WAKE_TAG || !b)
		return;
	pthread_mutex_lock(&rel_lock);
	bool last = --b->bucket == 0;
	b->unmapping = last; /* a child forked from now on must not unmap it */
	pthread_mutex_unlock(&rel_lock);
	if (!last)
		return;
	/* unmapped before it leaves the list: a drain that returns has its
	 * pages and its mapping gone (a short hugetlb pool waits on that) */
	os_unmap(&b->map);
	stat_sub(HP_STAT_MAPPED_BYTES, b->map.len);
	pthread_mutex_lock(&rel_lock);
	if (b->prev)
		b->prev->next = b->next;
	else
		in_flight = b->next;
	if (b->next)
		b->next->prev = b->prev;
	if (!in_flight)
		pthread_cond_broadcast(&drain_cond);
	pthread_mutex_unlock(&rel_lock);
	free(b);
}

static void reap_until(uint64_t timeout_ms)
{
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ms / 1000),
				       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
	if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) < 0)
		return;
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&ring, head, cqe) {
		complete(cqe);
		seen++;
	}
	io_uring_cq_advance(&ring, seen);
}

/* A ring usable by the janitor while other threads submit: the wait must
 * not touch the submission queue, which needs IORING_FEAT_EXT_ARG. */
static void ring_setup(void)
{
	ring_ok = io_uring_queue_init(256, &ring, 0) == 0;
	if (ring_ok && !(ring.features & IORING_FEAT_EXT_ARG)) {
		io_uring_queue_exit(&ring);
		ring_ok = false;
	}
	hp_log(2, "io_uring %s", ring_ok ? "ready" : "unavailable: releasing synchronously");
}
#endif

static void expire_cache(uint64_t *deadline)
{
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *out = cache_expire(hp_now_ms(), deadline);
	pthread_mutex_unlock(&hp_heap_lock);
	release_blocks(out);
}

static void wait_cond(uint64_t timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(timeout_ms / 1000);
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&rel_lock);
	if (!wake_pending)
		pthread_cond_timedwait(&rel_cond, &rel_lock, &ts);
	wake_pending = false;
	pthread_mutex_unlock(&rel_lock);
}

static void *janitor_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t deadline, now;
		control_poll();
		expire_cache(&deadline);
		publish_update();
		now = hp_now_ms();
		uint64_t wait = deadline > now ? deadline - now : 1;
		if (wait > TICK_MS)
			wait = TICK_MS;
#ifdef HAVE_LIBURING
		if (ring_ok) {
			reap_until(wait);
			continue;
		}
#endif
		wait_cond(wait);
	}
	return NULL;
}

/* Called from hp_init_slow (also again in a forked child). */
void janitor_start(void)
{
	pthread_attr_t attr;
	sigset_t all, old;

#ifdef HAVE_LIBURING
	ring_setup();
#endif
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	sigfillset(&all); /* signals are for the application's threads */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	janitor_running = pthread_create(&janitor, &attr, janitor_main, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (!janitor_running)
		hp_log(1, "no janitor thread: cache decay and live reload are off");
}

void janitor_wake(void)
{
	if (!janitor_running)
		return;
#ifdef HAVE_LIBURING
	if (ring_ok) {
		pthread_mutex_lock(&rel_lock);
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		if (sqe) {
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data(sqe, (void *)(uintptr_t)WAKE_TAG);
			io_uring_submit(&ring);
		}
		pthread_mutex_unlock(&rel_lock);
		return;
	}
#endif
	pthread_mutex_lock(&rel_lock);
	wake_pending = true;
	pthread_cond_signal(&rel_cond);
	pthread_mutex_unlock(&rel_lock);
}

void release_drain(void)
{
	pthread_mutex_lock(&rel_lock);
	while (in_flight && janitor_running)
		pthread_cond_wait(&drain_cond, &rel_lock);
	pthread_mutex_unlock(&rel_lock);
}

void hp_release_drain(void)
{
	hp_init();
	release_drain();
}

/* ---- fork ---------------------------------------------------------------------- */

void release_prepare_fork(void)
{
	pthread_mutex_lock(&rel_lock);
}

void release_parent_after_fork(void)
{
	pthread_mutex_unlock(&rel_lock);
}

/* The child has no janitor and shares the parent's ring memory: drop the
 * ring without touching it, unmap the child's copies of blocks whose
 * release was in flight, and let init start a fresh janitor and ring. */
void release_child_after_fork(void)
{
	pthread_mutex_unlock(&rel_lock);
	pthread_mutex_init(&rel_lock, NULL);
	pthread_cond_init(&rel_cond, NULL);
	pthread_cond_init(&drain_cond, NULL);
	janitor_running = false;
	wake_pending = false;
#ifdef HAVE_LIBURING
	if (ring_ok) {
		io_uring_queue_exit(&ring); /* unmaps our view, closes our fd only */
		ring_ok = false;
	}
#endif
	while (in_flight) {
		struct hp_block *b = in_flight;
		in_flight = b->next;
		/* an address the parent already unmapped may hold a new block by now */
		if (!b->unmapping)
			os_unmap(&b->map);
		stat_sub(HP_STAT_MAPPED_BYTES, b->map.len);
		free(b);
	}
}
