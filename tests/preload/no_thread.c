/* glibc's malloc starts no thread, and a process with a thread it did not
 * start cannot unshare(CLONE_NEWUSER) (bwrap, rootless containers, browser
 * sandboxes).  Under the preload library, a program whose allocations all
 * stay below the threshold must remain a process of one thread -- main
 * before the fix started the janitor in the library's constructor: two
 * threads, and unshare failed with EINVAL.  Its first huge block starts the
 * janitor (there is work for it from then on). */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	CHECK(d != NULL, "opendir /proc/self/task: %s", strerror(errno));
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Whether this kernel lets a process of one thread (a forked child is
 * one) make a user namespace at all; why not in why. */
static bool userns_allowed(char *why, size_t len)
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "waitpid");
	if (WEXITSTATUS(status) == 0)
		return true;
	snprintf(why, len, "this kernel refuses a user namespace to a process of one thread: %s",
		 strerror(WEXITSTATUS(status)));
	return false;
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=thp", "HPALLOC_THRESHOLD=1M", NULL};
	char why[256];

	preload_test_init(argc, argv, knobs, NULL);
	bool userns = userns_allowed(why, sizeof(why));
	for (size_t size = 16; size < 1 * MiB; size = size * 3 / 2 + 1) {
		char *p = malloc(size), *q = calloc(1, size);
		CHECK(p && q, "malloc/calloc of %zu", size);
		memset(p, 1, size);
		p = realloc(p, size * 2 < 1 * MiB ? size * 2 : size);
		CHECK(p != NULL, "realloc");
		free(p);
		free(q);
	}
	CHECK(threads() == 1, "%d threads after small allocations only: the preload library "
	      "started a thread without work for it", threads());
	if (userns)
		CHECK(unshare(CLONE_NEWUSER) == 0, "unshare(CLONE_NEWUSER) after small allocations: %s",
		      strerror(errno));
	else
		printf("SKIP(other): preload/no_thread: unshare: %s\n", why);
	char *big = malloc(4 * MiB); /* the first huge block: work for the janitor */
	CHECK(big && hpalloc_owns(big), "a 4 MiB block is not hpalloc's");
	memset(big, 1, 4 * MiB);
	CHECK(threads() >= 2 && hpalloc_stat("janitor_active") == 1,
	      "no janitor after the first huge block (%d threads)", threads());
	free(big);
	preload_pass("preload/no_thread");
}
