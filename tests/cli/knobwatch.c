/* knobwatch — a small hpalloc user for the CLI tests.
 *
 *   knobwatch [-t SECONDS] KNOB...
 *
 * Initialises the library (one hp_malloc), prints "ready <pid>", then every
 * 20 ms reads the knobs with hp_knob_get() and prints "KNOB=VALUE SOURCE"
 * whenever one changes (and once at start).  It never calls
 * hp_control_reload(): a change can only reach it through the library's
 * own polling, which is what the tests measure.  Exits normally (so the
 * library's exit handler runs) after SECONDS (default 60) or on SIGTERM.
 */
#include "hpalloc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_KNOBS 16

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char last[MAX_KNOBS][HP_KNOB_VALUE_MAX + 16] = { { 0 } };
	double limit = 60, end;
	const struct timespec tick = { 0, 20 * 1000 * 1000 };
	int first = 1, nknobs;
	void *p;

	if (argc > 2 && strcmp(argv[1], "-t") == 0) {
		limit = atof(argv[2]);
		argv += 2;
		argc -= 2;
	}
	nknobs = argc - 1;
	if (nknobs < 1 || nknobs > MAX_KNOBS) {
		fprintf(stderr, "usage: knobwatch [-t SECONDS] KNOB...\n");
		return 2;
	}
	signal(SIGTERM, on_term);
	p = hp_malloc(64); /* initialises the library: janitor, control dir */
	hp_free(p);
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	end = now_s() + limit;
	while (!stop && now_s() < end) {
		for (int i = 0; i < nknobs; i++) {
			char value[HP_KNOB_VALUE_MAX], line[sizeof(last[0])];
			int src = hp_knob_get(argv[i + 1], value, sizeof(value));

			if (src < 0) {
				fprintf(stderr, "knobwatch: unknown knob %s\n",
					argv[i + 1]);
				return 2;
			}
			snprintf(line, sizeof(line), "%s %s", value,
				 hp_source_name(src));
			if (first || strcmp(line, last[i]) != 0) {
				memcpy(last[i], line, sizeof(line));
				printf("%s=%s\n", argv[i + 1], line);
				fflush(stdout);
			}
		}
		first = 0;
		nanosleep(&tick, NULL);
	}
	return 0;
}
