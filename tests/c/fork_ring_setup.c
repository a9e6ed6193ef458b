/* fork while the janitor is setting its io_uring up -- a program that forks
 * right after its first huge block (multiprocessing creating a Pool just
 * after the first large array).  The ring exists (descriptor, mapped
 * queues) but is not published yet.  The child must not keep that
 * half-made ring: its own janitor sets up a new one, so the inherited
 * descriptor and mappings would leak for the child's whole life (main
 * before the fix: the child had two io_uring descriptors).  The window is
 * held open by pausing the janitor right after io_uring_queue_init
 * (fault.c); the descriptors are counted in /proc/self/fd: the child, with
 * its own ring, has as many as the parent with its one (none where the
 * ring fd is registered, lib/threads/ring.c; one where it cannot be). */
#include "harness.h"
#include "fault.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int count_uring_fds(void)
{
	char path[300], target[256];
	struct dirent *e;
	int n = 0;
	DIR *d = opendir("/proc/self/fd");

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			n += strstr(target, "io_uring") != NULL;
		}
	}
	closedir(d);
	return n;
}

#define COUNTED 10 /* the grandchild's exit status: COUNTED + its descriptors */

/* The grandchild: its own janitor, its own ring, nothing else. */
static int child_counts(void)
{
	fault_ring_init_pause(0);
	hp_free(hp_malloc(4 * MiB)); /* starts this process's janitor */
	if (!harness_ring_ready_within(2000)) {
		fprintf(stderr, "child: its janitor set up no ring\n");
		return 2;
	}
	int n = count_uring_fds();
	return n < 0 ? 1 : COUNTED + n;
}

/* A fresh janitor (a freshly executed process: the first huge block starts
 * one), forked from while it sits between ring setup and publishing. */
static int forks_during_setup(void)
{
	int before = fault_ring_inits();
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	fault_ring_init_pause(200);
	hp_free(hp_malloc(4 * MiB));
	/* io_uring is usable (checked by the parent): a janitor that sets no
	 * ring up within 10 s is a failure, not a reason to skip */
	for (int i = 0; fault_ring_inits() == before; i++) {
		if (i > 10000) {
			fprintf(stderr, "the janitor set up no ring in 10 s\n");
			return 4;
		}
		harness_sleep_ms(1);
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0)
		_exit(child_counts());
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return 3;
	if (!WIFEXITED(status) || WEXITSTATUS(status) < COUNTED)
		return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	if (!harness_ring_ready_within(2000))
		return 4;
	int mine = count_uring_fds(), child = WEXITSTATUS(status) - COUNTED;
	if (child != mine) {
		fprintf(stderr, "child: %d io_uring descriptors, its parent with its one ring %d\n",
			child, mine);
		return 1;
	}
	return 0;
}

static const struct harness_child_case children[] = {
	{"forks_during_setup", forks_during_setup},
};

/* Each round in a freshly executed process: forked from this test program,
 * whose own janitor may be inside malloc at that moment, a child can inherit
 * a held allocator lock under ASan (GCC 12's sanitizer allocator has no fork
 * handlers; glibc's has), which says nothing about hpalloc. */
static void test_fork_during_ring_setup(void **state)
{
	char why[256], err[4096];
	(void)state;
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	for (int round = 0; round < 3; round++) {
		int rc = harness_run_child("forks_during_setup", (const char *const[]){NULL}, err,
					   sizeof(err));
		if (rc != 0)
			fail_msg("round %d: exit status %d:\n%s", round, rc, err);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_fork_during_ring_setup),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("fork_ring_setup", tests, ARRAY_SIZE(tests));
}
