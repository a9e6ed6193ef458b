/* See cancel_util.h. */
#include "cancel_util.h"
#include "fault.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int say_fd = -1, pipe_rd = -1;
static const char *volatile watchdog_why;

void cancel_say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 1;
	(void)!write(say_fd >= 0 ? say_fd : STDERR_FILENO, buf, (size_t)n);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void cancel_stderr_block(void)
{
	int p[2];
	char junk[4096];

	memset(junk, 'x', sizeof(junk));
	say_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 10);
	if (say_fd < 0 || pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
		abort();
	while (write(p[1], junk, sizeof(junk)) > 0)
		;
	while (write(p[1], junk, 1) > 0) /* to the last byte */
		;
	fcntl(p[1], F_SETFL, 0); /* blocking again: the next write waits */
	dup2(p[1], STDERR_FILENO);
	close(p[1]);
	pipe_rd = p[0];
	fcntl(pipe_rd, F_SETFL, 0);
}

static void *flow_main(void *arg)
{
	char buf[65536];
	(void)arg;
	while (read(pipe_rd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

void cancel_stderr_flow(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, flow_main, NULL) != 0)
		abort();
	pthread_detach(t);
	/* what is written from now on (a sanitizer's report too) is seen */
	dup2(say_fd, STDERR_FILENO);
}

static void *victim_main(void *arg)
{
	struct victim *v = arg;

	atomic_store(&v->tid, (int)syscall(SYS_gettid));
	v->result = v->call(v->arg);
	atomic_store(&v->returned, true);
	pthread_testcancel(); /* a pending cancel acts here, after the call */
	return NULL;
}

void cancel_victim_start(struct victim *v)
{
	atomic_store(&v->tid, 0);
	atomic_store(&v->returned, false);
	if (pthread_create(&v->thread, NULL, victim_main, v) != 0)
		abort();
	while (!atomic_load(&v->tid))
		sleep_ms(1);
}

bool cancel_victim_blocked_in(struct victim *v, long nr, unsigned ms)
{
	for (unsigned waited = 0; waited < ms; waited += 5) {
		if (fault_thread_syscall(atomic_load(&v->tid)) == nr) {
			sleep_ms(50); /* still there: it is waiting, not passing */
			if (fault_thread_syscall(atomic_load(&v->tid)) == nr)
				return true;
		}
		if (atomic_load(&v->returned))
			break;
		sleep_ms(5);
	}
	cancel_say("FAIL: the thread never blocked in system call %ld inside the call "
		   "(returned: %d): the test did not test\n", nr, (int)atomic_load(&v->returned));
	return false;
}

void cancel_victim_cancel(struct victim *v, void (*flow)(void))
{
	pthread_cancel(v->thread);
	sleep_ms(200); /* a cancellation point acts on it at once */
	if (flow)
		flow();
}

bool cancel_victim_join(struct victim *v)
{
	void *ret = NULL;
	cancel_watchdog(20, "pthread_join of the cancelled thread");
	pthread_join(v->thread, &ret);
	cancel_watchdog_off();
	return ret == PTHREAD_CANCELED;
}

int cancel_victim_in_log(struct victim *v, const char *what)
{
	int bad = 0;

	cancel_stderr_block();
	cancel_victim_start(v);
	if (!cancel_victim_blocked_in(v, 1 /* write */, 10000))
		return 1;
	cancel_victim_cancel(v, cancel_stderr_flow);
	if (!cancel_victim_join(v)) {
		cancel_say("FAIL: the thread was not cancelled at all\n");
		bad = 1;
	}
	if (!atomic_load(&v->returned)) {
		cancel_say("FAIL: the cancellation acted inside %s (it is a cancellation point)\n",
			   what);
		bad = 1;
	}
	return bad;
}

int cancel_control_file(const char *name, const char *text)
{
	char path[4096];
	const char *dir = getenv("HPALLOC_CONTROL_DIR");
	snprintf(path, sizeof(path), "%s/%s", dir ? dir : ".", name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) < 0 || close(fd) != 0) {
		cancel_say("cannot write %s\n", path);
		return -1;
	}
	return 0;
}

static void on_alarm(int sig)
{
	char buf[512];
	(void)sig;
	int n = snprintf(buf, sizeof(buf), "FAIL: %s did not return: a lock was left held\n",
			 watchdog_why ? watchdog_why : "?");
	(void)!write(say_fd >= 0 ? say_fd : STDERR_FILENO, buf, (size_t)n);
	_exit(1);
}

void cancel_watchdog(unsigned seconds, const char *why)
{
	watchdog_why = why;
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

void cancel_watchdog_off(void)
{
	alarm(0);
}

int cancel_fork_takes_every_lock(void)
{
	int status;

	cancel_watchdog(20, "fork() (its handler takes every hpalloc lock)");
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	cancel_watchdog_off();
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
		cancel_say("FAIL: fork: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}
