/* Successful calls that name a page size leave errno as they found it.
 * hp_ctx(origin, 2M) as the first call of a process (what the NumPy and
 * torch adapters do at import) looks the page sizes up, and
 * hp_malloc_pagesize(size, 0, ...) picks one from the pools' sysfs
 * counters: on main before the fix both left errno at 0.  The shared-block
 * calls are checked alongside.  Each case is a fresh process. */
#include "harness.h"
#include "keeps_errno.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>


static int child_ctx_first(void)
{
	void *ctx = NULL;
	KEEPS(ctx = hp_ctx(HP_ORIGIN_NUMPY, 2 * MiB));
	if (!ctx) {
		fprintf(stderr, "SKIP: no 2 MiB hugetlb page size here\n");
		return 77;
	}
	KEEPS(ctx = hp_ctx(HP_ORIGIN_NUMPY, 0));
	return keeps_errno_failures ? 1 : 0;
}

static int child_malloc_pagesize(void)
{
	void *p = NULL;
	hp_knob_set("fallback", "thp"); /* a short pool is still a success */
	KEEPS(p = hp_malloc_pagesize(4 * MiB, 0, 0));
	if (!p)
		return 2;
	KEEPS(hp_free(p));
	KEEPS(p = hp_malloc_pagesize(4 * MiB, 0, 1));
	if (!p)
		return 2;
	KEEPS(hp_free(p));
	return keeps_errno_failures ? 1 : 0;
}

static int child_shared(void)
{
	void *p = NULL, *q = NULL;
	int fd = -1;
	size_t size = 0;
	struct hp_shared_info info;
	struct hp_backing b;

	KEEPS(p = hp_shared_alloc(4 * MiB, 0, &fd));
	if (!p)
		return 2;
	KEEPS(hp_shared_info(p, &info));
	KEEPS(hp_backing(p, &b));
	KEEPS(q = hp_shared_map(fd, &size));
	if (!q)
		return 2;
	KEEPS(hp_shared_free(q));
	KEEPS(hp_shared_free(p));
	return keeps_errno_failures ? 1 : 0;
}

static const struct harness_child_case children[] = {
	{"ctx_first", child_ctx_first},
	{"malloc_pagesize", child_malloc_pagesize},
	{"shared", child_shared},
};

static void test_first_ctx_keeps_errno(void **state)
{
	(void)state;
	harness_child_passes("ctx_first");
}

static void test_malloc_pagesize_keeps_errno(void **state)
{
	(void)state;
	harness_child_passes("malloc_pagesize");
}

static void test_shared_keeps_errno(void **state)
{
	(void)state;
	harness_child_passes("shared");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_first_ctx_keeps_errno),
		HTEST(test_malloc_pagesize_keeps_errno),
		HTEST(test_shared_keeps_errno),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("errno_pagesize", tests, ARRAY_SIZE(tests));
}
