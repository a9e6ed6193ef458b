/* A program protects part of a large buffer it got from malloc & co, frees
 * it as it is, and allocates again (issue 45).  glibc unmaps such a buffer
 * on free, and the program runs; under the preload library the cache gave
 * the same block back, read-only and PROT_NONE pages included, and the
 * program died of a SIGSEGV at its next write -- or inside calloc, whose
 * zeroing of a reused block wrote there first.  Here every such block is
 * written whole (in a child first, which says where a write faulted):
 * reused whole (posix_memalign, malloc, calloc), cut from a larger one,
 * and joined from pieces each protected in part. */
#include "common.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (64 * MiB)
#define GUARD (2 * MiB)

static char *volatile child_base;

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "child: signal %d writing byte %td of the block\n", sig,
			 (char *)si->si_addr - child_base);
	(void)!write(2, msg, (size_t)n);
	_exit(3);
}

/* Every byte of [p, p + len) takes a write: tried in a child, then here. */
static void writable(char *p, size_t len, uint64_t seed, const char *what)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		child_base = p;
		for (size_t off = 0; off < len; off += 4 * KiB)
			((volatile char *)p)[off] = 1;
		((volatile char *)p)[len - 1] = 1;
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: a write to the %zu-byte block faulted", what,
	      len);
	fill(p, len, seed);
	CHECK(check(p, len, seed), "%s: contents", what);
}

/* p (len bytes) filled, a read-only page at ro and 2 MiB PROT_NONE at none,
 * then freed as it is. */
static void protect_and_free(char *p, size_t len, size_t ro, size_t none)
{
	CHECK(p != NULL, "allocation of %zu bytes", len);
	fill(p, len, 1);
	CHECK(mprotect(p + ro, 4 * KiB, PROT_READ) == 0, "mprotect read-only");
	CHECK(mprotect(p + none, 2 * MiB, PROT_NONE) == 0, "mprotect none");
	free(p);
}

/* The program: posix_memalign, a page made read-only, free,
 * malloc of the same size. */
static void test_reused(void)
{
	void *old = NULL;
	CHECK(posix_memalign(&old, 64, BIG) == 0, "posix_memalign(64, 64 MiB)");
	CHECK(hpalloc_owns(old), "posix_memalign(64 MiB) is not hpalloc's");
	protect_and_free(old, BIG, 8 * MiB + 4 * KiB, 30 * MiB);
	char *p = malloc(BIG);
	CHECK(p == old, "malloc(64 MiB) got %p, not the cached %p", (void *)p, old);
	writable(p, BIG, 2, "malloc, reused");
	/* calloc zeroes a reused block: its own writes must not fault */
	protect_and_free(p, BIG, 0, 62 * MiB);
	char *z = calloc(1, BIG);
	CHECK(z == p, "calloc(64 MiB) got %p, not the cached %p", (void *)z, (void *)p);
	CHECK(all_zero(z, BIG), "calloc of a reused block is not zeroed");
	writable(z, BIG, 3, "calloc, reused");
	free(z);
}

/* A 200 MiB block protected in front and behind, freed: a 20 MiB request
 * is cut from its front, the rest serves another; both protected in part
 * again and freed, the pieces joined serve nearly all of it. */
static void test_cut_and_joined(void)
{
	size_t len = 200 * MiB, rest_len = len - 20 * MiB - GUARD;
	hpalloc_cache_flush(); /* test_reused's block would serve the cut */
	char *old = malloc(len);
	protect_and_free(old, len, 12 * MiB, 120 * MiB);
	char *front = malloc(20 * MiB);
	CHECK(front == old, "malloc(20 MiB) was not cut from the cached block");
	writable(front, 20 * MiB, 4, "cut, front");
	char *rest = malloc(rest_len);
	CHECK(rest == old + 20 * MiB + GUARD, "malloc(%zu) is not the cached rest", rest_len);
	writable(rest, rest_len, 5, "cut, rest");
	CHECK(mprotect(front + 2 * MiB, 4 * KiB, PROT_NONE) == 0, "mprotect front");
	CHECK(mprotect(rest + 60 * MiB, 8 * MiB, PROT_READ) == 0, "mprotect rest");
	free(front);
	free(rest);
	char *p = malloc(len - 4 * MiB);
	CHECK(p == old, "malloc(%zu) was not joined from the cached pieces", len - 4 * MiB);
	writable(p, len - 4 * MiB, 6, "joined");
	free(p);
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=thp", "HPALLOC_CACHE_MAX=1G", "HPALLOC_CACHE_DECAY_MS=60000",
					    "HPALLOC_POPULATE=0", NULL};
	preload_test_init(argc, argv, knobs, NULL);
	test_reused();
	test_cut_and_joined();
	preload_pass("preload/protect");
}
