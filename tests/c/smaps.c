/* See smaps.h. */
#include "smaps.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool is_header(const char *line)
{
	/* entries start "start-end perms ..." in lowercase hex; fields start
	 * with a capitalised name ("Rss:", "VmFlags:") */
	return isdigit((unsigned char)line[0]) || (line[0] >= 'a' && line[0] <= 'f');
}

static size_t kb_field(const char *line, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(line, name, n) != 0 || line[n] != ':')
		return SIZE_MAX;
	return (size_t)strtoull(line + n + 1, NULL, 10) * 1024;
}

static void add_field(const char *line, struct harness_smaps *m)
{
	size_t v;

	if ((v = kb_field(line, "Rss")) != SIZE_MAX)
		m->rss += v;
	else if ((v = kb_field(line, "AnonHugePages")) != SIZE_MAX)
		m->anon_huge += v;
	else if ((v = kb_field(line, "ShmemPmdMapped")) != SIZE_MAX)
		m->shmem_pmd += v;
	else if ((v = kb_field(line, "Private_Hugetlb")) != SIZE_MAX ||
		 (v = kb_field(line, "Shared_Hugetlb")) != SIZE_MAX)
		m->hugetlb += v;
	else if ((v = kb_field(line, "LazyFree")) != SIZE_MAX)
		m->lazyfree += v;
	else if ((v = kb_field(line, "KernelPageSize")) != SIZE_MAX)
		m->kernel_page_size = v;
	else if (strncmp(line, "VmFlags:", 8) == 0) {
		m->thp_eligible = strstr(line, " hg") != NULL;
		m->thp_refused = strstr(line, " nh") != NULL;
	}
	m->huge = m->anon_huge + m->shmem_pmd + m->hugetlb;
}

int harness_smaps_each(int (*fn)(uintptr_t, uintptr_t, const struct harness_smaps *, void *),
		       void *arg)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	unsigned long start = 0, end = 0;
	struct harness_smaps m = {0};
	bool open_entry = false, stop = false;

	if (!f)
		return -1;
	while (!stop && fgets(line, sizeof(line), f)) {
		if (!is_header(line)) {
			if (open_entry)
				add_field(line, &m);
			continue;
		}
		if (open_entry)
			stop = fn(start, end, &m, arg) != 0;
		open_entry = sscanf(line, "%lx-%lx", &start, &end) == 2;
		memset(&m, 0, sizeof(m));
		m.mappings = 1;
	}
	if (!stop && open_entry)
		fn(start, end, &m, arg);
	fclose(f);
	return 0;
}

struct range_sum {
	uintptr_t lo, hi;
	struct harness_smaps *out;
};

static int add_overlapping(uintptr_t start, uintptr_t end, const struct harness_smaps *m, void *arg)
{
	struct range_sum *r = arg;
	struct harness_smaps *out = r->out;

	if (start >= r->hi || end <= r->lo)
		return 0;
	if (out->mappings++ == 0) {
		out->kernel_page_size = m->kernel_page_size;
		out->thp_eligible = m->thp_eligible;
		out->thp_refused = m->thp_refused;
	}
	out->rss += m->rss;
	out->anon_huge += m->anon_huge;
	out->shmem_pmd += m->shmem_pmd;
	out->hugetlb += m->hugetlb;
	out->huge += m->huge;
	out->lazyfree += m->lazyfree;
	return 0;
}

int harness_smaps_range(const void *addr, size_t len, struct harness_smaps *out)
{
	struct range_sum r = { (uintptr_t)addr, (uintptr_t)addr + len, out };

	memset(out, 0, sizeof(*out));
	return harness_smaps_each(add_overlapping, &r);
}

int harness_smaps_settled(const void *addr, size_t len, unsigned ms, struct harness_smaps *out)
{
	const size_t extent = 2u << 20;
	size_t whole = len / extent * extent;
	struct timespec now, end, pause = {0, 50 * 1000 * 1000};

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (long)(ms % 1000) * 1000000;
	for (;;) {
		int rc = harness_smaps_range(addr, len, out);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (rc < 0 || (out->huge >= whole && out->mappings == 1) || now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			return rc;
		nanosleep(&pause, NULL);
	}
}

/* An entry's header line, and its range. */
static bool header_range(const char *line, uintptr_t *lo, uintptr_t *hi)
{
	unsigned long a, b;

	if (!is_header(line) || sscanf(line, "%lx-%lx ", &a, &b) != 2)
		return false;
	*lo = a;
	*hi = b;
	return true;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

void harness_smaps_print(uintptr_t addr, int fd)
{
	static char buf[1 << 20];
	static const char intro[] = "  its mapping (smaps):\n";
	int in = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	ssize_t k;

	if (in < 0)
		return;
	while (n < sizeof(buf) - 1 && (k = read(in, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)k;
	close(in);
	buf[n] = '\0';
	const char *entry = NULL;
	for (char *line = buf; *line;) {
		char *next = strchr(line, '\n');
		uintptr_t lo, hi;
		if (header_range(line, &lo, &hi)) {
			if (entry) {
				write_all(fd, intro, sizeof(intro) - 1);
				write_all(fd, entry, (size_t)(line - entry));
				return;
			}
			if (addr >= lo && addr < hi)
				entry = line;
		}
		if (!next)
			break;
		line = next + 1;
	}
	if (entry) {
		write_all(fd, intro, sizeof(intro) - 1);
		write_all(fd, entry, strlen(entry));
	}
}
