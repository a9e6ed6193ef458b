/* stats.c's interface: the counters every file of lib/ adds to (the
 * public list is hpalloc.h's enum hp_stat), and the live gauges. */
#ifndef HP_STATS_H
#define HP_STATS_H

#include "hpalloc.h"
#include "../base.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_block;

HP_HIDDEN extern _Atomic uint64_t hp_counters[HP_STAT_COUNT];
static inline void stat_add(int s, uint64_t n)
{
	atomic_fetch_add_explicit(&hp_counters[s], n, memory_order_relaxed);
}
static inline void stat_sub(int s, uint64_t n)
{
	atomic_fetch_sub_explicit(&hp_counters[s], n, memory_order_relaxed);
}
HP_HIDDEN void stats_live_add(int backend, size_t bytes);
HP_HIDDEN void stats_live_sub(int backend, size_t bytes);
HP_HIDDEN void stats_block_live(const struct hp_block *b, bool live);
/* An allocation that fails (huge or small path): counted, and ENOMEM. */
static inline void *fail_enomem(void)
{
	stat_add(HP_STAT_FAILURES, 1);
	errno = ENOMEM;
	return NULL;
}

#endif
