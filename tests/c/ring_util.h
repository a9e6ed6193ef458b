/* Helpers of the tests of a ring whose descriptor the program closes or
 * reuses (tests/c/ring_fd_*.c).  Each runs in a fresh process (a child
 * case): the first huge block starts the janitor and its ring. */
#ifndef HP_TESTS_RING_UTIL_H
#define HP_TESTS_RING_UTIL_H

#define RING_UTIL_SIZE ((size_t)8 << 20)
#define RING_UTIL_URING "anon_inode:[io_uring]" /* /proc/self/fd link of a ring */
/* Most CPU time (ms) every other thread together may use in a 2 s sleep:
 * a janitor that waits uses a few ms; one spinning on a dead ring 2000. */
#define RING_UTIL_SPIN_LIMIT_MS 200

/* 0, or 77 with the reason said when io_uring cannot be used here. */
int ring_util_uring_or_skip(void);
/* thp blocks of RING_UTIL_SIZE, nothing cached; a janitor with its ring;
 * then a freed block held in the ring: its submits refused (EAGAIN) until
 * fault_submit(0, 0).  The block, or NULL (said why). */
char *ring_util_block_in_ring(void);
/* 0 if the other threads of the process used at most the limit in a 2 s
 * sleep, else 1 (said why, with when). */
int ring_util_no_spin(const char *when);

#endif
