/* Shared helpers of the cmocka C tests (tests/c/).
 *
 * Every test program:
 *   int main(int argc, char **argv) {
 *           harness_init(argc, argv);
 *           return harness_run("name", tests, ARRAY_SIZE(tests));
 *   }
 * Exit status: 0 pass, 1 fail, 77 when every case was skipped.  Each skip
 * prints one line "SKIP(<capability>): <case>: <why>"; tests/skip-driver
 * counts those lines, so `make check` reports a program where some cases
 * skipped as PASS plus one SKIP per skipped case.  A skip names what the
 * machine lacks (harness_skip_cap); when HPALLOC_TEST_REQUIRE lists that
 * capability (CI: every one), the case fails instead.  harness_init() gives the process a private, empty control
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
#include "pattern.h"
#include "kfile.h"
#include "pool.h"
#include "smaps.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HARNESS_EXIT_SKIP 77

/* ---- running: harness.c -------------------------------------------------- */
void harness_init(int argc, char **argv);
/* Runs the group; returns the process exit status (0, 1 or 77). */
int harness_run(const char *group, const struct CMUnitTest *tests, size_t count);
/* Capabilities of the machine a case may lack (hugetlb, hugetlb1g, uring,
 * thp, root, nonroot, ...): tests/capabilities lists and explains them all
 * (HARNESS_CAPS_FILE, set by tests/c/Makemodule.am), HPALLOC_TEST_REQUIRE
 * takes a comma-separated list of them.  "other" is no capability: a skip
 * for any other reason, never required. */
/* Whether HPALLOC_TEST_REQUIRE names cap (read by harness_init). */
bool harness_required(const char *cap);
/* Skip the current case because the machine lacks cap, printing why; if
 * cap is required, fail the case instead. */
void harness_note_skip_cap(const char *cap, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define harness_skip_cap(cap, ...)                                            \
	do {                                                                  \
		harness_note_skip_cap((cap), __VA_ARGS__);                    \
		skip();                                                       \
	} while (0)
/* Skip for a reason that is no capability ("other"): never required. */
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
	const char *name; /* for the SKIP lines */
};
void harness_trampoline(void **state);
#define HTEST(f)                                                              \
	{ .name = #f, .test_func = harness_trampoline,                        \
	  .setup_func = harness_case_setup, .teardown_func = harness_case_teardown, \
	  .initial_state = &(struct harness_case){ f, #f } }
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
/* A child case's check, no cmocka: 0 if ok, else "FAIL: what" on stderr
 * and 1 (its failures or'ed into the case's exit status). */
int harness_expect(bool ok, const char *what);
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
/* Runs child case `name` (no extra environment): the test fails with the
 * child's stderr unless it exits 0, and skips with it on 77. */
void harness_child_passes(const char *name);
/* Writes text and a newline to root/rel, making the directories on the way
 * (a staged sysfs for the tests of a reader); atomically (a new file
 * renamed over the old), so the library may read it meanwhile. */
void harness_stage_file(const char *root, const char *rel, const char *text);

/* A descriptor over a UNIX socket to another process (SCM_RIGHTS, one
 * byte), as multiprocessing's resource sharer passes a shared block's.
 * A send that fails fails the test; receiving is for the forked child (no
 * cmocka there): the descriptor, or -1. */
void harness_send_fd(int sock, int fd);
int harness_recv_fd(int sock);

/* ---- knobs and counters: harness_lib.c ------------------------------------ */
/* hp_knob_set that fails the test when the library refuses the value. */
void harness_knob(const char *name, const char *value);
/* THP blocks from 1 MiB up (skip unless THP is enabled), cached up to
 * cache_max for decay_ms, the janitor running, no populate workers, the
 * cache empty. */
void harness_thp_cache(const char *cache_max, const char *decay_ms);
/* Back to a known state: no process overrides, cache flushed, releases
 * drained. */
void harness_reset(void);
uint64_t harness_stat(int stat);
/* Wait up to ms until counter stat is at least value (no cmocka: fork
 * children and threads call it too); whether it got there. */
bool harness_stat_reaches(int stat, uint64_t value, unsigned ms);

/* ---- hugetlb pools: tests/c/pool.h ------------------------------------------ */
/* Reserve, or skip the current case with the reason (capability hugetlb,
 * hugetlb1g for 1 GiB pages), or fail it when the pool is broken. */
#define harness_pool_or_skip(pagesize, pages, exact)                          \
	do {                                                                  \
		char why_[256];                                               \
		int rc_ = harness_pool_reserve((pagesize), (pages), (exact),  \
					       why_, sizeof(why_));           \
		if (rc_ == HARNESS_POOL_BROKEN)                               \
			fail_msg("%s", why_);                                 \
		if (rc_ != 0)                                                 \
			harness_skip_cap(harness_pool_cap(pagesize), "%s", why_); \
	} while (0)

/* ---- what the kernel says, read independently of lib/core/smaps.c: kernel_view.c */
/* struct harness_smaps, harness_smaps_range(), harness_smaps_each() and
 * what "huge" means: tests/c/smaps.h. */
/* Fails the test unless hp_kernel_backing() agrees with the harness's own
 * reading of smaps for the range.  Call while nothing else changes it. */
void harness_check_smaps_reader(const void *addr, size_t len);
/* Resident bytes of the process (/proc/self/statm); hugetlb pages are not
 * counted there. */
size_t harness_statm_rss(void);
/* Bytes of [addr, addr+len) covered by any mapping in /proc/self/maps:
 * after a release, 0 says the block is really gone (not only its pages).
 * SIZE_MAX if the file cannot be read (no count, so every check fails);
 * it never fails the test itself, so fork children and threads call it. */
size_t harness_mapped(const void *addr, size_t len);
/* Bytes of n blocks of size each still covered by a mapping: of freed
 * blocks, once releases are drained, the cache's -- as long as nothing was
 * mapped since where a released one was. */
size_t harness_still_mapped(void *const *blocks, size_t n, size_t size);
/* The mapping (/proc/self/maps entry) holding addr: 0, or -1 if none. */
int harness_vma(const void *addr, uintptr_t *start, uintptr_t *end);
/* Maps a PROT_NONE page right after the mapping that follows [p, p+len)
 * (for a block of hpalloc's: its guard), so that the block
 * cannot grow in place and a realloc growing it must move.  The page, to
 * munmap (4 KiB); NULL when something is mapped there already (the block
 * cannot grow in place either).  Fails the test on any other error. */
void *harness_block_neighbour(const void *p, size_t len);
/* Mappings in the whole process that only hpalloc makes here: THP-advised
 * ("hg" in VmFlags) or hugetlb (KernelPageSize above 4 kB).  Their count;
 * their total size in *bytes. */
int harness_huge_vmas(size_t *bytes);
/* Physical frame numbers of the 4 KiB pages of [addr, addr+len) from
 * /proc/self/pagemap into pfn[] (len / 4096 entries; 0 = not present).
 * -1 unless root: for others the kernel reports every PFN as 0.  (Root
 * failing to read it fails the test.) */
int harness_pfns(const void *addr, size_t len, uint64_t *pfn);
/* The janitor starts with the process's first huge block (lib/threads/janitor.c):
 * unless it runs, one block of the threshold's size (2 MiB at least) is
 * allocated and freed, under the knobs in force. */
void harness_janitor_start(void);
/* The janitor has its io_uring set up (the uring_active gauge) within ms
 * milliseconds: it is started (harness_janitor_start) and sets the ring up
 * after its start, so a test that needs a release to go through the ring
 * waits for it first. */
bool harness_ring_ready_within(unsigned ms);
/* Minor page faults of the calling thread so far (getrusage): not the
 * library's own threads (janitor, populate workers), whose faults at any
 * moment made a count of the process's say a realloc had copied. */
long harness_minor_faults(void);
/* "always", "madvise" or "never" from /sys/kernel/mm/transparent_hugepage. */
const char *harness_thp_mode(void);
/* io_uring can be set up in this process (sysctl, seccomp); why otherwise. */
bool harness_uring_usable(char *why, size_t why_len);
/* Skip (capability uring) unless io_uring is built in and usable; thp:
 * skip unless THP is enabled ([always] or [madvise]). */
void harness_need_uring(void);
void harness_need_thp(void);
/* Skip unless THP is on (capability thp) and the kernel has MADV_COLLAPSE
 * (Linux 6.1; populate_pages keeps blocks on huge pages without it). */
void harness_need_collapse(void);
/* AnonHugePages of [p, p + len) per smaps (0 if unreadable); whether it
 * reaches len less one 2 MiB chunk within ms (populate_pages: a block
 * faulted at 4 KiB first is collapsed behind the program). */
size_t harness_anon_huge(const void *p, size_t len);
bool harness_huge_within(const void *p, size_t len, unsigned ms);

/* ---- interposing: open_next.c ------------------------------------------------- */
/* A test that interposes open(2) (the executable comes first in symbol
 * lookup) passes the call on with this: the mode argument when flags take
 * one, then the next open() in lookup order (tests/c/open_next.c: link
 * $(DL_LIBS)). */
int harness_open_next(const char *path, int flags, va_list ap);
/* The end of such an open(path, flags, ...): the call passed on. */
#define HARNESS_OPEN_PASS_ON(path, flags)                                     \
	do {                                                                  \
		va_list ap_;                                                  \
		va_start(ap_, flags);                                         \
		int fd_ = harness_open_next((path), (flags), ap_);            \
		va_end(ap_);                                                  \
		return fd_;                                                   \
	} while (0)

/* ---- contents ------------------------------------------------------------------ */
/* harness_fill, harness_check, harness_first_nonzero, harness_fill_slowly,
 * harness_check_filled, harness_touch: tests/c/pattern.h. */
/* Fail naming the first wrong byte ("wrong from byte 2097152 of 4194304"):
 * where a copy stopped tells which copy it was. */
#define assert_filled(p, n, seed)                                             \
	do {                                                                  \
		size_t n_ = (n), bad_ = harness_check((p), n_, (seed));      \
		if (bad_ != SIZE_MAX)                                         \
			fail_msg("%s: pattern %s wrong from byte %zu of %zu", #p, \
				 #seed, bad_, n_);                            \
	} while (0)
#define assert_zeroed(p, n)                                                   \
	do {                                                                  \
		size_t n_ = (n), bad_ = harness_first_nonzero((p), n_);       \
		if (bad_ != SIZE_MAX)                                         \
			fail_msg("%s: byte %zu of %zu is not zero", #p, bad_, n_); \
	} while (0)

#endif
