/* hp_proc_marked: the processes started with a variable set (how
 * hpalloc.ray finds its Ray workers, published or not), read from /proc
 * by the library (lib/door/prim.c), never by its callers.
 *   - Children exec'ed (sleep) with the variable set, to a plain value
 *     behind a string of 8000 bytes (longer than prim's stack buffer), to
 *     an empty value and to one of 300 bytes, are listed with their value
 *     (the long one cut to HP_PROC_MARK_MAX - 1 bytes) and comm "sleep";
 *     one started with only look-alikes (VAR_OTHER=, VARX=, VAR without
 *     '=') is not, nor is this process, even after setenv(): it is the
 *     starting environment that counts.  Sorted by pid; errno unchanged.
 *   - Bad input fails with EINVAL and leaves *out and *count as they
 *     were: var NULL, empty, containing '='; out or count NULL. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char var[64];

static void name_var(void)
{
	snprintf(var, sizeof(var), "HP_TEST_MARK_%ld", (long)getpid());
}

/* A child running sleep with exactly env: its pid once it has exec'ed
 * (the pipe closes on exec: before that it still holds our environment). */
static pid_t start_sleeper(char *const *env)
{
	int p[2];
	char c;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = {"sleep", "60", NULL};
		execve("/bin/sleep", argv, env);
		execve("/usr/bin/sleep", argv, env);
		_exit(127);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 0);
	close(p[0]);
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static const struct hp_proc_mark *find(const struct hp_proc_mark *v, size_t n, long pid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].pid == pid)
			return &v[i];
	return NULL;
}

static void test_lists_the_marked(void **state)
{
	static char big[8010], plain[128], empty[128], longv[400], other[128], prefix[128], bare[128];
	struct hp_proc_mark *v = NULL;
	size_t n = 0;

	(void)state;
	name_var();
	memset(big, 'b', 8000);
	memcpy(big, "BIG=", 4);
	snprintf(plain, sizeof(plain), "%s=hello world", var);
	snprintf(empty, sizeof(empty), "%s=", var);
	snprintf(longv, sizeof(longv), "%s=", var);
	memset(longv + strlen(longv), 'x', 300);
	snprintf(other, sizeof(other), "%s_OTHER=no", var);
	snprintf(prefix, sizeof(prefix), "%sX=no", var);
	snprintf(bare, sizeof(bare), "%s", var);

	pid_t a = start_sleeper((char *[]){"PATH=/bin", big, plain, "Z=1", NULL});
	pid_t b = start_sleeper((char *[]){other, prefix, bare, "PATH=/bin", NULL});
	pid_t c = start_sleeper((char *[]){empty, NULL});
	pid_t d = start_sleeper((char *[]){longv, NULL});
	assert_int_equal(setenv(var, "self", 1), 0); /* not at our start: not seen */

	errno = 12345;
	int rc = hp_proc_marked(var, &v, &n);
	assert_int_equal(rc, 0);
	assert_int_equal(errno, 12345);
	assert_int_equal(n, 3);
	assert_non_null(v);
	for (size_t i = 1; i < n; i++)
		assert_true(v[i - 1].pid < v[i].pid);

	const struct hp_proc_mark *m = find(v, n, a);
	assert_non_null(m);
	assert_string_equal(m->value, "hello world");
	assert_string_equal(m->comm, "sleep");
	m = find(v, n, c);
	assert_non_null(m);
	assert_string_equal(m->value, "");
	assert_string_equal(m->comm, "sleep");
	m = find(v, n, d);
	assert_non_null(m);
	assert_int_equal(strlen(m->value), HP_PROC_MARK_MAX - 1);
	assert_int_equal(strspn(m->value, "x"), HP_PROC_MARK_MAX - 1);
	assert_null(find(v, n, b));
	assert_null(find(v, n, getpid()));
	free(v);

	/* gone: no longer listed; nobody marked: NULL and 0 */
	stop(a);
	stop(c);
	stop(d);
	assert_int_equal(hp_proc_marked(var, &v, &n), 0);
	assert_int_equal(n, 0);
	assert_null(v);
	stop(b);
	unsetenv(var);
}

static void test_bad_input(void **state)
{
	struct hp_proc_mark sentinel, *v = &sentinel;
	size_t n = 42;

	(void)state;
	name_var();
	const char *bad[] = {NULL, "", "A=B", "="};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		errno = 0;
		assert_int_equal(hp_proc_marked(bad[i], &v, &n), -1);
		assert_int_equal(errno, EINVAL);
		assert_ptr_equal(v, &sentinel);
		assert_int_equal(n, 42);
	}
	errno = 0;
	assert_int_equal(hp_proc_marked(var, NULL, &n), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(n, 42);
	errno = 0;
	assert_int_equal(hp_proc_marked(var, &v, NULL), -1);
	assert_int_equal(errno, EINVAL);
	assert_ptr_equal(v, &sentinel);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_lists_the_marked),
		HTEST(test_bad_input),
	};

	harness_init(argc, argv);
	return harness_run("proc_marked", tests, ARRAY_SIZE(tests));
}
