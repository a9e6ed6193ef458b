/* Blocks glibc handed out before the preload library was initialised (by a
 * library whose constructor ran first: tests/preload/libearly.c) are
 * glibc's for good: free, realloc and malloc_usable_size find their owner
 * by address, also for a 2 MiB aligned one hpalloc does not own, and a
 * realloc above the threshold moves the contents to a huge block. */
#include "common.h"

#include <dlfcn.h>
#include <malloc.h>
#include <string.h>

struct early_blocks {
	int before_init;
	char *big, *aligned, *small, *grows;
};

static bool filled(const char *p, size_t n, int byte)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != byte)
			return false;
	return true;
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=thp", NULL};
	preload_test_init(argc, argv, knobs, getenv("HPALLOC_TEST_EARLY_LIB"));
	struct early_blocks *e = dlsym(RTLD_DEFAULT, "early_blocks");
	CHECK(e != NULL, "libearly.so is not loaded (HPALLOC_TEST_EARLY_LIB=%s)",
	      getenv("HPALLOC_TEST_EARLY_LIB"));
	CHECK(e->before_init, "libearly's constructor ran after the preload library's");
	CHECK(e->big && e->aligned && e->small && e->grows, "early allocations failed");
	CHECK(((uintptr_t)e->aligned & (2 * MiB - 1)) == 0, "posix_memalign(2 MiB)");
	CHECK(!hpalloc_owns(e->big) && !hpalloc_owns(e->aligned), "early blocks are hpalloc's");
	CHECK(malloc_usable_size(e->big) >= 64 * MiB, "usable size of an early block");
	CHECK(malloc_usable_size(e->aligned) >= 8 * MiB, "usable size of an early aligned block");
	CHECK(filled(e->big, 64 * MiB, 1) && filled(e->aligned, 8 * MiB, 2) &&
	      filled(e->small, 100, 3), "early contents");
	char *g = after_realloc(realloc(e->grows, 32 * MiB)); /* into a huge block, contents moved */
	CHECK(g && hpalloc_owns(g) && filled(g, 3 * MiB, 4), "realloc of an early block");
	CHECK(huge_bytes(g, 32 * MiB) >= 32 * MiB, "moved block not on huge pages");
	char *s = after_realloc(realloc(e->small, 200));
	CHECK(s && filled(s, 100, 3) && !hpalloc_owns(s), "small realloc of an early block");
	free(e->big);
	free(e->aligned); /* 2 MiB aligned, glibc's: hp_owns says no, glibc frees it */
	free(s);
	free(g);
	preload_pass("preload/early");
}
