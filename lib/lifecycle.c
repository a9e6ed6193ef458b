/* Lazy initialisation, fork handling and exit.
 *
 * Nothing runs at load time: the first hp_* call reads the knobs, the
 * control directory, and starts the janitor thread.  Around fork every
 * internal lock is taken (so no other thread can hold one mid-update), and
 * the child re-initialises: new janitor, new io_uring. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

_Atomic int hp_initialized;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool once_done;
static bool tool_mode; /* set before init by hpctl: see lifecycle_tool_mode */
static __thread bool initializing; /* init itself calls hp_* functions */

uint64_t hp_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void prepare_fork(void)
{
	pthread_mutex_lock(&init_lock);
	control_fork(FORK_PREPARE);
	knobs_fork(FORK_PREPARE);
	pthread_mutex_lock(&hp_heap_lock);
	release_prepare_fork();
	stats_fork(FORK_PREPARE);
}

static void parent_after_fork(void)
{
	stats_fork(FORK_PARENT);
	release_parent_after_fork();
	pthread_mutex_unlock(&hp_heap_lock);
	knobs_fork(FORK_PARENT);
	control_fork(FORK_PARENT);
	pthread_mutex_unlock(&init_lock);
}

/* Cached hugetlb blocks are MAP_PRIVATE copies whose pool reservation
 * stays with the parent: reused here, a first touch could need a pool
 * page that is not there (SIGBUS).  The child drops them. */
static void drop_inherited_hugetlb(void)
{
	release_blocks(cache_take_backend(HP_BACKEND_HUGETLB)); /* no ring yet: synchronous */
}

static void child_after_fork(void)
{
	stats_fork(FORK_CHILD);
	release_child_after_fork();
	drop_inherited_hugetlb();
	pthread_mutex_init(&hp_heap_lock, NULL);
	knobs_fork(FORK_CHILD);
	control_fork(FORK_CHILD); /* also forgets the parent's per-process entry */
	/* the lock may have been taken by a thread that does not exist here */
	pthread_mutex_init(&init_lock, NULL);
	/* the next hp_* call starts a janitor of our own */
	atomic_store_explicit(&hp_initialized, 0, memory_order_release);
}

static void at_exit(void)
{
	publish_exit();
}

/* Fork handlers exist before anything can take init_lock: a fork while
 * another thread initialises must not leave the child a held lock. */
__attribute__((constructor)) static void register_fork_handlers(void)
{
	pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
}

void hp_init_slow(void)
{
	if (initializing)
		return;
	pthread_mutex_lock(&init_lock);
	if (atomic_load(&hp_initialized)) {
		pthread_mutex_unlock(&init_lock);
		return;
	}
	initializing = true;
	if (!once_done) {
		knobs_init(!tool_mode);
		control_init();
		atexit(at_exit);
		once_done = true;
	}
	/* initialised before the janitor runs: it calls hp_* functions itself,
	 * and must not wait for init_lock while holding its own locks */
	atomic_store_explicit(&hp_initialized, 1, memory_order_release);
	if (!tool_mode)
		janitor_start();
	initializing = false;
	pthread_mutex_unlock(&init_lock);
}

/* hpctl reads knobs and stats of other processes through the library:
 * it must not become an allocator itself -- no janitor, no ring, no
 * published entry, and nothing of its own environment in the knobs it
 * reports.  Called before the first hp_* call. */
void lifecycle_tool_mode(void)
{
	pthread_mutex_lock(&init_lock);
	tool_mode = true;
	pthread_mutex_unlock(&init_lock);
	publish_disable();
}

const char *hp_version(void)
{
#ifdef PACKAGE_VERSION
	return PACKAGE_VERSION;
#else
	return "0.1.0";
#endif
}
