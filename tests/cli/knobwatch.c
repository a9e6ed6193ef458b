/* knobwatch — a small hpalloc user for the CLI tests.
 *
 *   knobwatch [-t SECONDS] [-f] KNOB...
 *
 * Initialises the library (one hp_malloc, then one block of the threshold's
 * size: the library starts its janitor -- control polling, the published
 * entry -- with the first huge block), prints "ready <pid>", then every
 * 20 ms reads the knobs with hp_knob_get() and prints "KNOB=VALUE SOURCE"
 * whenever one changes (and once at start).  It never calls
 * hp_control_reload(): a change can only reach it through the library's
 * own polling, which is what the tests measure.  Exits normally (so the
 * library's exit handler runs) after SECONDS (default 60) or on SIGTERM.
 * -f: fork a child that uses hpalloc for 1.5 s and exits normally; its
 * pid is printed as "forked <pid>".
 */
#include "hpalloc.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* Forks only once this process has published itself: its janitor has
 * then started.  A fork while that new thread is still being set up
 * deadlocked the child of the ASan build one time in three: GCC 12's
 * libasan allocates in its thread-start hook under its allocator's lock
 * and has no fork handlers, so the child inherited the lock held (both
 * threads' stacks inside libasan; the plain build never hangs). */
static void wait_published(void)
{
	static struct hp_proc self;

	for (int i = 0; i < 500 && hp_proc_get((long)getpid(), &self) != 0; i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
}

/* The library's own polling and publishing come with its janitor thread,
 * which the first huge block starts (lib/threads/janitor.c): map one.  With
 * mode=off there is none, and no janitor. */
static void start_janitor(void)
{
	hp_free(hp_malloc(64)); /* initialises the library: knobs, control dir */
	size_t t = hp_huge_threshold();
	if (t != SIZE_MAX)
		hp_free(hp_malloc(t));
}

/* A child that uses hpalloc after fork() (it publishes itself under its
 * own pid) and then exits normally (its exit handler must not remove the
 * parent's entry). */
static void start_child(void)
{
	wait_published();
	pid_t pid = fork();

	if (pid < 0) {
		perror("knobwatch: fork");
		exit(1);
	}
	if (pid == 0) {
		const struct timespec t = { 1, 500 * 1000 * 1000 };
		start_janitor();
		nanosleep(&t, NULL);
		exit(0);
	}
	printf("forked %ld\n", (long)pid);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char last[MAX_KNOBS][HP_KNOB_VALUE_MAX + 16] = { { 0 } };
	double limit = 60, end;
	const struct timespec tick = { 0, 20 * 1000 * 1000 };
	int first = 1, nknobs;

	int fork_child = 0;

	for (;;) {
		if (argc > 2 && strcmp(argv[1], "-t") == 0) {
			limit = atof(argv[2]);
			argv += 2;
			argc -= 2;
		} else if (argc > 1 && strcmp(argv[1], "-f") == 0) {
			fork_child = 1;
			argv++;
			argc--;
		} else {
			break;
		}
	}
	nknobs = argc - 1;
	if (nknobs < 1 || nknobs > MAX_KNOBS) {
		fprintf(stderr, "usage: knobwatch [-t SECONDS] KNOB...\n");
		return 2;
	}
	signal(SIGTERM, on_term);
	start_janitor();
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	if (fork_child)
		start_child();
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
		while (waitpid(-1, NULL, WNOHANG) > 0) /* no zombie children */
			;
		nanosleep(&tick, NULL);
	}
	return 0;
}
