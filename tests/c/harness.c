/* Shared helpers of the cmocka C tests; see harness.h. */
#include "harness.h"
#include "caps.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/io_uring.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CHILD_FLAG "--harness-child"
#define DEFAULT_WATCHDOG_S 90

/* Under ASan an impossible size must come back as NULL + ENOMEM, as glibc
 * does, not abort the test (errors.c asks for exactly that).  ASAN_OPTIONS
 * still overrides. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

static char control_dir[256];
static pid_t owner_pid;

/* One glibc arena for the whole test process.  The tests ask the kernel
 * whether a released block's address range is still mapped
 * (harness_mapped); a thread's first malloc or free makes glibc reserve a
 * new 64 MiB-aligned arena (128 MiB PROT_NONE, then trimmed), and the
 * kernel places it at the top of the free address space -- often exactly
 * where a block was just unmapped.  The janitor's first free (of a block
 * record, right after the munmap) did so in CI: tests/c/cache read
 * "0x1000000 != 0" for a block the library had unmapped.  With one arena no
 * thread reserves one.  Before main, so before any thread exists (glibc
 * fixes its arena limit at the first thread's first allocation); ASan
 * ignores it and has no arenas. */
__attribute__((constructor)) static void one_malloc_arena(void)
{
	mallopt(M_ARENA_MAX, 1);
}
static unsigned skipped_cases;
static const char *current_case = "?";

static void write_stderr(const char *msg)
{
	if (write(STDERR_FILENO, msg, strlen(msg)) < 0) {
		/* stderr gone: nothing to report to */
	}
}

static void on_fatal_signal(int sig)
{
	if (sig == SIGALRM)
		write_stderr("harness: watchdog expired: the test hung "
			     "(deadlock?) - failing\n");
	else
		write_stderr("harness: killed by a signal, restoring hugetlb pools\n");
	if (getpid() == owner_pid)
		harness_pools_restore_raw();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int remove_entry(const char *path, const struct stat *sb, int type,
			struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void at_exit_cleanup(void)
{
	if (getpid() != owner_pid)
		return;
	harness_pools_restore();
	if (control_dir[0])
		nftw(control_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Inherited HPALLOC_* settings would make results depend on the caller's
 * shell; each test sets the knobs it relies on. */
static void drop_inherited_knobs(void)
{
	for (;;) {
		char name[128] = "";
		for (char **e = environ; *e; e++) {
			if (strncmp(*e, "HPALLOC_", 8) == 0) {
				size_t n = strcspn(*e, "=");
				if (n < sizeof(name)) {
					memcpy(name, *e, n);
					name[n] = '\0';
				}
				break;
			}
		}
		if (!name[0] || unsetenv(name) != 0)
			return;
	}
}

static void install_signal_handlers(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGALRM };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
}

/* Crash handling as it was before cmocka: the default action, or the
 * sanitizer's reporter under ASan. */
static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE };
static struct sigaction crash_actions[ARRAY_SIZE(crash_signals)];

static void save_crash_actions(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(crash_signals); i++)
		sigaction(crash_signals[i], NULL, &crash_actions[i]);
}

void harness_crash_kills_process(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(crash_signals); i++)
		sigaction(crash_signals[i], &crash_actions[i], NULL);
}

void harness_set_watchdog(unsigned seconds)
{
	alarm(seconds);
}

/* Whether tests/capabilities (HARNESS_CAPS_FILE, the one list all three
 * harnesses share) names cap.  An unreadable list is a harness error. */
static bool known_cap(const char *cap, size_t n)
{
	FILE *f = fopen(HARNESS_CAPS_FILE, "re");
	char line[256];
	bool found = false;

	if (!f) {
		fprintf(stderr, "harness: cannot read %s: %s\n", HARNESS_CAPS_FILE, strerror(errno));
		exit(99);
	}
	while (!found && fgets(line, sizeof(line), f))
		found = line[0] != '#' && strcspn(line, " \t\n") == n && strncmp(line, cap, n) == 0;
	fclose(f);
	return found;
}

/* HPALLOC_TEST_REQUIRE=cap,cap...: a name tests/capabilities does not list
 * is an error (a typo would otherwise require nothing). */
static void read_required_caps(void)
{
	size_t n;
	const char *bad = caps_read(known_cap, &n);

	if (bad) {
		fprintf(stderr, "harness: HPALLOC_TEST_REQUIRE names '%.*s', which %s does not list\n",
			(int)n, bad, HARNESS_CAPS_FILE);
		exit(99);
	}
}

bool harness_required(const char *cap)
{
	return caps_required(cap);
}

void harness_init(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	owner_pid = getpid();
	read_required_caps();
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* tests/run-test's scratch directory is removed even when the test
	 * crashes; by hand, /tmp. */
	const char *scratch = getenv("HPALLOC_TEST_TMPDIR");
	if (!scratch || !*scratch || strlen(scratch) > sizeof(control_dir) - 32)
		scratch = "/tmp";
	/* A private, empty control directory: a system-wide /run/hpalloc must
	 * not change what the tests see.  (Formatted before the HPALLOC_*
	 * variables are dropped: scratch points into the environment.) */
	snprintf(control_dir, sizeof(control_dir), "%s/hpalloc-ctest-XXXXXX", scratch);
	drop_inherited_knobs();
	if (!mkdtemp(control_dir)) {
		perror("harness: mkdtemp");
		exit(1);
	}
	setenv("HPALLOC_CONTROL_DIR", control_dir, 1);
	install_signal_handlers();
	save_crash_actions();
	atexit(at_exit_cleanup);
	harness_set_watchdog(DEFAULT_WATCHDOG_S);
}

/* One line per skipped case, the format tests/skip-driver counts. */
static void print_skip(const char *cap, const char *fmt, va_list ap)
{
	skipped_cases++;
	printf("SKIP(%s): %s: ", cap, current_case);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
}

void harness_note_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	print_skip("other", fmt, ap);
	va_end(ap);
}

void harness_note_skip_cap(const char *cap, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	if (!known_cap(cap, strlen(cap)))
		fail_msg("harness: unknown capability '%s'", cap);
	va_start(ap, fmt);
	if (harness_required(cap)) {
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
		fail_msg("required capability %s (HPALLOC_TEST_REQUIRE) is missing: %s",
			 cap, why);
	}
	print_skip(cap, fmt, ap);
	va_end(ap);
}

static int group_teardown(void **state)
{
	(void)state;
	hp_knob_unset(NULL);
	hp_cache_flush();
	hp_release_drain();
	harness_pools_restore();
	return 0;
}

int harness_run(const char *group, const struct CMUnitTest *tests, size_t count)
{
	/* HARNESS_FILTER=pattern (cmocka's * and ?) runs only the matching
	 * cases: for debugging by hand. */
	const char *filter = getenv("HARNESS_FILTER");
	if (filter && *filter)
		cmocka_set_test_filter(filter);
	int failed = _cmocka_run_group_tests(group, tests, count, NULL,
					     group_teardown);
	if (failed)
		return 1;
	if (count > 0 && skipped_cases >= count) {
		printf("%s: every case skipped (reasons above)\n", group);
		return HARNESS_EXIT_SKIP;
	}
	if (skipped_cases)
		printf("%s: %u of %zu cases skipped (SKIP lines above)\n", group,
		       skipped_cases, count);
	return 0;
}

uint64_t harness_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void harness_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- child cases -------------------------------------------------------------- */
void harness_child_dispatch(int argc, char **argv,
			    const struct harness_child_case *cases, size_t count)
{
	if (argc < 3 || strcmp(argv[1], CHILD_FLAG) != 0)
		return;
	save_crash_actions();
	alarm(60); /* a hung child fails rather than hangs the suite */
	for (size_t i = 0; i < count; i++) {
		if (strcmp(cases[i].name, argv[2]) == 0) {
			fflush(stdout);
			exit(cases[i].fn());
		}
	}
	fprintf(stderr, "harness: unknown child case %s\n", argv[2]);
	exit(1);
}

static bool env_overridden(const char *entry, const char *const *extra)
{
	size_t n = strcspn(entry, "=");

	for (const char *const *x = extra; x && *x; x++)
		if (strncmp(entry, *x, n) == 0 && ((*x)[n] == '=' || (*x)[n] == '\0'))
			return true;
	return false;
}

static char **child_environment(const char *const *extra)
{
	size_t n = 0, k = 0;

	for (char **e = environ; *e; e++)
		n++;
	for (const char *const *x = extra; x && *x; x++)
		n++;
	char **env = calloc(n + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (char **e = environ; *e; e++)
		if (!env_overridden(*e, extra))
			env[k++] = *e;
	for (const char *const *x = extra; x && *x; x++)
		if (strchr(*x, '='))
			env[k++] = (char *)*x;
	env[k] = NULL;
	return env;
}

static void read_all(int fd, char *buf, size_t len)
{
	size_t used = 0;
	char sink[512];

	for (;;) {
		char *dst = (buf && used + 1 < len) ? buf + used : sink;
		size_t room = (buf && used + 1 < len) ? len - 1 - used : sizeof(sink);
		ssize_t r = read(fd, dst, room);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (dst != sink)
			used += (size_t)r;
	}
	if (buf && len)
		buf[used] = '\0';
}

int harness_run_child(const char *name, const char *const *env,
		      char *err, size_t err_len)
{
	int pipefd[2];
	char **envp = child_environment(env);

	if (!envp || pipe2(pipefd, O_CLOEXEC) != 0)
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char *argv[] = { (char *)"hpalloc-test-child", (char *)CHILD_FLAG,
				 (char *)name, NULL };
		dup2(pipefd[1], STDERR_FILENO);
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	close(pipefd[1]);
	read_all(pipefd[0], err, err_len);
	close(pipefd[0]);
	free(envp);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

void harness_child_passes(const char *name)
{
	char err[8192];
	int rc = harness_run_child(name, (const char *const[]){NULL}, err, sizeof(err));
	if (rc == 77)
		harness_skip("%s", err);
	if (rc != 0)
		fail_msg("child %s exited %d:\n%s", name, rc, err);
}

/* Written beside, then renamed over: a reader the library runs meanwhile
 * (the janitor's) sees the old file or the new one, never an empty one. */
void harness_stage_file(const char *root, const char *rel, const char *text)
{
	char path[1024], tmp[1100], cmd[1200];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(tmp, sizeof(tmp), "%s.staging", path);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	FILE *f = fopen(tmp, "we");
	assert_non_null(f);
	fprintf(f, "%s\n", text);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
}

/* ---- knobs ----------------------------------------------------------------------- */
void harness_knob(const char *name, const char *value)
{
	if (hp_knob_set(name, value) != 0) {
		int saved = errno;
		struct hp_knob_info info;
		int idx = hp_knob_index(name);

		memset(&info, 0, sizeof(info));
		if (idx >= 0)
			hp_knob_info(idx, &info);
		fail_msg("hp_knob_set(\"%s\", \"%s\") refused: %s (%s)", name,
			 value, strerror(saved), info.rejected);
	}
}

void harness_thp_cache(const char *cache_max, const char *decay_ms)
{
	harness_need_thp();
	/* no populate worker: its stack could land where a released block was,
	 * and /proc/self/maps would count it as the cache's */
	harness_knob("populate", "off");
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", cache_max);
	harness_knob("cache_decay_ms", decay_ms);
	harness_janitor_start();
	hp_cache_flush();
	hp_release_drain();
}

void harness_reset(void)
{
	hp_knob_unset(NULL);
	hp_cache_flush();
	hp_release_drain();
}

/* cmocka hands setup a pointer to the case's initial_state (our struct
 * harness_case) and then gives the test whatever setup left there. */
int harness_case_setup(void **state)
{
	harness_reset();
	(void)state;
	return 0;
}

void harness_trampoline(void **state)
{
	const struct harness_case *c = *state;

	current_case = c->name ? c->name : "?";
	harness_crash_kills_process();
	c->fn(state);
}

int harness_case_teardown(void **state)
{
	(void)state;
	harness_reset();
	return 0;
}

uint64_t harness_stat(int stat)
{
	struct hp_stats s;

	assert_int_equal(hp_stats_get(&s), 0);
	return s.v[stat];
}

bool harness_stat_reaches(int stat, uint64_t value, unsigned ms)
{
	struct hp_stats s;
	uint64_t end = harness_now_ms() + ms;

	do {
		if (hp_stats_get(&s) == 0 && s.v[stat] >= value)
			return true;
		harness_sleep_ms(1);
	} while (harness_now_ms() < end);
	return false;
}

void harness_janitor_start(void)
{
	if (harness_stat(HP_STAT_JANITOR_ACTIVE))
		return;
	size_t t = hp_huge_threshold();
	if (t != SIZE_MAX)
		hp_free(hp_malloc(t < 2 * MiB ? 2 * MiB : t));
}

bool harness_ring_ready_within(unsigned ms)
{
	harness_janitor_start();
	for (unsigned waited = 0;; waited += 5) {
		if (harness_stat(HP_STAT_URING_ACTIVE))
			return true;
		if (waited >= ms)
			return false;
		harness_sleep_ms(5);
	}
}

/* ---- smaps, read independently of the library (tests/c/smaps.c) ----------------- */
void harness_check_smaps_reader(const void *addr, size_t len)
{
	struct hp_kernel_backing lib;
	struct harness_smaps own;

	assert_int_equal(hp_kernel_backing(addr, len, &lib), 0);
	assert_int_equal(harness_smaps_range(addr, len, &own), 0);
	assert_true(own.mappings > 0);
	assert_int_equal(lib.kernel_page_size, own.kernel_page_size);
	assert_int_equal(lib.rss_bytes, own.rss);
	assert_int_equal(lib.anon_huge_bytes, own.anon_huge + own.shmem_pmd);
	assert_int_equal(lib.hugetlb_bytes, own.hugetlb);
	assert_int_equal(lib.huge_bytes, own.huge);
	assert_int_equal(!!lib.thp_eligible, own.thp_eligible);
}

size_t harness_statm_rss(void)
{
	char buf[128];
	unsigned long size, resident;

	if (harness_read_text("/proc/self/statm", buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%lu %lu", &size, &resident) != 2)
		return 0;
	return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Calls fn(start, end, arg) for every /proc/self/maps entry until it
 * returns non-zero; -1 if the file cannot be read. */
static int each_mapping(int (*fn)(uintptr_t, uintptr_t, void *), void *arg)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	unsigned long start, end;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &start, &end) == 2 && fn(start, end, arg))
			break;
	fclose(f);
	return 0;
}

struct overlap {
	uintptr_t lo, hi;
	size_t bytes;
};

static int add_overlap(uintptr_t start, uintptr_t end, void *arg)
{
	struct overlap *o = arg;
	uintptr_t a = start > o->lo ? start : o->lo, b = end < o->hi ? end : o->hi;

	if (a < b)
		o->bytes += b - a;
	return 0;
}

size_t harness_mapped(const void *addr, size_t len)
{
	struct overlap o = { (uintptr_t)addr, (uintptr_t)addr + len, 0 };

	if (each_mapping(add_overlap, &o) != 0)
		return SIZE_MAX;
	return o.bytes;
}

size_t harness_still_mapped(void *const *blocks, size_t n, size_t size)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += harness_mapped(blocks[i], size);
	return total;
}

struct vma_find {
	uintptr_t addr, start, end;
	bool found;
};

static int find_vma(uintptr_t start, uintptr_t end, void *arg)
{
	struct vma_find *v = arg;

	if (start <= v->addr && v->addr < end) {
		v->start = start;
		v->end = end;
		v->found = true;
		return 1;
	}
	return 0;
}

int harness_vma(const void *addr, uintptr_t *start, uintptr_t *end)
{
	struct vma_find v = { .addr = (uintptr_t)addr };

	if (each_mapping(find_vma, &v) != 0 || !v.found)
		return -1;
	*start = v.start;
	*end = v.end;
	return 0;
}

void *harness_block_neighbour(const void *p, size_t len)
{
	uintptr_t start, end = (uintptr_t)p + len;

	if (harness_vma((const char *)p + len, &start, &end) != 0)
		end = (uintptr_t)p + len; /* nothing right after the block */
	void *page = mmap((void *)end, 4096, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (page == MAP_FAILED && errno == EEXIST)
		return NULL;
	if (page == MAP_FAILED)
		fail_msg("mmap of a page at %#lx: %s", (unsigned long)end, strerror(errno));
	if (page != (void *)end) /* a kernel before 4.17 takes the address as a hint */
		fail_msg("mmap placed the page at %p, not at %#lx", page, (unsigned long)end);
	return page;
}

struct huge_vmas {
	int count;
	size_t bytes;
};

static int add_huge_vma(uintptr_t start, uintptr_t end, const struct harness_smaps *m, void *arg)
{
	struct huge_vmas *h = arg;

	if (m->kernel_page_size > 4 * KiB || m->thp_eligible) {
		h->count++;
		h->bytes += end - start;
	}
	return 0;
}

int harness_huge_vmas(size_t *bytes)
{
	struct huge_vmas h = {0};

	if (harness_smaps_each(add_huge_vma, &h) != 0)
		fail_msg("harness: cannot read /proc/self/smaps");
	*bytes = h.bytes;
	return h.count;
}

int harness_pfns(const void *addr, size_t len, uint64_t *pfn)
{
	size_t pages = len / 4096;
	off_t off = (off_t)((uintptr_t)addr / 4096 * sizeof(uint64_t));

	if (!harness_is_root())
		return -1;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail_msg("harness: root cannot open /proc/self/pagemap: %s", strerror(errno));
	ssize_t want = (ssize_t)(pages * sizeof(uint64_t));
	ssize_t got = pread(fd, pfn, (size_t)want, off);
	close(fd);
	if (got != want)
		fail_msg("harness: short read of /proc/self/pagemap");
	for (size_t i = 0; i < pages; i++) /* bit 63 present, bits 0-54 PFN */
		pfn[i] = (pfn[i] >> 63) ? pfn[i] & ((1ull << 55) - 1) : 0;
	return 0;
}

long harness_minor_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_minflt;
}

const char *harness_thp_mode(void)
{
	static const char *const modes[] = { "always", "madvise", "never" };
	char buf[128], want[16];

	if (harness_read_text("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof(buf)) <= 0)
		return "never";
	for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
		snprintf(want, sizeof(want), "[%s]", modes[i]);
		if (strstr(buf, want))
			return modes[i];
	}
	return "never";
}

bool harness_uring_usable(char *why, size_t why_len)
{
	long disabled = harness_read_long("/proc/sys/kernel/io_uring_disabled");
	struct io_uring_params params;

	if (disabled == 2) {
		snprintf(why, why_len, "io_uring disabled by kernel.io_uring_disabled=2");
		return false;
	}
	memset(&params, 0, sizeof(params));
	long fd = syscall(__NR_io_uring_setup, 4, &params);
	if (fd < 0) {
		snprintf(why, why_len, "io_uring_setup failed: %s (seccomp or sysctl)",
			 strerror(errno));
		return false;
	}
	close((int)fd);
	return true;
}

void harness_need_uring(void)
{
#ifndef HAVE_LIBURING
	harness_skip_cap("uring", "built --without-liburing: releases are always synchronous");
#else
	char why[256];

	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip_cap("uring", "%s", why);
#endif
}

void harness_need_thp(void)
{
	if (strcmp(harness_thp_mode(), "never") == 0)
		harness_skip_cap("thp", "transparent_hugepage/enabled is [never]: no THP");
}

/* ---- contents (harness_fill and co: pattern.c) ----------------------------------- */
#define FILL_PIECE ((size_t)2 << 20)

void harness_fill_slowly(void *p, size_t n, uint64_t seed, unsigned pause_ms)
{
	for (size_t off = 0; off < n; off += FILL_PIECE) {
		size_t len = n - off < FILL_PIECE ? n - off : FILL_PIECE;
		harness_fill((char *)p + off, len, seed + off);
		if (pause_ms)
			harness_sleep_ms(pause_ms);
	}
}

size_t harness_check_filled(const void *p, size_t n, uint64_t seed)
{
	for (size_t off = 0; off < n; off += FILL_PIECE) {
		size_t len = n - off < FILL_PIECE ? n - off : FILL_PIECE;
		size_t bad = harness_check((const char *)p + off, len, seed + off);
		if (bad != SIZE_MAX)
			return off + bad;
	}
	return SIZE_MAX;
}

void harness_touch(void *p, size_t n)
{
	volatile unsigned char *b = p;

	for (size_t off = 0; off < n; off += 4096)
		b[off] = 1;
	if (n)
		b[n - 1] = 1;
}
