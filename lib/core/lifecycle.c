/* Lazy initialisation, fork handling and exit -- of the core, and of the
 * layers above it, which join it (hp_join, hp_join_background: internal.h
 * says how and why).
 *
 * Nothing runs at load time but the joins: the first hp_* call reads the
 * knobs and, once the control plane has joined, the control directory.  No thread is started here: the janitor comes with
 * the first huge block (janitor.c says why).  Initialisation reads files
 * and may log, with init_lock held: it is no cancellation point (see
 * HP_NOCANCEL_BEGIN).  Around fork every internal lock is taken (so no
 * other thread can hold one mid-update), and the child re-initialises; its
 * first huge block gives it a janitor and an io_uring of its own. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <time.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

_Atomic int hp_initialized;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool once_done;
static bool tool_mode; /* set before init by hpctl: see lifecycle_tool_mode */
static __thread bool initializing; /* init itself calls hp_* functions */
__thread unsigned hp_inside __attribute__((tls_model("initial-exec")));

/* The one test of secure execution (setuid/setgid, file capabilities,
 * AT_SECURE): there hpalloc honours no environment variable and no control
 * directory, which whoever started the process could have planted. */
bool hp_secure_exec(void)
{
	return getauxval(AT_SECURE) != 0;
}

int hp_secure_execution(void)
{
	HP_ERRNO_SAVE;
	int secure = hp_secure_exec();
	HP_ERRNO_RESTORE;
	return secure;
}

uint64_t hp_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void init_fork(int phase)
{
	fork_mutex(&init_lock, phase);
	if (phase == FORK_CHILD) /* the next hp_* call initialises the child */
		atomic_store_explicit(&hp_initialized, 0, memory_order_release);
}

/* ---- the layers above ---------------------------------------------------------------- */

static _Atomic(const struct hp_part *) parts[SLOT_COUNT];
_Atomic(const struct hp_background *) hp_background;

static const struct hp_part *part(enum hp_slot slot)
{
	return atomic_load_explicit(&parts[slot], memory_order_acquire);
}

static void init_part(const struct hp_part *p)
{
	initializing = true;
	hp_inside++; /* init reads files: their mallocs are libc's */
	if (p->init)
		p->init();
	hp_inside--;
	initializing = false;
}

void hp_join(enum hp_slot slot, const struct hp_part *p)
{
	pthread_mutex_lock(&init_lock);
	atomic_store_explicit(&parts[slot], p, memory_order_release);
	if (once_done) /* the core was initialised before this layer joined */
		init_part(p);
	if (tool_mode && p->tool_mode)
		p->tool_mode();
	pthread_mutex_unlock(&init_lock);
}

void hp_join_background(const struct hp_background *bg)
{
	atomic_store_explicit(&hp_background, bg, memory_order_release);
}

static void fork_part(enum hp_slot slot, int phase)
{
	const struct hp_part *p = part(slot);
	if (p && p->fork)
		p->fork(phase);
}

static void control_part_fork(int phase)
{
	fork_part(SLOT_CONTROL, phase);
}

static void threads_part_fork(int phase)
{
	fork_part(SLOT_THREADS, phase);
}

/* Every module's fork hook, in the order the code nests their locks; each
 * layer above in its slot (control: control, publish; threads: ring,
 * janitor, populate). */
static void (*const fork_hooks[])(int) = {
	init_fork, control_part_fork, knobs_fork, heap_fork, shared_fork,
	release_fork, threads_part_fork, stats_fork, memcg_fork, registry_fork,
};
#define NHOOKS (sizeof(fork_hooks) / sizeof(fork_hooks[0]))

/* Private hugetlb blocks larger than what their pool can still give a
 * fork's copies (policy_fork_short): the child dies of SIGBUS at its next
 * touch once either side writes.  Said once per process on stderr, at
 * every verbosity: hpalloc cannot prevent it, the user can.  One relaxed
 * load while the process has no hugetlb block; no lock (the pools' sysfs
 * files through prim.c); write(2), not stdio, is all a fork from any
 * context may do. */
static void warn_fork_copies(void)
{
	static _Atomic bool warned;
	size_t pagesize, pages;
	long room;

	if (!atomic_load_explicit(&hp_counters[HP_STAT_HUGETLB_LIVE_BYTES], memory_order_relaxed) ||
	    atomic_load_explicit(&warned, memory_order_relaxed) || !policy_fork_short(&pagesize, &pages, &room) ||
	    atomic_exchange(&warned, true))
		return;
	char line[400];
	int n = snprintf(line, sizeof(line),
			 "hpalloc[%d]: fork with %zu MiB of private hugetlb blocks (%zu pages of %zu kB) and "
			 "room for %ld pages in their pool: once either process writes them, the child can "
			 "die of SIGBUS (no pool page for the copy).  mode=auto keeps room for fork's copies "
			 "(HPALLOC_MODE=auto, or hpctl set mode=auto); or raise vm.nr_overcommit_hugepages.\n",
			 (int)getpid(), pages * pagesize >> 20, pages, pagesize >> 10, room);
	if (n > 0) {
		HP_NOCANCEL_BEGIN; /* fork is no cancellation point, write(2) is */
		ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
		(void)ignored;
		HP_NOCANCEL_END;
	}
}

static void prepare_fork(void)
{
	HP_ERRNO_SAVE; /* fork keeps errno as it found it until it fails */
	warn_fork_copies();
	HP_ERRNO_RESTORE;
	for (size_t i = 0; i < NHOOKS; i++)
		fork_hooks[i](FORK_PREPARE);
}

/* Unlocked innermost first; in the child, repaired innermost first, so
 * that heap_fork finds release.c and ring.c ready for a one-thread process. */
static void after_fork(int phase)
{
	for (size_t i = NHOOKS; i-- > 0;)
		fork_hooks[i](phase);
}

static void parent_after_fork(void)
{
	after_fork(FORK_PARENT);
}

static void child_after_fork(void)
{
	after_fork(FORK_CHILD);
}

static void at_exit(void)
{
	for (int slot = 0; slot < SLOT_COUNT; slot++) {
		const struct hp_part *p = part(slot);
		if (p && p->exit)
			p->exit();
	}
}

/* Fork handlers exist before anything can take init_lock: a fork while
 * another thread initialises must not leave the child a held lock. */
__attribute__((constructor)) static void register_fork_handlers(void)
{
	pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
}

static void init_locked(void)
{
	initializing = true;
	hp_inside++; /* init reads files: their mallocs are libc's */
	if (!once_done) {
		knobs_init(!tool_mode);
		for (int slot = 0; slot < SLOT_COUNT; slot++) {
			const struct hp_part *p = part(slot);
			if (p && p->init)
				p->init();
		}
		atexit(at_exit);
		once_done = true;
	}
	atomic_store_explicit(&hp_initialized, 1, memory_order_release);
	hp_inside--;
	initializing = false;
}

void hp_init_slow(void)
{
	HP_ERRNO_SAVE; /* control files and probes that are absent are no error */
	if (initializing)
		return;
	HP_NOCANCEL_BEGIN;
	pthread_mutex_lock(&init_lock);
	if (!atomic_load(&hp_initialized))
		init_locked();
	pthread_mutex_unlock(&init_lock);
	HP_NOCANCEL_END;
	HP_ERRNO_RESTORE;
}

/* hpctl reads knobs and stats of other processes through the library:
 * it must not become an allocator itself -- no janitor, no ring, no
 * published entry, and nothing of its own environment in the knobs it
 * reports.  Called before the first hp_* call. */
void lifecycle_tool_mode(void)
{
	pthread_mutex_lock(&init_lock);
	tool_mode = true;
	for (int slot = 0; slot < SLOT_COUNT; slot++) {
		const struct hp_part *p = part(slot);
		if (p && p->tool_mode)
			p->tool_mode();
	}
	pthread_mutex_unlock(&init_lock);
}

/* configure.ac's AC_INIT is the one place the version is written. */
const char *hp_version(void)
{
	return PACKAGE_VERSION;
}
