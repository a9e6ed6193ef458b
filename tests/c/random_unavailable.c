/* A file written in a shared directory without the kernel's random source
 * (lib/door/prim.c prim_random; issue 46's textfile, the stats entries): a
 * kernel before 3.17, a seccomp filter or a pool not yet initialised
 * refuses getrandom.  syscall(2) is interposed (the executable comes
 * first in symbol lookup) to refuse it, and securedir_write_atomic still
 * writes every file whole under its name, its temporary created
 * exclusively under a name of the fallback (clock, pid, a counter), none
 * left behind -- also with getrandom back, and with two writers of one
 * file at once, whose fallback names must differ. */
#include "harness.h"
#include "../../lib/core/private.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic bool refuse_getrandom;
static _Atomic int getrandom_calls;

long syscall(long number, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	long a[6];

	va_start(ap, number);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (number == SYS_getrandom) {
		getrandom_calls++;
		if (refuse_getrandom) {
			errno = ENOSYS;
			return -1;
		}
	}
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static char dir[256];

static int open_dir(void)
{
	snprintf(dir, sizeof(dir), "%s/random-XXXXXX", getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(dir));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* The names in the directory: exactly want, or the test fails. */
static void only(const char *want)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	assert_non_null(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (strcmp(e->d_name, want) != 0)
			fail_msg("%s left in %s beside %s", e->d_name, dir, want);
		n++;
	}
	closedir(d);
	assert_int_equal(n, 1);
}

static void reads_back(int dirfd, const char *name, const char *want)
{
	char buf[256];
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

/* Writes in a row, as fast as they come (names from one clock tick). */
static void writes(int dirfd, int rounds)
{
	char text[64];
	for (int i = 0; i < rounds; i++) {
		snprintf(text, sizeof(text), "hpalloc_round %d\n", i);
		if (securedir_write_atomic(dirfd, "a.prom", text, strlen(text), 0644, false) != 0)
			fail_msg("write %d without the kernel's random source: %s", i, strerror(errno));
		reads_back(dirfd, "a.prom", text);
	}
	only("a.prom");
}

static void test_without_getrandom(void **state)
{
	(void)state;
	int dirfd = open_dir();
	refuse_getrandom = true;
	getrandom_calls = 0;
	writes(dirfd, 200);
	print_message("200 files written with getrandom refused %d times\n", getrandom_calls);
	if (getrandom_calls == 0)
		fail_msg("the writer never asked the kernel for random bytes: the case did not test");
	refuse_getrandom = false;
	writes(dirfd, 3);
	unlinkat(dirfd, "a.prom", 0);
	close(dirfd);
	rmdir(dir);
}

/* Two writers of one file at once (two threads; two processes are alike:
 * the pid is in the fallback too): without random names their temporaries
 * must still differ, or one finds the other's and fails. */
struct writer {
	int dirfd, id, failed, err;
};

static void *write_many(void *arg)
{
	struct writer *w = arg;
	char text[64];
	for (int i = 0; i < 500; i++) {
		snprintf(text, sizeof(text), "hpalloc_writer %d %d\n", w->id, i);
		if (securedir_write_atomic(w->dirfd, "a.prom", text, strlen(text), 0644, false) != 0) {
			w->failed++;
			w->err = errno;
		}
	}
	return NULL;
}

static void test_two_writers_without_getrandom(void **state)
{
	(void)state;
	int dirfd = open_dir();
	struct writer w[2] = {{dirfd, 0, 0, 0}, {dirfd, 1, 0, 0}};
	pthread_t t[2];
	refuse_getrandom = true;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, write_many, &w[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	refuse_getrandom = false;
	print_message("two writers, 500 files each, getrandom refused: %d and %d failed\n", w[0].failed,
		      w[1].failed);
	if (w[0].failed || w[1].failed)
		fail_msg("a writer failed without the kernel's random source: %s",
			 strerror(w[0].failed ? w[0].err : w[1].err));
	only("a.prom");
	unlinkat(dirfd, "a.prom", 0);
	close(dirfd);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_without_getrandom),
		HTEST(test_two_writers_without_getrandom),
	};
	harness_init(argc, argv);
	return harness_run("random_unavailable", tests, ARRAY_SIZE(tests));
}
