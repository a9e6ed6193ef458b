/* What the kernel says about placement: /proc/self/numa_maps, never our
 * own bookkeeping.  Each line describes one mapping by its start address
 * only ("7f12...000 bind:0 anon=16384 dirty=16384 N0=16384
 * kernelpagesize_kB=4"), so /proc/self/maps says which mapping contains
 * the start of the range; every mapping starting inside it counts too.
 * This file interprets the kernel's text; prim.c reads it
 * (prim_proc_lines). */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct first_walk {
	uintptr_t addr, found;
};

static int maps_line(char *line, void *arg)
{
	struct first_walk *w = arg;
	uintmax_t start, end;

	if (sscanf(line, "%" SCNxMAX "-%" SCNxMAX, &start, &end) == 2 && end > w->addr) {
		w->found = (uintptr_t)start;
		return 1;
	}
	return 0;
}

/* Start of the mapping that contains addr, or of the first one above it
 * (then the range begins in a hole); UINTPTR_MAX if none. */
static uintptr_t first_mapping(uintptr_t addr)
{
	struct first_walk w = {.addr = addr, .found = UINTPTR_MAX};

	prim_proc_lines("self/maps", maps_line, &w);
	return w.found;
}

/* One "key=value" word of a numa_maps line. */
static void add_word(const char *w, struct hp_kernel_numa *k, bool first)
{
	unsigned long long node, count, kb;
	int used = 0;

	if (sscanf(w, "N%llu=%llu%n", &node, &count, &used) == 2 && w[used] == '\0') {
		if (node < HP_NUMA_NODES)
			k->node_pages[node] += count;
		else
			k->other_node_pages += count;
	} else if (first && sscanf(w, "kernelpagesize_kB=%llu%n", &kb, &used) == 1 && w[used] == '\0') {
		k->page_size = (size_t)kb << 10;
	}
}

/* A line of a mapping in the range: its policy (the second word) and the
 * words that follow. */
static void add_line(char *line, struct hp_kernel_numa *k)
{
	char *save = NULL;
	strtok_r(line, " \n", &save); /* the address */
	const char *policy = strtok_r(NULL, " \n", &save);
	bool first = k->mappings == 0;

	if (!policy)
		return;
	if (first)
		snprintf(k->policy, sizeof(k->policy), "%s", policy);
	else if (strcmp(k->policy, policy) != 0)
		k->mixed = 1;
	k->mappings++;
	for (const char *w; (w = strtok_r(NULL, " \n", &save));)
		add_word(w, k, first);
}

struct numa_walk {
	uintptr_t lo, hi, first;
	struct hp_kernel_numa *out;
};

static int numa_maps_line(char *line, void *arg)
{
	struct numa_walk *w = arg;
	char *end;
	uintptr_t start = (uintptr_t)strtoull(line, &end, 16);

	if (end != line && *end == ' ' && start < w->hi && (start >= w->lo || start == w->first))
		add_line(line, w->out);
	return 0;
}

static int read_numa_maps(uintptr_t lo, uintptr_t hi, uintptr_t first, struct hp_kernel_numa *out)
{
	struct numa_walk w = {.lo = lo, .hi = hi, .first = first, .out = out};

	return prim_proc_lines("self/numa_maps", numa_maps_line, &w) < 0 ? -1 : 0;
}

static int kernel_numa(const void *addr, size_t len, struct hp_kernel_numa *out)
{
	uintptr_t lo = (uintptr_t)addr, span = len ? len : 1;
	uintptr_t hi = span > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + span; /* no wrap */

	if (!addr || !out) {
		errno = EINVAL;
		return -1;
	}
	*out = (struct hp_kernel_numa){.mappings = 0};
	HP_ERRNO_SAVE;
	if (read_numa_maps(lo, hi, first_mapping(lo), out) < 0)
		return -1;
	if (out->mappings == 0) {
		errno = ENOENT;
		return -1;
	}
	HP_ERRNO_RESTORE;
	return 0;
}

/* Reads /proc/self/numa_maps: no cancellation point (see HP_NOCANCEL_BEGIN). */
int hp_kernel_numa(const void *addr, size_t len, struct hp_kernel_numa *out)
{
	HP_NOCANCEL_BEGIN;
	int rc = kernel_numa(addr, len, out);
	HP_NOCANCEL_END;
	return rc;
}
