/* The cmocka tests' harness proper: running a program's cases, skips and
 * required capabilities, the watchdog and fatal signals, the private
 * control directory, child cases in a fresh process, staged files, a
 * descriptor passed to another process; see
 * harness.h.  The library's knobs and counters are in harness_lib.c, what
 * the kernel says in kernel_view.c, the pools in pool.c, smaps in smaps.c,
 * block contents in pattern.c. */
#include "harness.h"
#include "caps.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

int harness_expect(bool ok, const char *what)
{
	if (!ok)
		fprintf(stderr, "FAIL: %s\n", what);
	return ok ? 0 : 1;
}
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

/* One byte carries the descriptor (SCM_RIGHTS), as multiprocessing's
 * resource sharer sends it. */
void harness_send_fd(int sock, int fd)
{
	char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&byte, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	assert_int_equal(sendmsg(sock, &m, 0), 1);
}

int harness_recv_fd(int sock)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&byte, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	if (recvmsg(sock, &m, 0) != 1 || !CMSG_FIRSTHDR(&m))
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

/* ---- cases ---------------------------------------------------------------------- */
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
