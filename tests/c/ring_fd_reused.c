/* The program closes hpalloc's ring descriptor and the number is reused by
 * a file of its own (as `exec 3>file` in a shell does).  Main before the
 * fix: the janitor went on entering "its" ring under that number -- for a
 * regular file io_uring_enter fails (EOPNOTSUPP) and the janitor spun with
 * the freed block stuck; a forked child's fork handler closed the number
 * (taking the program's file away from the child); and for another
 * io_uring under that number, the janitor submitted *that* ring's
 * entries.  Now:
 *   - registered (the default since Linux 5.18) there is no number to
 *     reuse: a file or a ring the program opens is never touched;
 *   - with a plain ring fd (refused registration, as before 5.18) a number
 *     reused by a file that is no io_uring is noticed (EOPNOTSUPP): the
 *     ring is given up, nothing spins, the block is released, and a forked
 *     child closes nothing of the program's.  (A number reused by another
 *     io_uring cannot be told from ours there: not tested, ring.c says so.)
 * The file stays as it was, in the parent and in a forked child. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"
#include "ring_util.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE RING_UTIL_SIZE
#define CONTENT "the program's own file\n"

/* Close hpalloc's ring descriptor if it has one, so that the next
 * descriptor the program opens gets its number.  That number, or -1. */
static int close_ring_fd(bool need_one)
{
	int first;
	int n = fault_fds_linking(RING_UTIL_URING, &first);
	if (n > 1 || (need_one && n != 1)) {
		cancel_say("FAIL: %d ring descriptors: the test did not test\n", n);
		exit(1);
	}
	if (n == 1)
		close(first);
	return first;
}

/* The janitor opens descriptors of its own for a moment now and then (the
 * control directory, the stats entry, /proc/self/statm), so the freed
 * number may be taken when the program opens its file: open again, keeping
 * the extra descriptors until the number is the program's, then close them.
 * open_one() returns a descriptor or -1; the one with the number, the last
 * one opened after 32 tries, or -1. */
static int open_at_number(int was, int (*open_one)(void *), void (*close_one)(void *, int), void *arg)
{
	int extra[32], n = 0, fd;
	while ((fd = open_one(arg)) >= 0 && was >= 0 && fd != was && n < 32) {
		extra[n++] = fd;
		harness_sleep_ms(1);
	}
	while (n > 0)
		close_one(arg, extra[--n]);
	return fd;
}

static int open_file(void *arg)
{
	char path[] = "/tmp/hpalloc-reused.XXXXXX";
	(void)arg;
	int fd = mkstemp(path);
	if (fd >= 0)
		unlink(path);
	return fd;
}

static void close_file(void *arg, int fd)
{
	(void)arg;
	close(fd);
}

static bool same_file(int fd, const struct stat *want)
{
	struct stat st;
	return fstat(fd, &st) == 0 && st.st_dev == want->st_dev && st.st_ino == want->st_ino;
}

/* The descriptor still names the file in a forked child (hpalloc's fork
 * handler ran there). */
static int child_keeps(int fd, const struct stat *want)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(same_file(fd, want) ? 0 : 3);
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		cancel_say("FAIL: a forked child lost descriptor %d, the program's file\n", fd);
		return 1;
	}
	return 0;
}

static int reuse_by_file(bool plain_fd)
{
	char back[64];
	struct stat want;
	int bad = 0;

	if (ring_util_uring_or_skip())
		return 77;
	if (plain_fd)
		fault_register_ring(EINVAL); /* as a kernel before 5.18 */
	char *a = ring_util_block_in_ring();
	if (!a)
		return 1;
	int was = close_ring_fd(plain_fd);
	int fd = open_at_number(was, open_file, close_file, NULL);
	if (fd < 0 || write(fd, CONTENT, strlen(CONTENT)) < 0 || fstat(fd, &want) != 0)
		return 1;
	if (was >= 0 && fd != was) {
		cancel_say("FAIL: the file got fd %d, not the ring's %d: the test did not test\n", fd, was);
		return 1;
	}
	fault_submit(0, 0); /* submits would work again: only the number changed */
	bad |= child_keeps(fd, &want);
	bad |= ring_util_no_spin("with the ring's number reused by a file");
	cancel_watchdog(20, "hp_release_drain with the ring's number reused by a file");
	hp_release_drain();
	for (int i = 0; i < 8; i++) {
		char *b = hp_malloc(SIZE);
		b[0] = 1;
		hp_free(b);
		hp_release_drain();
		if (harness_mapped(b, SIZE) != 0) {
			cancel_say("FAIL: a block freed after the reuse stayed mapped\n");
			bad = 1;
		}
	}
	cancel_watchdog_off();
	if (harness_mapped(a, SIZE) != 0) {
		cancel_say("FAIL: the block that was in the ring stayed mapped\n");
		bad = 1;
	}
	bad |= child_keeps(fd, &want);
	ssize_t n = pread(fd, back, sizeof(back), 0);
	struct stat now;
	if (!same_file(fd, &want) || fstat(fd, &now) != 0 || now.st_size != (off_t)strlen(CONTENT) ||
	    n != (ssize_t)strlen(CONTENT) || memcmp(back, CONTENT, strlen(CONTENT)) != 0) {
		cancel_say("FAIL: the program's file under the ring's old number changed\n");
		bad = 1;
	}
	close(fd);
	return bad;
}

static int child_reused_by_file(void)
{
	return reuse_by_file(false);
}

static int child_reused_by_file_plain_fd(void)
{
	return reuse_by_file(true);
}

/* Another io_uring of the program under the number, with an entry it has
 * prepared and published (SQ tail moved) but not submitted yet. */
/* The rings open_at_number() opened, one per try. */
struct rings {
	struct io_uring ring[33];
	int tries;
};

static int open_ring(void *arg)
{
	struct rings *r = arg;
	if (io_uring_queue_init(8, &r->ring[r->tries], 0) != 0)
		return -1;
	return r->ring[r->tries++].ring_fd;
}

static void close_ring(void *arg, int fd)
{
	struct rings *r = arg;
	for (int i = 0; i < r->tries; i++)
		if (r->ring[i].ring_fd == fd)
			io_uring_queue_exit(&r->ring[i]);
}

static int child_reused_by_ring(void)
{
	static struct rings rings;
	int bad = 0;

	if (ring_util_uring_or_skip())
		return 77;
	char *a = ring_util_block_in_ring();
	if (!a)
		return 1;
	int was = close_ring_fd(false);
	if (open_at_number(was, open_ring, close_ring, &rings) < 0)
		return 1;
	struct io_uring *mine = &rings.ring[rings.tries - 1];
	if (was >= 0 && mine->ring_fd != was) {
		cancel_say("FAIL: the program's ring got fd %d, not hpalloc's %d\n", mine->ring_fd, was);
		return 1;
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(mine);
	io_uring_prep_nop(sqe);
	mine->sq.sqe_head = mine->sq.sqe_tail;
	io_uring_smp_store_release(mine->sq.ktail, mine->sq.sqe_tail);
	unsigned head = *mine->sq.khead;
	fault_submit(0, 0);
	cancel_watchdog(20, "hp_malloc/hp_free with the ring's number reused by another ring");
	for (int i = 0; i < 8; i++) {
		char *b = hp_malloc(SIZE);
		b[0] = 1;
		hp_free(b);
	}
	harness_sleep_ms(1000); /* the janitor's retries and waits (every 5 to 250 ms) */
	if (*mine->sq.khead != head || io_uring_cq_ready(mine) != 0) {
		cancel_say("FAIL: hpalloc submitted the entries of the program's own io_uring "
			   "(its head moved by %u, %u completions)\n", *mine->sq.khead - head,
			   io_uring_cq_ready(mine));
		bad = 1;
	}
	cancel_watchdog(20, "hp_release_drain with the ring's number reused by another ring");
	hp_release_drain();
	cancel_watchdog_off();
	if (harness_mapped(a, SIZE) != 0) {
		cancel_say("FAIL: the block that was in the ring stayed mapped\n");
		bad = 1;
	}
	/* the program's entry was still there, for the program */
	if (!bad && (io_uring_enter((unsigned)mine->ring_fd, 1, 1, IORING_ENTER_GETEVENTS, NULL) != 1 ||
		     io_uring_cq_ready(mine) != 1)) {
		cancel_say("FAIL: the program's own submit did not find its entry\n");
		bad = 1;
	}
	io_uring_queue_exit(mine);
	return bad;
}

static const struct harness_child_case children[] = {
	{"reused_by_file", child_reused_by_file},
	{"reused_by_file_plain_fd", child_reused_by_file_plain_fd},
	{"reused_by_ring", child_reused_by_ring},
};

static void test_number_reused_by_a_file(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("reused_by_file");
}

static void test_plain_fd_reused_by_a_file(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("reused_by_file_plain_fd");
}

static void test_number_reused_by_another_ring(void **state)
{
	(void)state;
	harness_need_uring();
	harness_child_passes("reused_by_ring");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_number_reused_by_a_file),
		HTEST(test_plain_fd_reused_by_a_file),
		HTEST(test_number_reused_by_another_ring),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("ring_fd_reused", tests, ARRAY_SIZE(tests));
}
