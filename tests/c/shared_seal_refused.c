/* A shared block that cannot be sealed is never handed out.  Kernels
 * before 4.16 refuse a hugetlb memfd that allows sealing (EINVAL): the
 * block then goes by the fallback knob -- a sealed shmem block with
 * fallback=thp, NULL (ENOMEM) with fallback=fail.  And a kernel (or a
 * seccomp profile) refusing F_ADD_SEALS gets no block at all, with nothing
 * left mapped or open.  Both made to happen with a seccomp filter in a
 * child process.  Before the fix blocks were never sealed: the fallback
 * block was unsealed, and a refused F_ADD_SEALS went unnoticed. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SIZE (4 * MiB)
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

/* Refuse system call nr with err when its argument arg has any bit of
 * mask (is_mask) or equals value (!is_mask); allow everything else. */
static int refuse_when(long nr, int arg, bool is_mask, unsigned value, int err)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
		/* low 32 bits of the argument (x86-64 is little-endian) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[arg])),
		is_mask ? (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, value, 0, 1)
			: (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* This process's memfds (its own descriptors of shared blocks). */
static int memfds(void)
{
	char path[300], target[256];
	struct dirent *e;
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			n += strncmp(target, "/memfd:", 7) == 0;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static int live_blocks(void)
{
	struct hp_stats st;
	hp_stats_get(&st);
	return (int)st.v[HP_STAT_SHARED_LIVE_BLOCKS];
}

#define CHECK(cond, code)                                                     \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
			return (code);                                        \
		}                                                             \
	} while (0)

/* A kernel before 4.16: no hugetlb memfd that allows sealing. */
static int child_no_sealable_hugetlb(void)
{
	int fd = -1;
	if (refuse_when(SYS_memfd_create, 1, true, MFD_HUGETLB, EINVAL) != 0)
		return 77;
	hp_knob_set("mode", "hugetlb");
	hp_knob_set("pagesize", "2M");
	hp_knob_set("fallback", "fail");
	errno = 0;
	CHECK(hp_shared_alloc(SIZE, 0, &fd) == NULL && errno == ENOMEM && fd == -1, 1);
	CHECK(live_blocks() == 0 && memfds() == 0, 2);
	hp_knob_set("fallback", "thp");
	unsigned char *p = hp_shared_alloc(SIZE, 0, &fd);
	CHECK(p != NULL, 3);
	struct hp_shared_info info;
	CHECK(hp_shared_info(p, &info) == 0 && info.backend == HP_BACKEND_THP, 4);
	int seals = fcntl(fd, F_GET_SEALS);
	CHECK(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW), 5);
	CHECK(ftruncate(fd, 0) == -1 && errno == EPERM, 6);
	memset(p, 1, SIZE);
	CHECK(hp_shared_free(p) == 0 && memfds() == 0, 7);
	return 0;
}

/* F_ADD_SEALS refused: no block, nothing left mapped or open. */
static int child_no_seals(void)
{
	int fd = -1;
	if (refuse_when(SYS_fcntl, 1, false, F_ADD_SEALS, EPERM) != 0)
		return 77;
	hp_knob_set("mode", "thp");
	errno = 0;
	CHECK(hp_shared_alloc(SIZE, 0, &fd) == NULL && errno == ENOMEM && fd == -1, 1);
	CHECK(live_blocks() == 0 && memfds() == 0, 2);
	hp_knob_set("mode", "hugetlb");
	hp_knob_set("pagesize", "2M");
	hp_knob_set("fallback", "thp");
	CHECK(hp_shared_alloc(SIZE, 0, &fd) == NULL && errno == ENOMEM && fd == -1, 3);
	CHECK(live_blocks() == 0 && memfds() == 0, 4);
	return 0;
}

static void test_kernel_without_hugetlb_sealing(void **state)
{
	(void)state;
	harness_child_passes("no_sealable_hugetlb");
}

static void test_seals_refused(void **state)
{
	(void)state;
	harness_child_passes("no_seals");
}

static const struct harness_child_case children[] = {
	{"no_sealable_hugetlb", child_no_sealable_hugetlb},
	{"no_seals", child_no_seals},
};

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_kernel_without_hugetlb_sealing),
		HTEST(test_seals_refused),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("shared_seal_refused", tests, ARRAY_SIZE(tests));
}
