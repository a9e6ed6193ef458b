/* A program as a user of the installed library writes it: built with
 * nothing but `pkg-config --cflags --libs hpalloc` (tests/consumer/pkg-config.sh).
 * Allocates 64 MiB with hp_malloc, writes and reads every byte back, prints
 * hp_version(). */
#include <hpalloc.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK_SIZE ((size_t)64 << 20)

static unsigned char pattern(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

int main(void)
{
	unsigned char *block = hp_malloc(BLOCK_SIZE);

	if (block == NULL) {
		perror("hp_malloc(64 MiB)");
		return 1;
	}
	for (size_t i = 0; i < BLOCK_SIZE; i++)
		block[i] = pattern(i);
	for (size_t i = 0; i < BLOCK_SIZE; i++) {
		if (block[i] != pattern(i)) {
			fprintf(stderr, "byte %zu reads back %u, wrote %u\n",
				i, block[i], pattern(i));
			return 1;
		}
	}
	hp_free(block);
	printf("hpalloc %s\n", hp_version());
	return 0;
}
