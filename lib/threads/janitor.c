/* The janitor: hpalloc's background thread for releases, decay, reload and
 * stats, and its schedule (the populate workers are populate.c's).
 *
 * Started when there is work for it, never before: by the first huge block
 * the process maps (heap.c; again in a forked child, by its own first
 * one).  glibc's malloc starts no thread, and a process with a thread it
 * did not start cannot unshare(CLONE_NEWUSER) (bwrap, rootless containers,
 * browser sandboxes) -- a process under the preload library whose
 * allocations all stay below the threshold must remain a process of one
 * thread.  Until its first huge block a process therefore has no ring
 * (nothing to release), no cache to decay, and:
 *   - no live reload: it uses the knobs as its first hp_* call (the preload
 *     library: its start) read them from the environment and the control
 *     directory; hp_control_reload() reads the directory again on demand.
 *     The janitor polls from its start on, so a process sees changes from
 *     its first huge block on.  (Routing by size never needed a thread: the
 *     threshold in force is the one read last.)
 *   - no published entry: `hpctl stats` lists a process from its first
 *     huge block on -- before, it has nothing of hpalloc's to show, and
 *     `hpctl -p PID` cannot reach it.
 *
 * It owns the io_uring (sets it up, prepares, submits and reaps: ring.c
 * says why no other thread touches it) and, at least every TICK_MS, does
 * the work that must stay off the allocation path: control directory
 * polling (control.c), the cache's watch (cache_watch: its decay and
 * bounds, the memory cgroup and resident memory they follow -- cache.c
 * decides, the janitor only calls), stats publishing (publish.c),
 * releasing what other threads left to it (release_pump), and
 * resubmitting a backlogged ring.  It waits on the ring while the kernel
 * has entries of it, else on a condition variable (janitor_wake).
 *
 * If the thread cannot be created (a pids cgroup, RLIMIT_NPROC), there is
 * no ring either -- nobody would reap it -- and every release is
 * synchronous; the cache decays on the free path instead (heap.c), live
 * reload of the control directory is off.  It is not tried again.  The
 * gauges janitor_active and uring_active say which it is. */
#include "../core/internal.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#define TICK_MS 250
/* While a bound watches (cache_watch says so: cache_rss_max, or a memory
 * cgroup's limit with something cached) -- as often as Dask's memory
 * monitor looks. */
#define WATCH_TICK_MS 100
#define BACKLOG_RETRY_MS 5 /* a failed submit is retried this soon */
#define NAME "hpalloc-janitor" /* top -H, ps -L; at most 15 characters */

static _Atomic bool running;
/* Set once a start was tried (again 0 in a forked child); forbidden: hpctl
 * (lifecycle_tool_mode) never gets one. */
static _Atomic bool start_tried, forbidden;
static __thread bool on_janitor; /* this thread is the janitor */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static bool wake_pending;

bool janitor_running(void)
{
	return atomic_load_explicit(&running, memory_order_acquire);
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
	pthread_mutex_lock(&wake_lock);
	if (!wake_pending)
		pthread_cond_timedwait(&wake_cond, &wake_lock, &ts);
	wake_pending = false;
	pthread_mutex_unlock(&wake_lock);
}

/* Soon again when a submit is to be retried or a gone ring still has
 * completions to hand back; in WATCH_TICK_MS when a bound watches. */
static uint64_t next_wait_ms(uint64_t deadline, bool watch)
{
	bool soon = ring_backlogged() || ring_collecting();
	uint64_t now = hp_now_ms(), cap = soon ? BACKLOG_RETRY_MS : watch ? WATCH_TICK_MS : TICK_MS;
	uint64_t wait = deadline > now ? deadline - now : 1;
	return wait < cap ? wait : cap;
}

static void *janitor_main(void *arg)
{
	(void)arg;
	hp_inside = 1; /* all of this thread is hpalloc's own code */
	on_janitor = true;
	pthread_setname_np(pthread_self(), NAME);
	/* before the first publish_update(): janitor_start() stores it only
	 * once pthread_create() returns, and this thread may publish first */
	atomic_store_explicit(&hp_counters[HP_STAT_JANITOR_ACTIVE], 1, memory_order_relaxed);
	ring_start();
	for (;;) {
		uint64_t deadline;
		control_poll();
		bool watch = cache_watch(&deadline); /* decay, bounds: cache.c */
		thp_watch_splits(atomic_load_explicit(&hp_counters[HP_STAT_THP_LIVE_BYTES], memory_order_relaxed) ||
				 atomic_load_explicit(&hp_counters[HP_STAT_CACHED_BYTES], memory_order_relaxed));
		publish_update();
		release_pump();  /* what other threads left pending, into the ring */
		ring_submit();   /* what was prepared, and a backlog */
		ring_collect();  /* a ring that is gone gives back what it held */
		uint64_t wait = next_wait_ms(deadline, watch);
		if (!ring_wait(wait)) /* nothing the kernel is working on */
			wait_cond(wait);
	}
	return NULL;
}

void janitor_forbid(void)
{
	atomic_store(&forbidden, true);
}

/* Called on every huge mapping: one load once the janitor was tried. */
void janitor_start(void)
{
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;

	if (likely(atomic_load_explicit(&start_tried, memory_order_relaxed)) ||
	    atomic_load(&forbidden) || atomic_exchange(&start_tried, true))
		return;
	memcg_start(); /* the cache's bound holds from the first free on, janitor or not */
	/* pthread_create allocates (its thread's TLS): under the preload
	 * library that malloc must not come back into the huge path, which
	 * called us */
	hp_inside++;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	sigfillset(&all); /* signals are for the application's threads */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&thread, &attr, janitor_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	hp_inside--;
	if (rc != 0) {
		hp_log(1, "no janitor thread (%s): releases are synchronous, "
		       "cache decay happens on free, live reload is off", strerror(rc));
		return;
	}
	atomic_store_explicit(&running, true, memory_order_release);
	atomic_store_explicit(&hp_counters[HP_STAT_JANITOR_ACTIVE], 1, memory_order_relaxed);
}

void janitor_wake(void)
{
	if (!janitor_running() || on_janitor)
		return; /* the janitor's own work is looked at before it waits */
	pthread_mutex_lock(&wake_lock);
	wake_pending = true;
	pthread_cond_signal(&wake_cond);
	pthread_mutex_unlock(&wake_lock);
}

/* The child has no janitor: its first huge block starts one of its own. */
void janitor_fork(int phase)
{
	fork_mutex(&wake_lock, phase);
	if (phase != FORK_CHILD)
		return;
	pthread_cond_init(&wake_cond, NULL);
	wake_pending = false;
	atomic_store(&running, false);
	atomic_store(&start_tried, false);
	atomic_store(&hp_counters[HP_STAT_JANITOR_ACTIVE], 0);
}

/* ---- the threads layer joins the core (internal.h: "the layers above join") ------- */

static void threads_fork(int phase)
{
	/* the order their locks nest in: sq_lock, wake_lock, pop_lock */
	static void (*const hooks[])(int) = {ring_fork, janitor_fork, populate_fork};
	fork_in_order(hooks, sizeof(hooks) / sizeof(hooks[0]), phase);
}

static const struct hp_part threads_part = {
	.fork = threads_fork,
	.tool_mode = janitor_forbid,
};

static const struct hp_background threads_background = {
	.start = janitor_start,
	.wake = janitor_wake,
	.running = janitor_running,
	.fresh = populate_fresh,
	.forget = populate_forget,
};

const int hp_threads_joins = 1; /* the anchor AM_LDFLAGS names */

__attribute__((constructor)) static void threads_join(void)
{
	hp_join_background(&threads_background);
	hp_join(SLOT_THREADS, &threads_part);
}
