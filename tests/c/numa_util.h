/* Helpers of the NUMA tests (tests/c/numa*.c): what the kernel says about
 * placement, read here independently of lib/core/numa_maps.c; the nodes of this
 * machine from sysfs (not libnuma, which the library uses);
 * seccomp filters that make mbind or the fault-in fail. */
#ifndef HP_TESTS_NUMA_UTIL_H
#define HP_TESTS_NUMA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NU_MAX_NODES 64

/* One mapping's line of /proc/self/numa_maps. */
struct nu_entry {
	bool found;
	char policy[64];      /* second word: "bind:0", "prefer:0", "default" */
	bool huge;            /* the "huge" word (hugetlb) */
	long pages[NU_MAX_NODES]; /* N<n>= */
	long total;           /* sum of N<n>= */
	long page_kb;         /* kernelpagesize_kB, 0 if absent */
};
/* The entry of the mapping that starts at addr. */
int nu_entry_at(const void *addr, struct nu_entry *out);

/* The library takes no policy but default (built --without-libnuma, a
 * kernel without NUMA): says why on stderr. */
bool numa_unavailable(void);

/* Nodes with memory (/sys/devices/system/node/has_memory). */
int nu_nodes(int *nodes, int max);

/* Per-node pools: harness_node_pool(), harness_node_pool_set(),
 * tests/c/pool.h. */

/* Install a seccomp filter (this thread and its children; call in a child
 * process) returning -err for mbind, or for madvise(MADV_POPULATE_WRITE),
 * or killing the process on mbind or set_mempolicy (err < 0). */
int nu_seccomp_mbind(int err);
int nu_seccomp_populate(int err);

/* Mappings in /proc/self/maps; those of exactly len bytes, readable and
 * writable. */
int nu_mapping_count(void);
int nu_mapping_of_size(size_t len);

#endif
