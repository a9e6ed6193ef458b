/* Fault injection for the failure tests (tests/c/<failure>.c), linked into
 * each such program.
 *
 * The program itself defines io_uring_submit, io_uring_queue_init,
 * io_uring_register_ring_fd, pthread_create and madvise: the executable comes first in symbol lookup, so
 * libhpalloc's calls land here (also under ASan, whose interceptors we
 * forward to via RTLD_NEXT).  Until armed, each forwards to the real one.
 * Counters are atomics: the janitor thread submits too.
 *
 * Also: a seccomp filter refusing io_uring_setup, and sysctl save and
 * restore.  Whether an address range is mapped: harness_mapped(). */
#ifndef HP_TESTS_FAULT_H
#define HP_TESTS_FAULT_H

#include <stdbool.h>
#include <stddef.h>

/* io_uring_submit returns -err for the next `times` calls (0 disarms). */
void fault_submit(int err, int times);
int fault_submit_failures(void); /* how many submits were made to fail */
/* The next `times` io_uring_submit calls hand the kernel only the first
 * prepared entry and return 1, as the kernel does when it runs out of
 * requests part way (io_submit_sqes): the rest stay in the ring. */
void fault_submit_partial(int times);
int fault_submit_partial_left(void); /* of those, not happened yet */
/* io_uring_queue_init: -err (0: real), or the real one with `entries`. */
void fault_queue_init(int err);
void fault_ring_entries(unsigned entries);
/* io_uring_queue_init rings set up so far in this process; the real one
 * pauses ms milliseconds after setting a ring up (a window for fork). */
int fault_ring_inits(void);
void fault_ring_init_pause(unsigned ms);
/* pthread_create returns err (0: real). */
void fault_pthread_create(int err);
/* pthread_create works ok more times, then returns err. */
void fault_pthread_create_after(int ok, int err);
/* madvise(2) with advice fails with err (0: real again), as a kernel that
 * does not know the advice (EINVAL) or a memory limit (ENOMEM) refuses it;
 * how many calls were refused so far. */
void fault_madvise(int advice, int err);
/* The same for the next `times` such calls only (-1: all). */
void fault_madvise_times(int advice, int err, int times);
/* The same for calls on ranges within [addr, addr + len) whose every page
 * is resident only (a collapse the kernel refuses as busy). */
void fault_madvise_within(int advice, int err, int times, void *addr, size_t len);
int fault_madvise_refused(void);
/* mremap(2) moving to a fixed address fails with err for the next `times`
 * such calls (0 disarms), as the kernel's refusals do: FAULT_MOVE_REFUSED
 * before it touched the destination, FAULT_MOVE_CLEARED after it unmapped
 * the destination (the map count, memory; hugetlb pages before 5.16),
 * FAULT_MOVE_TAKEN as CLEARED and then another thread maps the hole (a
 * shared mapping of 0x5a bytes: fault_move_taken says where, the test
 * unmaps it).  How many moves were refused since it was armed. */
enum fault_move { FAULT_MOVE_REFUSED, FAULT_MOVE_CLEARED, FAULT_MOVE_TAKEN };
/* The next `times` mmap(2) calls without an address of a file (shared) or
 * of hugetlb pages, 2 MiB or more, are placed where hpalloc must move them
 * to get a boundary with room after it (where the kernel puts them depends
 * on what else is mapped, e.g. ASan's regions): a file 4 KiB past a 2 MiB
 * boundary; hugetlb pages on one, with a 4 KiB PROT_NONE page right after
 * them (fault_blocker says where; the test unmaps it).  Other calls go
 * straight to the kernel. */
void fault_map_off_boundary(int times);
void *fault_blocker(void);
/* The next `times` mmap(2) calls asking for an address by hint (not
 * MAP_FIXED) of a file (shared) or of hugetlb pages find it taken, as if
 * another thread had mapped there first: a 4 KiB PROT_NONE page is mapped
 * at the hint before the call goes to the kernel, which then maps
 * elsewhere.  How many were taken since it was armed; the pages are the
 * test's to unmap (fault_hint_blockers_unmap). */
void fault_map_hint_taken(int times);
int fault_map_hints_taken(void);
void fault_hint_blockers_unmap(void);
/* The next `times` mmap(2) calls of an inaccessible, uncharged reservation
 * (PROT_NONE, MAP_NORESERVE, anonymous) fail with ENOMEM, as an address
 * space limit refuses them; how many were refused since it was armed. */
void fault_map_reserve(int times);
/* The same after `skip` such calls went through (a grow that moves maps
 * one reservation before the one a test means). */
void fault_map_reserve_after(int skip, int times);
int fault_map_reserve_refused(void);
void fault_mremap_fixed(int err, enum fault_move how, int times);
/* The same after `skip` such moves went through. */
void fault_mremap_fixed_after(int skip, int err, enum fault_move how, int times);
int fault_mremap_refused(void);
/* The destination of the last move refused (NULL if none since armed). */
void *fault_move_refused_dest(void);
unsigned char *fault_move_taken(size_t *len);
/* io_uring_register_ring_fd returns -err (0: real): a kernel before 5.18,
 * where hpalloc's ring keeps its plain descriptor. */
void fault_register_ring(int err);

/* CPU time (user + system, ms) used so far by every thread of this
 * process but the calling one (/proc/self/task/<tid>/stat): what the
 * janitor and the kernel's io_uring workers burn while the caller sleeps. */
long fault_others_cpu_ms(void);
/* Descriptors of this process whose /proc/self/fd link is target (e.g.
 * "anon_inode:[io_uring]"): how many, the lowest in *first (-1 if none). */
int fault_fds_linking(const char *target, int *first);
/* The system call thread tid of this process is blocked in (first field of
 * /proc/self/task/<tid>/syscall), -1 if running or unknown. */
long fault_thread_syscall(int tid);

/* Install a seccomp filter making io_uring_setup fail with EPERM (this
 * thread and its children; call in a child process).  0 or -1. */
int fault_seccomp_no_io_uring(void);
/* Same for any system call number (returning err). */
int fault_seccomp_refuse(long nr, int err);

/* A one-number sysctl file: harness_read_long / harness_write_long
 * (tests/c/kfile.h). */

#endif
