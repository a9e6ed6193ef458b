/* The kernel's THP settings as lib/threads/thp.c reads them (what `hpctl status`
 * prints), on a staged sysfs directory so every combination is checked on
 * any machine:
 *   - a size serves hpalloc's madvised blocks when its own setting is
 *     always or madvise, or inherit under a top-level always or madvise;
 *   - sizes come sorted, whatever order the directory lists them in;
 *   - a kernel before multi-size THP (no hugepages-<N>kB directories): the
 *     PMD size alone, with the top-level setting;
 *   - no THP at all (no directory): -1, and the setting "unavailable";
 *   - an unreadable size file is left out, not guessed.
 * And on this machine's real directory: the same sizes as sysfs lists. */
#include "harness.h"
#include "../../lib/core/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[512], root[600]; /* a staged sysfs; its THP directory */

static void put(const char *rel, const char *text)
{
	harness_stage_file(root, rel, text);
}

static void stage(const char *name)
{
	char cmd[600];
	snprintf(base, sizeof(base), "%s/thp-%s",
		 getenv("HPALLOC_TEST_TMPDIR") ? getenv("HPALLOC_TEST_TMPDIR") : "/tmp", name);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	assert_int_equal(system(cmd), 0);
	snprintf(root, sizeof(root), "%s/kernel/mm/transparent_hugepage", base);
	prim_sysfs_root(base);
}

static const struct thp_size *size_of(const struct thp_size *s, int n, size_t size)
{
	for (int i = 0; i < n; i++)
		if (s[i].size == size)
			return &s[i];
	fail_msg("size %zu not listed", size);
	return NULL;
}

static void test_multi_size(void **state)
{
	(void)state;
	struct thp_size s[16];
	char word[32];

	stage("multi");
	put("enabled", "always [madvise] never");
	put("hugepages-2048kB/enabled", "always [inherit] madvise never");
	put("hugepages-64kB/enabled", "always inherit [madvise] never");
	put("hugepages-16kB/enabled", "always inherit madvise [never]");
	put("hugepages-1024kB/enabled", "[always] inherit madvise never");
	put("hugepages-32kB/enabled", "always [inherit] madvise never");
	assert_int_equal(thp_setting("enabled", word, sizeof(word)), 0);
	assert_string_equal(word, "madvise");
	int n = thp_sizes(s, 16);
	assert_int_equal(n, 5);
	for (int i = 1; i < n; i++)
		assert_true(s[i - 1].size < s[i].size);
	assert_true(size_of(s, n, 2 * MiB)->serves);        /* inherit, top madvise */
	assert_string_equal(size_of(s, n, 2 * MiB)->enabled, "inherit");
	assert_true(size_of(s, n, 64 * KiB)->serves);       /* madvise */
	assert_false(size_of(s, n, 16 * KiB)->serves);      /* never */
	assert_true(size_of(s, n, 1 * MiB)->serves);        /* always */
	assert_true(size_of(s, n, 32 * KiB)->serves);       /* inherit */

	/* the top level decides for inherit, and only for inherit */
	put("enabled", "always madvise [never]");
	n = thp_sizes(s, 16);
	assert_int_equal(n, 5);
	assert_false(size_of(s, n, 2 * MiB)->serves);
	assert_false(size_of(s, n, 32 * KiB)->serves);
	assert_true(size_of(s, n, 64 * KiB)->serves);
	assert_true(size_of(s, n, 1 * MiB)->serves);

	/* no more than the caller has room for */
	assert_int_equal(thp_sizes(s, 2), 2);
	prim_sysfs_root(NULL);
}

static void test_before_multi_size(void **state)
{
	(void)state;
	struct thp_size s[4];

	stage("pmd");
	put("enabled", "[always] madvise never");
	put("defrag", "always defer defer+madvise [madvise] never");
	put("hpage_pmd_size", "2097152");
	assert_int_equal(thp_sizes(s, 4), 1);
	assert_int_equal(s[0].size, 2 * MiB);
	assert_string_equal(s[0].enabled, "always");
	assert_true(s[0].serves);
	put("enabled", "always madvise [never]");
	assert_int_equal(thp_sizes(s, 4), 1);
	assert_false(s[0].serves);
	prim_sysfs_root(NULL);
}

static void test_no_thp(void **state)
{
	(void)state;
	struct thp_size s[4];
	char word[32];

	stage("none"); /* the directory does not exist */
	assert_int_equal(thp_sizes(s, 4), -1);
	assert_int_equal(thp_setting("enabled", word, sizeof(word)), -1);
	assert_string_equal(word, "unavailable");
	prim_sysfs_root(NULL);
}

static void test_unreadable_size_left_out(void **state)
{
	(void)state;
	struct thp_size s[4];

	stage("partial");
	put("enabled", "always [madvise] never");
	put("hugepages-2048kB/enabled", "always [inherit] madvise never");
	char dir[700];
	snprintf(dir, sizeof(dir), "%s/hugepages-64kB", root);
	assert_int_equal(mkdir(dir, 0755), 0); /* a size without its file */
	assert_int_equal(thp_sizes(s, 4), 1);
	assert_int_equal(s[0].size, 2 * MiB);
	prim_sysfs_root(NULL);
}

/* The real directory: every hugepages-<N>kB with an enabled file, listed
 * (a size may have none: 8 KiB is shmem's alone). */
static void test_this_machine(void **state)
{
	(void)state;
	struct thp_size s[32];
	const char *dir = "/sys/kernel/mm/transparent_hugepage";
	DIR *d = opendir(dir);
	if (!d)
		harness_skip_cap("thp", "no %s", dir);
	int expect = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s/enabled", dir, e->d_name);
		expect += strncmp(e->d_name, "hugepages-", 10) == 0 && access(path, R_OK) == 0;
	}
	closedir(d);
	int n = thp_sizes(s, 32);
	assert_int_equal(n, expect ? expect : 1);
	bool pmd = false;
	for (int i = 0; i < n; i++)
		pmd |= s[i].size == 2 * MiB;
	assert_true(pmd);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_multi_size),
		HTEST(test_before_multi_size),
		HTEST(test_no_thp),
		HTEST(test_unreadable_size_left_out),
		HTEST(test_this_machine),
	};

	harness_init(argc, argv);
	return harness_run("thp_settings", tests, ARRAY_SIZE(tests));
}
