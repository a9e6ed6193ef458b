/* Shared blocks: huge pages several processes map, by descriptor.
 *
 * A shared block is a memfd mapped MAP_SHARED.  Preferred: a hugetlb memfd
 * (MFD_HUGETLB with the page size the `pagesize` knob chooses): mmap
 * without MAP_NORESERVE reserves its pool pages in the file, so a short
 * pool fails here (ENOMEM) and never later as a SIGBUS -- in this process
 * or in any other that maps the descriptor, since the reservation belongs
 * to the file.  Else the `fallback` knob decides: thp = a shmem memfd with
 * MADV_HUGEPAGE (transparent huge pages where the kernel's shmem_enabled
 * allows them, ordinary pages otherwise), small = the same without the
 * advice, fail = ENOMEM.  policy.c makes these choices (policy_shared_plan,
 * policy_fallback), by the same rules as for private blocks.
 *
 * Every block is sealed when it is made, before anyone else can have its
 * descriptor: F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL.  Any process
 * holding the descriptor (every receiver does) could otherwise ftruncate()
 * it, and every process mapping it would die of SIGBUS at its next touch
 * beyond the new end.  hp_shared_map() therefore maps only a memfd sealed
 * against shrinking and growing, whose size is one a block can have: the
 * mapping then covers pages that stay as long as it does.  (The seals do
 * not forbid fallocate(FALLOC_FL_PUNCH_HOLE): only F_SEAL_WRITE does, which
 * forbids writable mappings too.  A hole reads as zeros; on hugetlb its
 * pages go back to the pool, and touching it again needs a free one.)
 *
 * Shared blocks never enter the private reuse cache nor the release ring:
 * other processes may map the same pages, and the kernel frees them when
 * the last descriptor and mapping are gone.  Each process keeps its own
 * record (address, length, descriptor, backend) in a small list under
 * shared_lock; hp_shared_free() unmaps and closes.  A forked child inherits
 * mappings, descriptors and records: it may use and free them as its own.
 */
#include "internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
/* What a block's size is sealed with, and what hp_shared_map() requires. */
#define SEALS_SIZE (F_SEAL_SHRINK | F_SEAL_GROW)
#define SEALS_BLOCK (SEALS_SIZE | F_SEAL_SEAL)

struct shared {
	void *addr;
	size_t len;
	int fd;
	int backend;      /* HP_BACKEND_HUGETLB, _THP (advised shmem), _SMALL */
	size_t kernel_page_size; /* hugetlb page size, else 4096 (shmem) */
	struct shared *next;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared *blocks;

/* A memfd of len bytes, sealed at that size (hugetlb pages of pagesize,
 * else shmem), or -1.  A kernel that cannot seal a hugetlb memfd (before
 * 4.16) refuses it here: the block then goes by the fallback knob. */
static int shared_memfd(size_t len, size_t pagesize)
{
	return prim_memfd(pagesize ? "hpalloc-shared-hugetlb" : "hpalloc-shared", len, pagesize, SEALS_BLOCK);
}

/* Map len bytes of fd; for shmem on a 2 MiB boundary, so THP can back it. */
static void *map_fd(int fd, size_t len, bool align)
{
	int prot = PROT_READ | PROT_WRITE;
	return align ? prim_map_aligned(len, prot, MAP_SHARED, fd) : prim_map(NULL, len, prot, MAP_SHARED, fd);
}

/* A hugetlb memfd of len bytes, mapped (pool pages reserved), or -1. */
static int create_hugetlb(size_t len, size_t pagesize, struct shared *s)
{
	int fd = shared_memfd(len, pagesize);
	if (fd < 0)
		return -1;
	if ((s->addr = map_fd(fd, len, false))) {
		*s = (struct shared){s->addr, len, fd, HP_BACKEND_HUGETLB, pagesize, NULL};
		return 0;
	}
	close(fd);
	return -1;
}

static int create_shmem(size_t len, bool advise, struct shared *s)
{
	int fd = shared_memfd(len, 0);
	if (fd < 0)
		return -1;
	if ((s->addr = map_fd(fd, len, true))) {
		if (advise)
			prim_advise(s->addr, len, MADV_HUGEPAGE);
		*s = (struct shared){s->addr, len, fd, advise ? HP_BACKEND_THP : HP_BACKEND_SMALL,
				     HP_BASE_PAGE, NULL};
		return 0;
	}
	close(fd);
	return -1;
}

static void *remember(struct shared *s)
{
	struct shared *rec = malloc(sizeof(*rec));
	if (!rec) {
		prim_unmap(s->addr, s->len);
		close(s->fd);
		errno = ENOMEM;
		return NULL;
	}
	*rec = *s;
	pthread_mutex_lock(&shared_lock);
	rec->next = blocks;
	blocks = rec;
	pthread_mutex_unlock(&shared_lock);
	stat_add(HP_STAT_SHARED_LIVE_BYTES, rec->len);
	stat_add(HP_STAT_SHARED_LIVE_BLOCKS, 1);
	return rec->addr;
}

/* The block policy.c plans (hugetlb first when the knobs say so), then
 * what the fallback knob gives. */
static int create(size_t size, size_t pagesize, struct shared *s)
{
	struct hp_plan p = policy_shared_plan(size, pagesize);

	if (p.backend == HP_BACKEND_HUGETLB) {
		size_t len = hp_align_up(size, p.pagesize);
		if (len >= size && create_hugetlb(len, p.pagesize, s) == 0)
			return 0;
		stat_add(HP_STAT_SHARED_FALLBACKS, 1);
		p.backend = policy_fallback();
		if (p.backend < 0) {
			hp_log(1, "shared block of %zu bytes: hugetlb pool short, fallback=fail", size);
			errno = ENOMEM;
			return -1;
		}
		hp_log(1, "shared block of %zu bytes: hugetlb pool short: %s memory", size,
		       p.backend == HP_BACKEND_THP ? "THP shmem" : "ordinary shared");
	}
	return create_shmem(hp_align_up(size, HP_THP_SIZE), p.backend == HP_BACKEND_THP, s);
}

static void *shared_alloc(size_t size, size_t pagesize, int *fd_out)
{
	struct shared s;
	HP_ERRNO_SAVE;

	if (size == 0 || size > HP_MAX_BLOCK ||
	    (pagesize && !os_pagesize_supported(pagesize))) {
		errno = size ? (pagesize ? EINVAL : ENOMEM) : EINVAL;
		return NULL;
	}
	hp_init();
	if (create(size, pagesize, &s) != 0) {
		stat_add(HP_STAT_FAILURES, 1);
		errno = ENOMEM;
		return NULL;
	}
	void *p = remember(&s);
	if (p) {
		if (fd_out)
			*fd_out = s.fd;
		HP_ERRNO_RESTORE;
	}
	return p;
}

/* fd is a block another process may have made: a memfd (shmem or
 * hugetlbfs) sealed so that its size cannot change, writable, of a size a
 * block can have.  Its page size goes to *pagesize (0: shmem).  Else
 * false, with the reason logged (verbose). */
static bool sealed_block(int fd, size_t *len, size_t *pagesize)
{
	struct prim_memfd m;
	const char *why = NULL;

	if (prim_memfd_stat(fd, &m, &why) == 0) {
		if (m.seals < 0 || (m.seals & SEALS_SIZE) != SEALS_SIZE)
			why = "its size is not sealed (F_SEAL_SHRINK, F_SEAL_GROW)";
		else if (m.seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))
			why = "sealed against writing";
		else if (m.len == 0 || m.len % m.kernel_page_size)
			why = "its size is no multiple of its page size";
	}
	if (why) {
		hp_log(1, "shared block descriptor %d refused: %s", fd, why);
		return false;
	}
	*len = m.len;
	*pagesize = m.hugetlb ? m.kernel_page_size : 0;
	return true;
}

static void *shared_map(int fd, size_t *size_out)
{
	struct shared s = {0};
	size_t pagesize;
	HP_ERRNO_SAVE;

	hp_init();
	if (fd < 0 || !sealed_block(fd, &s.len, &pagesize)) {
		errno = EINVAL;
		return NULL;
	}
	bool hugetlb = pagesize != 0;
	s.fd = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* ours to close; the caller keeps fd */
	if (s.fd < 0)
		return NULL;
	s.addr = map_fd(s.fd, s.len, !hugetlb);
	if (!s.addr) {
		close(s.fd);
		return NULL;
	}
	/* shmem THP can only come from advice (or shmem_enabled=always) */
	if (!hugetlb)
		prim_advise(s.addr, s.len, MADV_HUGEPAGE);
	s.backend = hugetlb ? HP_BACKEND_HUGETLB : HP_BACKEND_THP;
	s.kernel_page_size = hugetlb ? pagesize : HP_BASE_PAGE;
	void *p = remember(&s);
	if (p) {
		if (size_out)
			*size_out = s.len;
		HP_ERRNO_RESTORE;
	}
	return p;
}

/* The record of the block containing addr; shared_lock held. */
static struct shared **find_locked(const void *addr)
{
	for (struct shared **pp = &blocks; *pp; pp = &(*pp)->next)
		if ((const char *)addr >= (char *)(*pp)->addr &&
		    (const char *)addr < (char *)(*pp)->addr + (*pp)->len)
			return pp;
	return NULL;
}

static int shared_free(void *ptr)
{
	pthread_mutex_lock(&shared_lock);
	struct shared **pp = ptr ? find_locked(ptr) : NULL, *s = pp ? *pp : NULL;
	if (s && s->addr == ptr)
		*pp = s->next;
	pthread_mutex_unlock(&shared_lock);
	if (!s || s->addr != ptr) {
		errno = EINVAL;
		return -1;
	}
	HP_ERRNO_SAVE;
	prim_unmap(s->addr, s->len);
	close(s->fd);
	stat_sub(HP_STAT_SHARED_LIVE_BYTES, s->len);
	stat_sub(HP_STAT_SHARED_LIVE_BLOCKS, 1);
	free(s);
	HP_ERRNO_RESTORE;
	return 0;
}

/* The entry points: log lines, close() and the probes are cancellation
 * points, which hpalloc's calls are not (see HP_NOCANCEL_BEGIN). */
void *hp_shared_alloc(size_t size, size_t pagesize, int *fd_out)
{
	HP_NOCANCEL_BEGIN;
	void *p = shared_alloc(size, pagesize, fd_out);
	HP_NOCANCEL_END;
	return p;
}

void *hp_shared_map(int fd, size_t *size_out)
{
	HP_NOCANCEL_BEGIN;
	void *p = shared_map(fd, size_out);
	HP_NOCANCEL_END;
	return p;
}

int hp_shared_free(void *ptr)
{
	HP_NOCANCEL_BEGIN;
	int rc = shared_free(ptr);
	HP_NOCANCEL_END;
	return rc;
}

int hp_shared_info(const void *ptr, struct hp_shared_info *out)
{
	if (!ptr || !out) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&shared_lock);
	struct shared **pp = find_locked(ptr);
	if (pp)
		*out = (struct hp_shared_info){.addr = (*pp)->addr, .size = (*pp)->len, .fd = (*pp)->fd,
					       .backend = (*pp)->backend, .page_size = (*pp)->kernel_page_size};
	pthread_mutex_unlock(&shared_lock);
	if (!pp) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* For hp_backing(): the shared mapping containing addr. */
bool shared_lookup(const void *addr, struct hp_map *out)
{
	pthread_mutex_lock(&shared_lock);
	struct shared **pp = find_locked(addr);
	if (pp)
		*out = (struct hp_map){.addr = (*pp)->addr, .len = (*pp)->len,
				       .kernel_page_size = (*pp)->kernel_page_size, .backend = (*pp)->backend};
	pthread_mutex_unlock(&shared_lock);
	return pp != NULL;
}

void shared_fork(int phase)
{
	fork_mutex(&shared_lock, phase);
}
