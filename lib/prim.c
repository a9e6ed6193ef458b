/* The only place that talks to the kernel about memory: every memory system
 * call of the library (mmap, munmap, mprotect, mremap, madvise, mbind,
 * memfd_create, ftruncate, the seals) and every read of the hugetlb and
 * THP files of sysfs.  Modelled on mimalloc's "primitive" layer
 * (include/mimalloc/prim.h, src/prim/): the files that decide -- os.c
 * (private blocks), shared.c, numa.c, thp.c, and hpctl through private.h --
 * call these and nothing below them, so one file knows each system call's
 * flags and each sysfs path, and a staged sysfs (tests) stands in for all
 * of them at once.
 *
 * Rules:
 *   - no policy: which page size, backend, fallback or placement a block
 *     gets is decided by the caller; these carry it out;
 *   - no lock is taken and no memory allocated (directories are read with
 *     getdents64 into the stack, not opendir): callers run under
 *     hp_heap_lock, inside pthread_once and inside the malloc of an
 *     interposer (libhpalloc-preload.so);
 *   - nothing is logged: the caller knows what the failure means;
 *   - errno: a system call wrapper fails as the call does, -1 (or NULL for
 *     a mapping) with the kernel's errno, which the cleanup of a failed
 *     attempt leaves as it was; a sysfs reader returns -1 for "unknown" and
 *     leaves errno as it found it (a missing file is an answer, not an
 *     error of the caller's). */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBNUMA
#include <numaif.h>
#endif

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#define HUGETLBFS_MAGIC 0x958458f6
#define TMPFS_MAGIC 0x01021994

/* ---- mappings ------------------------------------------------------------------ */

void *prim_map(void *hint, size_t len, int prot, int flags, int fd)
{
	void *p = mmap(hint, len, prot, flags, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *prim_map_hugetlb(size_t len, size_t pagesize)
{
	return prim_map(NULL, len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (prim_page_shift(pagesize) << MAP_HUGE_SHIFT),
			-1);
}

/* The kernel often hands out a 2 MiB aligned address by itself (large
 * anonymous and shmem mappings, Linux 6.7+): take it.  Else reserve 2 MiB
 * more, inaccessible and uncharged, and map over its aligned part, which
 * works for a file too (its offset 0 lands on the boundary); the rest of
 * the reservation goes back. */
void *prim_map_aligned(size_t len, int prot, int flags, int fd)
{
	char *p = prim_map(NULL, len, prot, flags, fd);
	if (!p || ((uintptr_t)p & (HP_THP_SIZE - 1)) == 0)
		return p;
	munmap(p, len);
	size_t span = len + HP_THP_SIZE;
	char *raw = prim_map(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
	if (!raw)
		return NULL;
	char *start = (char *)hp_align_up((uintptr_t)raw, HP_THP_SIZE);
	if (!prim_map(start, len, prot, flags | MAP_FIXED, fd)) {
		int err = errno;
		munmap(raw, span);
		errno = err;
		return NULL;
	}
	if (start > raw)
		munmap(raw, (size_t)(start - raw));
	if (raw + span > start + len)
		munmap(start + len, (size_t)(raw + span - (start + len)));
	return start;
}

int prim_unmap(void *addr, size_t len)
{
	return munmap(addr, len);
}

int prim_protect(void *addr, size_t len, int prot)
{
	return mprotect(addr, len, prot);
}

int prim_advise(void *addr, size_t len, int advice)
{
	return madvise(addr, len, advice);
}

void *prim_remap(void *addr, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	void *p = mremap(addr, old_len, new_len, flags, new_addr);
	return p == MAP_FAILED ? NULL : p;
}

int prim_mbind(void *addr, size_t len, int mode, const unsigned long *nodes, unsigned long maxnode)
{
#ifdef HAVE_LIBNUMA
	return (int)mbind(addr, len, mode, nodes, maxnode, 0);
#else
	(void)addr, (void)len, (void)mode, (void)nodes, (void)maxnode;
	errno = ENOSYS;
	return -1;
#endif
}

/* ---- memfds --------------------------------------------------------------------- */

int prim_memfd(const char *name, size_t len, size_t pagesize, unsigned seals)
{
	unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	if (pagesize)
		flags |= MFD_HUGETLB | ((unsigned)prim_page_shift(pagesize) << MFD_HUGE_SHIFT);
	int fd = memfd_create(name, flags);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len) == 0 && fcntl(fd, F_ADD_SEALS, (int)seals) == 0)
		return fd;
	int err = errno;
	close(fd);
	errno = err;
	return -1;
}

/* fstat first: it answers for any descriptor without blocking. */
int prim_memfd_stat(int fd, struct prim_memfd *out, const char **why)
{
	struct stat st;
	struct statfs sf;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		*why = "not a regular file";
		return -1;
	}
	if (fstatfs(fd, &sf) != 0 || ((unsigned long)sf.f_type != TMPFS_MAGIC &&
				      (unsigned long)sf.f_type != HUGETLBFS_MAGIC)) {
		*why = "not a memfd";
		return -1;
	}
	out->hugetlb = (unsigned long)sf.f_type == HUGETLBFS_MAGIC;
	out->pagesize = out->hugetlb ? (size_t)sf.f_bsize : HP_BASE_PAGE;
	out->len = st.st_size > 0 ? (size_t)st.st_size : 0;
	out->seals = fcntl(fd, F_GET_SEALS);
	return 0;
}
