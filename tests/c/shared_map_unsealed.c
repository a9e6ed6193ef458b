/* hp_shared_map() of a descriptor that is not a sealed shared block: a
 * plain file, memfds that are unsealed or sealed the wrong way, a hugetlb
 * memfd without seals, a tmpfs file, a FIFO, a socket, a character device,
 * a directory.  Each is refused with EINVAL, and nothing is mapped,
 * recorded or left open.  Before the fix a plain file and an unsealed memfd
 * were mapped: a process holding such a descriptor could shrink it under
 * every mapper (SIGBUS, see shared_truncate).  A block hp_shared_alloc()
 * made -- or any memfd sealed against shrinking and growing -- maps. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SIZE (4 * MiB)

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Descriptors of fd's file other than fd (by device and inode: other
 * threads may open other things meanwhile). */
static int count_dups_of(int fd)
{
	struct stat st, other;
	struct dirent *e;
	int n = 0;
	assert_int_equal(fstat(fd, &st), 0);
	DIR *d = opendir("/proc/self/fd");
	assert_non_null(d);
	while ((e = readdir(d))) {
		int i = atoi(e->d_name);
		if (e->d_name[0] != '.' && i != fd && i != dirfd(d) && fstat(i, &other) == 0 &&
		    other.st_dev == st.st_dev && other.st_ino == st.st_ino)
			n++;
	}
	closedir(d);
	return n;
}

/* Mappings of fd's file in /proc/self/maps (by device and inode: other
 * threads may map other things meanwhile). */
static int count_maps_of(int fd)
{
	char line[512];
	struct stat st;
	int n = 0;
	assert_int_equal(fstat(fd, &st), 0);
	FILE *f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
		    ino == st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev))
			n++;
	}
	fclose(f);
	return n;
}

/* fd is refused and changes nothing; fd stays the caller's, open. */
static void refused(int fd, const char *what)
{
	size_t size = 99;
	int dups = count_dups_of(fd);
	uint64_t live = harness_stat(HP_STAT_SHARED_LIVE_BLOCKS);

	errno = 0;
	void *p = hp_shared_map(fd, &size);
	if (p)
		fail_msg("%s: mapped at %p (%zu bytes)", what, p, size);
	if (errno != EINVAL)
		fail_msg("%s: errno %d (%s), not EINVAL", what, errno, strerror(errno));
	assert_int_equal(size, 99);
	assert_int_equal(count_dups_of(fd), dups); /* no duplicate left open */
	assert_int_equal(count_maps_of(fd), 0); /* nothing mapped */
	assert_int_equal(harness_stat(HP_STAT_SHARED_LIVE_BLOCKS), live);
	assert_int_equal(fcntl(fd, F_GETFD), FD_CLOEXEC); /* still open */
	close(fd);
}

static int memfd(unsigned flags, off_t size, int seals)
{
	int fd = memfd_create("not-hpalloc", MFD_CLOEXEC | flags);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	if (seals)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static char *scratch_path(const char *name)
{
	static char path[4096];
	const char *dir = getenv("HPALLOC_TEST_TMPDIR");
	snprintf(path, sizeof(path), "%s/%s", dir ? dir : "/tmp", name);
	unlink(path);
	return path;
}

static void test_plain_file_refused(void **state)
{
	(void)state;
	char *path = scratch_path("plain");
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, SIZE), 0);
	unlink(path);
	refused(fd, "a plain file");
}

static void test_unsealed_memfds_refused(void **state)
{
	(void)state;
	refused(memfd(0, SIZE, 0), "a memfd that cannot be sealed");
	refused(memfd(MFD_ALLOW_SEALING, SIZE, 0), "a memfd with no seal");
	refused(memfd(MFD_ALLOW_SEALING, SIZE, F_SEAL_SHRINK), "a memfd that may grow");
	refused(memfd(MFD_ALLOW_SEALING, SIZE, F_SEAL_GROW), "a memfd that may shrink");
	refused(memfd(MFD_ALLOW_SEALING, SIZE, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE),
		"a memfd sealed against writing");
	refused(memfd(MFD_ALLOW_SEALING, SIZE + 100, F_SEAL_SHRINK | F_SEAL_GROW),
		"a memfd of a size no block has");
}

/* memfd_create() and ftruncate() of a hugetlb memfd take no pool page:
 * no pool needed, only the page size. */
static void test_unsealed_hugetlb_memfd_refused(void **state)
{
	(void)state;
	int fd = memfd_create("not-hpalloc", MFD_CLOEXEC | MFD_HUGETLB | (21u << 26));
	if (fd < 0)
		harness_skip_cap("hugetlb", "no 2 MiB hugetlb memfd: %s", strerror(errno));
	assert_int_equal(ftruncate(fd, SIZE), 0);
	refused(fd, "a hugetlb memfd with no seal");
}

static void test_tmpfs_file_refused(void **state)
{
	(void)state;
	char path[] = "/dev/shm/hpalloc-test-XXXXXX";
	int fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		harness_skip("no /dev/shm: %s", strerror(errno));
	unlink(path);
	assert_int_equal(ftruncate(fd, SIZE), 0);
	refused(fd, "a tmpfs file (shmem, sealed by nobody)");
}

static void test_fifo_socket_device_directory_refused(void **state)
{
	(void)state;
	char *path = scratch_path("fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	/* O_RDWR: opens without a writer; hp_shared_map must not block on it */
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	unlink(path);
	refused(fd, "a FIFO");
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	refused(sv[0], "a socket");
	close(sv[1]);
	refused(open("/dev/zero", O_RDWR | O_CLOEXEC), "/dev/zero");
	refused(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), "a directory");
}

/* The rule is the seals, not who made the memfd: a block another program
 * sealed the same way maps; so does one of ours. */
static void test_sealed_blocks_map(void **state)
{
	(void)state;
	size_t size = 0;
	int fd = memfd(MFD_ALLOW_SEALING, SIZE, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	unsigned char *p = hp_shared_map(fd, &size);
	assert_non_null(p);
	assert_int_equal(size, SIZE);
	memset(p, 1, SIZE);
	assert_int_equal(hp_shared_free(p), 0);
	close(fd);

	harness_knob("mode", "thp");
	p = hp_shared_alloc(SIZE, 0, &fd);
	assert_non_null(p);
	int seals = fcntl(fd, F_GET_SEALS);
	assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	unsigned char *q = hp_shared_map(fd, &size);
	assert_non_null(q);
	assert_int_equal(size, SIZE);
	q[5] = 42;
	assert_int_equal(p[5], 42); /* the same pages */
	assert_int_equal(hp_shared_free(q), 0);
	assert_int_equal(hp_shared_free(p), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_plain_file_refused),
		HTEST(test_unsealed_memfds_refused),
		HTEST(test_unsealed_hugetlb_memfd_refused),
		HTEST(test_tmpfs_file_refused),
		HTEST(test_fifo_socket_device_directory_refused),
		HTEST(test_sealed_blocks_map),
	};
	harness_init(argc, argv);
	return harness_run("shared_map_unsealed", tests, ARRAY_SIZE(tests));
}
