/* The fork-worker idiom on hugetlb pages, with the default knobs
 * (mode=auto): the parent allocates an array, forks, and a child reads
 * it -- the fork-time contents -- while the parent rewrites it, or the
 * child writes its own copy.  Every such write to a MAP_PRIVATE hugetlb
 * block shared with a child needs a free pool page for the copy.  Before
 * the fix mode=auto took the last free pages of the pool (8 MiB on a
 * 4-page pool): the parent's write then took the page away from the child
 * (the kernel's unmap_ref_private), which died of SIGBUS at its next read,
 * and a child's own write died at once.  Now mode=auto takes hugetlb pages
 * only while the pool keeps a free page for the copy of every private
 * hugetlb page the process maps (else the block is THP, copied like any
 * memory): no child dies, each reads its snapshot.  With room in the pool
 * the block is hugetlb, and the copies come from that room. */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (8 * MiB)
#define PAGES (SIZE / (2 * MiB))

enum child_does { CHILD_READS, CHILD_WRITES };

/* The child waits until the parent has written (fd), then reads its
 * snapshot (seed 1), or writes its own copy and reads that back. */
static int child(const unsigned char *a, int fd, enum child_does what)
{
	char go;
	if (read(fd, &go, 1) != 1)
		return 10;
	if (harness_check(a, SIZE, 1) != SIZE_MAX)
		return 11; /* not the fork-time contents */
	if (what == CHILD_WRITES) {
		harness_fill((void *)a, SIZE, 3);
		if (harness_check(a, SIZE, 3) != SIZE_MAX)
			return 12;
	}
	return 0;
}

static void expect_exit0(pid_t pid)
{
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("child killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	if (WEXITSTATUS(status))
		fail_msg("child exited %d (11: it did not read its fork-time snapshot)",
			 WEXITSTATUS(status));
}

/* Fork `children` children at once (as a Pool does), the parent rewrites
 * a when parent_writes, then the children go. */
static void fork_workers(unsigned char *a, int children, bool parent_writes, enum child_does what)
{
	int fds[2];
	pid_t pid[4];
	assert_true(children <= 4);
	harness_fill(a, SIZE, 1);
	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	for (int i = 0; i < children; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			close(fds[1]);
			_exit(child(a, fds[0], what));
		}
	}
	close(fds[0]);
	if (parent_writes)
		harness_fill(a, SIZE, 2);
	for (int i = 0; i < children; i++)
		assert_int_equal(write(fds[1], "g", 1), 1);
	close(fds[1]);
	for (int i = 0; i < children; i++)
		expect_exit0(pid[i]);
	assert_filled(a, SIZE, parent_writes ? 2 : 1); /* the children's writes stay theirs */
}

static int backend_of(const void *p)
{
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	return b.backend;
}

static void free_and_check_pool(void *a, long pages)
{
	hp_free(a);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), pages); /* nothing held */
}

/* 8 MiB on a 4-page pool: the reproduction. */
static void test_parent_writes_pool_without_room(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, PAGES, true);
	unsigned char *a = hp_malloc(SIZE);
	assert_non_null(a);
	fork_workers(a, 1, true, CHILD_READS);
	free_and_check_pool(a, PAGES);
}

static void test_child_writes_pool_without_room(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, PAGES, true);
	unsigned char *a = hp_malloc(SIZE);
	assert_non_null(a);
	fork_workers(a, 2, false, CHILD_WRITES);
	free_and_check_pool(a, PAGES);
}

/* Room for the block and its copies: hugetlb pages, and the parent's
 * rewrite after forking several children takes one copy per page. */
static void test_hugetlb_with_room_for_the_copies(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 2 * PAGES, true);
	unsigned char *a = hp_malloc(SIZE);
	assert_non_null(a);
	assert_int_equal(backend_of(a), HP_BACKEND_HUGETLB);
	fork_workers(a, 3, true, CHILD_READS);
	fork_workers(a, 1, false, CHILD_WRITES);
	free_and_check_pool(a, 2 * PAGES);
}

/* A second block may not take the room the first one's copies need: with
 * 12 pages, one 8 MiB hugetlb block (4 + 4 of room), then a private and a
 * shared 8 MiB block elsewhere, then fork and rewrite the first. */
static void test_later_blocks_keep_the_room(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, 3 * PAGES, true);
	unsigned char *a = hp_malloc(SIZE);
	assert_non_null(a);
	assert_int_equal(backend_of(a), HP_BACKEND_HUGETLB);
	unsigned char *b = hp_malloc(SIZE);
	assert_non_null(b);
	void *s = hp_shared_alloc(SIZE, 0, NULL);
	assert_non_null(s);
	memset(b, 5, SIZE);
	memset(s, 5, SIZE);
	fork_workers(a, 1, true, CHILD_READS);
	assert_int_equal(hp_shared_free(s), 0);
	hp_free(b);
	free_and_check_pool(a, 3 * PAGES);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_parent_writes_pool_without_room),
		HTEST(test_child_writes_pool_without_room),
		HTEST(test_hugetlb_with_room_for_the_copies),
		HTEST(test_later_blocks_keep_the_room),
	};
	harness_init(argc, argv);
	return harness_run("fork_cow", tests, ARRAY_SIZE(tests));
}
