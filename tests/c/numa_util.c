/* See numa_util.h. */
#include "numa_util.h"
#include "hpalloc.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int nu_entry_at(const void *addr, struct nu_entry *out)
{
	FILE *f = fopen("/proc/self/numa_maps", "re");
	char *line = NULL;
	size_t cap = 0;

	memset(out, 0, sizeof(*out));
	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		char *save, *w = strtok_r(line, " \n", &save);
		if (!w || strtoull(w, NULL, 16) != (uintptr_t)addr)
			continue;
		out->found = true;
		w = strtok_r(NULL, " \n", &save);
		snprintf(out->policy, sizeof(out->policy), "%s", w ? w : "");
		while ((w = strtok_r(NULL, " \n", &save))) {
			int node;
			long n;
			if (strcmp(w, "huge") == 0)
				out->huge = true;
			else if (sscanf(w, "N%d=%ld", &node, &n) == 2 && node >= 0 && node < NU_MAX_NODES)
				out->pages[node] += n, out->total += n;
			else
				sscanf(w, "kernelpagesize_kB=%ld", &out->page_kb);
		}
		break;
	}
	free(line);
	fclose(f);
	return out->found ? 0 : -1;
}

bool numa_unavailable(void)
{
	char canon[64], err[256] = "";
	if (hp_knob_parse("numa", "local", canon, sizeof(canon), err, sizeof(err)) == 0)
		return false;
	fprintf(stderr, "SKIP: this hpalloc takes no NUMA policy here: %s\n", err);
	return true;
}

int nu_nodes(int *nodes, int max)
{
	FILE *f = fopen("/sys/devices/system/node/has_memory", "re");
	int n = 0, a, b;
	char sep;

	if (!f)
		return 0;
	while (n < max && fscanf(f, "%d", &a) == 1) {
		b = a;
		if (fscanf(f, "%c", &sep) == 1 && sep == '-') {
			if (fscanf(f, "%d", &b) != 1)
				break;
			if (fscanf(f, "%c", &sep) != 1)
				sep = '\n';
		}
		for (int i = a; i <= b && n < max; i++)
			nodes[n++] = i;
		if (sep != ',')
			break;
	}
	fclose(f);
	return n;
}

static void node_path(int node, size_t pagesize, const char *file, char *buf, size_t len)
{
	snprintf(buf, len, "/sys/devices/system/node/node%d/hugepages/hugepages-%zukB/%s", node,
		 pagesize >> 10, file);
}

long nu_node_pool(int node, size_t pagesize, const char *file)
{
	char path[160];
	long v = -1;
	node_path(node, pagesize, file, path, sizeof(path));
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

long nu_pool_reserved(size_t pagesize)
{
	char path[160];
	long v = -1;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/resv_hugepages", pagesize >> 10);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static struct saved {
	int node;
	size_t pagesize;
	long value;
} saved[8];
static int nsaved;

static int write_pool(int node, size_t pagesize, long pages)
{
	char path[160];
	node_path(node, pagesize, "nr_hugepages", path, sizeof(path));
	FILE *f = fopen(path, "we");
	if (!f)
		return -1;
	int rc = fprintf(f, "%ld\n", pages) < 0;
	return (fclose(f) != 0 || rc) ? -1 : 0;
}

void nu_node_pools_restore(void)
{
	while (nsaved > 0) {
		struct saved *s = &saved[--nsaved];
		write_pool(s->node, s->pagesize, s->value);
	}
}

int nu_node_pool_set(int node, size_t pagesize, long pages, char *why, size_t len)
{
	long now = nu_node_pool(node, pagesize, "nr_hugepages");
	if (now < 0) {
		snprintf(why, len, "node %d has no %zu kB pool", node, pagesize >> 10);
		return -1;
	}
	bool known = false;
	for (int i = 0; i < nsaved; i++)
		known |= saved[i].node == node && saved[i].pagesize == pagesize;
	if (!known && nsaved < 8) {
		if (nsaved == 0)
			atexit(nu_node_pools_restore);
		saved[nsaved++] = (struct saved){node, pagesize, now};
	}
	if (write_pool(node, pagesize, pages) != 0 && errno != ENOMEM) {
		snprintf(why, len, "writing node %d's %zu kB pool: %s", node, pagesize >> 10, strerror(errno));
		return -1;
	}
	long got = nu_node_pool(node, pagesize, "nr_hugepages");
	if (got != pages) {
		snprintf(why, len, "node %d's %zu kB pool: kernel gave %ld pages, %ld wanted", node,
			 pagesize >> 10, got, pages);
		return -1;
	}
	return 0;
}

static int install(struct sock_filter *filter, unsigned short len)
{
	struct sock_fprog prog = {.len = len, .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

#define ARCH_CHECK                                                                         \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),           \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),                     \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),                                      \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

int nu_seccomp_mbind(int err)
{
	unsigned ret = err < 0 ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA);
	struct sock_filter filter[] = {
		ARCH_CHECK,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_set_mempolicy, err < 0 ? 1 : 2, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, ret),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	return install(filter, sizeof(filter) / sizeof(filter[0]));
}

int nu_seccomp_populate(int err)
{
	struct sock_filter filter[] = {
		ARCH_CHECK,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_POPULATE_WRITE, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	return install(filter, sizeof(filter) / sizeof(filter[0]));
}

int nu_mapping_count(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	int n = 0, c;
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

int nu_mapping_of_size(size_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512], perms[8];
	unsigned long long start, end;
	int n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%llx %7s", &start, &end, perms) == 3 && end - start == len &&
		    perms[0] == 'r' && perms[1] == 'w')
			n++;
	fclose(f);
	return n;
}
