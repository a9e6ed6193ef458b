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
