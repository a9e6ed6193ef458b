/* Shared blocks (hp_shared_*): huge pages another process maps by
 * descriptor.  Checked against smaps (hugetlb, THP shmem), pool counts and
 * /proc/self/maps; a short pool fails or falls back at creation, never a
 * SIGBUS; memfd_create refused (seccomp) and fork under way lose nothing. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (8 * MiB)

static void hugetlb_knobs(const char *fallback)
{
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", fallback);
}

/* The child maps what it received and swaps the pattern. */
static int child_side(int sock, size_t size)
{
	int fd = harness_recv_fd(sock);
	size_t got;
	unsigned char *p = hp_shared_map(fd, &got);
	close(fd);
	if (!p || got < size)
		return 10;
	if (harness_check(p, size, 1) != SIZE_MAX)
		return 11;
	struct harness_smaps k;
	if (harness_smaps_range(p, size, &k) != 0 || k.hugetlb != size)
		return 12; /* the kernel says: not hugetlb pages here */
	harness_fill(p, size, 2);
	return hp_shared_free(p) == 0 ? 0 : 13;
}

static void test_hugetlb_block_by_descriptor(void **state)
{
	int sv[2], fd = -1;
	(void)state;
	harness_pool_or_skip(2 * MiB, SIZE / (2 * MiB), true);
	hugetlb_knobs("fail");
	unsigned char *p = hp_shared_alloc(SIZE, 0, &fd);
	assert_non_null(p);
	assert_true(fd >= 0);
	assert_int_equal(harness_pool_available(2 * MiB), 0); /* reserved at creation */
	struct hp_shared_info info;
	assert_int_equal(hp_shared_info(p + 100, &info), 0);
	assert_ptr_equal(info.addr, p);
	assert_int_equal(info.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(info.page_size, 2 * MiB);
	harness_fill(p, SIZE, 1);
	assert_int_equal(harness_stat(HP_STAT_SHARED_LIVE_BYTES), SIZE);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		hp_shared_free(p); /* the child drops what it inherited */
		_exit(child_side(sv[1], SIZE));
	}
	close(sv[1]);
	harness_send_fd(sv[0], fd);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_filled(p, SIZE, 2); /* the child's writes, seen here */
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_HUGETLB);
	assert_int_equal(b.kernel.hugetlb_bytes, SIZE);
	close(sv[0]);
	assert_int_equal(hp_shared_free(p), 0);
	assert_int_equal(harness_mapped(p, SIZE), 0);
	assert_int_equal(harness_stat(HP_STAT_SHARED_LIVE_BYTES), 0);
	assert_int_equal(harness_pool_available(2 * MiB), SIZE / (2 * MiB)); /* no leak */
}

static void test_short_pool_fails_or_falls_back(void **state)
{
	int fd;
	(void)state;
	harness_pool_or_skip(2 * MiB, SIZE / (2 * MiB) - 1, true); /* one page short */
	uint64_t fallbacks = harness_stat(HP_STAT_SHARED_FALLBACKS);
	hugetlb_knobs("fail");
	errno = 0;
	assert_null(hp_shared_alloc(SIZE, 0, &fd));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(harness_pool_available(2 * MiB), SIZE / (2 * MiB) - 1);
	hugetlb_knobs("small");
	unsigned char *p = hp_shared_alloc(SIZE, 0, &fd);
	assert_non_null(p);
	memset(p, 7, SIZE); /* no SIGBUS: ordinary shared memory */
	struct hp_shared_info info;
	assert_int_equal(hp_shared_info(p, &info), 0);
	assert_int_equal(info.backend, HP_BACKEND_SMALL);
	struct harness_smaps k;
	assert_int_equal(harness_smaps_range(p, SIZE, &k), 0);
	assert_int_equal(k.hugetlb, 0);
	assert_int_equal(k.kernel_page_size, 4096);
	assert_int_equal(harness_stat(HP_STAT_SHARED_FALLBACKS), fallbacks + 2);
	assert_int_equal(hp_shared_free(p), 0);
	/* an explicit page size obeys fallback just the same */
	hugetlb_knobs("fail");
	assert_null(hp_shared_alloc(SIZE, 2 * MiB, &fd));
}

static void test_bad_input_changes_nothing(void **state)
{
	int fd = -7, devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	size_t size = 99;
	(void)state;
	errno = 0;
	assert_null(hp_shared_alloc(0, 0, &fd));
	assert_int_equal(errno, EINVAL);
	assert_null(hp_shared_alloc(SIZE, 3 * MiB, &fd));
	assert_int_equal(errno, EINVAL);
	assert_int_equal(fd, -7);
	assert_null(hp_shared_map(-1, &size));
	assert_null(hp_shared_map(devnull, &size)); /* not a regular file */
	assert_int_equal(errno, EINVAL);
	assert_int_equal(size, 99);
	char local[16];
	assert_int_equal(hp_shared_free(local), -1);
	assert_int_equal(errno, EINVAL);
	struct hp_shared_info info;
	assert_int_equal(hp_shared_info(local, &info), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(harness_stat(HP_STAT_SHARED_LIVE_BLOCKS), 0);
	close(devnull);
}

/* memfd_create refused (a seccomp profile): NULL, nothing half made. */
static int child_no_memfd(void)
{
	int fd = -1;
	if (fault_seccomp_refuse(SYS_memfd_create, EPERM) != 0)
		return 77;
	hp_knob_set("mode", "thp");
	if (hp_shared_alloc(SIZE, 0, &fd) != NULL || errno != ENOMEM || fd != -1)
		return 1;
	struct hp_stats st;
	hp_stats_get(&st);
	return st.v[HP_STAT_SHARED_LIVE_BLOCKS] == 0 && st.v[HP_STAT_FAILURES] >= 1 ? 0 : 2;
}

static void test_memfd_create_refused(void **state)
{
	char err[2048];
	(void)state;
	int rc = harness_run_child("no_memfd", (const char *const[]){NULL}, err, sizeof(err));
	if (rc != 0)
		fail_msg("child exited %d: %s", rc, err);
}

/* fork while another thread makes and frees shared blocks: the child gets
 * consistent records and can free every block it inherited. */
static _Atomic bool stop;
static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		void *p = hp_shared_alloc(2 * MiB, 0, NULL);
		if (p)
			hp_shared_free(p);
	}
	return NULL;
}

static void test_fork_while_blocks_come_and_go(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, churn, NULL), 0);
	for (int i = 0; i < 50; i++) {
		void *mine = hp_shared_alloc(4 * MiB, 0, NULL);
		if (!mine)
			fail_msg("round %d: hp_shared_alloc(4 MiB) failed: %s (failures %llu)", i,
				 strerror(errno), (unsigned long long)harness_stat(HP_STAT_FAILURES));
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			if (hp_shared_free(mine) != 0 || harness_mapped(mine, 4 * MiB) != 0)
				_exit(1);
			struct hp_stats st; /* an inherited half-made block would show here */
			hp_stats_get(&st);
			_exit(st.v[HP_STAT_SHARED_LIVE_BLOCKS] <= 1 ? 0 : 2);
		}
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			fail_msg("round %d: child status %#x", i, status);
		assert_int_equal(hp_shared_free(mine), 0);
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	assert_int_equal(harness_stat(HP_STAT_SHARED_LIVE_BLOCKS), 0);
}

#define SHMEM_ENABLED "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

/* With the kernel allowing THP for advised shmem, the THP fallback gives
 * huge pages (ShmemPmdMapped), and hp_backing reports them. */
static void test_thp_shmem_where_the_kernel_allows(void **state)
{
	char before[128] = "";
	(void)state;
	FILE *f = fopen(SHMEM_ENABLED, "re");
	if (!f)
		harness_skip("no %s: this kernel has no shmem THP", SHMEM_ENABLED);
	if (fgets(before, sizeof(before), f)) {
		char *l = strchr(before, '['), *r = l ? strchr(l, ']') : NULL;
		if (l && r) {
			*r = '\0';
			memmove(before, l + 1, strlen(l + 1) + 1);
		}
	}
	fclose(f);
	if (!harness_is_root())
		harness_skip("setting %s needs root", SHMEM_ENABLED);
	f = fopen(SHMEM_ENABLED, "we");
	assert_non_null(f);
	fputs("advise\n", f);
	assert_int_equal(fclose(f), 0);
	harness_knob("mode", "thp");
	unsigned char *p = hp_shared_alloc(16 * MiB, 0, NULL);
	size_t huge = 0;
	struct hp_backing b = {0};
	if (p) {
		memset(p, 3, 16 * MiB);
		struct harness_smaps k; /* read here, not by the library */
		if (harness_smaps_range(p, 1, &k) == 0)
			huge = k.shmem_pmd;
		hp_backing(p, &b);
		hp_shared_free(p);
	}
	f = fopen(SHMEM_ENABLED, "we"); /* restored before any assertion */
	if (f) {
		fprintf(f, "%s\n", before);
		fclose(f);
	}
	assert_non_null(p);
	assert_int_equal(b.backend, HP_BACKEND_THP);
	assert_true(huge >= 8 * MiB); /* the kernel may leave an extent or two */
	assert_int_equal(b.kernel.anon_huge_bytes, huge);
}

static const struct harness_child_case children[] = {
	{"no_memfd", child_no_memfd},
};

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_hugetlb_block_by_descriptor),
		HTEST(test_short_pool_fails_or_falls_back),
		HTEST(test_bad_input_changes_nothing),
		HTEST(test_memfd_create_refused),
		HTEST(test_fork_while_blocks_come_and_go),
		HTEST(test_thp_shmem_where_the_kernel_allows),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("shared", tests, ARRAY_SIZE(tests));
}
