/* Shared helpers of the cmocka C tests (tests/c/).
 *
 * Every test program:
 *   int main(int argc, char **argv) {
 *           harness_init(argc, argv);
 *           return harness_run("name", tests, ARRAY_SIZE(tests));
 *   }
 * Exit status: 0 pass, 1 fail, 77 when every case was skipped (each skip
 * prints why).  harness_init() gives the process a private, empty control
 * directory, drops inherited HPALLOC_* variables, restores hugetlb pools at
 * exit and on SIGINT/SIGTERM/SIGHUP/SIGALRM, and arms a watchdog alarm so a
 * deadlock fails instead of hanging.  HARNESS_FILTER=pattern runs only the
 * matching cases (cmocka wildcards), e.g. HARNESS_FILTER='*decay*'.
 */
#ifndef HP_TESTS_HARNESS_H
#define HP_TESTS_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hpalloc.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HARNESS_EXIT_SKIP 77

/* ---- running ------------------------------------------------------------ */
void harness_init(int argc, char **argv);
/* Runs the group; returns the process exit status (0, 1 or 77). */
int harness_run(const char *group, const struct CMUnitTest *tests, size_t count);
/* Skip the current case, printing why. */
void harness_note_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define harness_skip(...)                                                     \
	do {                                                                  \
		harness_note_skip(__VA_ARGS__);                               \
		skip();                                                       \
	} while (0)
/* Per-case setup/teardown: harness_reset() before and after each case. */
int harness_case_setup(void **state);
int harness_case_teardown(void **state);
/* cmocka turns a crash into a longjmp back into the test.  For an
 * allocator that is wrong: the crash may be in another thread (the process
 * hangs), or inside the library with a lock held (the next case
 * deadlocks).  So every case runs with the crash handling from before
 * cmocka (default action, or the sanitizer's report): a crash kills the
 * program, which counts as failed; tests/run-test restores the pools. */
void harness_crash_kills_process(void);
struct harness_case {
	void (*fn)(void **state);
};
void harness_trampoline(void **state);
#define HTEST(f)                                                              \
	{ .name = #f, .test_func = harness_trampoline,                        \
	  .setup_func = harness_case_setup, .teardown_func = harness_case_teardown, \
	  .initial_state = &(struct harness_case){ f } }
/* Seconds before the watchdog kills the process (default 90). */
void harness_set_watchdog(unsigned seconds);
uint64_t harness_now_ms(void);
void harness_sleep_ms(unsigned ms);

/* Cases run in a fresh process (re-exec of this binary) so environment
 * variables are read by a library that has not been initialised yet. */
struct harness_child_case {
	const char *name;
	int (*fn)(void); /* 0 pass, 1 fail (print why), 77 skip */
};
/* In main() before harness_init(): if argv asks for a child case, runs it
 * and exits. */
void harness_child_dispatch(int argc, char **argv,
			    const struct harness_child_case *cases, size_t count);
/* Runs child case `name` with extra environment entries ("K=V", NULL
 * terminated; "K=" sets an empty value, "K" alone unsets it).  Returns its
 * exit status (128+signal if killed).  Captures its stderr into err (may be
 * NULL). */
int harness_run_child(const char *name, const char *const *env,
		      char *err, size_t err_len);

/* ---- knobs ---------------------------------------------------------------- */
/* hp_knob_set that fails the test when the library refuses the value. */
void harness_knob(const char *name, const char *value);
/* Back to a known state: no process overrides, cache flushed, releases
 * drained. */
void harness_reset(void);
uint64_t harness_stat(int stat);

/* ---- hugetlb pools ---------------------------------------------------------- */
bool harness_is_root(void);
/* Make at least `pages` pages of `pagesize` free (free - reserved) in the
 * pool, exactly that many if `exact`.  The previous nr_hugepages is
 * restored at exit.  0 on success; -1 with the reason in why (not root, no
 * such pool, the kernel gave fewer pages). */
int harness_pool_reserve(size_t pagesize, long pages, bool exact,
			 char *why, size_t why_len);
/* free_hugepages - resv_hugepages, or -1. */
long harness_pool_available(size_t pagesize);
void harness_pools_restore(void);
/* Reserve or skip the current case with the reason. */
#define harness_pool_or_skip(pagesize, pages, exact)                          \
	do {                                                                  \
		char why_[256];                                               \
		if (harness_pool_reserve((pagesize), (pages), (exact), why_,  \
					 sizeof(why_)) != 0)                  \
			harness_skip("%s", why_);                             \
	} while (0)

/* ---- what the kernel says, read independently of lib/smaps.c --------------- */
struct harness_smaps {
	int mappings;            /* smaps entries overlapping the range */
	size_t kernel_page_size; /* of the first one                     */
	size_t rss;
	size_t anon_huge;
	size_t hugetlb;          /* Private_Hugetlb + Shared_Hugetlb     */
	bool thp_eligible;       /* "hg" in VmFlags of the first one     */
};
int harness_smaps_range(const void *addr, size_t len, struct harness_smaps *out);
/* Fails the test unless hp_kernel_backing() agrees with the harness's own
 * reading of smaps for the range.  Call while nothing else changes it. */
void harness_check_smaps_reader(const void *addr, size_t len);
/* Resident bytes of the process (/proc/self/statm); hugetlb pages are not
 * counted there. */
size_t harness_statm_rss(void);
/* "always", "madvise" or "never" from /sys/kernel/mm/transparent_hugepage. */
const char *harness_thp_mode(void);
/* io_uring can be set up in this process (sysctl, seccomp); why otherwise. */
bool harness_uring_usable(char *why, size_t why_len);

/* ---- contents ------------------------------------------------------------------ */
/* Deterministic pattern from seed; check returns the first bad offset or
 * SIZE_MAX. */
void harness_fill(void *p, size_t n, uint64_t seed);
size_t harness_check(const void *p, size_t n, uint64_t seed);
/* Index of the first non-zero byte, or SIZE_MAX. */
size_t harness_first_nonzero(const void *p, size_t n);
/* Write one byte in every 4 KiB page. */
void harness_touch(void *p, size_t n);

#define assert_filled(p, n, seed) assert_int_equal(harness_check((p), (n), (seed)), SIZE_MAX)
#define assert_zeroed(p, n) assert_int_equal(harness_first_nonzero((p), (n)), SIZE_MAX)

#endif
