/* bench/path_cost PATH PAIRS: PAIRS hp_malloc + hp_free pairs on one of
 * the allocation paths, for bench/path_cost.sh to count under callgrind
 * (the difference of two runs is the cost of one pair, start-up and the
 * first, uncached allocation cancelled out):
 *   small     64 bytes: libc's path
 *   resident  a cached 4 MiB THP block libc would have kept (no advice)
 *   offered   a cached 64 MiB THP block, offered to the kernel (MADV_FREE)
 * Exit 0, or 1 if a call failed or a pair took another path. */
#include "hpalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int knob(const char *name, const char *value)
{
	if (hp_knob_set(name, value) == 0)
		return 0;
	fprintf(stderr, "path_cost: %s=%s refused\n", name, value);
	return -1;
}

static size_t size_of(const char *path)
{
	if (!strcmp(path, "small"))
		return 64;
	if (!strcmp(path, "resident"))
		return (size_t)4 << 20;
	if (!strcmp(path, "offered"))
		return (size_t)64 << 20;
	return 0;
}

int main(int argc, char **argv)
{
	size_t size = argc == 3 ? size_of(argv[1]) : 0;
	long pairs = argc == 3 ? atol(argv[2]) : 0;
	struct hp_stats before, after;

	if (!size || pairs <= 0) {
		fprintf(stderr, "usage: path_cost small|resident|offered PAIRS\n");
		return 2;
	}
	if (knob("mode", "thp") || knob("cache_max", "1G") || knob("cache_decay_ms", "3600000") ||
	    knob("populate", "off"))
		return 1;
	/* libc learns a 32 MiB mmap threshold from a freed 32 MiB block of its
	 * own: a cached 4 MiB block is one libc would have kept */
	free(malloc((size_t)32 << 20));
	void *p = hp_malloc(size);
	if (!p)
		return 1;
	hp_free(p);
	hp_stats_get(&before);
	for (long i = 0; i < pairs; i++) {
		p = hp_malloc(size);
		if (!p)
			return 1;
		hp_free(p);
	}
	hp_stats_get(&after);
	long hits = (long)(after.v[HP_STAT_CACHE_HITS] - before.v[HP_STAT_CACHE_HITS]);
	if (hits != (size > 64 ? pairs : 0)) {
		fprintf(stderr, "path_cost: %ld of %ld pairs hit the cache\n", hits, pairs);
		return 1;
	}
	/* the last free cached the block: offered, or left resident */
	if (size > 64 && (after.v[HP_STAT_CACHED_RECLAIMABLE_BYTES] != 0) != (size > ((size_t)4 << 20))) {
		fprintf(stderr, "path_cost: the cached block was %s\n",
			after.v[HP_STAT_CACHED_RECLAIMABLE_BYTES] ? "offered" : "left resident");
		return 1;
	}
	return 0;
}
