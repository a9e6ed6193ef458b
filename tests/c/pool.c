/* The C tests' one hugetlb pool fixture: reserve, read, put back; see
 * pool.h.  The only place in tests/, bench/ and the soak workload's C that
 * spells the sysfs pool paths or writes a pool (one writer per language:
 * the Python tests' is tests/python/hp_pools.py, the shell tests'
 * tests/run-test). */
#include "pool.h"
#include "kfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOLS "/sys/kernel/mm/hugepages"
#define NODES "/sys/devices/system/node"
#define KB(pagesize) ((pagesize) >> 10)
#define ONE_GIB ((size_t)1 << 30)

/* ---- the pool files -------------------------------------------------------- */
void harness_pool_path(size_t pagesize, const char *file, char *buf, size_t len)
{
	snprintf(buf, len, POOLS "/hugepages-%zukB/%s", KB(pagesize), file);
}

void harness_node_pool_path(int node, size_t pagesize, const char *file, char *buf, size_t len)
{
	snprintf(buf, len, NODES "/node%d/hugepages/hugepages-%zukB/%s", node, KB(pagesize), file);
}

long harness_pool_counter(size_t pagesize, const char *file)
{
	char path[160];

	harness_pool_path(pagesize, file, path, sizeof(path));
	return harness_read_long(path);
}

long harness_node_pool(int node, size_t pagesize, const char *file)
{
	char path[160];

	harness_node_pool_path(node, pagesize, file, path, sizeof(path));
	return harness_read_long(path);
}

long harness_pool_available(size_t pagesize)
{
	long free_pages = harness_pool_counter(pagesize, "free_hugepages");
	long resv = harness_pool_counter(pagesize, "resv_hugepages");

	if (free_pages < 0)
		return -1;
	if (resv < 0) {
		static bool warned;
		if (!warned)
			fprintf(stderr, "harness: resv_hugepages of the %zu kB pool is negative (%ld): "
				"kernel reservation accounting underflowed earlier\n", KB(pagesize), resv);
		warned = true;
	}
	return free_pages - resv;
}

void harness_pools_print(FILE *out)
{
	static const size_t sizes[] = {(size_t)2 << 20, ONE_GIB};
	static const char *const files[] = {"nr", "free", "resv", "surplus"};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		fprintf(out, "  hugetlb pool %zukB:", KB(sizes[i]));
		for (size_t j = 0; j < sizeof(files) / sizeof(files[0]); j++) {
			char file[32];
			long v;
			snprintf(file, sizeof(file), "%s_hugepages", files[j]);
			char path[160];
			harness_pool_path(sizes[i], file, path, sizeof(path));
			if (harness_read_long_at(path, &v) == 0)
				fprintf(out, " %s %ld", files[j], v);
			else
				fprintf(out, " %s ?", files[j]);
		}
		fputc('\n', out);
	}
}

/* ---- putting back: restorable from a signal handler -------------------------- */
struct saved_pool {
	char path[160];
	char value[32]; /* what it held before the first change */
	size_t value_len;
};
#define MAX_SAVED 16
static struct saved_pool saved[MAX_SAVED];
static volatile sig_atomic_t saved_count;
static pid_t saver_pid;

/* Without a word: a program leaving may still hold pool pages (the preload
 * library's cache), which the kernel frees, and shrinks the pool by, as the
 * process ends.  The cmocka harness checks after flushing the cache. */
static void restore_at_exit(void)
{
	if (getpid() == saver_pid) /* not a fork child leaving */
		harness_pools_restore_raw();
}

int harness_pool_save(const char *path)
{
	for (int i = 0; i < saved_count; i++)
		if (strcmp(saved[i].path, path) == 0)
			return 0;
	if (saved_count >= MAX_SAVED)
		return -1;
	struct saved_pool *s = &saved[saved_count];
	int n = harness_read_text(path, s->value, sizeof(s->value));
	if (n <= 0)
		return -1;
	s->value_len = (size_t)n;
	snprintf(s->path, sizeof(s->path), "%s", path);
	if (saved_count == 0) {
		saver_pid = getpid();
		atexit(restore_at_exit);
	}
	saved_count++; /* only now visible to the signal handler */
	return 0;
}

void harness_pools_restore_raw(void)
{
	for (int i = saved_count - 1; i >= 0; i--) {
		int fd = open(saved[i].path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (write(fd, saved[i].value, saved[i].value_len) < 0) {
			/* nothing better to do in a signal handler; the
			 * run-test wrapper restores pools as well */
		}
		close(fd);
	}
}

void harness_pools_restore(void)
{
	harness_pools_restore_raw();
	for (int i = 0; i < saved_count; i++) {
		long want = strtol(saved[i].value, NULL, 10);
		long now = harness_read_long(saved[i].path);
		if (now != want)
			fprintf(stderr, "harness: %s is %ld, could not restore %ld "
				"(pages still in use?)\n", saved[i].path, now, want);
	}
}

/* ---- reserving ------------------------------------------------------------------ */
bool harness_is_root(void)
{
	return geteuid() == 0;
}

const char *harness_pool_cap(size_t pagesize)
{
	return pagesize >= ONE_GIB ? "hugetlb1g" : "hugetlb";
}

int harness_pool_reserve(size_t pagesize, long pages, bool exact,
			 char *why, size_t why_len)
{
	char nr_path[160];

	if (!harness_is_root()) {
		snprintf(why, why_len, "not root: cannot resize the %zu kB hugetlb pool",
			 KB(pagesize));
		return HARNESS_POOL_LACKING;
	}
	harness_pool_path(pagesize, "nr_hugepages", nr_path, sizeof(nr_path));
	long nr = harness_read_long(nr_path);
	long avail = harness_pool_available(pagesize);
	if (nr < 0 || avail < 0) {
		snprintf(why, why_len, "kernel has no %zu kB hugetlb pool", KB(pagesize));
		return HARNESS_POOL_LACKING;
	}
	/* root and the pool exists: from here on, not being able to use it
	 * is a broken test machine (read-only /sys), not a missing feature */
	if (harness_pool_save(nr_path) != 0) {
		snprintf(why, why_len, "cannot save %s", nr_path);
		return HARNESS_POOL_BROKEN;
	}
	if (avail != pages && (avail < pages || exact)) {
		long target = nr + (pages - avail);
		if (harness_write_long(nr_path, target < 0 ? 0 : target) != 0) {
			snprintf(why, why_len, "root cannot write %ld to %s: %s", target,
				 nr_path, strerror(errno));
			return HARNESS_POOL_BROKEN;
		}
	}
	avail = harness_pool_available(pagesize);
	if (avail < pages || (exact && avail != pages)) {
		snprintf(why, why_len,
			 "kernel gave %ld free %zu kB huge pages, %ld needed "
			 "(memory too fragmented?)", avail, KB(pagesize), pages);
		return HARNESS_POOL_LACKING;
	}
	return 0;
}

int harness_node_pool_set(int node, size_t pagesize, long pages, char *why, size_t len)
{
	char path[160];

	harness_node_pool_path(node, pagesize, "nr_hugepages", path, sizeof(path));
	if (harness_read_long(path) < 0) {
		snprintf(why, len, "node %d has no %zu kB pool", node, KB(pagesize));
		return -1;
	}
	if (harness_pool_save(path) != 0) {
		snprintf(why, len, "cannot save %s", path);
		return -1;
	}
	/* ENOMEM: the kernel gave what it could, said below */
	if (harness_write_long(path, pages) != 0 && errno != ENOMEM) {
		snprintf(why, len, "writing node %d's %zu kB pool: %s", node, KB(pagesize), strerror(errno));
		return -1;
	}
	long got = harness_read_long(path);
	if (got != pages) {
		snprintf(why, len, "node %d's %zu kB pool: kernel gave %ld pages, %ld wanted", node,
			 KB(pagesize), got, pages);
		return -1;
	}
	return 0;
}
