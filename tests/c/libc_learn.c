/* What libc would have learnt (lib/core/small.c): glibc serves a buffer of a
 * size it has seen a program free as an mmapped chunk from its heap from
 * then on; hpalloc's huge frees are replayed to it so that it still learns.
 * Each case runs in a fresh process, whose libc has learnt nothing yet:
 *   - after hp_free of a 4 MiB huge block, malloc(3 MiB) comes from libc's
 *     heap (on main it was mmapped afresh: a pandas groupby paid 5,500
 *     faults per call for it);
 *   - a huge block above glibc's own cap (32 MiB) teaches nothing, as it
 *     would teach glibc nothing;
 *   - the replay happens once per new largest size, and leaves errno.
 * Whether a chunk is mmapped: above the program break, where glibc's main
 * heap ends (the harness runs every test with one arena). */
#include "harness.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* glibc's main heap ends at the program break; its mmapped chunks lie in
 * the mapping area far above it. */
static bool libc_mmapped(const void *p)
{
	return (const char *)p >= (const char *)sbrk(0);
}

static void knobs(void)
{
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
}

/* A huge block of size, touched and freed. */
static void huge_freed(size_t size)
{
	char *p = hp_malloc(size);
	if (!p) {
		fprintf(stderr, "hp_malloc(%zu) failed\n", size);
		exit(2);
	}
	memset(p, 1, size);
	hp_free(p);
}

static int child_learns(void)
{
	knobs();
	char *before = malloc(3 * MiB);
	int bad = harness_expect(before && libc_mmapped(before), "a fresh libc should mmap 3 MiB");
	free(before); /* teaches libc 3 MiB itself: ask for more below */
	huge_freed(6 * MiB);
	errno = EXDEV;
	huge_freed(7 * MiB);
	bad |= harness_expect(errno == EXDEV, "hp_free changed errno");
	char *after = malloc(5 * MiB);
	bad |= harness_expect(after && !libc_mmapped(after), "after a 7 MiB huge free, libc should serve 5 MiB from its heap");
	free(after);
	return bad;
}

static int child_not_beyond_cap(void)
{
	knobs();
	huge_freed(64 * MiB);
	char *after = malloc(5 * MiB);
	int bad = harness_expect(after && libc_mmapped(after), "a 64 MiB huge free should teach libc nothing");
	free(after);
	return bad;
}

static const struct harness_child_case children[] = {
	{"learns", child_learns},
	{"not_beyond_cap", child_not_beyond_cap},
};

/* Under ASan malloc is ASan's, which has no such threshold to learn. */
static void need_glibc_malloc(void)
{
#if defined(__SANITIZE_ADDRESS__)
	harness_skip("ASan's malloc replaces glibc's: nothing of glibc to teach (the plain build runs this)");
#endif
	harness_need_thp();
}

static void test_libc_learns_from_huge_frees(void **state)
{
	(void)state;
	need_glibc_malloc();
	harness_child_passes("learns");
}

static void test_not_beyond_glibc_cap(void **state)
{
	(void)state;
	need_glibc_malloc();
	harness_child_passes("not_beyond_cap");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_libc_learns_from_huge_frees),
		HTEST(test_not_beyond_glibc_cap),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("libc_learn", tests, ARRAY_SIZE(tests));
}
