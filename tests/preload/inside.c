/* The smallest threshold (4K) under the preload library: then hpalloc's
 * own allocations -- its initialisation's, the janitor's (control directory
 * polling, the published stats entry: opendir buffers of 32 KiB, stdio
 * buffers of 4 KiB), the pool probes of mode=auto (libhugetlbfs) -- are all
 * above the threshold, and would re-enter the huge path from inside it.
 * They must go to glibc (hp_inside): the program runs, its own 4 KiB+
 * blocks are hpalloc's, and the janitor keeps working (a knob written to
 * the control directory reaches the process). */
#include "common.h"

#include <dirent.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, ms % 1000 * 1000000};
	nanosleep(&ts, NULL);
}

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200; i++) {
		char *p = malloc(4096 + (size_t)i * 512);
		CHECK(p && hpalloc_owns(p), "a %d-byte block is not hpalloc's", 4096 + i * 512);
		memset(p, i, 4096);
		free(p);
	}
	return NULL;
}

/* What the process's published entry says, read back through hpalloc. */
static long knob_source(const char *name)
{
	char buf[64];
	int (*get)(const char *, char *, size_t) =
		(int (*)(const char *, char *, size_t))dlsym_default("hp_knob_get");
	return get(name, buf, sizeof(buf));
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=auto", "HPALLOC_THRESHOLD=4K", NULL};
	pthread_t t[4];

	preload_test_init(argc, argv, knobs, NULL);
	char *p = malloc(4096);
	CHECK(p && hpalloc_owns(p), "malloc(4096) is not hpalloc's with threshold=4K");
	free(p);
	p = malloc(4 * MiB);
	CHECK(p && hpalloc_owns(p) && huge_bytes(p, 4 * MiB) == 4 * MiB, "malloc(4 MiB) not huge");
	free(p);
	DIR *d = opendir("/proc/self/fd"); /* the program's own 32 KiB buffer: huge */
	CHECK(d != NULL && readdir(d) != NULL, "opendir");
	closedir(d);
	for (long i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	/* the janitor polls the control directory (opendir, file reads) */
	const char *dir = getenv("HPALLOC_CONTROL_DIR");
	CHECK(dir != NULL, "no HPALLOC_CONTROL_DIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/cache_decay_ms", dir);
	FILE *f = fopen(path, "we");
	CHECK(f && fputs("77\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
	int waited = 0;
	while (knob_source("cache_decay_ms") != 1 /* HP_SOURCE_CONTROL */ && waited < 5000) {
		sleep_ms(50);
		waited += 50;
	}
	CHECK(waited < 5000, "the janitor did not apply the control directory's knob");
	CHECK(hpalloc_stat("janitor_active") == 1, "no janitor");
	preload_pass("preload/inside");
}
