/* See common.h. */
#include "common.h"

#include "hpalloc.h" /* types only: the functions are looked up at run time */
#include "../c/caps.h"
#include "../c/pool.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int preload_checks;
extern char **environ;

#if !defined(__SANITIZE_ADDRESS__) /* under ASan the tests skip: see preload_test_init */
/* The process's malloc is the preload library's. */
static bool preloaded(void)
{
	void *(*volatile m)(size_t) = malloc; /* resolved like any caller's */
	Dl_info info;

	return dladdr((void *)m, &info) && info.dli_fname &&
	       strstr(info.dli_fname, "libhpalloc-preload") != NULL;
}

static bool keep_variable(const char *entry)
{
	if (strncmp(entry, "HPALLOC_", 8) != 0)
		return strncmp(entry, "LD_PRELOAD=", 11) != 0;
	return strncmp(entry, "HPALLOC_CONTROL_DIR=", 20) == 0 ||
	       strncmp(entry, "HPALLOC_TEST_", 13) == 0;
}

/* Under valgrind, no io_uring: valgrind runs one thread at a time and does
 * not know that io_uring_enter blocks, so hpalloc's janitor waiting there
 * for completions holds valgrind's lock and every other thread stops for
 * good (seen with valgrind 3.19); and memcheck could not see what io_uring
 * does to memory anyway.  A seccomp filter refuses io_uring_setup, as
 * Docker's default profile does: hpalloc then releases synchronously and
 * its janitor waits on a condition variable. */
static void no_io_uring(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		fprintf(stderr, "FAIL: cannot keep io_uring away from valgrind: %s\n", strerror(errno));
		exit(1);
	}
}

/* HPALLOC_TEST_VALGRIND="valgrind --tool=memcheck ...": the re-executed
 * program runs under that command (make check-preload-valgrind). */
static void exec_under(const char *tool, char **argv, char **env)
{
	char *words = strdup(tool), *save = NULL, exe[4096];
	char *args[64];
	int n = 0;
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (!words || len <= 0)
		exit(1);
	exe[len] = '\0';
	for (char *w = strtok_r(words, " ", &save); w && n < 48; w = strtok_r(NULL, " ", &save))
		args[n++] = w;
	args[n++] = exe;
	for (int i = 1; argv[i] && n < 63; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	execvpe(args[0], args, env);
	fprintf(stderr, "FAIL: cannot run %s: %s\n", args[0], strerror(errno));
	exit(1);
}

static void reexec(char **argv, const char *lib, const char *const *knobs, const char *after)
{
	size_t n = 0, k = 0;
	const char *old = getenv("LD_PRELOAD");

	while (environ[n])
		n++;
	while (knobs && knobs[k])
		k++;
	char **env = calloc(n + k + 4, sizeof(char *));
	char *preload = malloc(strlen(lib) + (old ? strlen(old) : 0) + (after ? strlen(after) : 0) + 16);
	if (!env || !preload)
		exit(1);
	size_t j = 0;
	for (size_t i = 0; i < n; i++)
		if (keep_variable(environ[i]))
			env[j++] = environ[i];
	for (size_t i = 0; i < k; i++)
		env[j++] = (char *)knobs[i];
	const char *tool = getenv("HPALLOC_TEST_VALGRIND");
	/* after an existing preload (a sanitizer runtime must stay first) */
	sprintf(preload, "LD_PRELOAD=%s%s%s%s%s", old && *old ? old : "", old && *old ? " " : "", lib,
		after ? " " : "", after ? after : "");
	env[j++] = preload;
	env[j++] = "HPALLOC_TEST_PRELOAD_REEXEC=1";
	env[j] = NULL;
	if (tool && *tool) {
		no_io_uring();
		exec_under(tool, argv, env);
	}
	execve("/proc/self/exe", argv, env);
	fprintf(stderr, "FAIL: cannot re-execute under %s: %s\n", lib, strerror(errno));
	exit(1);
}
#endif

void preload_test_init(int argc, char **argv, const char *const *knobs, const char *after)
{
	(void)argc;
#if defined(__SANITIZE_ADDRESS__)
	(void)argv;
	(void)knobs;
	(void)after;
	fprintf(stderr, "SKIP: AddressSanitizer cannot be combined with an interposer of malloc "
		"(its runtime must be the process's malloc, and it refuses to start when "
		"another library comes first); `make check-preload-valgrind` runs these "
		"programs under valgrind's memcheck instead\n");
	exit(EXIT_SKIP);
#else
	if (preloaded()) {
		alarm(600); /* a deadlock fails the test (also under valgrind) */
		return;
	}
	if (getenv("HPALLOC_TEST_PRELOAD_REEXEC")) {
		fprintf(stderr, "FAIL: re-executed with LD_PRELOAD=%s, but malloc is not "
			"libhpalloc-preload.so's\n", getenv("LD_PRELOAD"));
		exit(1);
	}
	const char *lib = getenv("HPALLOC_TEST_PRELOAD");
	if (!lib || !*lib) {
		fprintf(stderr, "FAIL: HPALLOC_TEST_PRELOAD (the preload library to test) is not "
			"set: run through make check, or set it to .../lib/.libs/libhpalloc-preload.so\n");
		exit(1);
	}
	reexec(argv, lib, knobs, after);
#endif
}

void preload_skip_part(const char *cap, const char *name, const char *why)
{
	size_t n;
	caps_read(NULL, &n); /* any name: the cmocka harness refuses unknown ones */
	if (caps_required(cap)) {
		fprintf(stderr, "FAIL: required capability %s (HPALLOC_TEST_REQUIRE) is missing: "
			"%s: %s\n", cap, name, why);
		exit(1);
	}
	printf("SKIP(%s): %s: %s\n", cap, name, why);
}

void preload_pass(const char *name)
{
	printf("PASS: %s (%d checks)\n", name, preload_checks);
	exit(0);
}

/* ---- smaps ------------------------------------------------------------------ */

size_t huge_bytes(void *p, size_t len)
{
	struct harness_smaps r;
	for (size_t off = 0; off < len; off += 4096)
		((volatile char *)p)[off] = ((volatile char *)p)[off];
	/* an hpalloc block once settled: one faulted at 4 KiB first is
	 * collapsed behind the program */
	bool ours = dlsym_default_opt("hp_owns") && hpalloc_owns(p);
	if (harness_smaps_settled(p, len, ours ? HARNESS_SETTLE_MS : 0, &r) < 0)
		return 0;
	return r.huge;
}

bool on_small_pages(const void *p)
{
	struct harness_smaps r;
	return harness_smaps_range(p, 1, &r) == 0 && r.mappings == 1 && r.kernel_page_size == 4096 &&
	       r.huge == 0;
}

/* ---- hpalloc, looked up ------------------------------------------------------ */

void *dlsym_default_opt(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

void *dlsym_default(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		fprintf(stderr, "FAIL: %s not found: is libhpalloc.so.1 loaded?\n", name);
		exit(1);
	}
	return f;
}

bool hpalloc_owns(const void *p)
{
	int (*owns)(const void *) = (int (*)(const void *))dlsym_default("hp_owns");
	return owns(p) == 1;
}

int hpalloc_knob(const char *name, const char *value)
{
	int (*set)(const char *, const char *) =
		(int (*)(const char *, const char *))dlsym_default("hp_knob_set");
	return set(name, value);
}

void hpalloc_cache_flush(void)
{
	void (*flush)(void) = (void (*)(void))dlsym_default("hp_cache_flush");
	void (*drain)(void) = (void (*)(void))dlsym_default("hp_release_drain");
	flush();
	drain();
}

uint64_t hpalloc_stat(const char *name)
{
	int (*get)(struct hp_stats *) = (int (*)(struct hp_stats *))dlsym_default("hp_stats_get");
	const char *(*stat_name)(int) = (const char *(*)(int))dlsym_default("hp_stat_name");
	struct hp_stats s;

	if (get(&s) != 0)
		return UINT64_MAX;
	for (int i = 0; stat_name(i); i++)
		if (!strcmp(stat_name(i), name))
			return s.v[i];
	fprintf(stderr, "FAIL: no hpalloc counter %s\n", name);
	exit(1);
}

/* ---- valgrind ------------------------------------------------------------------ */

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK_H 1
#endif
#endif

void *after_realloc(void *p)
{
#ifdef HAVE_MEMCHECK_H
	if (p && RUNNING_ON_VALGRIND && hpalloc_owns(p))
		VALGRIND_MAKE_MEM_DEFINED(p, malloc_usable_size(p));
#endif
	return p;
}

/* ---- contents ----------------------------------------------------------------- */

/* tests/c/pattern.c's pattern, one for every test. */
void fill(void *p, size_t n, uint64_t seed)
{
	harness_fill(p, n, seed);
}

size_t first_wrong(const void *p, size_t n, uint64_t seed)
{
	return harness_check(p, n, seed);
}

bool check(const void *p, size_t n, uint64_t seed)
{
	return harness_check(p, n, seed) == SIZE_MAX;
}

bool all_zero(const void *p, size_t n)
{
	return harness_first_nonzero(p, n) == SIZE_MAX;
}

/* ---- hugetlb pool ------------------------------------------------------------------ */

/* tests/c/pool.c's fixture: a pool it cannot write is no pool here. */
bool pool_reserve_2m(long pages, char *why, size_t len)
{
	return harness_pool_reserve(2 * MiB, pages, false, why, len) == 0;
}
