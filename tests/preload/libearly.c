/* Preloaded after libhpalloc-preload.so, so its constructor runs first
 * (the dynamic linker initialises later objects of LD_PRELOAD earlier):
 * blocks glibc hands out before the preload library is initialised, for
 * tests/preload/early. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct early_blocks {
	int before_init;   /* hp_huge_threshold() still said SIZE_MAX */
	char *big;         /* malloc(64 MiB)                    */
	char *aligned;     /* posix_memalign(2 MiB, 8 MiB)      */
	char *small;       /* malloc(100)                       */
	char *grows;       /* malloc(3 MiB), realloc'd later    */
};
__attribute__((visibility("default"))) struct early_blocks early_blocks;

__attribute__((constructor)) static void early(void)
{
	size_t (*threshold)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "hp_huge_threshold");
	void *p = NULL;

	early_blocks.before_init = threshold && threshold() == SIZE_MAX;
	early_blocks.big = malloc(64 << 20);
	if (posix_memalign(&p, 2 << 20, 8 << 20) == 0)
		early_blocks.aligned = p;
	early_blocks.small = malloc(100);
	early_blocks.grows = malloc(3 << 20);
	if (early_blocks.big)
		memset(early_blocks.big, 1, 64 << 20);
	if (early_blocks.aligned)
		memset(early_blocks.aligned, 2, 8 << 20);
	if (early_blocks.small)
		memset(early_blocks.small, 3, 100);
	if (early_blocks.grows)
		memset(early_blocks.grows, 4, 3 << 20);
}
