/* A memory cgroup of a C test's own (tests/c/memcg_util.c): the C side of
 * tests/python/hp_memcg.py.  One at a time per program: v1 under
 * /sys/fs/cgroup/memory where that hierarchy exists (these machines), else
 * v2 where cgroup2 has the memory controller; named hpalloc-ctest-<pid>,
 * with a limit and no swap.  The test process moves itself in
 * (tmemcg_enter) or runs a forked child in it (tmemcg_spawn), and the
 * kernel's own numbers judge: usage, how often the charge hit the limit,
 * the OOM kills.  tmemcg_remove() moves the process back, kills what is
 * left inside and removes the cgroup; tmemcg_make() registers it with
 * atexit, so a failed case (cmocka's longjmp, a fail_msg) removes it too,
 * and the next run removes the cgroups whose pid is gone (a run killed
 * outright).  Root and a memory controller: else the case is skipped
 * (capabilities root, memcg). */
#ifndef HP_TESTS_MEMCG_UTIL_H
#define HP_TESTS_MEMCG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct tmemcg {
	int version;      /* 1 or 2 */
	char parent[256]; /* where cgroups of that version are made */
	char dir[512];    /* ours, "" if none */
	char home[512];   /* where the process was */
};
extern struct tmemcg tmemcg;

/* A fresh cgroup limited to limit bytes (the one left by an earlier case
 * removed first); skips the case without root or a memory controller. */
void tmemcg_make(size_t limit);
/* The process itself into it (tmemcg_make first). */
void tmemcg_enter(void);
/* A forked child in it runs fn(arg) and exits with what it returns; the
 * child's status as waitpid gives it. */
int tmemcg_spawn(int (*fn)(void *), void *arg);
/* Out, what is left inside killed, removed.  Idempotent. */
void tmemcg_remove(void);

/* TMEMCG_NO_LIMIT: none ("-1", "max"), for tmemcg_make too. */
#define TMEMCG_NO_LIMIT ((size_t)-1)
void tmemcg_set_limit(size_t limit);
/* The same without failing the case (a limit below what the kernel can
 * reclaim is refused: EBUSY); fork children call it.  Whether it took. */
bool tmemcg_try_limit(size_t limit);
size_t tmemcg_usage(void);
size_t tmemcg_peak(void);        /* v1 max_usage_in_bytes, v2 memory.peak (0 unknown) */
/* The peak back to the usage now (v1; false where it cannot be). */
bool tmemcg_reset_peak(void);
size_t tmemcg_limit_hits(void);  /* v1 memory.failcnt, v2 memory.events "max" */
size_t tmemcg_oom_kills(void);   /* memory.oom_control / memory.events "oom_kill" */
/* A "key value" line of a file of the cgroup (memory.stat): the value, 0 if
 * absent. */
size_t tmemcg_key(const char *file, const char *key);
/* "killed by signal 9 (the OOM killer's)", "exit 3": for messages. */
const char *tmemcg_status_text(int status);

#endif
