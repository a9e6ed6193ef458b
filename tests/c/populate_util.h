/* Holding hpalloc's populate workers inside a block (lib/threads/populate.c), for
 * the tests of what the program may do meanwhile: free or resize the
 * block, fork, be cancelled.
 *
 * The block's range is registered with a userfaultfd (missing faults, with
 * the faulting thread's id): every fault in it is served by a thread here
 * -- at once for the program's threads, and, while the test says so, held
 * for a thread named hpalloc-ahead.  A worker held there is inside the
 * block (its MADV_POPULATE_WRITE waits for the fault to be served), the
 * state that a free, a resize, a fork or a cancellation must cope with.
 * The pages it serves are 4 KiB zero pages (UFFDIO_COPY): what backs the
 * block is not what these tests look at.
 *
 * Handling faults the kernel takes on a thread's behalf (the workers'
 * MADV_POPULATE_WRITE) needs privilege (CAP_SYS_PTRACE, or
 * vm.unprivileged_userfaultfd=1): without it pop_hold_start() says so and
 * the case skips (capability root). */
#ifndef HP_TESTS_POPULATE_UTIL_H
#define HP_TESTS_POPULATE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Register [addr, addr + len) (one anonymous mapping) and start serving.
 * 0, or -1 with the reason in why. */
int pop_hold_start(void *addr, size_t len, char *why, size_t why_len);
/* From now on hold the workers' faults (true), or serve the held ones and
 * every later one (false). */
void pop_hold_workers(bool hold);
/* Wait up to ms until a worker's fault is held; false if none came. */
bool pop_hold_wait_held(unsigned ms);
/* The address of the first fault held now, or 0. */
uintptr_t pop_hold_first_held(void);
/* Faults of workers seen so far (served or held). */
int pop_hold_worker_faults(void);
/* Serve what is held, stop the thread, close the userfaultfd. */
void pop_hold_stop(void);

/* The state these tests start from, in a fresh process: a fresh THP block
 * of len bytes (cache_max 0, releases synchronous, one populate worker)
 * whose first 4 MiB the program filled (harness_fill, seed 1), so that
 * its populate job started, and a worker held inside it.  NULL with the
 * reason in why, and *skip set when the machine cannot (no userfaultfd). */
char *pop_hold_block(size_t len, bool *skip, char *why, size_t why_len);
#define POP_FILLED (4 << 20) /* what pop_hold_block filled */
/* In a case (cmocka): skip unless THP is on and a worker can be held
 * (root: userfaultfd serving the kernel's faults needs CAP_SYS_PTRACE). */
void pop_hold_require(void);

/* A fresh block of size, filled by the program from its start
 * (harness_fill_slowly, 1 ms pauses).  After its first 4 MiB -- the
 * workers' cue -- the program waits for meanwhile() (if given) to say
 * that what the case expects of them happened (it waits up to 10 s
 * itself; false is a failure), so a case does not hang on who got a CPU
 * first.  Then checked: its data, and smaps says it is on huge pages (within 30 s: populate_pages
 * may fault it at 4 KiB first and collapse it behind the program).
 * Freed.  0, or 1 with what went wrong said on stderr. */
int pop_fresh_block_whole(size_t size, uint64_t seed, bool (*meanwhile)(void));
/* meanwhile() for the usual case: the workers populated some of it. */
bool pop_workers_populated(void);

#endif
