/* What the kernel says about a range: /proc/self/smaps, never our own
 * bookkeeping.  Sums every mapping that overlaps the range.  And the
 * process's resident memory, for cache_rss_max (/proc/self/statm).  This
 * file interprets the kernel's text; prim.c reads it (prim_proc_lines,
 * prim_proc_read). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* "Name:   123 kB" -> bytes, if the line starts with name. */
static bool field_bytes(const char *line, const char *name, size_t *out)
{
	size_t n = strlen(name);
	unsigned long long kb;

	if (strncmp(line, name, n) != 0 || line[n] != ':' || sscanf(line + n + 1, "%llu", &kb) != 1)
		return false;
	*out = (size_t)kb * 1024;
	return true;
}

static void add_field(const char *line, struct hp_kernel_backing *k, bool first)
{
	size_t v;

	if (field_bytes(line, "Rss", &v))
		k->rss_bytes += v;
	else if (field_bytes(line, "AnonHugePages", &v) || field_bytes(line, "ShmemPmdMapped", &v))
		k->anon_huge_bytes += v; /* THP: anonymous, or shmem (shared blocks) */
	else if (field_bytes(line, "Private_Hugetlb", &v) || field_bytes(line, "Shared_Hugetlb", &v))
		k->hugetlb_bytes += v;
	else if (first && field_bytes(line, "KernelPageSize", &v))
		k->kernel_page_size = v;
	else if (first && strncmp(line, "VmFlags:", 8) == 0)
		k->thp_eligible = strstr(line, " hg") != NULL;
}

struct range_walk {
	uintptr_t lo, hi;
	bool inside, first, found;
	struct hp_kernel_backing *out;
};

/* One line of smaps: a mapping's header ("start-end perms ..."), or one of
 * its fields (they start with a capital; "VmFlags:" parses as neither). */
static int smaps_line(char *line, void *arg)
{
	struct range_walk *w = arg;
	uintmax_t start, end;

	if (sscanf(line, "%" SCNxMAX "-%" SCNxMAX " ", &start, &end) == 2 && line[0] != 'V') {
		if (w->inside)
			w->first = false;
		w->inside = start < w->hi && end > w->lo;
		w->found |= w->inside;
	} else if (w->inside) {
		add_field(line, w->out, w->first);
	}
	return 0;
}

static int kernel_backing(const void *addr, size_t len, struct hp_kernel_backing *out)
{
	uintptr_t lo = (uintptr_t)addr, span = len ? len : 1;
	uintptr_t hi = span > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + span; /* no wrap */

	if (!addr || !out) {
		errno = EINVAL;
		return -1;
	}
	*out = (struct hp_kernel_backing){0};
	HP_ERRNO_SAVE;
	struct range_walk w = {.lo = lo, .hi = hi, .first = true, .out = out};
	if (prim_proc_lines("self/smaps", smaps_line, &w) < 0)
		return -1;
	out->huge_bytes = out->anon_huge_bytes + out->hugetlb_bytes;
	if (!w.found) {
		errno = ENOENT;
		return -1;
	}
	HP_ERRNO_RESTORE;
	return 0;
}

/* Reads /proc/self/smaps: no cancellation point (see HP_NOCANCEL_BEGIN). */
int hp_kernel_backing(const void *addr, size_t len, struct hp_kernel_backing *out)
{
	HP_NOCANCEL_BEGIN;
	int rc = kernel_backing(addr, len, out);
	HP_NOCANCEL_END;
	return rc;
}

/* /proc/self/statm's second field, pages.  No stdio: the janitor calls
 * this every tick, and it must not allocate. */
size_t hp_self_rss(void)
{
	char buf[128];
	size_t rss = 0;
	HP_ERRNO_SAVE; /* called on the allocation path: errno unchanged */
	if (prim_proc_read("self/statm", buf, sizeof(buf)) > 0) {
		char *p = strchr(buf, ' ');
		if (p)
			rss = (size_t)strtoull(p + 1, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
	}
	HP_ERRNO_RESTORE;
	return rss;
}
