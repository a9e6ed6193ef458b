/* The C tests' one hugetlb pool fixture: the sysfs pool files (spelt here
 * only), their counters read and written, and a pool reserved for a test
 * and put back afterwards.  Knows neither cmocka nor hpalloc: linked into
 * tests/c/libharness.la, the preload tests' programs, the soak workload and
 * bench/micro.
 *
 * Putting back: the first change to a pool file saves what it held;
 * harness_pools_restore() writes every saved value back, last saved first
 * (a node's pool changed after the whole pool is put back before it).  The
 * process that saved (not its fork children) does so at exit, and
 * harness_pools_restore_raw() is the async-signal-safe part for a fatal
 * signal's handler.  tests/run-test restores every pool as well, whatever
 * happens to the program. */
#ifndef HP_TESTS_POOL_H
#define HP_TESTS_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---- the pool files ------------------------------------------------------ */
/* .../hugepages-<kB>kB/file of the whole pool of pagesize, and of a node's. */
void harness_pool_path(size_t pagesize, const char *file, char *buf, size_t len);
void harness_node_pool_path(int node, size_t pagesize, const char *file, char *buf, size_t len);
/* A counter ("nr_hugepages", "free_hugepages", "resv_hugepages",
 * "surplus_hugepages"): the pool's, or node's; -1 if none. */
long harness_pool_counter(size_t pagesize, const char *file);
long harness_node_pool(int node, size_t pagesize, const char *file);
/* free_hugepages - resv_hugepages, or -1. */
long harness_pool_available(size_t pagesize);
/* nr, free, resv and surplus of the 2 MiB and 1 GiB pools, one line each
 * ("  hugetlb pool 2048kB: nr 4 free 4 resv 0 surplus 0"); what a test
 * prints when it dies of a signal, so stdio. */
void harness_pools_print(FILE *out);

/* ---- reserving ------------------------------------------------------------ */
bool harness_is_root(void);
/* Make at least `pages` pages of `pagesize` free (free - reserved) in the
 * pool, exactly that many if `exact`.  The previous nr_hugepages is
 * restored at exit.  0 on success; HARNESS_POOL_LACKING with the reason in
 * why when the machine cannot (not root, no such pool, the kernel gave
 * fewer pages); HARNESS_POOL_BROKEN when root could not even write
 * nr_hugepages (a read-only /sys): a fault of the test machine, never a
 * skip. */
#define HARNESS_POOL_LACKING (-1)
#define HARNESS_POOL_BROKEN (-2)
int harness_pool_reserve(size_t pagesize, long pages, bool exact,
			 char *why, size_t why_len);
/* Set node's pool of pagesize to pages (saved first).  0, or -1 with why. */
int harness_node_pool_set(int node, size_t pagesize, long pages, char *why, size_t len);
/* "hugetlb1g" for 1 GiB pages, else "hugetlb" (tests/capabilities). */
const char *harness_pool_cap(size_t pagesize);

/* ---- putting back ----------------------------------------------------------- */
/* Saves what path holds, once per path (a second call keeps the first
 * value).  0, or -1 if it cannot be read or no room is left. */
int harness_pool_save(const char *path);
/* Writes every saved value back, saying on stderr which did not take
 * (pages still in use?). */
void harness_pools_restore(void);
/* The same without a word: only open/write/close, for a signal handler. */
void harness_pools_restore_raw(void);

#endif
