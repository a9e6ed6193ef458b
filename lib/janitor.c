/* The janitor: hpalloc's one background thread, and its schedule.
 *
 * Started by hp_init (again in a forked child, lazily).  It owns the
 * io_uring (sets it up, reaps its completions) and, at least every TICK_MS,
 * does the work that must stay off the allocation path: control directory
 * polling (control.c), cache decay (heap_expire), stats publishing
 * (publish.c), and resubmitting a backlogged ring.  It waits on the ring
 * when there is one (a NOP wakes it), else on a condition variable.
 *
 * If the thread cannot be created (a pids cgroup, RLIMIT_NPROC), there is
 * no ring either -- nobody would reap it -- and every release is
 * synchronous; the cache decays on the free path instead (heap.c), live
 * reload of the control directory is off.  The gauges janitor_active and
 * uring_active say which it is. */
#include "internal.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#define TICK_MS 250
#define BACKLOG_RETRY_MS 5 /* a failed submit is retried this soon */

static _Atomic bool running;
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

static uint64_t next_wait_ms(uint64_t deadline)
{
	uint64_t now = hp_now_ms(), cap = ring_backlogged() ? BACKLOG_RETRY_MS : TICK_MS;
	uint64_t wait = deadline > now ? deadline - now : 1;
	return wait < cap ? wait : cap;
}

static void *janitor_main(void *arg)
{
	(void)arg;
	hp_inside = 1; /* all of this thread is hpalloc's own code */
	/* before the first publish_update(): janitor_start() stores it only
	 * once pthread_create() returns, and this thread may publish first */
	atomic_store_explicit(&hp_counters[HP_STAT_JANITOR_ACTIVE], 1, memory_order_relaxed);
	ring_start();
	for (;;) {
		uint64_t deadline;
		control_poll();
		heap_expire(&deadline);
		publish_update();
		ring_retry();
		uint64_t wait = next_wait_ms(deadline);
		if (ring_ready())
			ring_wait(wait);
		else
			wait_cond(wait);
	}
	return NULL;
}

void janitor_start(void)
{
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	sigfillset(&all); /* signals are for the application's threads */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&thread, &attr, janitor_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
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
	if (!janitor_running())
		return;
	if (ring_ready()) {
		ring_wake();
		return;
	}
	pthread_mutex_lock(&wake_lock);
	wake_pending = true;
	pthread_cond_signal(&wake_cond);
	pthread_mutex_unlock(&wake_lock);
}

/* The child has no janitor: the next hp_* call starts one of its own. */
void janitor_fork(int phase)
{
	fork_mutex(&wake_lock, phase);
	if (phase != FORK_CHILD)
		return;
	pthread_cond_init(&wake_cond, NULL);
	wake_pending = false;
	atomic_store(&running, false);
	atomic_store(&hp_counters[HP_STAT_JANITOR_ACTIVE], 0);
}
