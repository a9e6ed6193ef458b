/* A peer shrinks a shared block: another process that holds the
 * descriptor (every receiver does) calls ftruncate() on it.  Before the
 * fix the memfd was unsealed: the call succeeded, and every process
 * mapping the block died of SIGBUS at its next touch beyond the new end.
 * Now the block is sealed when it is made (F_SEAL_SHRINK | F_SEAL_GROW):
 * shrinking and growing fail with EPERM, the size stays, and the creator,
 * a receiver that mapped the descriptor and the peer itself read every
 * page intact.  On a hugetlb block (a pool with no page to spare) and on
 * a shmem block. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (8 * MiB)

/* The receiver: maps what it was sent, says so, waits for the peer to have
 * tried, then reads every page. */
static int receiver(int sock)
{
	int fd = harness_recv_fd(sock);
	size_t got = 0;
	const unsigned char *p = fd >= 0 ? hp_shared_map(fd, &got) : NULL;
	char go;
	if (!p || got != SIZE)
		return 10;
	if (write(sock, "m", 1) != 1 || read(sock, &go, 1) != 1)
		return 11;
	return harness_check(p, SIZE, 7) == SIZE_MAX ? 0 : 12;
}

/* The peer: shrinks (to half, to nothing) and grows the descriptor it was
 * given.  Exit 0 when every call failed with EPERM, else which succeeded. */
static int peer(int fd)
{
	static const off_t sizes[] = {SIZE / 2, 0, 2 * SIZE};
	for (int i = 0; i < 3; i++) {
		errno = 0;
		if (ftruncate(fd, sizes[i]) == 0)
			return 20 + i; /* the kernel let it */
		if (errno != EPERM)
			return 30 + i;
	}
	return 0;
}

static const char *peer_said(int code)
{
	switch (code) {
	case 0: return "every ftruncate failed with EPERM";
	case 20: return "ftruncate to half the size succeeded";
	case 21: return "ftruncate to 0 succeeded";
	case 22: return "ftruncate to twice the size succeeded";
	default: return "ftruncate failed with another errno than EPERM";
	}
}

static void expect_exit0(pid_t pid, const char *who)
{
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("%s killed by signal %d (%s)", who, WTERMSIG(status), strsignal(WTERMSIG(status)));
	if (WEXITSTATUS(status))
		fail_msg("%s exited %d", who, WEXITSTATUS(status));
}

/* A reader of p in a process of its own: a SIGBUS there is reported, not
 * the end of the test. */
static void read_in_child(const unsigned char *p, const char *who)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(harness_check(p, SIZE, 7) == SIZE_MAX ? 0 : 1);
	expect_exit0(pid, who);
}

static void peer_truncates(int backend)
{
	int fd = -1, sv[2];
	unsigned char *p = hp_shared_alloc(SIZE, 0, &fd);
	assert_non_null(p);
	struct hp_shared_info info;
	assert_int_equal(hp_shared_info(p, &info), 0);
	assert_int_equal(info.backend, backend);
	harness_fill(p, SIZE, 7);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fflush(NULL);
	pid_t rpid = fork();
	assert_true(rpid >= 0);
	if (rpid == 0) {
		close(sv[0]);
		hp_shared_free(p); /* it only knows what it was sent */
		_exit(receiver(sv[1]));
	}
	close(sv[1]);
	harness_send_fd(sv[0], fd);
	char mapped;
	assert_int_equal(read(sv[0], &mapped, 1), 1);

	pid_t ppid = fork(); /* holds the descriptor, as every receiver does */
	assert_true(ppid >= 0);
	if (ppid == 0)
		_exit(peer(fd));
	int status;
	assert_int_equal(waitpid(ppid, &status, 0), ppid);
	assert_true(WIFEXITED(status));
	int said = WEXITSTATUS(status);

	assert_int_equal(write(sv[0], "g", 1), 1);
	expect_exit0(rpid, "the receiver reading the block");
	read_in_child(p, "the creator's reader");
	close(sv[0]);
	if (said)
		fail_msg("the peer: %s", peer_said(said));
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, SIZE);
	assert_filled(p, SIZE, 7);
	assert_int_equal(hp_shared_free(p), 0);
}

static void test_peer_cannot_truncate_hugetlb_block(void **state)
{
	(void)state;
	harness_pool_or_skip(2 * MiB, SIZE / (2 * MiB), true); /* none to spare */
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	peer_truncates(HP_BACKEND_HUGETLB);
	assert_int_equal(harness_pool_available(2 * MiB), SIZE / (2 * MiB));
}

static void test_peer_cannot_truncate_shmem_block(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	peer_truncates(HP_BACKEND_THP);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_peer_cannot_truncate_hugetlb_block),
		HTEST(test_peer_cannot_truncate_shmem_block),
	};
	harness_init(argc, argv);
	return harness_run("shared_truncate", tests, ARRAY_SIZE(tests));
}
