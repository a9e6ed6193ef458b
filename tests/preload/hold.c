/* A plain program for tests/preload/hpctl-run.sh: allocates SIZE bytes with
 * malloc, writes them, prints "ready <address> owns=<0|1> huge=<bytes on
 * huge pages>" and holds the block until its standard input closes (or
 * 120 s pass).  Not linked to hpalloc; run under `hpctl run --preload`. */
#include "common.h"

#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 64 * MiB;
	char *p = malloc(size), c;

	if (!p)
		return 1;
	memset(p, 1, size);
	bool owned = dlsym_default_opt("hp_owns") && hpalloc_owns(p);
	printf("ready %p owns=%d huge=%zu\n", (void *)p, owned, huge_bytes(p, size));
	fflush(stdout);
	alarm(120);
	while (read(STDIN_FILENO, &c, 1) > 0)
		;
	free(p);
	return 0;
}
