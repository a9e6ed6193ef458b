/* Helpers of the cancellation tests (tests/c/cancel_*.c): a thread is
 * cancelled (deferred cancellation, the default) while it is blocked inside
 * an hp_* call, and the program then shows that the call was no
 * cancellation point and left no lock held.  Each test runs in a fresh
 * process (a child case) and writes its verdict through cancel_say(): its
 * standard error may be the full pipe the test blocks hpalloc on. */
#ifndef HP_TESTS_CANCEL_UTIL_H
#define HP_TESTS_CANCEL_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* The thread under test, as it reports itself. */
struct victim {
	void *(*call)(void *arg); /* the hp_* call(s); its result in ->result */
	void *arg;
	_Atomic int tid;          /* set first thing */
	_Atomic bool returned;    /* the call came back */
	void *result;
	pthread_t thread;
};

/* printf to the test's own standard error (saved before any redirection). */
void cancel_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Point fd 2 at a pipe nobody reads and fill it: the next write to standard
 * error (an hpalloc log line) blocks.  cancel_stderr_flow() starts reading
 * it (and throwing it away) so that blocked writes complete, and points
 * fd 2 back at the test's standard error. */
void cancel_stderr_block(void);
void cancel_stderr_flow(void);
/* Start v->call on a new thread (deferred cancellation, enabled).  After
 * the call the thread reaches a cancellation point of its own
 * (pthread_testcancel) and would otherwise exit normally. */
void cancel_victim_start(struct victim *v);
/* Wait up to ms for the victim to block in system call nr (1 write, 202
 * futex); false (said why) if it never did: the test would not test. */
bool cancel_victim_blocked_in(struct victim *v, long nr, unsigned ms);
/* pthread_cancel it, give the cancellation time to act (it would, at a
 * cancellation point), then let it go on: flow(), if given, unblocks it. */
void cancel_victim_cancel(struct victim *v, void (*flow)(void));
/* Join it (watchdog armed); true if it ended cancelled. */
bool cancel_victim_join(struct victim *v);
/* The whole run for a call that blocks writing a log line: standard error
 * blocked, v started and seen blocked in write(2), cancelled, standard
 * error flowing again, joined.  0 if the call returned to its caller and
 * the cancel acted after it; 1 (said why, naming the call what) if not. */
int cancel_victim_in_log(struct victim *v, const char *what);
/* Write name (text) into $HPALLOC_CONTROL_DIR: 0, or -1 (said why). */
int cancel_control_file(const char *name, const char *text);
/* Fail the process (exit 1) with why if it takes longer than seconds: a
 * call that waits for a lock a dead thread holds never returns. */
void cancel_watchdog(unsigned seconds, const char *why);
void cancel_watchdog_off(void);
/* fork() takes every lock of hpalloc first (its pthread_atfork handler):
 * it returns only if none is left held.  0, or 1 (said why). */
int cancel_fork_takes_every_lock(void);

#endif
