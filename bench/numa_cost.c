/* bench/numa_cost PAIRS [POLICY]: PAIRS cached hp_malloc + hp_free pairs of
 * a 64 MiB THP block, the numa knob set to POLICY (default: leave it at
 * its default).  Run by bench/numa_cost.sh under callgrind, which counts the
 * instructions spent inside hp_malloc and hp_free only: the difference
 * between two runs with different PAIRS is the cost of one pair, with the
 * first (uncached) allocation and start-up cancelled out.  Exit 0, or 1 if
 * a call failed or a pair missed the cache. */
#include "hpalloc.h"

#include <stdio.h>
#include <stdlib.h>

#define BLOCK ((size_t)64 << 20)

static int knob(const char *name, const char *value)
{
	if (hp_knob_set(name, value) == 0)
		return 0;
	fprintf(stderr, "numa_cost: %s=%s refused\n", name, value);
	return -1;
}

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? atol(argv[1]) : 0;
	struct hp_stats before, after;

	if (pairs <= 0 || argc > 3) {
		fprintf(stderr, "usage: numa_cost PAIRS [POLICY]\n");
		return 2;
	}
	/* THP blocks: the same path with or without a hugetlb pool */
	if (knob("mode", "thp") || knob("cache_max", "1G") ||
	    knob("cache_decay_ms", "3600000") ||
	    (argc > 2 && knob("numa", argv[2])))
		return 1;
	void *p = hp_malloc(BLOCK); /* the miss: maps (and places) the block */
	if (!p)
		return 1;
	hp_free(p);
	hp_stats_get(&before);
	for (long i = 0; i < pairs; i++) {
		p = hp_malloc(BLOCK);
		if (!p)
			return 1;
		hp_free(p);
	}
	hp_stats_get(&after);
	long hits = (long)(after.v[HP_STAT_CACHE_HITS] - before.v[HP_STAT_CACHE_HITS]);
	if (hits != pairs) {
		fprintf(stderr, "numa_cost: %ld of %ld pairs hit the cache\n", hits, pairs);
		return 1;
	}
	return 0;
}
