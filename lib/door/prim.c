/* The only door to the kernel: every memory system call of the library
 * (mmap, munmap, mprotect, mremap, madvise, mincore, mbind,
 * get/set_mempolicy, memfd_create, ftruncate, the seals), the io_uring
 * entry of the MADV_DONTNEED ring.c submits for a released block
 * (prim_prep_release: ring.c says why only the janitor touches the ring),
 * every read of the hugetlb, THP and NUMA node files of sysfs (the nodes
 * are listed here, not by libnuma, which would read /sys behind this
 * door) and hpctl's write of a hugetlb pool's size, every read of the
 * files that say which memory cgroup the process is in and what it may use
 * (memcg.c decides what they mean), and every other read of /proc (smaps,
 * numa_maps, statm, comm, a pid's stat and environ, the processes there
 * are, our pid namespace; for hpctl its mounts, meminfo, the io_uring
 * sysctl and its own executable).  Modelled on mimalloc's "primitive"
 * layer (include/mimalloc/prim.h, src/prim/; even its
 * _mi_prim_process_info, the RSS, is read there): the files that decide
 * or interpret -- os.c (private blocks), shared.c, numa.c, thp.c,
 * memcg.c, smaps.c, numa_maps.c, publish.c, peers.c, and hpctl through
 * private.h -- call these and nothing below them, so one file knows each
 * system call's flags and each kernel file's path, and a staged sysfs
 * (tests) stands in for all of them at once; a staged root does the same
 * for the cgroup files.  tests/prim-door.sh holds the other files to it.
 *
 * Rules:
 *   - no policy: which page size, backend, fallback or placement a block
 *     gets is decided by the caller; these carry it out (one bound is
 *     this file's: the reservations refused moves leave, prim_move_into);
 *   - no lock is taken and no memory allocated (directories are read with
 *     getdents64 into the stack, not opendir; a /proc line longer than the
 *     stack's buffer gets a private mapping, not malloc): callers run
 *     under hp_heap_lock, inside pthread_once and inside the malloc of an
 *     interposer (libhpalloc-preload.so);
 *   - nothing is logged: the caller knows what the failure means;
 *   - errno: a system call wrapper fails as the call does, -1 (or NULL for
 *     a mapping) with the kernel's errno, which the cleanup of a failed
 *     attempt leaves as it was; a sysfs reader returns -1 for "unknown" and
 *     leaves errno as it found it (a missing file is an answer, not an
 *     error of the caller's); a /proc reader fails with the kernel's
 *     errno (its caller says what a missing /proc means). */
#include "prim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_LIBNUMA
#include <numaif.h>
#endif
#ifdef HAVE_LIBURING
#include <liburing.h>
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

/* Placing a mapping on a boundary.  Nothing here may ever unmap a range
 * another thread could have mapped meanwhile, and no window may open in
 * which one could take the place we want:
 *   - an anonymous mapping is made align bytes longer and trimmed
 *     (map_anon_aligned): there is nothing to place;
 *   - a mapping of a file or of hugetlb pages is made first where the
 *     kernel puts it, so what can fail there (a hugetlb pool too short)
 *     fails before anything else was done; it stays where it is if that is
 *     on the boundary with its keep bytes free after it, else one mremap
 *     moves it into a reservation (prim_move_into).
 * Mapping it into the reservation with MAP_FIXED instead would fail after
 * the kernel cleared the range (hugetlb's pool reservation; older kernels
 * for any failure), and asking for the place by hint after handing it back
 * loses the place to a thread mapping at that moment (tests/c/shared lost
 * it four times in a row to its churn thread: ENOMEM). */

#define RESERVE_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

static bool on_boundary(const void *p, size_t align)
{
	return ((uintptr_t)p & (align - 1)) == 0;
}

static void unmap_range(char *from, char *to)
{
	if (to > from)
		munmap(from, (size_t)(to - from));
}

/* [addr, addr + len) reserved for us if nothing is mapped there:
 * MAP_FIXED_NOREPLACE never replaces a mapping (a kernel before 4.17 takes
 * it for a hint: a mapping elsewhere is a no). */
static bool claim(char *addr, size_t len)
{
	int err = errno;
	char *p = prim_map(addr, len, PROT_NONE, RESERVE_FLAGS | MAP_FIXED_NOREPLACE, -1);
	if (p && p != addr)
		munmap(p, len);
	errno = err;
	return p == addr;
}

/* The kernel clears a move's destination before some of its failures (the
 * map count, memory; any failure to move hugetlb pages before 5.16) and
 * not before others: only a range nobody took since is ours to give back.
 * One still reserved cannot be told from a mapping another thread made in
 * a destination the kernel did clear, so it stays for good -- address
 * space only (PROT_NONE, MAP_NORESERVE: uncharged), but one mapping of the
 * map count (vm.max_map_count) each, and a kernel that refuses one move
 * (near that count) refuses the next.  So they are counted (the stat
 * stranded_reservations) and bounded, the one bound of this file's own:
 * after HP_STRANDED_MAX of them nothing is moved any more -- prim_move_into
 * refuses at once, ENOMEM, giving the reservation back (certainly ours:
 * the kernel never saw it), place() places by hint, os.c's grow copies
 * and its refault leaves the extent as it is.  Sixteen: far above what a
 * kernel refusing now and then leaves, far below the map count.
 * (tests/c/move_refused_bound.) */
static _Atomic unsigned stranded;

static bool may_move(void)
{
	return atomic_load_explicit(&stranded, memory_order_relaxed) < HP_STRANDED_MAX;
}

static void strand(void)
{
	atomic_fetch_add_explicit(&stranded, 1, memory_order_relaxed);
}

unsigned prim_stranded(void)
{
	return atomic_load_explicit(&stranded, memory_order_relaxed);
}

void *prim_move_into(void *addr, size_t old_len, size_t new_len, void *dest, size_t span)
{
	char *d = dest;
	if (!may_move()) {
		munmap(d, span);
		errno = ENOMEM;
		return NULL;
	}
	void *p = mremap(addr, old_len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
	if (p != MAP_FAILED)
		return p;
	int err = errno;
	unmap_range(d + new_len, d + span);
	if (claim(d, new_len))
		munmap(d, new_len);
	else
		strand();
	errno = err;
	return NULL;
}

static char *map_anon_aligned(size_t len, size_t align, int prot, int flags)
{
	if (len > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	char *raw = prim_map(NULL, len + align, prot, flags, -1);
	if (!raw)
		return NULL;
	char *start = (char *)hp_align_up((uintptr_t)raw, align);
	unmap_range(raw, start);
	unmap_range(start + len, raw + len + align);
	return start;
}

/* The fallback of a kernel that cannot move the mapping (hugetlb pages
 * before Linux 5.16): reserve, hand back the place, ask for it by hint; a
 * thread that took it first makes the kernel map elsewhere: try again (a
 * few times, then ENOMEM). */
static char *map_by_hint(size_t len, size_t align, size_t keep, int prot, int flags, int fd)
{
	for (int tries = 0; tries < 4; tries++) {
		char *raw = prim_map(NULL, len + keep + align, PROT_NONE, RESERVE_FLAGS, -1);
		if (!raw)
			return NULL;
		char *start = (char *)hp_align_up((uintptr_t)raw, align), *end = raw + len + keep + align;
		munmap(raw, (size_t)(start - raw) + len);
		char *p = prim_map(start, len, prot, flags, fd);
		int err = errno;
		if (p == start) {
			unmap_range(start + len + keep, end);
			return p;
		}
		if (p)
			munmap(p, len);
		munmap(start + len, (size_t)(end - (start + len)));
		if (!p) {
			errno = err;
			return NULL;
		}
	}
	errno = ENOMEM;
	return NULL;
}

/* p, just mapped with len bytes of prot, flags and fd, on an align
 * boundary with keep bytes reserved after it: where it is, or moved into a
 * reservation; NULL + errno (p unmapped) if neither can be had. */
static char *place(char *p, size_t len, size_t align, size_t keep, int prot, int flags, int fd)
{
	if (on_boundary(p, align) && (!keep || claim(p + len, keep)))
		return p;
	if (!may_move()) { /* past the bound of stranded reservations */
		munmap(p, len);
		return map_by_hint(len, align, keep, prot, flags, fd);
	}
	char *dest = NULL;
	if (len <= SIZE_MAX - keep - align)
		dest = prim_map(NULL, len + keep + align, PROT_NONE, RESERVE_FLAGS, -1);
	else
		errno = ENOMEM;
	char *moved = NULL;
	if (dest) {
		char *start = (char *)hp_align_up((uintptr_t)dest, align);
		unmap_range(dest, start);
		size_t span = (size_t)(dest + len + keep + align - start);
		if ((moved = prim_move_into(p, len, len, start, span)))
			unmap_range(start + len + keep, start + span);
	}
	if (moved)
		return moved;
	int err = errno;
	munmap(p, len);
	if (dest && err == EINVAL)
		return map_by_hint(len, align, keep, prot, flags, fd);
	errno = err;
	return NULL;
}

void *prim_map_hugetlb(size_t len, size_t pagesize, size_t tail, int tail_prot)
{
	int prot = PROT_READ | PROT_WRITE;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (prim_page_shift(pagesize) << MAP_HUGE_SHIFT);
	char *p = prim_map(NULL, len, prot, flags, -1);
	if (p)
		p = place(p, len, pagesize, tail, prot, flags, -1);
	if (p && tail && mprotect(p + len, tail, tail_prot) < 0) {
		int err = errno;
		munmap(p, len + tail);
		errno = err;
		return NULL;
	}
	return p;
}

/* The kernel often hands out a 2 MiB aligned address by itself (large
 * anonymous and shmem mappings, Linux 6.7+): take it. */
void *prim_map_aligned(size_t len, int prot, int flags, int fd)
{
	char *p = prim_map(NULL, len, prot, flags, fd);
	if (!p || on_boundary(p, HP_THP_SIZE))
		return p;
	if (fd >= 0)
		return place(p, len, HP_THP_SIZE, 0, prot, flags, fd);
	munmap(p, len);
	return map_anon_aligned(len, HP_THP_SIZE, prot, flags);
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

#ifdef HAVE_LIBURING
void prim_prep_release(struct io_uring_sqe *sqe, void *addr, size_t len)
{
	io_uring_prep_madvise(sqe, addr, (off_t)len, MADV_DONTNEED);
}
#endif

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

int prim_thread_policy(int *mode, unsigned long *nodes, unsigned long maxnode)
{
#ifdef HAVE_LIBNUMA
	return (int)get_mempolicy(mode, nodes, maxnode, NULL, 0);
#else
	(void)mode, (void)nodes, (void)maxnode;
	errno = ENOSYS;
	return -1;
#endif
}

int prim_set_thread_policy(int mode, const unsigned long *nodes, unsigned long maxnode)
{
#ifdef HAVE_LIBNUMA
	return (int)set_mempolicy(mode, nodes, maxnode);
#else
	(void)mode, (void)nodes, (void)maxnode;
	errno = ENOSYS;
	return -1;
#endif
}

void *prim_heap_break(void)
{
	return sbrk(0);
}

int prim_resident(const void *addr)
{
	unsigned char v = 0;
	void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(HP_BASE_PAGE - 1));
	if (mincore(page, 1, &v) < 0)
		return -1;
	return v & 1;
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
	out->kernel_page_size = out->hugetlb ? (size_t)sf.f_bsize : HP_BASE_PAGE;
	out->len = st.st_size > 0 ? (size_t)st.st_size : 0;
	out->seals = fcntl(fd, F_GET_SEALS);
	return 0;
}

/* ---- sysfs ---------------------------------------------------------------------- */

#define HUGETLB_DIR "kernel/mm/hugepages"
#define THP_DIR "kernel/mm/transparent_hugepage"
#define NODE_DIR "devices/system/node"

static const char *sysfs = "/sys";

void prim_sysfs_root(const char *root)
{
	sysfs = root ? root : "/sys";
}

/* The file at path (below the root), NUL-terminated in buf; its length, or
 * -1 if it cannot be read or is empty.  errno as it was. */
static ssize_t read_file(const char *path, char *buf, size_t len)
{
	HP_ERRNO_SAVE;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = -1;

	if (fd >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
	}
	if (n <= 0)
		n = -1;
	else
		buf[n] = '\0';
	HP_ERRNO_RESTORE;
	return n;
}

/* The page size a directory named hugepages-<N>kB stands for (the hugetlb
 * pools' and multi-size THP's), 0 for any other name (the kernel's
 * spelling only, so that the name can be rebuilt from the size). */
static size_t hugepages_dir_size(const char *name)
{
	unsigned long long kb;
	char tail[4], canon[64];

	if (sscanf(name, "hugepages-%llu%3s", &kb, tail) != 2 || strcmp(tail, "kB") != 0 ||
	    kb == 0 || kb > SIZE_MAX >> 10)
		return 0;
	snprintf(canon, sizeof(canon), "hugepages-%llukB", kb);
	return strcmp(canon, name) == 0 ? (size_t)kb << 10 : 0;
}

/* A few sizes: an insertion sort (qsort may allocate). */
static void sort_sizes(size_t *v, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			size_t t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
}

/* Each entry's name in the directory at path to fn: 0, or -1 + errno (the
 * kernel's) if it cannot be opened.  getdents64 into the stack: opendir
 * would allocate. */
static int each_entry_at(const char *path, void (*fn)(const char *name, void *arg), void *arg)
{
	char buf[4096] __attribute__((aligned(8)));
	ssize_t n;

	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	HP_ERRNO_SAVE;
	while ((n = getdents64(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			off += e->d_reclen;
			fn(e->d_name, arg);
		}
	close(fd);
	HP_ERRNO_RESTORE;
	return 0;
}

/* Each entry's name in dir (below the root) to fn: 0, or -1 if dir cannot
 * be opened.  errno as it was. */
static int each_entry(const char *dir, void (*fn)(const char *name, void *arg), void *arg)
{
	char path[512];
	HP_ERRNO_SAVE;

	snprintf(path, sizeof(path), "%s/%s", sysfs, dir);
	int rc = each_entry_at(path, fn, arg);
	HP_ERRNO_RESTORE;
	return rc;
}

struct sizes_found {
	size_t *out;
	int max, count;
};

static void take_size(const char *name, void *arg)
{
	struct sizes_found *f = arg;
	size_t size = hugepages_dir_size(name);
	if (size && f->count < f->max)
		f->out[f->count++] = size;
}

/* The sizes of the hugepages-<N>kB directories of dir (below the root),
 * the first max of them, ascending; -1 if dir cannot be opened. */
static int list_sizes(const char *dir, size_t *out, int max)
{
	struct sizes_found f = {.out = out, .max = max};
	if (each_entry(dir, take_size, &f) < 0)
		return -1;
	sort_sizes(out, f.count);
	return f.count;
}

int prim_pool_sizes(size_t *out, int max)
{
	return list_sizes(HUGETLB_DIR, out, max);
}

/* The path of a file (nr_hugepages, free_hugepages, ...) of node's pool of
 * pagesize, or of the whole pool with node -1.  0, or -1 if it does not
 * fit len. */
static int pool_path(int node, size_t pagesize, const char *file, char *buf, size_t len)
{
	int n;
	if (node < 0)
		n = snprintf(buf, len, "%s/" HUGETLB_DIR "/hugepages-%zukB/%s", sysfs, pagesize >> 10, file);
	else
		n = snprintf(buf, len, "%s/" NODE_DIR "/node%d/hugepages/hugepages-%zukB/%s", sysfs, node,
			     pagesize >> 10, file);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

long long prim_pool_counter(int node, size_t pagesize, const char *file)
{
	char path[256], buf[32];

	if (pool_path(node, pagesize, file, path, sizeof(path)) < 0 ||
	    read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	/* the kernel's counters are unsigned and can transiently wrap (a
	 * reserve count of -4 reads 18446744073709551612): keep it modular */
	return (long long)strtoull(buf, NULL, 10);
}

/* One write of the whole number: the kernel sizes the pool on it. */
int prim_pool_write(int node, size_t pagesize, unsigned long long pages)
{
	char path[256], val[32];

	if (pool_path(node, pagesize, "nr_hugepages", path, sizeof(path)) < 0) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int n = snprintf(val, sizeof(val), "%llu\n", pages);
	ssize_t w = write(fd, val, (size_t)n);
	int err = w == n ? 0 : w < 0 ? errno : EIO;
	close(fd);
	if (!err)
		return 0;
	errno = err;
	return -1;
}

int prim_thp_read(const char *rel, char *buf, size_t len)
{
	char path[512], line[256];

	snprintf(path, sizeof(path), "%s/" THP_DIR "/%s", sysfs, rel);
	if (read_file(path, line, sizeof(line)) < 0)
		return -1;
	line[strcspn(line, "\n")] = '\0';
	snprintf(buf, len, "%s", line);
	return 0;
}

int prim_thp_sizes(size_t *out, int max)
{
	return list_sizes(THP_DIR, out, max);
}

/* The node a directory named node<N> stands for (the kernel's spelling
 * only: "node0", never "node00"), -1 for any other name. */
static int node_dir_number(const char *name)
{
	int v = 0;
	if (strncmp(name, "node", 4) != 0 || name[4] < '0' || name[4] > '9' ||
	    (name[4] == '0' && name[5]))
		return -1;
	for (const char *c = name + 4; *c; c++) {
		if (*c < '0' || *c > '9' || v > 99999)
			return -1;
		v = v * 10 + (*c - '0');
	}
	return v;
}

struct nodes_found {
	unsigned long *mask;
	int nbits, count;
};

static void take_node(const char *name, void *arg)
{
	struct nodes_found *f = arg;
	int n = node_dir_number(name);
	int bits = 8 * (int)sizeof(unsigned long);
	if (n >= 0 && n < f->nbits) {
		f->mask[n / bits] |= 1UL << (n % bits);
		f->count++;
	}
}

int prim_node_ids(unsigned long *mask, int nbits)
{
	struct nodes_found f = {.mask = mask, .nbits = nbits};
	return each_entry(NODE_DIR, take_node, &f) < 0 ? -1 : f.count;
}

int prim_node_read(int node, const char *file, char *buf, size_t len)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/" NODE_DIR "/node%d/%s", sysfs, node, file);
	ssize_t n = read_file(path, buf, len);
	if (n < 0)
		return -1;
	char *nl = strchr(buf, '\n');
	if (!nl && (size_t)n == len - 1) /* the line may go on: not all of it */
		return -1;
	if (nl)
		*nl = '\0';
	return 0;
}

/* ---- lines of a file -------------------------------------------------------------- */

/* Each line of fd to fn, without its end (the byte end: '\n', or '\0'
 * for the strings of an environ), until fn returns non-zero
 * (returned; 0 at the end).  The lines are read into buf (cap bytes, the
 * caller's stack).  A line that does not fit: with grow, buf becomes a
 * private mapping twice as large (up to PROC_LINE_MAX; no malloc, which
 * may be what called us), unmapped at the end, and -1 + ENOMEM if there is
 * none to be had or the line is longer still; without grow the line is
 * skipped (the cgroup files' lines are short: a long one is not ours). */
#define PROC_LINE_MAX ((size_t)1 << 20)
static int each_line_fd(int fd, char end, char *buf, size_t cap, bool grow,
			int (*fn)(char *line, void *arg), void *arg)
{
	char *const stack = buf;
	size_t have = 0;
	ssize_t n;
	int rc = 0;
	bool skipping = false; /* the rest of a line longer than buf */

	while (rc == 0 && (n = read(fd, buf + have, cap - 1 - have)) > 0) {
		have += (size_t)n;
		buf[have] = '\0';
		char *line = buf, *nl;
		while (rc == 0 && (nl = memchr(line, end, have - (size_t)(line - buf)))) {
			*nl = '\0';
			if (!skipping)
				rc = fn(line, arg);
			skipping = false;
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have < cap - 1 || rc != 0)
			continue;
		char *bigger = grow && cap < PROC_LINE_MAX
				       ? prim_map(NULL, cap * 2, PROT_READ | PROT_WRITE,
						  MAP_PRIVATE | MAP_ANONYMOUS, -1)
				       : NULL;
		if (bigger) {
			memcpy(bigger, buf, have);
			if (buf != stack)
				munmap(buf, cap);
			buf = bigger;
			cap *= 2;
		} else if (grow) {
			errno = ENOMEM;
			rc = -1;
		} else { /* no newline in a full buffer */
			have = 0;
			skipping = true;
		}
	}
	if (rc == 0 && have && !skipping) { /* a last line without newline */
		buf[have] = '\0';
		rc = fn(buf, arg);
	}
	if (buf != stack)
		munmap(buf, cap);
	return rc;
}

/* Each line of the file at path to fn: prim_proc_self_lines() says how. */
static int each_line(const char *path, int (*fn)(char *line, void *arg), void *arg)
{
	char buf[2048];
	HP_ERRNO_SAVE;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		HP_ERRNO_RESTORE;
		return -1;
	}
	int rc = each_line_fd(fd, '\n', buf, sizeof(buf), false, fn, arg);
	close(fd);
	HP_ERRNO_RESTORE;
	return rc;
}

/* ---- /proc: what the kernel says of processes (callers interpret it) -------------- */

#define PROC "/proc/"

/* "/proc/" rel into buf, without printf (hp_self_rss() is on the
 * allocation path); -1 + ENAMETOOLONG if it does not fit. */
static int proc_path(const char *rel, char *buf, size_t len)
{
	size_t n = strlen(rel);
	if (n >= len - (sizeof(PROC) - 1)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, PROC, sizeof(PROC) - 1);
	memcpy(buf + sizeof(PROC) - 1, rel, n + 1);
	return 0;
}

ssize_t prim_proc_read(const char *rel, char *buf, size_t len)
{
	char path[128];
	if (proc_path(rel, path, sizeof(path)) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	int err = errno;
	close(fd);
	errno = err;
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* Each piece of /proc/<rel> ending in end to fn: prim_proc_lines() says how. */
static int proc_pieces(const char *rel, char end, int (*fn)(char *line, void *arg), void *arg)
{
	char path[128], buf[4096];
	if (proc_path(rel, path, sizeof(path)) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	HP_ERRNO_SAVE;
	int rc = each_line_fd(fd, end, buf, sizeof(buf), true, fn, arg);
	int err = errno;
	close(fd);
	if (rc < 0)
		errno = err;
	else
		HP_ERRNO_RESTORE;
	return rc;
}

int prim_proc_lines(const char *rel, int (*fn)(char *line, void *arg), void *arg)
{
	return proc_pieces(rel, '\n', fn, arg);
}

int prim_proc_strings(const char *rel, int (*fn)(char *str, void *arg), void *arg)
{
	return proc_pieces(rel, '\0', fn, arg);
}

struct pids_found {
	void (*fn)(long pid, void *arg);
	void *arg;
};

/* A process's directory of /proc: digits alone, no leading zero, an int. */
static void take_pid(const char *name, void *arg)
{
	struct pids_found *f = arg;
	long pid = 0;

	if (name[0] < '1' || name[0] > '9')
		return;
	for (const char *c = name; *c; c++) {
		if (*c < '0' || *c > '9' || pid > (INT_MAX - 9) / 10)
			return;
		pid = pid * 10 + (*c - '0');
	}
	f->fn(pid, f->arg);
}

int prim_proc_pids(void (*fn)(long pid, void *arg), void *arg)
{
	struct pids_found f = {.fn = fn, .arg = arg};
	return each_entry_at(PROC, take_pid, &f);
}

ssize_t prim_proc_readlink(const char *rel, char *buf, size_t len)
{
	char path[128];
	if (proc_path(rel, path, sizeof(path)) < 0)
		return -1;
	ssize_t n = readlink(path, buf, len - 1);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

int prim_proc_ident(const char *rel, unsigned long long *dev, unsigned long long *ino)
{
	char path[128];
	struct stat st;
	if (proc_path(rel, path, sizeof(path)) < 0 || stat(path, &st) != 0)
		return -1;
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}

struct vmstat_want {
	const char *const *keys;
	unsigned long long *out;
	int n, found;
};

static int vmstat_line(char *line, void *arg)
{
	struct vmstat_want *w = arg;
	char *space = strchr(line, ' ');
	if (!space)
		return 0;
	*space = '\0';
	for (int i = 0; i < w->n; i++)
		if (strcmp(line, w->keys[i]) == 0) {
			char *end;
			unsigned long long v = strtoull(space + 1, &end, 10);
			if (end != space + 1 && *end == '\0') {
				w->out[i] = v;
				w->found++;
			}
		}
	return w->found == w->n;
}

int prim_vmstat(const char *const *keys, unsigned long long *out, int n)
{
	struct vmstat_want w = {.keys = keys, .out = out, .n = n};
	if (each_line(PROC "vmstat", vmstat_line, &w) < 0)
		return -1;
	return w.found;
}

/* ---- the memory cgroup ---------------------------------------------------------- */

static const char *memcg_root = "";

void prim_memcg_root(const char *root)
{
	memcg_root = root ? root : "";
}

int prim_proc_self_lines(const char *name, int (*fn)(char *line, void *arg), void *arg)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/proc/self/%s", memcg_root, name);
	return each_line(path, fn, arg);
}

int prim_memcg_lines(const char *dir, const char *file, int (*fn)(char *line, void *arg), void *arg)
{
	char path[PRIM_MEMCG_PATH_MAX + 64];
	int n = snprintf(path, sizeof(path), "%s%s/%s", memcg_root, dir, file);

	if (n < 0 || (size_t)n >= sizeof(path))
		return -1;
	return each_line(path, fn, arg);
}

int prim_memcg_read(const char *dir, const char *file, char *buf, size_t len)
{
	char path[PRIM_MEMCG_PATH_MAX + 64];
	int n = snprintf(path, sizeof(path), "%s%s/%s", memcg_root, dir, file);

	if (n < 0 || (size_t)n >= sizeof(path) || read_file(path, buf, len) < 0)
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* ---- randomness ---------------------------------------------------------------------- */

int prim_random(void *buf, size_t len)
{
	long n = syscall(SYS_getrandom, buf, len, GRND_NONBLOCK);
	if (n == (long)len)
		return 0;
	if (n >= 0)
		errno = EAGAIN;
	return -1;
}
