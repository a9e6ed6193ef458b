/* What the kernel says about a range: /proc/self/smaps, never our own
 * bookkeeping.  Sums every mapping that overlaps the range. */
#include "internal.h"

#include <errno.h>
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

static int kernel_backing(const void *addr, size_t len, struct hp_kernel_backing *out)
{
	uintptr_t lo = (uintptr_t)addr, span = len ? len : 1;
	uintptr_t hi = span > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + span; /* no wrap */
	char line[512];
	bool inside = false, first = true, found = false;

	if (!addr || !out) {
		errno = EINVAL;
		return -1;
	}
	*out = (struct hp_kernel_backing){0};
	HP_ERRNO_SAVE;
	FILE *f = fopen("/proc/self/smaps", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		bool whole = strchr(line, '\n') != NULL;
		uintmax_t start, end;
		/* a header line is "start-end perms ..."; field lines start with a capital */
		if (sscanf(line, "%" SCNxMAX "-%" SCNxMAX " ", &start, &end) == 2 && line[0] != 'V') {
			if (inside)
				first = false;
			inside = start < hi && end > lo;
			found |= inside;
		} else if (inside) {
			add_field(line, out, first);
		}
		while (!whole && fgets(line, sizeof(line), f)) /* rest of a long line */
			whole = strchr(line, '\n') != NULL;
	}
	fclose(f);
	out->huge_bytes = out->anon_huge_bytes + out->hugetlb_bytes;
	if (!found) {
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
