/* The backing reports: what hpalloc and the kernel say backs an address
 * (hp_backing: backend, page size, sizes, the kernel's smaps figures;
 * hp_backing_numa: placement policy, the kernel's numa_maps figures).
 *
 * Both describe the whole block an address lies in -- a live private
 * block (registry.c), or for hp_backing a shared one (shared.c) -- and
 * for any other address the page it lies in, without reading a header
 * (libc memory, maybe not even ours).
 *
 * Thread and lock rules: a report may run in any thread, concurrently
 * with the block's free.  The block's mapping is copied under
 * hp_heap_lock (the registry's writers hold it, so the block cannot be
 * freed meanwhile) and only the copy is used once the lock is dropped;
 * the kernel's figures are read (smaps.c, numa_maps.c) with no lock held.
 * A report of a block freed meanwhile describes whatever is mapped there
 * by then: a report is a snapshot, never a hold on the block. */
#include "internal.h"

/* What a report describes: the block ptr lies in, or ptr's own page. */
struct report_range {
	bool found;        /* map is the block's */
	struct hp_map map; /* copied: the block may go once unlocked */
	const void *addr;
	size_t len;
};

/* Bad arguments: -1 + EINVAL.  Else the library initialised and *r the
 * range to report; shared blocks only if shared_too. */
static int report_range(const void *ptr, const void *out, bool shared_too, struct report_range *r)
{
	if (!ptr || !out) {
		errno = EINVAL;
		return -1;
	}
	hp_init();
	*r = (struct report_range){.addr = ptr, .len = 1};
	pthread_mutex_lock(&hp_heap_lock);
	struct hp_block *b = reg_find_containing(ptr);
	if (b)
		r->map = b->map;
	pthread_mutex_unlock(&hp_heap_lock);
	r->found = b || (shared_too && shared_lookup(ptr, &r->map));
	if (r->found) {
		r->addr = r->map.addr;
		r->len = r->map.len;
	}
	return 0;
}

int hp_backing(const void *ptr, struct hp_backing *out)
{
	struct report_range r;
	HP_ERRNO_SAVE;

	if (report_range(ptr, out, true, &r) < 0)
		return -1;
	*out = (struct hp_backing){.backend = HP_BACKEND_SMALL, .requested_page_size = HP_BASE_PAGE};
	if (r.found) {
		out->backend = r.map.backend;
		out->usable_size = out->mapping_size = r.map.len;
		out->requested_page_size = r.map.backend == HP_BACKEND_HUGETLB ? r.map.kernel_page_size :
					   r.map.backend == HP_BACKEND_THP ? HP_THP_SIZE : HP_BASE_PAGE;
	}
	int rc = hp_kernel_backing(r.addr, r.len, &out->kernel);
	if (rc == 0)
		HP_ERRNO_RESTORE;
	return rc;
}

int hp_backing_numa(const void *ptr, struct hp_backing_numa *out)
{
	struct report_range r;
	HP_ERRNO_SAVE;

	if (report_range(ptr, out, false, &r) < 0)
		return -1;
	*out = (struct hp_backing_numa){.policy = ""};
	if (r.found)
		numa_format(r.map.numa, out->policy, sizeof(out->policy));
	int rc = hp_kernel_numa(r.addr, r.len, &out->kernel);
	if (rc == 0)
		HP_ERRNO_RESTORE;
	return rc;
}
