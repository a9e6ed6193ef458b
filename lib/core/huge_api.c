/* The huge path alone, for interposers: hp_huge_threshold, hp_huge_alloc,
 * hp_huge_realloc, hp_owns.
 *
 * The CPython raw-domain wrapper and the preload library keep their own
 * ordinary allocator for everything below threshold: these never hand out
 * or take back libc memory, and say "yours" (1) instead.  Blocks come
 * from heap.c's block sourcing (huge_try, resize_in_place) and are freed
 * by hp_free, like every other huge block.
 *
 * Thread and lock rules:
 *   - Called from any thread, also from an interposed malloc/free that
 *     runs inside hpalloc's own code (hp_inside: its initialisation, the
 *     janitor, these functions): such a call gets "yours" at once and
 *     never comes back into the huge path and the locks it may already
 *     hold.
 *   - hp_huge_threshold() is the interposers' fast path: relaxed loads,
 *     no lock.  hp_owns() takes registry.c's reg_lock alone (innermost),
 *     so an interposed free() may ask it holding any of hpalloc's locks.
 *   - hp_huge_alloc() and hp_huge_realloc() run with cancellation
 *     disabled, as heap.c's huge_alloc(): they may read sysfs, log and
 *     drain a short pool, some of it with a lock held. */
#include "internal.h"

#include <string.h>

int hp_owns(const void *ptr)
{
	return ptr && reg_lookup(ptr) != NULL;
}

/* The interposers' fast path: one relaxed load for the common answer.
 * threshold is 0 only before knobs_init (its lowest value is 4K). */
size_t hp_huge_threshold(void)
{
	size_t t = (size_t)hp_knob(KNOB_THRESHOLD);

	if (unlikely(t == 0 || hp_inside) ||
	    (int)hp_knob(KNOB_MODE) == MODE_OFF)
		return SIZE_MAX;
	return t;
}

static bool huge_alignment_ok(size_t alignment)
{
	return alignment <= HP_THP_SIZE && (alignment & (alignment - 1)) == 0;
}

static int huge_alloc_work(void *ctx, size_t size, size_t alignment, int zero, void **out)
{
	bool to_small;

	if (!out) {
		errno = EINVAL;
		return -1;
	}
	hp_init();
	if (!(forced(ctx) || wants_huge(size)) || !huge_alignment_ok(alignment))
		return 1;
	void *p = huge_try(size ? size : 1, ctx, zero != 0, &to_small);
	if (!p)
		return to_small ? 1 : -1;
	*out = p;
	return 0;
}

/* An interposed malloc called from hpalloc's own code (hp_inside: its
 * initialisation, the janitor, these two functions) gets "yours": it never
 * comes back into the huge path and its locks. */
int hp_huge_alloc(void *ctx, size_t size, size_t alignment, int zero, void **out)
{
	if (hp_inside && out)
		return 1;
	HP_NOCANCEL_BEGIN; /* as heap.c's huge_alloc() */
	hp_inside++;
	int rc = huge_alloc_work(ctx, size, alignment, zero, out);
	hp_inside--;
	HP_NOCANCEL_END;
	return rc;
}

static int huge_realloc_work(void *ctx, void *ptr, size_t size, void **out)
{
	struct hp_block *b = ptr && out ? reg_lookup(ptr) : NULL;
	bool to_small;
	HP_ERRNO_SAVE; /* mremap trying in place first, then moving */

	if (!b) {
		errno = EINVAL;
		return -1;
	}
	if (!(forced(ctx) || wants_huge(size)))
		return 1;
	if (size > HP_MAX_BLOCK) {
		fail_enomem();
		return -1;
	}
	if (size == 0)
		size = 1; /* forced: a block of one byte, as hp_huge_alloc() gives */
	void *np = resize_in_place(b, size, ctx);
	if (np) {
		*out = np;
		HP_ERRNO_RESTORE;
		return 0;
	}
	np = huge_try(size, ctx, false, &to_small);
	if (!np)
		return to_small ? 1 : -1;
	memcpy(np, ptr, b->map.len < size ? b->map.len : size);
	stat_add(HP_STAT_REALLOC_COPIES, 1);
	hp_free(ptr);
	*out = np;
	HP_ERRNO_RESTORE;
	return 0;
}

int hp_huge_realloc(void *ctx, void *ptr, size_t size, void **out)
{
	if (hp_inside && out && hp_owns(ptr))
		return 1;
	HP_NOCANCEL_BEGIN; /* as heap.c's huge_alloc() */
	hp_inside++;
	int rc = huge_realloc_work(ctx, ptr, size, out);
	hp_inside--;
	HP_NOCANCEL_END;
	return rc;
}
