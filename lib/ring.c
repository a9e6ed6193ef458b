/* The io_uring ring: transport only.
 *
 * release.c decides what to release and owns every block on its way out;
 * this file only carries MADV_DONTNEED requests to the kernel and hands the
 * completions back (release_chunk_done()).  Who touches what:
 *   - the submission queue: any thread, under sq_lock (release.c calls
 *     ring_queue() with its own lock held: rel_lock nests outside sq_lock);
 *   - the completion queue: the janitor thread only (ring_wait()), without
 *     sq_lock -- waiting needs IORING_FEAT_EXT_ARG so it never touches the
 *     submission queue;
 *   - setup: the janitor thread, once, before it publishes `ready` (release
 *     order): a ring that failed the probe is never published, so no other
 *     thread can write into a ring being torn down.  Setup holds sq_lock
 *     (as fork does): a fork never sees a ring half made.
 * A submit that fails after entries were prepared (-EAGAIN when the kernel
 * cannot allocate requests, -EBUSY on a full completion queue) leaves them
 * in the shared submission ring: the kernel takes them with the next
 * io_uring_enter.  So a failed submit only means "submit again later": the
 * ring is marked backlogged, the janitor retries, and release.c sends new
 * blocks the synchronous way meanwhile.  A partial submit is the same.  Completions are never dropped: the
 * probe requires IORING_FEAT_NODROP (an overflowing completion queue is
 * kept by the kernel and flushed as the janitor reaps).
 *
 * A forked child shares the parent's ring memory: it drops its view without
 * touching the queues (ring_fork), and its own janitor sets up a new ring. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#define RING_ENTRIES 256
#define CHUNK ((size_t)1 << 30) /* io_uring madvise length is 32-bit */
#define WAKE_TAG 1              /* user_data of wake-up NOPs */

static _Atomic bool ready;      /* published by the janitor after setup */
static _Atomic bool backlogged; /* prepared entries await a successful submit */

#ifdef HAVE_LIBURING
static struct io_uring ring;
static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;

/* The conditions the release path needs, checked on a ring that is set up:
 * EXT_ARG (wait without touching the SQ), NODROP (no lost completion) and
 * IORING_OP_MADVISE. */
static bool ring_usable(struct io_uring *r, char *why, size_t len)
{
	if (!(r->features & IORING_FEAT_EXT_ARG)) {
		snprintf(why, len, "kernel lacks IORING_FEAT_EXT_ARG (Linux 5.11)");
		return false;
	}
	if (!(r->features & IORING_FEAT_NODROP)) {
		snprintf(why, len, "kernel lacks IORING_FEAT_NODROP (Linux 5.5)");
		return false;
	}
	struct io_uring_probe *p = io_uring_get_probe_ring(r);
	bool madvise_ok = p && io_uring_opcode_supported(p, IORING_OP_MADVISE);
	if (p)
		io_uring_free_probe(p);
	if (!madvise_ok) {
		snprintf(why, len, "kernel lacks IORING_OP_MADVISE (Linux 5.6)");
		return false;
	}
	return true;
}

/* Set up r and check it; on failure r is torn down and why says why. */
static bool ring_open(struct io_uring *r, unsigned entries, char *why, size_t len)
{
	int rc = io_uring_queue_init(entries, r, 0);
	if (rc < 0) {
		snprintf(why, len, "io_uring_queue_init: %s%s", strerror(-rc),
			 rc == -EPERM ? " (kernel.io_uring_disabled or seccomp)" : "");
		return false;
	}
	if (ring_usable(r, why, len))
		return true;
	io_uring_queue_exit(r);
	return false;
}
#endif

bool ring_probe(char *why, size_t len)
{
#ifdef HAVE_LIBURING
	struct io_uring r;
	if (!ring_open(&r, 2, why, len))
		return false;
	io_uring_queue_exit(&r);
	snprintf(why, len, "io_uring usable (EXT_ARG, NODROP, OP_MADVISE)");
	return true;
#else
	snprintf(why, len, "hpalloc built without liburing");
	return false;
#endif
}

bool ring_ready(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire);
}

bool ring_backlogged(void)
{
	return atomic_load_explicit(&backlogged, memory_order_relaxed);
}

/* Setup and publishing under sq_lock, which the fork hook takes: a fork
 * finds no ring or a published one, never one set up but not yet ready
 * (the child could not tell it has it, and would leak it). */
void ring_start(void)
{
#ifdef HAVE_LIBURING
	char why[160];
	pthread_mutex_lock(&sq_lock);
	bool ok = ring_open(&ring, RING_ENTRIES, why, sizeof(why));
	if (ok) {
		atomic_store_explicit(&ready, true, memory_order_release);
		atomic_store_explicit(&hp_counters[HP_STAT_URING_ACTIVE], 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&sq_lock);
	if (ok)
		hp_log(2, "io_uring ready");
	else
		hp_log(2, "io_uring unavailable (%s): releasing synchronously", why);
#endif
}

#ifdef HAVE_LIBURING
/* sq_lock held.  A failed submit keeps the entries queued: retry later.
 * So does a partial one (the kernel stops taking entries when it cannot
 * allocate a request and returns how many it took): what it left is still
 * prepared, and only a later submit hands it over. */
static void submit_locked(void)
{
	int rc = io_uring_submit(&ring);
	bool left = rc < 0 || io_uring_sq_ready(&ring) > 0;
	atomic_store_explicit(&backlogged, left, memory_order_relaxed);
	if (rc < 0)
		hp_log(2, "io_uring_submit: %s: retrying from the janitor", strerror(-rc));
	else if (left)
		hp_log(2, "io_uring_submit took %d entries, %u left: retrying from the janitor", rc,
		       io_uring_sq_ready(&ring));
}
#endif

size_t ring_chunks(size_t len)
{
	return (len + CHUNK - 1) / CHUNK;
}

bool ring_queue(struct hp_block *b)
{
#ifdef HAVE_LIBURING
	size_t chunks = ring_chunks(b->map.len);

	pthread_mutex_lock(&sq_lock);
	if (io_uring_sq_space_left(&ring) < chunks && !ring_backlogged())
		submit_locked(); /* make room: hand what is queued to the kernel */
	if (io_uring_sq_space_left(&ring) < chunks || ring_backlogged()) {
		pthread_mutex_unlock(&sq_lock);
		return false; /* nothing of b prepared: the caller releases it */
	}
	for (size_t off = 0; off < b->map.len; off += CHUNK) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		size_t len = b->map.len - off < CHUNK ? b->map.len - off : CHUNK;
		io_uring_prep_madvise(sqe, (char *)b->map.addr + off, (off_t)len, MADV_DONTNEED);
		sqe->flags |= IOSQE_ASYNC; /* never do the work inline in this thread */
		io_uring_sqe_set_data(sqe, b);
	}
	/* from here b belongs to the ring until its last completion */
	submit_locked();
	pthread_mutex_unlock(&sq_lock);
	return true;
#else
	(void)b;
	return false;
#endif
}

void ring_retry(void)
{
#ifdef HAVE_LIBURING
	if (!ring_ready() || !ring_backlogged())
		return;
	pthread_mutex_lock(&sq_lock);
	submit_locked();
	pthread_mutex_unlock(&sq_lock);
#endif
}

void ring_wake(void)
{
#ifdef HAVE_LIBURING
	pthread_mutex_lock(&sq_lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
	if (sqe) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, (void *)(uintptr_t)WAKE_TAG);
		submit_locked();
	}
	pthread_mutex_unlock(&sq_lock);
#endif
}

void ring_wait(uint64_t timeout_ms)
{
#ifdef HAVE_LIBURING
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ms / 1000),
				       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
	if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) < 0)
		return;
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&ring, head, cqe) {
		void *data = io_uring_cqe_get_data(cqe);
		if (data && (uintptr_t)data != WAKE_TAG)
			release_chunk_done(data, cqe->res);
		seen++;
	}
	io_uring_cq_advance(&ring, seen);
#else
	(void)timeout_ms;
#endif
}

/* The lock is taken around fork so no thread is mid-submit; the child
 * drops its view of the parent's ring without touching the queues. */
void ring_fork(int phase)
{
#ifdef HAVE_LIBURING
	fork_mutex(&sq_lock, phase);
	if (phase == FORK_CHILD && ring_ready())
		io_uring_queue_exit(&ring); /* unmaps our view, closes our fd only */
#endif
	if (phase == FORK_CHILD) {
		atomic_store(&ready, false);
		atomic_store(&backlogged, false);
		atomic_store(&hp_counters[HP_STAT_URING_ACTIVE], 0);
	}
}
