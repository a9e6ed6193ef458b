/* holder — an hpalloc user that holds memory, for the hpctl stats/top tests
 * and bench/fleet.sh.
 *
 *   holder [-t SECONDS] [SIZE...]
 *
 * Allocates one block of each SIZE ("64M", parsed by the library) with
 * hp_malloc and writes every page, then twice one more of the first SIZE,
 * freed at once (a miss, then a cache hit: n + 1 misses and 1 hit in all),
 * prints "ready <pid>" and waits until
 * SIGTERM or SECONDS (default 60), then frees everything and exits normally
 * (the library's exit handler removes its published entry).
 */
#include "hpalloc.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BLOCKS 16

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void *take(const char *text)
{
	uint64_t size;
	void *p;

	if (hp_parse_size(text, &size) != 0 || size == 0) {
		fprintf(stderr, "holder: bad size '%s'\n", text);
		exit(2);
	}
	p = hp_malloc(size);
	if (!p) {
		fprintf(stderr, "holder: hp_malloc(%s) failed\n", text);
		exit(1);
	}
	memset(p, 1, size);
	return p;
}

int main(int argc, char **argv)
{
	const struct timespec tick = { 0, 50 * 1000 * 1000 };
	void *blocks[MAX_BLOCKS];
	double limit = 60;
	int n = 0;

	if (argc > 2 && strcmp(argv[1], "-t") == 0) {
		limit = atof(argv[2]);
		argv += 2;
		argc -= 2;
	}
	if (argc - 1 > MAX_BLOCKS) {
		fprintf(stderr, "usage: holder [-t SECONDS] [SIZE...] (at most %d)\n",
			MAX_BLOCKS);
		return 2;
	}
	signal(SIGTERM, on_term);
	hp_free(hp_malloc(64)); /* initialises the library even without SIZE */
	for (int i = 1; i < argc; i++)
		blocks[n++] = take(argv[i]);
	for (int i = 0; i < 2 && argc > 1; i++)
		hp_free(take(argv[1])); /* a miss, then a hit on the cached one */
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	for (long ticks = (long)(limit * 20); !stop && ticks > 0; ticks--)
		nanosleep(&tick, NULL);
	while (n > 0)
		hp_free(blocks[--n]);
	return 0;
}
