/* Fuzz target: the kernel files the library reads through a staged sysfs
 * root (what tests use): THP settings and sizes (lib/threads/thp.c: thp_setting,
 * thp_sizes, multi-size THP directories) and hugetlb pool counters
 * (lib/door/prim.c: prim_pool_counter); and, through the same directory staged
 * as the cgroup root (prim_memcg_root), the memory cgroup's files
 * (lib/core/memcg.c: proc/self/cgroup, proc/self/mountinfo, the cgroup
 * directories a mount line leads to).  The kernel is no adversary, but
 * these readers are cheap to fuzz and `hpctl status` prints what they
 * return, or the cache's bound follows from them.
 *
 * Input: records as in the control target, "=== PATH\nBODY", PATH relative
 * to the staged root (components of [A-Za-z0-9_.-], no "." or ".."), e.g.
 *   === kernel/mm/transparent_hugepage/enabled
 *   always [madvise] never
 *
 * Promises checked: thp_setting() gives one line without brackets and
 * "unavailable" exactly when it fails; thp_sizes() gives at most the room
 * it has, ascending, each with a terminated setting, serving madvised
 * memory exactly when its setting is always or madvise, or inherit while
 * the top-level one is; prim_pool_counter() is the file's leading number or
 * -1 without one; memcg.c finds no limit (nothing measured: no bound on
 * the cache) or one below 2^62, under which it measures at most the limit
 * free (nothing under a limit of 0). */
#include "fuzz.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POOL "kernel/mm/hugepages/hugepages-2048kB"
#define MAX_SIZES 8

static int rootfd = -1;
static char root[PATH_MAX];

static bool good_path(const char *p)
{
	int parts = 0;

	while (*p) {
		size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && !strncmp(p, "..", 2)) || ++parts > 6)
			return false;
		p += n;
		if (*p && *p++ != '/')
			return false;
		if (!*p && p[-1] == '/')
			return false;
	}
	return parts > 0;
}

/* Create path's directories below rootfd and write the file. */
static void stage(char *path, const char *body, size_t len)
{
	int fd = dup(rootfd);

	for (char *slash; fd >= 0 && (slash = strchr(path, '/')); path = slash + 1) {
		*slash = '\0';
		mkdirat(fd, path, 0755);
		int next = openat(fd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		fd = next;
	}
	if (fd >= 0) {
		fuzz_write_file(fd, path, body, len, 0644);
		close(fd);
	}
}

static void stage_all(const char *in, size_t size)
{
	const char *end = in + size, *p = in;

	while (p < end) {
		const char *next = memmem(p, (size_t)(end - p), "\n=== ", 5);
		if ((size_t)(end - p) >= 4 && !memcmp(p, "=== ", 4)) {
			const char *eol = memchr(p, '\n', (size_t)(end - p));
			const char *body = eol ? eol + 1 : end;
			char path[256] = "";
			size_t hl = (size_t)((eol ? eol : end) - p - 4);
			if (hl < sizeof(path)) {
				memcpy(path, p + 4, hl);
				if (strlen(path) == hl && good_path(path))
					stage(path, body, next && next >= body ? (size_t)(next - body) : (size_t)(end - body));
			}
		}
		p = next ? next + 1 : end;
	}
}

static bool serves(const char *word)
{
	return !strcmp(word, "always") || !strcmp(word, "madvise");
}

static void check_setting(const char *file, char *out, size_t len)
{
	int rc = thp_setting(file, out, len);

	if (!memchr(out, '\0', len) || strchr(out, '\n'))
		fuzz_fail("thp_setting(%s): '%s' is not one terminated line", file, out);
	if (rc != 0 && strncmp(out, "unavailable", len - 1) != 0) /* cut to len */
		fuzz_fail("thp_setting(%s) failed but says '%s'", file, out);
}

static void check_sizes(const char *top)
{
	struct thp_size sizes[MAX_SIZES + 1];
	int max = MAX_SIZES;

	memset(sizes, 0x5a, sizeof(sizes));
	int n = thp_sizes(sizes, max);
	if (n < -1 || n > max)
		fuzz_fail("thp_sizes: %d sizes in room for %d", n, max);
	for (int i = 0; i < n; i++) {
		const struct thp_size *s = &sizes[i];
		if (!memchr(s->enabled, '\0', sizeof(s->enabled)))
			fuzz_fail("size %d: setting not terminated", i);
		if (i && s->size < sizes[i - 1].size)
			fuzz_fail("sizes not ascending: %zu after %zu", s->size, sizes[i - 1].size);
		if (s->serves != (serves(s->enabled) || (!strcmp(s->enabled, "inherit") && serves(top))))
			fuzz_fail("size %zu: '%s' under '%s' %s", s->size, s->enabled, top,
				  s->serves ? "serves" : "does not serve");
	}
	for (size_t b = 0; b < sizeof(sizes[MAX_SIZES]); b++)
		if (((unsigned char *)&sizes[MAX_SIZES])[b] != 0x5a)
			fuzz_fail("thp_sizes wrote past its room");
}

static void check_counter(const char *file)
{
	char path[PATH_MAX + 64], buf[32];
	long long want = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/" POOL "/%s", root, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			want = (long long)strtoull(buf, NULL, 10);
		}
	}
	long long got = prim_pool_counter(-1, 2 * HP_MiB, file);
	if (got != want)
		fuzz_fail("prim_pool_counter(%s): %lld, the file says %lld", file, got, want);
}

static void check_memcg(void)
{
	memcg_start(); /* what the first huge mapping does: find the cgroup, read its levels */
	cache_before_map(HP_BACKEND_THP, HP_THP_SIZE, false); /* a fresh THP block: the usage again, counted */
	uint64_t limit = atomic_load(&hp_counters[HP_STAT_MEMCG_LIMIT_BYTES]);
	size_t free = memcg_headroom(0);
	if (limit >= (uint64_t)1 << 62)
		fuzz_fail("memcg: a limit of %llu bytes is no limit", (unsigned long long)limit);
	if (limit && free == SIZE_MAX)
		fuzz_fail("memcg: limit %llu, but nothing measured under it", (unsigned long long)limit);
	/* memcg_limit_bytes is 0 both without a limit and under a limit of 0
	 * (v2's memory.high may be 0): what is free then is unknown or 0 */
	if (free != SIZE_MAX && free > limit)
		fuzz_fail("memcg: limit %llu, but %zu free under it", (unsigned long long)limit, free);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char top[32], defrag[8];

	fuzz_init();
	fuzz_input(data, size);
	if (rootfd < 0) {
		snprintf(root, sizeof(root), "%s/sys", fuzz_dir());
		mkdir(root, 0755);
		rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0)
			fuzz_fail("%s: %s", root, strerror(errno));
		prim_sysfs_root(root);
		prim_memcg_root(root);
	}
	stage_all((const char *)data, size);
	check_setting("enabled", top, sizeof(top));
	check_setting("defrag", defrag, sizeof(defrag)); /* a short buffer */
	check_sizes(top);
	check_counter("free_hugepages");
	check_counter("resv_hugepages");
	check_memcg();
	fuzz_empty_dir(rootfd);
	return 0;
}
