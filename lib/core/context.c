/* Contexts: who allocates and how its huge blocks are placed.
 *
 * A context (struct hp_ctx, internal.h) is what the NEP 49 handler,
 * Numba, PyTorch and the interposers pass to hp_ctx_malloc & co (heap.c)
 * and hp_huge_* (huge_api.c): an origin, for the stats; when pagesize is
 * not 0, hugetlb pages of that size forced whatever threshold and mode
 * say; and for a derived one (hp_ctx_numa) a placement policy of its own
 * instead of the numa knob's.  heap.c reads them through forced(),
 * origin_of() and numa_of() (internal.h).
 *
 * Thread and lock rules: no lock.  A context is read on every allocation
 * through it, from any thread, and is never written once another thread
 * can see it:
 *   - The fixed contexts are filled in at compile time and never written:
 *     hp_ctx() hands out a pointer into the table from whichever thread
 *     asks first while other threads read the same context.
 *   - Derived contexts are interned: pushed onto a list lock-free
 *     (compare-and-swap on its head), never changed once pushed and never
 *     freed, so a fork or a signal finds the list whole and a handler
 *     holding one never outlives it. */
#include "internal.h"

#include <stdlib.h>

#define CTX_PAGESIZES 3 /* follow the knobs, 2 MiB, 1 GiB */
#define CTX_ENTRY(o, ps) {.origin = (o), .pagesize = (ps)} /* no numa of its own */
#define CTX_ROW(o) {CTX_ENTRY(o, 0), CTX_ENTRY(o, 2 * HP_MiB), CTX_ENTRY(o, HP_GiB)}
static struct hp_ctx contexts[HP_ORIGIN_COUNT][CTX_PAGESIZES] = {
	CTX_ROW(HP_ORIGIN_API),   CTX_ROW(HP_ORIGIN_NUMPY), CTX_ROW(HP_ORIGIN_PYTHON),
	CTX_ROW(HP_ORIGIN_TORCH), CTX_ROW(HP_ORIGIN_NUMBA), CTX_ROW(HP_ORIGIN_PRELOAD),
};
_Static_assert(HP_ORIGIN_COUNT == 6, "a CTX_ROW for every origin");

static bool pagesize_supported(size_t pagesize)
{
	HP_NOCANCEL_BEGIN; /* the first call lists the kernel's page sizes */
	bool ok = os_pagesize_supported(pagesize);
	HP_NOCANCEL_END;
	return ok;
}

void *hp_ctx(int origin, size_t pagesize)
{
	int slot = pagesize == 0 ? 0 : pagesize == 2 * HP_MiB ? 1 : pagesize == HP_GiB ? 2 : -1;

	if (origin < 0 || origin >= HP_ORIGIN_COUNT || slot < 0 ||
	    (pagesize && !pagesize_supported(pagesize))) {
		errno = EINVAL;
		return NULL;
	}
	return &contexts[origin][slot];
}

void *hp_ctx_pagesize(size_t pagesize)
{
	if (pagesize == 0) { /* not a page size: hp_ctx() would follow the knobs */
		errno = EINVAL;
		return NULL;
	}
	return hp_ctx(HP_ORIGIN_API, pagesize);
}

/* The interned derived contexts (see above). */
static _Atomic(struct hp_ctx *) derived;

static struct hp_ctx *find_derived(struct hp_ctx *from, const struct hp_ctx *want)
{
	for (struct hp_ctx *c = from; c; c = c->next)
		if (c->origin == want->origin && c->pagesize == want->pagesize && c->numa == want->numa)
			return c;
	return NULL;
}

void *hp_ctx_numa(void *ctx, const char *policy)
{
	const struct hp_ctx *base = ctx ? ctx : hp_ctx(HP_ORIGIN_API, 0);
	uint64_t numa;
	HP_ERRNO_SAVE;

	hp_init();
	HP_NOCANCEL_BEGIN; /* the first parse asks libnuma for the nodes */
	int rc = knobs_parse(KNOB_NUMA, policy, &numa, NULL, 0);
	HP_NOCANCEL_END;
	if (rc < 0)
		return NULL; /* EINVAL; hp_knob_parse("numa", ...) says why */
	struct hp_ctx want = {.origin = base->origin, .pagesize = base->pagesize,
			      .has_numa = true, .numa = numa};
	struct hp_ctx *head = atomic_load(&derived), *c, *mine = NULL;
	for (;;) {
		if ((c = find_derived(head, &want)))
			break;
		if (!mine && !(mine = malloc(sizeof(*mine))))
			return NULL; /* ENOMEM */
		*mine = want;
		mine->next = head;
		if (atomic_compare_exchange_weak(&derived, &head, mine)) {
			c = mine;
			mine = NULL;
			break;
		}
		/* another thread pushed first: head is the new head, look again */
	}
	free(mine); /* the same context was interned by another thread */
	HP_ERRNO_RESTORE;
	return c;
}
