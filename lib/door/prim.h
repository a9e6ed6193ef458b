/* prim.c: the only door to the kernel, for lib/ and hpctl -- every mmap,
 * munmap, mprotect, mremap, madvise (and the io_uring entry of the
 * MADV_DONTNEED ring.c submits: prim_prep_release), mincore, mbind,
 * get/set_mempolicy, memfd_create, ftruncate and seal, every read of the
 * hugetlb, THP and NUMA node files of sysfs (the nodes and their CPUs: not
 * libnuma's), of the memory cgroup's files, and of /proc (smaps,
 * numa_maps, statm, comm, a pid's stat and environ, the processes there
 * are, our pid namespace; hpctl's mounts, meminfo, sysctls and own
 * executable), and hpctl's one write: a hugetlb pool's size
 * (prim_pool_write).  Modelled on mimalloc's include/mimalloc/prim.h:
 * os.c, shared.c, numa.c, thp.c, populate.c, memcg.c, smaps.c,
 * numa_maps.c, publish.c, peers.c and hpctl decide and interpret, prim.c
 * carries out and reads.
 * tests/prim-door.sh fails on a /proc or /sys path, a memory system call,
 * a libnuma call or an open of a path built here in any other file of lib/
 * or tools/ (and of the Python extension).  Rules (prim.c's first comment says
 * why):
 *   - no policy: no page size, backend or fallback is chosen here;
 *   - no lock taken, no memory allocated by malloc (callers run inside
 *     interposers and under hp_heap_lock), nothing logged (the caller says
 *     what failed);
 *   - a system call wrapper fails as the call does: -1 or NULL with errno
 *     the kernel's; a sysfs reader says "unknown" (-1) and leaves errno as
 *     it found it; a /proc reader fails with the kernel's errno.
 * Included by internal.h; the readers hpctl also calls are in private.h. */
#ifndef HP_PRIM_H
#define HP_PRIM_H

#include "../base.h"

#include <stdbool.h>
#include <stddef.h>

/* The log2 of a page size: how MAP_HUGE_* and MFD_HUGE_* name it. */
static inline int prim_page_shift(size_t pagesize)
{
	return 63 - __builtin_clzll((unsigned long long)pagesize);
}

/* ---- mappings ------------------------------------------------------------------ */
/* mmap(2) of fd (-1: anonymous); NULL + errno instead of MAP_FAILED. */
HP_HIDDEN void *prim_map(void *hint, size_t len, int prot, int flags, int fd);
/* Private anonymous hugetlb pages of pagesize (reserved now: no
 * MAP_NORESERVE), followed by tail bytes of private anonymous memory with
 * tail_prot, uncharged; NULL + errno.  Never maps over anything, so it
 * never takes down a mapping another thread just made. */
HP_HIDDEN void *prim_map_hugetlb(size_t len, size_t pagesize, size_t tail, int tail_prot);
/* len bytes of fd (-1: anonymous) mapped with prot and flags starting on a
 * 2 MiB boundary; NULL + errno. */
HP_HIDDEN void *prim_map_aligned(size_t len, int prot, int flags, int fd);
HP_HIDDEN int prim_unmap(void *addr, size_t len);
HP_HIDDEN int prim_protect(void *addr, size_t len, int prot);
HP_HIDDEN int prim_advise(void *addr, size_t len, int advice);
/* The io_uring entry sqe made the release of [addr, addr + len) that
 * prim_advise(addr, len, MADV_DONTNEED) would do, for ring.c to submit
 * (only in a build with liburing). */
struct io_uring_sqe;
HP_HIDDEN void prim_prep_release(struct io_uring_sqe *sqe, void *addr, size_t len);
/* mremap(2); NULL + errno instead of MAP_FAILED. */
HP_HIDDEN void *prim_remap(void *addr, size_t old_len, size_t new_len, int flags, void *new_addr);
/* The mapping at addr (old_len bytes, new_len after) moved to dest, the
 * start of a reservation of span bytes the caller made: what it does not
 * fill stays reserved for the caller.  NULL + errno: the mapping stays
 * where it was and the reservation is given back, all of it that is
 * certainly still ours (never a range another thread may have mapped);
 * what is not stays for good, counted (stranded_reservations), and after
 * HP_STRANDED_MAX of them no move is tried any more: NULL + ENOMEM at once
 * (prim.c says why). */
#define HP_STRANDED_MAX 16
HP_HIDDEN void *prim_move_into(void *addr, size_t old_len, size_t new_len, void *dest, size_t span);
/* The reservations stranded so far (stats.c publishes it as
 * stranded_reservations: the door counts, and calls nobody). */
HP_HIDDEN unsigned prim_stranded(void);
/* mbind(2) (libnuma's wrapper); -1 + ENOSYS in a build without libnuma. */
HP_HIDDEN int prim_mbind(void *addr, size_t len, int mode, const unsigned long *nodes,
			 unsigned long maxnode);
/* The calling thread's own policy: get_mempolicy(2) and set_mempolicy(2)
 * (libnuma's wrappers); -1 + ENOSYS in a build without libnuma. */
HP_HIDDEN int prim_thread_policy(int *mode, unsigned long *nodes, unsigned long maxnode);
HP_HIDDEN int prim_set_thread_policy(int mode, const unsigned long *nodes, unsigned long maxnode);
/* Whether the page at addr is resident (mincore(2) of one page): 1, 0, or
 * -1 + errno. */
HP_HIDDEN int prim_resident(const void *addr);
/* Where the main heap's break is now (sbrk(0)): libc's heap grew when it moved. */
HP_HIDDEN void *prim_heap_break(void);

/* ---- memfds --------------------------------------------------------------------- */
/* A close-on-exec memfd named name of len bytes (hugetlb pages of pagesize,
 * 0: shmem) with seals added before anyone else can have it; -1 + errno,
 * nothing left open. */
HP_HIDDEN int prim_memfd(const char *name, size_t len, size_t pagesize, unsigned seals);
/* What a descriptor someone handed us is, asked in an order that never
 * blocks (fstat, then fstatfs, then its seals). */
struct prim_memfd {
	size_t len;      /* its size */
	size_t kernel_page_size; /* hugetlbfs: its page size; shmem: 4096 */
	bool hugetlb;
	int seals;       /* F_GET_SEALS, -1 if it has none to tell */
};
/* 0, or -1 with *why "not a regular file" / "not a memfd". */
HP_HIDDEN int prim_memfd_stat(int fd, struct prim_memfd *out, const char **why);

/* ---- sysfs: hugetlb pools, THP settings, NUMA nodes -------------------------------- */
/* Tests: read every file below root (a staged sysfs: root/kernel/mm/hugepages,
 * root/kernel/mm/transparent_hugepage, root/devices/system/node) instead of
 * /sys; NULL: /sys.  Set before the reads, never while other threads read. */
HP_HIDDEN void prim_sysfs_root(const char *root);
/* The first line of a file of the THP directory (rel: "enabled",
 * "hugepages-64kB/enabled"), without its newline; -1 unknown. */
HP_HIDDEN int prim_thp_read(const char *rel, char *buf, size_t len);
/* The multi-size THP sizes (its hugepages-<N>kB directories), ascending, at
 * most max; -1 without the THP directory. */
HP_HIDDEN int prim_thp_sizes(size_t *out, int max);
/* The NUMA nodes there are, as libnuma lists them: a bit set in mask (nbits
 * bits, zeroed by the caller) for each node<N> directory of
 * devices/system/node; how many, -1 without that directory. */
HP_HIDDEN int prim_node_ids(unsigned long *mask, int nbits);
/* The first line of a file of node's directory ("cpulist"), without its
 * newline; -1 unknown (or longer than len - 1 bytes). */
HP_HIDDEN int prim_node_read(int node, const char *file, char *buf, size_t len);

/* ---- randomness ---------------------------------------------------------------------
 * len bytes of the kernel's random source into buf, never blocking: the raw
 * getrandom system call (glibc's wrapper is a cancellation point, and the
 * janitor thread calls this too).  0, or -1 + errno where there is none to
 * give (a kernel before 3.17, a seccomp filter, a pool not yet initialised). */
HP_HIDDEN int prim_random(void *buf, size_t len);

/* ---- /proc: what the kernel says of processes -------------------------------------
 * The readers of /proc/<rel> hpctl calls too (prim_proc_read, _lines,
 * _readlink) are in private.h. */
/* The device and inode numbers of /proc/<rel> (stat(2), links followed:
 * "self/ns/pid" names our pid namespace); -1 + errno. */
HP_HIDDEN int prim_proc_ident(const char *rel, unsigned long long *dev, unsigned long long *ino);
/* Each NUL-terminated string of /proc/<rel> ("<pid>/environ"), whole
 * whatever its length, to fn, as prim_proc_lines() (private.h) gives
 * lines: until fn returns non-zero, which is returned; 0 at the end, errno
 * as it was; -1 + errno if the file cannot be opened (ENOENT: the process
 * is gone; EACCES: not ours to read), or ENOMEM for a string over 1 MiB. */
HP_HIDDEN int prim_proc_strings(const char *rel, int (*fn)(char *str, void *arg), void *arg);
/* Each process /proc shows (its <pid> directories; no threads) to fn, in
 * the order the kernel lists them: 0, errno as it was, or -1 + errno if
 * /proc cannot be opened. */
HP_HIDDEN int prim_proc_pids(void (*fn)(long pid, void *arg), void *arg);
/* /proc/vmstat: the values of the n counters named keys into out (those not
 * found left as they were): how many were found, -1 if unreadable. */
HP_HIDDEN int prim_vmstat(const char *const *keys, unsigned long long *out, int n);

/* ---- the memory cgroup (memcg.c decides what the files mean) ---------------------- */
/* The longest cgroup directory path (mount point and cgroup path) read:
 * paths are copied onto the stack of the free path. */
#define PRIM_MEMCG_PATH_MAX 512
/* Tests: read /proc/self/cgroup, /proc/self/mountinfo and every cgroup
 * file below root (a staged tree: root/proc/self/..., root/sys/fs/cgroup/...)
 * instead of below /; NULL: /.  Set while no other thread reads. */
HP_HIDDEN void prim_memcg_root(const char *root);
/* Each line of /proc/self/<name> ("cgroup", "mountinfo"), without its
 * newline, to fn (which may write into it) until fn returns non-zero,
 * which is returned; 0 at the end; -1 if the file cannot be opened.  A
 * line of 2 KiB or more is skipped.  No memory allocated; errno as it was. */
HP_HIDDEN int prim_proc_self_lines(const char *name, int (*fn)(char *line, void *arg), void *arg);
/* Each line of file in the cgroup directory dir (memory.stat), as
 * prim_proc_self_lines() gives them; -1 if it cannot be opened. */
HP_HIDDEN int prim_memcg_lines(const char *dir, const char *file, int (*fn)(char *line, void *arg),
			       void *arg);
/* The first line of file in the cgroup directory dir (an absolute path, as
 * mountinfo gives it, below the root), without its newline; -1 if it cannot
 * be read or is empty.  errno as it was. */
HP_HIDDEN int prim_memcg_read(const char *dir, const char *file, char *buf, size_t len);

#endif
