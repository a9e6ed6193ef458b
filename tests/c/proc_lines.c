/* lib/door/prim.c reads /proc for the rest of the library (prim_proc_lines):
 * lines come whole whatever their length, and a failure loses nothing.
 *   - A mapping of a file whose path is about 4000 bytes long: its lines of
 *     /proc/self/maps, smaps and numa_maps are longer than the 4 KiB the
 *     reader holds on its stack.  They come whole (the path and what
 *     follows it), and the reports of that mapping (hp_kernel_backing,
 *     hp_kernel_numa) are the ones of a short path: its resident bytes, its
 *     page size, its pages per node.  errno unchanged.
 *   - The staged cgroup files' reader (prim_proc_self_lines) skips a line
 *     too long for it, as before.
 *   - No memory for a long line (mmap refused: the program's mmap stands in
 *     for libc's, the library's internals being linked in): -1 + ENOMEM,
 *     for the reports too, and no descriptor left open.  mmap allowed
 *     again: the same reads succeed. */
#include "harness.h"
#include "../../lib/core/internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- mmap, interposed: refused on demand ------------------------------------ */
static bool refuse_mmap;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	if (refuse_mmap) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real(addr, len, prot, flags, fd, off);
}

/* ---- a file with a long path, mapped --------------------------------------- */
#define PAGES 2
static char base[512], path[4200];
static char *map;

static void map_long_path(void)
{
	const char *tmp = getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp";
	char part[201];

	memset(part, 'd', sizeof(part) - 1);
	part[sizeof(part) - 1] = '\0';
	snprintf(base, sizeof(base), "%s/proc_lines", tmp);
	snprintf(path, sizeof(path), "%s", base);
	assert_true(mkdir(path, 0700) == 0 || errno == EEXIST);
	/* directories of up to 200 bytes, then the file: 4090 bytes in all
	 * (PATH_MAX is 4096 with the NUL), so the maps line passes 4 KiB */
	while (strlen(path) + 1 + 200 < 4090 - 10) {
		strcat(path, "/");
		strcat(path, part);
		assert_true(mkdir(path, 0700) == 0 || errno == EEXIST);
	}
	strcat(path, "/");
	memset(part, 'f', 4090 - strlen(path));
	part[4090 - strlen(path)] = '\0';
	strcat(path, part);
	assert_int_equal(strlen(path), 4090);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, PAGES * 4096), 0);
	map = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	close(fd);
	memset(map, 1, PAGES * 4096);
}

static void unmap_long_path(void)
{
	char cmd[sizeof(base) + 16];

	munmap(map, PAGES * 4096);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	assert_int_equal(system(cmd), 0);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* The line of /proc/self/maps of the mapping: whole if it ends with the
 * path (nothing was cut). */
struct find {
	char start[32];
	size_t len;
	bool whole;
};

static int find_line(char *line, void *arg)
{
	struct find *f = arg;
	size_t n = strlen(line), p = strlen(path);

	if (strncmp(line, f->start, strlen(f->start)) != 0)
		return 0;
	f->len = n;
	f->whole = n > p && strcmp(line + n - p, path) == 0;
	return 1;
}

static void test_long_lines_whole(void **state)
{
	(void)state;
	map_long_path();
	struct find f = {.len = 0};
	snprintf(f.start, sizeof(f.start), "%lx-", (unsigned long)(uintptr_t)map);

	errno = 4242;
	assert_int_equal(prim_proc_lines("self/maps", find_line, &f), 1);
	assert_int_equal(errno, 4242);
	assert_true(f.len > 4096);
	assert_true(f.whole);

	struct hp_kernel_backing k;
	assert_int_equal(hp_kernel_backing(map, PAGES * 4096, &k), 0);
	assert_int_equal(errno, 4242);
	assert_int_equal(k.rss_bytes, PAGES * 4096);
	assert_int_equal(k.kernel_page_size, 4096);

	if (access("/proc/self/numa_maps", R_OK) != 0) {
		unmap_long_path();
		harness_skip("no /proc/self/numa_maps (a kernel without NUMA): its reader is not checked");
	}
	struct hp_kernel_numa n;
	assert_int_equal(hp_kernel_numa(map, PAGES * 4096, &n), 0);
	assert_int_equal(errno, 4242);
	unsigned long long pages = n.other_node_pages;
	for (int i = 0; i < HP_NUMA_NODES; i++)
		pages += n.node_pages[i];
	assert_int_equal(n.mappings, 1);
	assert_int_equal(pages, PAGES);
	assert_int_equal(n.page_size, 4096);
	unmap_long_path();
}

static void test_no_memory_for_a_long_line(void **state)
{
	(void)state;
	map_long_path();
	struct find f = {.len = 0};
	struct hp_kernel_backing k;
	snprintf(f.start, sizeof(f.start), "%lx-", (unsigned long)(uintptr_t)map);
	int fds = open_fds();

	refuse_mmap = true;
	errno = 0;
	int rc = prim_proc_lines("self/maps", find_line, &f);
	int err = errno;
	int backing = hp_kernel_backing(map, PAGES * 4096, &k), backing_err = errno;
	refuse_mmap = false;
	assert_int_equal(rc, -1);
	assert_int_equal(err, ENOMEM);
	assert_int_equal(backing, -1);
	assert_int_equal(backing_err, ENOMEM);
	assert_int_equal(open_fds(), fds);

	assert_int_equal(prim_proc_lines("self/maps", find_line, &f), 1);
	assert_true(f.whole);
	assert_int_equal(hp_kernel_backing(map, PAGES * 4096, &k), 0);
	assert_int_equal(k.rss_bytes, PAGES * 4096);
	unmap_long_path();
}

/* The staged cgroup files' reader (prim_proc_self_lines, the same loop
 * without growth) still skips a line too long for its 2 KiB: memcg.c
 * never sees half a line. */
struct seen {
	int lines;
	bool long_one;
};

static int count_line(char *line, void *arg)
{
	struct seen *s = arg;
	s->lines++;
	s->long_one |= strlen(line) >= 2047;
	return 0;
}

static void test_cgroup_reader_skips_long_lines(void **state)
{
	(void)state;
	char root[600], text[5000], cmd[700];
	struct seen s = {0};

	snprintf(root, sizeof(root), "%s/proc_lines_root",
		 getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp");
	memset(text, 'x', 3000);
	snprintf(text + 3000, sizeof(text) - 3000, "\n0::/short"); /* the stager ends it with a newline */
	harness_stage_file(root, "proc/self/cgroup", text);
	prim_memcg_root(root);
	errno = 4242;
	int rc = prim_proc_self_lines("cgroup", count_line, &s);
	prim_memcg_root(NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(errno, 4242);
	assert_int_equal(s.lines, 1);
	assert_false(s.long_one);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_long_lines_whole),
		HTEST(test_no_memory_for_a_long_line),
		HTEST(test_cgroup_reader_skips_long_lines),
	};

	harness_init(argc, argv);
	return harness_run("proc_lines", tests, ARRAY_SIZE(tests));
}
