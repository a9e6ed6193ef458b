/* Helpers of the preload tests (tests/preload/): ordinary C programs that
 * know nothing of hpalloc -- they call malloc & co and read what the kernel
 * says in /proc/self/smaps -- run under libhpalloc-preload.so.
 *
 * Each program calls preload_test_init() first: if the preload library is
 * not this process's malloc yet, it re-executes itself with LD_PRELOAD
 * naming $HPALLOC_TEST_PRELOAD (the build tree's library; make check sets
 * it) and the knobs given, so the test runs as a user's program would.
 * Exit status: 0 pass, 1 fail (with the failing check on stderr), 77 skip.
 * ASan cannot be combined with an interposer of malloc (its own runtime
 * must be the process's malloc): a sanitizer build skips, saying so; `make
 * check-preload-valgrind` runs these programs under memcheck instead. */
#ifndef HP_TESTS_PRELOAD_COMMON_H
#define HP_TESTS_PRELOAD_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../c/pattern.h"
#include "../c/smaps.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define EXIT_SKIP 77

/* Knob settings ("HPALLOC_MODE=thp", ...; NULL terminated) for the
 * re-executed process; the caller's HPALLOC_* variables are dropped.
 * after: another object to preload after the preload library, or NULL. */
void preload_test_init(int argc, char **argv, const char *const *knobs, const char *after);

extern int preload_checks;
#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			exit(1);                                              \
		}                                                             \
		preload_checks++;                                             \
	} while (0)
void preload_pass(const char *name); /* prints the count, exits 0 */
/* A part of the program cannot run here, because the machine lacks cap
 * (tests/capabilities; "other": no capability): one line
 * "SKIP(cap): name: why", which tests/skip-driver counts -- or, when
 * HPALLOC_TEST_REQUIRE names cap, a failure. */
void preload_skip_part(const char *cap, const char *name, const char *why);

/* What /proc/self/smaps says about the mappings overlapping a range:
 * harness_smaps_range(), tests/c/smaps.h (the C tests' one reader). */
/* Bytes of [p, p+len) on huge pages (THP or hugetlb) per smaps; the range
 * is touched first so that there is something to see, and an hpalloc block
 * read once settled (harness_smaps_settled). */
size_t huge_bytes(void *p, size_t len);
/* p lies in a mapping with 4 KiB pages and no huge page at all. */
bool on_small_pages(const void *p);

/* hpalloc's view, looked up at run time (the program does not link it):
 * whether p is the start of one of its huge blocks, and a counter. */
bool hpalloc_owns(const void *p);
void *dlsym_default(const char *name); /* exits 1 if absent */
void *dlsym_default_opt(const char *name); /* NULL if absent */
uint64_t hpalloc_stat(const char *name);
/* hp_knob_set (0, or -1 when the library refuses the value) of the
 * library under the program; its hp_cache_flush and hp_release_drain:
 * the cached blocks back with the kernel when it returns. */
int hpalloc_knob(const char *name, const char *value);
void hpalloc_cache_flush(void);

/* Call on the result of every realloc: under valgrind, memcheck does not
 * follow mremap(MREMAP_FIXED) growing a block onto a PROT_NONE reservation
 * (hpalloc's THP blocks grow that way) and reports the grown part as
 * unaddressable although the kernel mapped it read-write -- a modelling
 * gap of valgrind 3.19 reproduced with plain syscalls.  This tells memcheck
 * what the kernel did; a no-op otherwise. */
void *after_realloc(void *p);

/* Deterministic contents, tests/c/pattern.h's: fill(p, n, seed) writes a
 * prefix of the same position-dependent pattern whatever n; first_wrong
 * gives the offset of the first byte that differs from it, or SIZE_MAX. */
void fill(void *p, size_t n, uint64_t seed);
size_t first_wrong(const void *p, size_t n, uint64_t seed);
bool check(const void *p, size_t n, uint64_t seed);
bool all_zero(const void *p, size_t n);

/* hugetlb pool of 2 MiB pages: make `pages` free pages available (root),
 * restored at exit (tests/c/pool.h).  false (and why) if that is
 * impossible here. */
bool pool_reserve_2m(long pages, char *why, size_t len);

#endif
