/* See fault.h. */
#include "fault.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <liburing.h>

#include "hpalloc.h"

static _Atomic int submit_err, submit_times, submit_failed, partial_times;
static _Atomic int init_err;
static _Atomic unsigned ring_entries;
static _Atomic int ring_inits;
static _Atomic unsigned init_pause_ms;
static _Atomic int pthread_err, pthread_ok_left = -1;
static _Atomic int madvise_advice = -1, madvise_err, madvise_refused, madvise_times = -1;
static char *_Atomic madvise_lo, *_Atomic madvise_hi; /* [lo, hi): the calls refused; NULL: all */
static _Atomic int register_err;

void fault_submit(int err, int times)
{
	atomic_store(&submit_times, times);
	atomic_store(&submit_err, err);
}

void fault_submit_partial(int times)
{
	atomic_store(&partial_times, times);
}

int fault_submit_partial_left(void)
{
	int left = atomic_load(&partial_times);
	return left > 0 ? left : 0;
}

/* What liburing's submit does, but with to_submit = 1: the kernel takes the
 * first entry and leaves the others queued behind the head it publishes. */
static int submit_one(struct io_uring *ring)
{
	struct io_uring_sq *sq = &ring->sq;
	if (sq->sqe_head != sq->sqe_tail) {
		sq->sqe_head = sq->sqe_tail;
		io_uring_smp_store_release(sq->ktail, sq->sqe_tail);
	}
	/* hpalloc registers its ring and closes the plain fd (lib/threads/ring.c):
	 * enter through the registered index then, as liburing does */
	if (ring->int_flags & 1 /* liburing's INT_FLAG_REG_RING */)
		return io_uring_enter((unsigned)ring->enter_ring_fd, 1, 0, IORING_ENTER_REGISTERED_RING, NULL);
	return io_uring_enter((unsigned)ring->ring_fd, 1, 0, 0, NULL);
}

int fault_submit_failures(void)
{
	return atomic_load(&submit_failed);
}

void fault_queue_init(int err)
{
	atomic_store(&init_err, err);
}

void fault_ring_entries(unsigned entries)
{
	atomic_store(&ring_entries, entries);
}

int fault_ring_inits(void)
{
	return atomic_load(&ring_inits);
}

void fault_ring_init_pause(unsigned ms)
{
	atomic_store(&init_pause_ms, ms);
}

void fault_pthread_create(int err)
{
	atomic_store(&pthread_ok_left, -1);
	atomic_store(&pthread_err, err);
}

void fault_pthread_create_after(int ok, int err)
{
	atomic_store(&pthread_ok_left, ok);
	atomic_store(&pthread_err, err);
}

void fault_register_ring(int err)
{
	atomic_store(&register_err, err);
}

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "fault: no next %s\n", name);
		abort();
	}
	return f;
}

int io_uring_submit(struct io_uring *ring)
{
	static int (*real)(struct io_uring *);
	int err = atomic_load(&submit_err);

	if (err && atomic_fetch_sub(&submit_times, 1) > 0) {
		atomic_fetch_add(&submit_failed, 1);
		return -err;
	}
	if (io_uring_sq_ready(ring) > 1 && atomic_fetch_sub(&partial_times, 1) > 0)
		return submit_one(ring);
	if (!real)
		real = (int (*)(struct io_uring *))next("io_uring_submit");
	return real(ring);
}

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	static int (*real)(unsigned, struct io_uring *, unsigned);
	int err = atomic_load(&init_err);
	unsigned want = atomic_load(&ring_entries);

	if (err)
		return -err;
	if (!real)
		real = (int (*)(unsigned, struct io_uring *, unsigned))next("io_uring_queue_init");
	int rc = real(want ? want : entries, ring, flags);
	unsigned pause = atomic_load(&init_pause_ms);
	if (rc == 0) {
		atomic_fetch_add(&ring_inits, 1);
		if (pause) {
			struct timespec ts = {.tv_sec = pause / 1000,
					      .tv_nsec = (long)(pause % 1000) * 1000000};
			nanosleep(&ts, NULL);
		}
	}
	return rc;
}

int io_uring_register_ring_fd(struct io_uring *ring)
{
	static int (*real)(struct io_uring *);
	int err = atomic_load(&register_err);

	if (err)
		return -err;
	if (!real)
		real = (int (*)(struct io_uring *))next("io_uring_register_ring_fd");
	return real(ring);
}

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	static create_fn real;
	int err = atomic_load(&pthread_err);

	if (err && (atomic_load(&pthread_ok_left) < 0 || atomic_fetch_sub(&pthread_ok_left, 1) <= 0))
		return err;
	if (!real)
		real = (create_fn)next("pthread_create");
	return real(t, attr, fn, arg);
}

void fault_madvise(int advice, int err)
{
	fault_madvise_times(advice, err, -1);
}

void fault_madvise_times(int advice, int err, int times)
{
	atomic_store(&madvise_lo, NULL);
	atomic_store(&madvise_times, times);
	atomic_store(&madvise_err, err);
	atomic_store(&madvise_advice, err ? advice : -1);
}

int fault_madvise_refused(void)
{
	return atomic_load(&madvise_refused);
}

/* Whether every page of [addr, addr + len) is resident (mincore). */
static bool all_resident(void *addr, size_t len)
{
	size_t pages = len / 4096;
	unsigned char vec[4096];
	if (pages == 0 || pages > sizeof(vec) || syscall(SYS_mincore, addr, len, vec) != 0)
		return false;
	for (size_t i = 0; i < pages; i++)
		if (!(vec[i] & 1))
			return false;
	return true;
}

void fault_madvise_within(int advice, int err, int times, void *addr, size_t len)
{
	fault_madvise_times(advice, err, times);
	atomic_store(&madvise_hi, (char *)addr + len);
	atomic_store(&madvise_lo, (char *)addr);
}

static bool refused_here(void *addr, size_t len)
{
	char *lo = atomic_load(&madvise_lo), *hi = atomic_load(&madvise_hi);
	return !lo || ((char *)addr >= lo && (char *)addr + len <= hi && all_resident(addr, len));
}

int madvise(void *addr, size_t len, int advice)
{
	static int (*real)(void *, size_t, int);

	if (advice == atomic_load(&madvise_advice) && atomic_load(&madvise_times) != 0 &&
	    refused_here(addr, len)) {
		if (atomic_load(&madvise_times) > 0)
			atomic_fetch_sub(&madvise_times, 1);
		atomic_fetch_add(&madvise_refused, 1);
		errno = atomic_load(&madvise_err);
		return -1;
	}
	if (!real)
		real = (int (*)(void *, size_t, int))next("madvise");
	return real(addr, len, advice);
}

static _Atomic int move_err, move_times, move_how, move_refused, move_skip;
static unsigned char *_Atomic taken;
static _Atomic size_t taken_len;
static void *_Atomic refused_dest;

void fault_mremap_fixed(int err, enum fault_move how, int times)
{
	fault_mremap_fixed_after(0, err, how, times);
}

void fault_mremap_fixed_after(int skip, int err, enum fault_move how, int times)
{
	atomic_store(&move_skip, err ? skip : 0);
	if (err) { /* a new staging: its own count, no mapping taken yet */
		atomic_store(&move_refused, 0);
		atomic_store(&refused_dest, NULL);
		atomic_store(&taken, NULL);
		atomic_store(&taken_len, 0);
	}
	atomic_store(&move_how, (int)how);
	atomic_store(&move_times, err ? times : 0);
	atomic_store(&move_err, err);
}

int fault_mremap_refused(void)
{
	return atomic_load(&move_refused);
}

void *fault_move_refused_dest(void)
{
	return atomic_load(&refused_dest);
}

unsigned char *fault_move_taken(size_t *len)
{
	*len = atomic_load(&taken_len);
	return atomic_load(&taken);
}

/* One of the `times` calls still to stage taken, if any is left. */
static bool take_one(_Atomic int *times)
{
	int left = atomic_load(times);
	while (left > 0)
		if (atomic_compare_exchange_weak(times, &left, left - 1))
			return true;
	return false;
}

static bool refuse_move(void)
{
	return atomic_load(&move_err) && !take_one(&move_skip) && take_one(&move_times);
}

static void take(void *dest, size_t len)
{
	unsigned char *p = mmap(dest, len, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != dest) {
		fprintf(stderr, "fault: could not map the cleared %zu bytes at %p\n", len, dest);
		abort();
	}
	memset(p, 0x5a, len);
	atomic_store(&taken_len, len);
	atomic_store(&taken, p);
}

static _Atomic int off_times;
static void *_Atomic blocker;

void fault_map_off_boundary(int times)
{
	atomic_store(&blocker, NULL);
	atomic_store(&off_times, times);
}

void *fault_blocker(void)
{
	return atomic_load(&blocker);
}

static _Atomic int reserve_times, reserve_refused, reserve_skip;

void fault_map_reserve(int times)
{
	fault_map_reserve_after(0, times);
}

void fault_map_reserve_after(int skip, int times)
{
	if (times) /* a new staging: its own count */
		atomic_store(&reserve_refused, 0);
	atomic_store(&reserve_skip, times ? skip : 0);
	atomic_store(&reserve_times, times);
}

int fault_map_reserve_refused(void)
{
	return atomic_load(&reserve_refused);
}

static bool refused_reservation(int prot, int flags, int fd)
{
	int reserve = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	if (prot != PROT_NONE || fd != -1 || (flags & reserve) != reserve || take_one(&reserve_skip) ||
	    !take_one(&reserve_times))
		return false;
	atomic_fetch_add(&reserve_refused, 1);
	return true;
}

/* The kernel's mmap, past ASan's interceptor and this file's mmap. */
static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

#define MAX_HINT_BLOCKERS 16
static _Atomic int hint_times, hints_taken;
static void *_Atomic hint_blockers[MAX_HINT_BLOCKERS];

void fault_map_hint_taken(int times)
{
	if (times) /* a new staging: its own count */
		atomic_store(&hints_taken, 0);
	atomic_store(&hint_times, times);
}

int fault_map_hints_taken(void)
{
	return atomic_load(&hints_taken);
}

void fault_hint_blockers_unmap(void)
{
	for (int i = 0; i < MAX_HINT_BLOCKERS; i++) {
		void *b = atomic_exchange(&hint_blockers[i], NULL);
		if (b)
			munmap(b, 4096);
	}
}

/* A hint for a file's or hugetlb pages' mapping, its place to be taken. */
static bool hint_to_take(void *addr, int flags, int fd)
{
	if (!addr || (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) ||
	    !((flags & MAP_HUGETLB) || (fd >= 0 && (flags & MAP_SHARED))))
		return false;
	return take_one(&hint_times);
}

/* Another thread's page at addr (a single-threaded test: nobody else). */
static void take_hint(void *addr)
{
	void *b = sys_mmap(addr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (b != addr) {
		fprintf(stderr, "fault: could not take the hinted place %p\n", addr);
		abort();
	}
	int n = atomic_fetch_add(&hints_taken, 1);
	if (n >= MAX_HINT_BLOCKERS) {
		fprintf(stderr, "fault: more than %d hinted places taken\n", MAX_HINT_BLOCKERS);
		abort();
	}
	atomic_store(&hint_blockers[n], b);
}

static bool staged_call(void *addr, size_t len, int flags, int fd)
{
	if (addr || len < 2 * 1024 * 1024 || !((flags & MAP_HUGETLB) || (fd >= 0 && (flags & MAP_SHARED))))
		return false;
	return take_one(&off_times);
}

static void unmap_span(char *from, char *to)
{
	if (to > from)
		munmap(from, (size_t)(to - from));
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	const size_t two = 2 * 1024 * 1024;
	if (refused_reservation(prot, flags, fd)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	if (hint_to_take(addr, flags, fd))
		take_hint(addr);
	if (!staged_call(addr, len, flags, fd))
		return sys_mmap(addr, len, prot, flags, fd, off);
	char *r = sys_mmap(NULL, len + 3 * two, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return r;
	char *end = r + len + 3 * two, *at = (char *)(((uintptr_t)r + two - 1) & ~(uintptr_t)(two - 1));
	if (!(flags & MAP_HUGETLB))
		at += 4096;
	char *p = sys_mmap(at, len, prot, flags | MAP_FIXED, fd, off);
	int err = errno;
	if (p == MAP_FAILED) { /* single-threaded test: nobody took the place */
		munmap(r, (size_t)(end - r));
		errno = err;
		return p;
	}
	unmap_span(r, at);
	char *rest = at + len;
	if (flags & MAP_HUGETLB) {
		atomic_store(&blocker, rest);
		rest += 4096;
	}
	unmap_span(rest, end);
	return p;
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	static void *(*real)(void *, size_t, size_t, int, ...);
	void *dest = NULL;

	if (flags & MREMAP_FIXED) {
		va_list ap;
		va_start(ap, flags);
		dest = va_arg(ap, void *);
		va_end(ap);
		if (refuse_move()) {
			int how = atomic_load(&move_how);
			if (how != FAULT_MOVE_REFUSED)
				munmap(dest, new_len);
			if (how == FAULT_MOVE_TAKEN)
				take(dest, new_len);
			atomic_fetch_add(&move_refused, 1);
			atomic_store(&refused_dest, dest);
			errno = atomic_load(&move_err);
			return MAP_FAILED;
		}
	}
	if (!real)
		real = (void *(*)(void *, size_t, size_t, int, ...))next("mremap");
	return real(old, old_len, new_len, flags, dest);
}

long fault_others_cpu_ms(void)
{
	long me = (long)syscall(SYS_gettid), tick = sysconf(_SC_CLK_TCK), total = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	if (!d || tick <= 0)
		abort();
	while ((e = readdir(d))) {
		char path[64], buf[1024];
		long tid = strtol(e->d_name, NULL, 10);
		if (tid <= 0 || tid == me)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* gone meanwhile */
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		/* fields after the command name (which may hold spaces): state is
		 * field 3, utime 14, stime 15 */
		const char *p = strrchr(buf, ')');
		unsigned long ut, st;
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
			total += (long)(ut + st) * 1000 / tick;
	}
	closedir(d);
	return total;
}

int fault_fds_linking(const char *target, int *first)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	*first = -1;
	if (!d)
		abort();
	while ((e = readdir(d))) {
		char path[64], link[256];
		int fd = (int)strtol(e->d_name, NULL, 10);
		if (e->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t len = readlink(path, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = '\0';
		if (strcmp(link, target) != 0)
			continue;
		n++;
		if (*first < 0 || fd < *first)
			*first = fd;
	}
	closedir(d);
	return n;
}

long fault_thread_syscall(int tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long nr = -1;
	if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%ld", &nr) != 1)
		nr = -1;
	fclose(f);
	return nr;
}

int fault_seccomp_refuse(long nr, int err)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int fault_seccomp_no_io_uring(void)
{
	return fault_seccomp_refuse(__NR_io_uring_setup, EPERM);
}

