/* The registry: the live huge blocks, found by the address they start at.
 *
 * A pointer is a huge block's exactly when the registry holds a block
 * starting there (every one starts on a 2 MiB boundary: maybe_huge() in
 * internal.h sends every other pointer to small.c without a look here).
 *
 * Thread and lock rules:
 *   - Written (reg_insert, reg_find(.., true)) under hp_heap_lock, so that
 *     a block leaves the registry and enters the cache (or release.c) in
 *     one critical section and a fork never finds it owned by nobody
 *     (heap.c's retire_locked()), and also under reg_lock.
 *   - Read (reg_find(.., false), reg_lookup, reg_find_containing) under
 *     reg_lock alone.  reg_lock is the innermost lock of all and nothing is
 *     called while it is held, so the free() of an interposer, which asks
 *     hp_owns() about every 2 MiB aligned pointer, is safe wherever it is
 *     called from -- also from hpalloc's own code holding its other locks
 *     (release.c frees block records under rel_lock), where hp_heap_lock
 *     would invert the order.
 *   - A block found by a reader stays valid only while the reader keeps it
 *     from being freed: by owning it (a realloc of the caller's block), or
 *     by holding hp_heap_lock (backing.c copies its mapping under it).
 *   - A block's map changes (cut, joined, resized: heap.c, pieces.c) only
 *     while it is out of the registry, so what a reader finds is whole.
 *   - Fork: registry_fork() is the last hook of lifecycle.c's table, after
 *     every other lock: a thread holding one of those may still free()
 *     through hp_owns(), which takes reg_lock. */
#include "internal.h"

#define REG_BITS 12
static struct hp_block *registry[1u << REG_BITS];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static inline size_t reg_slot(const void *addr)
{
	return (size_t)((((uintptr_t)addr >> 21) * 0x9E3779B97F4A7C15ull) >> (64 - REG_BITS));
}

void reg_insert(struct hp_block *b)
{
	size_t i = reg_slot(b->map.addr);
	pthread_mutex_lock(&reg_lock);
	b->hnext = registry[i];
	registry[i] = b;
	pthread_mutex_unlock(&reg_lock);
}

struct hp_block *reg_find(const void *addr, bool remove)
{
	struct hp_block *b = NULL;

	pthread_mutex_lock(&reg_lock);
	for (struct hp_block **pp = &registry[reg_slot(addr)]; *pp; pp = &(*pp)->hnext)
		if ((*pp)->map.addr == addr) {
			b = *pp;
			if (remove)
				*pp = b->hnext;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
	return b;
}

struct hp_block *reg_lookup(const void *ptr)
{
	return maybe_huge(ptr) ? reg_find(ptr, false) : NULL;
}

/* Interior pointers: a walk of every chain, for reports only. */
struct hp_block *reg_find_containing(const void *addr)
{
	struct hp_block *found = NULL;

	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < (1u << REG_BITS) && !found; i++)
		for (struct hp_block *b = registry[i]; b; b = b->hnext)
			if ((const char *)addr >= (char *)b->map.addr &&
			    (const char *)addr < (char *)b->map.addr + b->map.len) {
				found = b;
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

void registry_fork(int phase)
{
	fork_mutex(&reg_lock, phase);
}
