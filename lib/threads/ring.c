/* The io_uring ring: transport only, and the janitor thread's alone.
 *
 * release.c decides what to release and owns every block on its way out;
 * this file only carries MADV_DONTNEED requests to the kernel (the entries
 * prim.c's prim_prep_release() makes) and hands the completions back
 * (release_entry_done()).
 *
 * The ring is kept out of the descriptor table.  Programs close descriptors
 * they did not open -- daemons and sandboxes closefrom(3)/close_range() at
 * start, shell scripts `exec 3>file` -- and the ring was usually fd 3: every
 * io_uring_enter then failed (the janitor spun, blocks stayed "in the ring"
 * forever, hp_release_drain() never returned), and a number reused by
 * another file had our submits sent there.  So right after setup the
 * janitor registers the ring fd (IORING_REGISTER_RING_FDS, Linux 5.18) and
 * closes the plain one: io_uring_enter takes the registered index from then
 * on, which nothing else in the process can close or reuse, and the ring's
 * memory stays mapped as before.  liburing 2.3 (Debian 12) has
 * io_uring_register_ring_fd() but not io_uring_close_ring_fd() (2.4): we
 * close the fd and set ring_fd to -1 ourselves, which is all the latter
 * does for a ring never given to io_uring_register() again (it also sets a
 * flag only io_uring_register() wrappers read); with ring_fd -1,
 * io_uring_queue_exit() closes nothing.
 *
 * A registration belongs to the thread that made it (the kernel keeps it
 * in that task's io_uring context), so one thread uses the ring: the
 * janitor.  It sets the ring up, prepares the entries of the blocks
 * release.c hands it (ring_queue, with rel_lock held), submits them
 * (ring_submit), waits for and reaps their completions (ring_wait).  Other
 * threads never touch the ring: they leave their blocks to the janitor and
 * wake it (release.c).  sq_lock only orders the janitor's use of the ring
 * against fork (and setup and teardown against everything that reads
 * `ready`): a fork never finds a ring half made or half torn down.
 *
 * Where the ring fd cannot be registered (a kernel before 5.18, liburing
 * before 2.2) the plain descriptor stays and may be closed or reused under
 * us.  io_uring_enter then fails with EBADF (closed), EOPNOTSUPP (the
 * number now names a file that is no io_uring), ENXIO or EBADFD: the ring
 * is gone (ring_fail).  Nothing is retried on it: `ready` drops, every new
 * release is synchronous, and the janitor hands back what the ring still
 * held (ring_collect): entries the kernel never took will never run, so
 * their blocks are released at once; entries it took are running and
 * complete into the ring's memory, which stays mapped until the last one
 * is reaped from it (no system call needed).  Only a number reused by
 * another io_uring cannot be told from ours (before Linux 6.7 every
 * io_uring shares one anonymous inode): registration is the real remedy.
 *
 * A failed submit that is no loss of the ring (-EAGAIN when the kernel
 * cannot allocate requests, -EBUSY on a full completion queue) leaves the
 * entries in the shared submission ring: the kernel takes them with the
 * next io_uring_enter.  So it only means "submit again later": the ring is
 * marked backlogged, the janitor retries soon, and release.c sends new
 * blocks the synchronous way meanwhile.  A partial submit is the same.
 * Completions are never dropped: the probe requires IORING_FEAT_NODROP (an
 * overflowing completion queue is kept by the kernel and flushed as the
 * janitor reaps).
 *
 * A forked child shares the parent's ring memory: it drops its view without
 * touching the queues (ring_fork); it never had the parent's registration
 * (the kernel does not copy a task's io_uring context to a child).  Its own
 * janitor, if it gets one, sets up a new ring. */
#include "../core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBURING
#include <liburing.h>
/* liburing 2.2 brought io_uring_register_ring_fd() with this flag. */
#ifdef IORING_ENTER_REGISTERED_RING
#define RING_CAN_REGISTER 1
#endif
#endif

#define RING_ENTRIES 256
#define ENTRY_BYTES ((size_t)1 << 30) /* io_uring madvise length is 32-bit */
/* A gone ring's entries that the kernel took complete within milliseconds,
 * into the ring's memory -- unless the completion queue was full: the
 * kernel then keeps them aside, and only io_uring_enter, which no longer
 * reaches the ring, flushes them.  After this long whatever is missing is
 * given up: those blocks stay mapped and are never handed out again (a
 * late MADV_DONTNEED on them harms nobody), and the drain returns. */
#define GONE_GRACE_MS 2000

static _Atomic bool ready;      /* set by the janitor once the ring is set up */
static _Atomic bool backlogged; /* prepared entries await a successful submit */

#ifdef HAVE_LIBURING
static struct io_uring ring;
static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;
/* The janitor's bookkeeping (sq_lock held, or the janitor reading its own
 * numbers).  mapped: our view of the ring exists (setup until teardown). */
static bool mapped, registered, gone;
static uint64_t prepared, completed; /* entries; the difference is outstanding */
static uint64_t gone_at_ms;
/* The plain descriptor, where it could not be registered: what it was at
 * setup, so that a forked child closes it only if it still is a ring. */
static struct stat plain_st;

/* The conditions the release path needs, checked on a ring that is set up:
 * EXT_ARG (wait with a timeout), NODROP (no lost completion) and
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

/* Take r's descriptor out of the table: registered, then closed.  false
 * (r untouched, its plain descriptor kept) where the kernel cannot. */
static bool ring_unplug(struct io_uring *r, char *why, size_t len)
{
#ifdef RING_CAN_REGISTER
	int rc = io_uring_register_ring_fd(r);
	if (rc == 1) {
		close(r->ring_fd);
		r->ring_fd = -1; /* what io_uring_close_ring_fd() (liburing 2.4) does */
		return true;
	}
	snprintf(why, len, "io_uring_register_ring_fd: %s", strerror(rc < 0 ? -rc : EINVAL));
#else
	(void)r;
	snprintf(why, len, "liburing before 2.2 cannot register the ring fd");
#endif
	return false;
}
#endif

bool ring_probe(char *why, size_t len)
{
#ifdef HAVE_LIBURING
	struct io_uring r;
	if (!ring_open(&r, 2, why, len))
		return false;
	bool can_register = false;
#ifdef RING_CAN_REGISTER
	/* registered and unregistered again: the plain fd still closes it */
	if (io_uring_register_ring_fd(&r) == 1) {
		can_register = true;
		io_uring_unregister_ring_fd(&r);
	}
#endif
	io_uring_queue_exit(&r);
	snprintf(why, len, "io_uring usable (EXT_ARG, NODROP, OP_MADVISE%s)",
		 can_register ? ", registered ring fd" : "; its fd stays in the descriptor table");
	return true;
#else
	snprintf(why, len, "hpalloc built without liburing");
	return false;
#endif
}

static bool ring_ready(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire);
}

bool ring_backlogged(void)
{
	return atomic_load_explicit(&backlogged, memory_order_relaxed);
}

static const struct release_way ring_way; /* below: what release.c is lent */

/* Setup, unplugging and setting `ready` under sq_lock, which the fork hook
 * takes: a fork finds no ring or a ready one, never one set up but not
 * yet ready (the child could not tell it has it, and would leak it). */
void ring_start(void)
{
#ifdef HAVE_LIBURING
	char why[160], unplug_why[128] = "";
	pthread_mutex_lock(&sq_lock);
	bool ok = ring_open(&ring, RING_ENTRIES, why, sizeof(why));
	if (ok) {
		registered = ring_unplug(&ring, unplug_why, sizeof(unplug_why));
		if (!registered && fstat(ring.ring_fd, &plain_st) != 0)
			memset(&plain_st, 0, sizeof(plain_st));
		mapped = true;
		gone = false;
		prepared = completed = 0;
		atomic_store_explicit(&ready, true, memory_order_release);
		atomic_store_explicit(&hp_counters[HP_STAT_URING_ACTIVE], 1, memory_order_relaxed);
		release_lend(&ring_way); /* release.c may send blocks this way from now on */
	}
	pthread_mutex_unlock(&sq_lock);
	if (!ok)
		hp_log(2, "io_uring unavailable (%s): releasing synchronously", why);
	else if (registered)
		hp_log(2, "io_uring ready (registered ring fd, none in the descriptor table)");
	else
		hp_log(2, "io_uring ready on fd %d (%s): if the program closes it, releases "
		       "become synchronous", ring.ring_fd, unplug_why);
#else
	(void)ring_way; /* never lent: every release is synchronous */
#endif
}

#ifdef HAVE_LIBURING
static bool lost_ring(int err)
{
	return err == EBADF || err == EBADFD || err == ENXIO || err == EOPNOTSUPP;
}

/* sq_lock held: io_uring_enter failed with -rc.  The ring is gone, or it
 * only could not take the entries now (they stay queued: retry later). */
static void ring_fail(int rc)
{
	if (!lost_ring(-rc)) {
		atomic_store_explicit(&backlogged, true, memory_order_relaxed);
		hp_log(2, "io_uring_enter: %s: retrying from the janitor", strerror(-rc));
		return;
	}
	if (gone)
		return;
	gone = true;
	gone_at_ms = hp_now_ms();
	atomic_store_explicit(&ready, false, memory_order_release);
	atomic_store_explicit(&backlogged, false, memory_order_relaxed);
	atomic_store_explicit(&hp_counters[HP_STAT_URING_ACTIVE], 0, memory_order_relaxed);
	hp_log(1, "io_uring descriptor %d closed or replaced by the program (%s): "
	       "releasing synchronously from now on", ring.ring_fd, strerror(-rc));
}

/* sq_lock held.  What the kernel did not take stays prepared: a failed
 * submit keeps the entries queued, a partial one the rest of them (the
 * kernel stops taking entries when it cannot allocate a request). */
static void submit_locked(void)
{
	if (gone || io_uring_sq_ready(&ring) == 0) {
		atomic_store_explicit(&backlogged, false, memory_order_relaxed);
		return;
	}
	int rc = io_uring_submit(&ring);
	if (rc < 0) {
		ring_fail(rc);
		return;
	}
	bool left = io_uring_sq_ready(&ring) > 0;
	atomic_store_explicit(&backlogged, left, memory_order_relaxed);
	if (left)
		hp_log(2, "io_uring_submit took %d entries, %u left: retrying from the janitor", rc,
		       io_uring_sq_ready(&ring));
}
#endif

static size_t ring_entries(size_t len)
{
	return (len + ENTRY_BYTES - 1) / ENTRY_BYTES;
}

static bool ring_queue(struct hp_block *b)
{
#ifdef HAVE_LIBURING
	size_t entries = ring_entries(b->map.len);

	pthread_mutex_lock(&sq_lock);
	if (io_uring_sq_space_left(&ring) < entries && !ring_backlogged())
		submit_locked(); /* make room: hand what is queued to the kernel */
	if (gone || io_uring_sq_space_left(&ring) < entries || ring_backlogged()) {
		pthread_mutex_unlock(&sq_lock);
		return false; /* nothing of b prepared: the caller releases it */
	}
	for (size_t off = 0; off < b->map.len; off += ENTRY_BYTES) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		size_t len = b->map.len - off < ENTRY_BYTES ? b->map.len - off : ENTRY_BYTES;
		prim_prep_release(sqe, (char *)b->map.addr + off, len);
		sqe->flags |= IOSQE_ASYNC; /* never do the work inline in the janitor */
		io_uring_sqe_set_data(sqe, b);
	}
	prepared += entries;
	/* from here b belongs to the ring until its last completion */
	pthread_mutex_unlock(&sq_lock);
	return true;
#else
	(void)b;
	return false;
#endif
}

/* Any thread: the ring takes blocks now -- set up, not gone, and no
 * failed submit waiting to be retried. */
static bool ring_takes(void)
{
	return ring_ready() && !ring_backlogged();
}

/* What release.c is lent (ring_start): the janitor pumps the blocks left
 * pending into the ring, so a kick wakes it. */
static const struct release_way ring_way = {
	.takes = ring_takes,
	.entries = ring_entries,
	.queue = ring_queue,
	.kick = janitor_wake,
};

void ring_submit(void)
{
#ifdef HAVE_LIBURING
	if (!ring_ready())
		return;
	pthread_mutex_lock(&sq_lock);
	submit_locked();
	pthread_mutex_unlock(&sq_lock);
#endif
}

#ifdef HAVE_LIBURING
/* Hand back every completion in the queue: memory only, no system call,
 * so it also works on a ring whose descriptor is gone. */
static void reap(void)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&ring, head, cqe) {
		release_entry_done(io_uring_cqe_get_data(cqe), cqe->res);
		seen++;
	}
	io_uring_cq_advance(&ring, seen);
	completed += seen;
}

/* Entries the kernel took and has not completed yet. */
static uint64_t in_kernel(void)
{
	return prepared - completed - io_uring_sq_ready(&ring);
}
#endif

bool ring_wait(uint64_t timeout_ms)
{
#ifdef HAVE_LIBURING
	bool waited = false;
	if (ring_ready() && !ring_backlogged() && in_kernel() > 0) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ms / 1000),
					       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
		/* without sq_lock: only this thread uses the ring, and a fork
		 * must not wait for the timeout */
		int rc = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
		if (rc < 0 && rc != -ETIME && rc != -EINTR) {
			pthread_mutex_lock(&sq_lock);
			ring_fail(rc);
			pthread_mutex_unlock(&sq_lock);
		} else {
			waited = true;
		}
	}
	if (mapped)
		reap();
	return waited; /* false: the caller waits elsewhere (never a spin) */
#else
	(void)timeout_ms;
	return false;
#endif
}

#ifdef HAVE_LIBURING
/* sq_lock held: unmap our view of the ring.  Its descriptor number, if we
 * still had one, is closed only while it is still the ring's: the program
 * may have closed it and opened something else under that number. */
static void unmap_locked(bool fd_is_ours)
{
	if (!fd_is_ours)
		ring.ring_fd = -1;
	io_uring_queue_exit(&ring);
	mapped = false;
}

static bool plain_fd_is_ring(void)
{
	struct stat st;
	return ring.ring_fd >= 0 && fstat(ring.ring_fd, &st) == 0 && st.st_dev == plain_st.st_dev &&
	       st.st_ino == plain_st.st_ino && st.st_rdev == plain_st.st_rdev;
}
#endif

void ring_collect(void)
{
#ifdef HAVE_LIBURING
	struct hp_block *dropped[RING_ENTRIES];
	unsigned n = 0;

	if (!gone || !mapped)
		return;
	pthread_mutex_lock(&sq_lock);
	/* entries the kernel never took: nothing will ever run them */
	unsigned khead = IO_URING_READ_ONCE(*ring.sq.khead);
	for (unsigned i = khead; i != ring.sq.sqe_tail && n < RING_ENTRIES; i++)
		dropped[n++] = (struct hp_block *)(uintptr_t)ring.sq.sqes[i & ring.sq.ring_mask].user_data;
	ring.sq.sqe_head = ring.sq.sqe_tail = khead; /* forgotten */
	prepared -= n;
	pthread_mutex_unlock(&sq_lock);
	for (unsigned i = 0; i < n; i++)
		release_entry_done(dropped[i], -ECANCELED);
	reap();
	if (in_kernel() > 0 && hp_now_ms() - gone_at_ms <= GONE_GRACE_MS)
		return; /* running: their completions come into the memory we keep */
	if (in_kernel() > 0) {
		hp_log(1, "io_uring gone with %llu completions missing%s: their blocks stay mapped",
		       (unsigned long long)in_kernel(),
		       IO_URING_READ_ONCE(*ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW ?
		       " (kept aside by the kernel, the completion queue was full)" : "");
		release_abandon_ring();
	}
	pthread_mutex_lock(&sq_lock);
	unmap_locked(false); /* the number, if any, is not ours any more */
	pthread_mutex_unlock(&sq_lock);
#endif
}

bool ring_collecting(void)
{
#ifdef HAVE_LIBURING
	return gone && mapped;
#else
	return false;
#endif
}

/* The lock is taken around fork so the janitor is not mid-submit; the
 * child drops its view of the parent's ring without touching the queues. */
void ring_fork(int phase)
{
#ifdef HAVE_LIBURING
	fork_mutex(&sq_lock, phase);
	if (phase == FORK_CHILD && mapped)
		unmap_locked(!registered && plain_fd_is_ring()); /* our view, our fd only */
	if (phase == FORK_CHILD) {
		gone = registered = false;
		prepared = completed = 0;
	}
#endif
	if (phase == FORK_CHILD) {
		atomic_store(&ready, false);
		atomic_store(&backlogged, false);
		atomic_store(&hp_counters[HP_STAT_URING_ACTIVE], 0);
	}
}
