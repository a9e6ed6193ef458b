/* See populate_util.h. */
#include "populate_util.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define MAX_HELD 64

static int uffd = -1;
static pthread_t server;
static _Atomic bool stopping, holding;
static _Atomic int worker_faults, nheld;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t held[MAX_HELD]; /* addresses of held faults */
static char zero_page[PAGE] __attribute__((aligned(PAGE)));

/* A thread of hpalloc's populate workers (by the name it gives itself). */
static bool is_worker(unsigned tid)
{
	char path[64], comm[32] = "";
	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, comm, sizeof(comm) - 1);
	close(fd);
	return n > 0 && strcmp(comm, "hpalloc-ahead\n") == 0;
}

/* One 4 KiB zero page in; a page that is there already (a race) wakes. */
static void serve(uintptr_t addr)
{
	struct uffdio_copy copy = {.dst = addr & ~(uintptr_t)(PAGE - 1), .src = (uintptr_t)zero_page,
				   .len = PAGE};
	if (ioctl(uffd, UFFDIO_COPY, &copy) == 0 || errno != EEXIST)
		return;
	struct uffdio_range wake = {.start = copy.dst, .len = PAGE};
	ioctl(uffd, UFFDIO_WAKE, &wake);
}

static void serve_held(void)
{
	pthread_mutex_lock(&held_lock);
	for (int i = 0; i < atomic_load(&nheld); i++)
		serve(held[i]);
	atomic_store(&nheld, 0);
	pthread_mutex_unlock(&held_lock);
}

static void on_fault(const struct uffd_msg *m)
{
	uintptr_t addr = (uintptr_t)m->arg.pagefault.address;

	if (!is_worker(m->arg.pagefault.feat.ptid)) {
		serve(addr);
		return;
	}
	atomic_fetch_add(&worker_faults, 1);
	pthread_mutex_lock(&held_lock);
	bool keep = atomic_load(&holding) && atomic_load(&nheld) < MAX_HELD;
	if (keep)
		held[atomic_fetch_add(&nheld, 1)] = addr;
	pthread_mutex_unlock(&held_lock);
	if (!keep)
		serve(addr);
}

static void *server_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&stopping)) {
		struct pollfd p = {.fd = uffd, .events = POLLIN};
		if (poll(&p, 1, 20) <= 0)
			continue;
		struct uffd_msg m;
		if (read(uffd, &m, sizeof(m)) != sizeof(m))
			continue;
		if (m.event == UFFD_EVENT_PAGEFAULT)
			on_fault(&m);
	}
	return NULL;
}

int pop_hold_start(void *addr, size_t len, char *why, size_t why_len)
{
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0) {
		snprintf(why, why_len, "userfaultfd: %s (kernel faults need CAP_SYS_PTRACE)", strerror(errno));
		return -1;
	}
	struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_THREAD_ID};
	struct uffdio_register reg = {.range = {.start = (uintptr_t)addr, .len = len},
				      .mode = UFFDIO_REGISTER_MODE_MISSING};
	if (ioctl(uffd, UFFDIO_API, &api) < 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
		snprintf(why, why_len, "userfaultfd API or register: %s", strerror(errno));
		close(uffd);
		uffd = -1;
		return -1;
	}
	atomic_store(&stopping, false);
	atomic_store(&worker_faults, 0);
	atomic_store(&nheld, 0);
	if (pthread_create(&server, NULL, server_main, NULL) != 0) {
		snprintf(why, why_len, "no thread to serve faults");
		close(uffd);
		uffd = -1;
		return -1;
	}
	return 0;
}

void pop_hold_workers(bool hold)
{
	atomic_store(&holding, hold);
	if (!hold)
		serve_held();
}

bool pop_hold_wait_held(unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		if (atomic_load(&nheld) > 0)
			return true;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return atomic_load(&nheld) > 0;
}

uintptr_t pop_hold_first_held(void)
{
	pthread_mutex_lock(&held_lock);
	uintptr_t addr = atomic_load(&nheld) > 0 ? held[0] : 0;
	pthread_mutex_unlock(&held_lock);
	return addr;
}

int pop_hold_worker_faults(void)
{
	return atomic_load(&worker_faults);
}

void pop_hold_stop(void)
{
	if (uffd < 0)
		return;
	pop_hold_workers(false);
	atomic_store(&stopping, true);
	pthread_join(server, NULL);
	close(uffd); /* wakes any fault still waiting: it then retries without us */
	uffd = -1;
}

void pop_hold_require(void)
{
	harness_need_thp();
	if (!harness_is_root())
		harness_skip_cap("root", "holding a worker needs userfaultfd for kernel faults (CAP_SYS_PTRACE)");
}

static uint64_t ahead_before;

bool pop_workers_populated(void)
{
	return harness_stat_reaches(HP_STAT_POPULATE_AHEAD_BYTES, ahead_before + 1, 10000);
}

int pop_fresh_block_whole(size_t size, uint64_t seed, bool (*meanwhile)(void))
{
	struct hp_stats st;
	int bad = 0;
	if (hp_stats_get(&st) != 0)
		return 1;
	ahead_before = st.v[HP_STAT_POPULATE_AHEAD_BYTES];
	char *p = hp_malloc(size);
	if (!p) {
		fprintf(stderr, "FAIL: hp_malloc(%zu): %s\n", size, strerror(errno));
		return 1;
	}
	harness_fill_slowly(p, POP_FILLED, seed, 0);
	if (meanwhile && !meanwhile()) {
		fprintf(stderr, "FAIL: what the workers were to do did not happen within 10 s\n");
		bad = 1;
	}
	harness_fill_slowly(p + POP_FILLED, size - POP_FILLED, seed + 1, 1);
	if (harness_check_filled(p, POP_FILLED, seed) != SIZE_MAX ||
	    harness_check_filled(p + POP_FILLED, size - POP_FILLED, seed + 1) != SIZE_MAX) {
		fprintf(stderr, "FAIL: the block lost data\n");
		bad = 1;
	}
	/* on huge pages from the first fault, or (populate_pages: 4 KiB
	 * first) once a worker collapsed it behind the program */
	if (!harness_huge_within(p, size, 30000)) {
		fprintf(stderr, "FAIL: the block is not on huge pages 30 s after it was filled "
			"(AnonHugePages %zu of %zu)\n", harness_anon_huge(p, size), size);
		bad = 1;
	}
	hp_free(p);
	return bad;
}

char *pop_hold_block(size_t len, bool *skip, char *why, size_t why_len)
{
	*skip = false;
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("uring", "off");
	hp_knob_set("populate", "1");
	char *p = hp_malloc(len);
	if (!p) {
		snprintf(why, why_len, "hp_malloc(%zu): %s", len, strerror(errno));
		return NULL;
	}
	if (pop_hold_start(p, len, why, why_len) < 0) {
		*skip = true;
		hp_free(p);
		return NULL;
	}
	pop_hold_workers(true);
	harness_fill(p, POP_FILLED, 1); /* chunks 0 and 1: the job starts */
	if (!pop_hold_wait_held(10000)) {
		snprintf(why, why_len, "no populate worker faulted in the block within 10 s "
			 "(%d worker faults): the test would not test", pop_hold_worker_faults());
		pop_hold_stop();
		return NULL;
	}
	return p;
}
