/* fork() under load with the preload library: 4 threads allocate, resize
 * and free small and huge blocks without pause while the main thread forks
 * 20 times.  Each child (one thread, a copy of every lock's state at the
 * fork) must find the blocks it inherited intact, free them, allocate huge
 * blocks that the kernel backs with huge pages, fork a grandchild doing the
 * same, and exit -- within a deadline, so a lock left held by a thread that
 * did not survive the fork fails the test instead of hanging it.  The
 * parent's own blocks stay intact whatever its children did with theirs.
 * The workers check every byte of their blocks: before a free, after a
 * realloc (min(old, new) of them), and a calloc's zeros. */
#include "common.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 4
#define FORKS 20
#define BIG (32 * MiB)

static _Atomic bool stop;

static void *fork_load_worker(void *arg)
{
	uint64_t x = 977 + (uintptr_t)arg;
	char *keep[8] = {0};
	size_t sizes[8] = {0};
	uint64_t seeds[8] = {0};

	while (!atomic_load(&stop)) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int i = (int)(x % 8);
		if (keep[i]) {
			size_t bad = first_wrong(keep[i], sizes[i], seeds[i]);
			CHECK(bad == SIZE_MAX, "worker block of %zu bytes changed from byte %zu",
			      sizes[i], bad);
			free(keep[i]);
		}
		seeds[i] = x >> 8;
		sizes[i] = x % 3 == 0 ? 2 * MiB + x % (8 * MiB) : 16 + x % 8000;
		bool zeroed = x % 2 == 0;
		keep[i] = zeroed ? calloc(1, sizes[i]) : malloc(sizes[i]);
		CHECK(keep[i] != NULL, "worker allocation");
		CHECK(!zeroed || all_zero(keep[i], sizes[i]), "calloc(1, %zu) not zeroed", sizes[i]);
		fill(keep[i], sizes[i], seeds[i]);
		if (x % 5 == 0) { /* across the threshold and back */
			size_t n = sizes[i] >= MiB ? 3000 : 3 * MiB;
			char *q = after_realloc(realloc(keep[i], n));
			CHECK(q != NULL, "worker realloc");
			size_t kept = sizes[i] < n ? sizes[i] : n, bad = first_wrong(q, kept, seeds[i]);
			CHECK(bad == SIZE_MAX, "worker realloc %zu -> %zu bytes: wrong from byte %zu",
			      sizes[i], n, bad);
			keep[i] = q;
			sizes[i] = n;
			fill(q, n, seeds[i]);
		}
	}
	for (int i = 0; i < 8; i++)
		free(keep[i]);
	return NULL;
}

/* In a child: the inherited blocks, then new ones, then a grandchild. */
static int child(char *big, char *small, int depth)
{
	/* a deadlock kills the child: SIGALRM, counted as failure */
	alarm(getenv("HPALLOC_TEST_VALGRIND") ? 600 : 30);
	if (!check(big, BIG, 42) || !check(small, 200, 43)) {
		fprintf(stderr, "FAIL: child %d: inherited contents differ\n", (int)getpid());
		return 1;
	}
	free(big);
	free(small);
	char *p = malloc(BIG), *s = malloc(100);
	if (!p || !s || !hpalloc_owns(p) || huge_bytes(p, BIG) < BIG) {
		fprintf(stderr, "FAIL: child %d: new block %p (%s) has %zu bytes on huge pages\n",
			(int)getpid(), (void *)p, p && hpalloc_owns(p) ? "hpalloc's" : "not hpalloc's",
			p ? huge_bytes(p, BIG) : 0);
		return 1;
	}
	fill(p, BIG, 42);
	fill(s, 100, 43);
	char *r = after_realloc(realloc(p, 2 * BIG));
	if (!r || !check(r, BIG, 42)) {
		fprintf(stderr, "FAIL: child %d: realloc\n", (int)getpid());
		return 1;
	}
	free(s);
	if (depth == 0) {
		char *g = malloc(BIG), *gs = malloc(200);
		fill(g, BIG, 42);
		fill(gs, 200, 43);
		pid_t pid = fork();
		if (pid == 0)
			_exit(child(g, gs, 1));
		int status;
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "FAIL: grandchild of %d failed\n", (int)getpid());
			return 1;
		}
		free(g);
		free(gs);
	}
	free(r);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=thp", NULL};
	pthread_t t[WORKERS];

	preload_test_init(argc, argv, knobs, NULL);
	for (long i = 0; i < WORKERS; i++)
		CHECK(pthread_create(&t[i], NULL, fork_load_worker, (void *)i) == 0, "pthread_create");
	int forks = getenv("HPALLOC_TEST_VALGRIND") ? FORKS / 4 : FORKS;
	for (int round = 0; round < forks; round++) {
		char *big = malloc(BIG), *small = malloc(200);
		CHECK(big && small && hpalloc_owns(big), "parent allocations");
		fill(big, BIG, 42);
		fill(small, 200, 43);
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0)
			_exit(child(big, small, 0));
		int status;
		CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d: child %s %d", round,
		      WIFEXITED(status) ? "exited" : "killed by signal",
		      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		CHECK(check(big, BIG, 42) && check(small, 200, 43), "parent's blocks changed");
		CHECK(huge_bytes(big, BIG) >= BIG, "parent's block left huge pages");
		free(big);
		free(small);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(t[i], NULL);
	preload_pass("preload/fork");
}
