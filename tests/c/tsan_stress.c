/* The library's thread-shared entry points from several threads at once,
 * for tests/c/tsan.sh, which builds the library's sources and this program
 * with -fsanitize=thread: any data race is a report, and the test fails.
 * Not a cmocka test: ThreadSanitizer's report is the verdict.
 *
 * hp_ctx() is what the NumPy, torch and Numba adapters call from whichever
 * thread allocates first (main before the fix wrote the context it returns
 * on every call, racing with threads reading it to allocate). */
#include "hpalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 20
#define MiB ((size_t)1 << 20)

static void contexts(unsigned round)
{
	static const size_t pagesizes[] = {0, 2 * MiB};
	for (int origin = 0; origin < HP_ORIGIN_COUNT; origin++) {
		void *ctx = hp_ctx(origin, pagesizes[round % 2]);
		if (!ctx)
			continue; /* no 2 MiB hugetlb size here */
		char *p = hp_ctx_malloc(ctx, origin == 0 ? 3 * MiB : 200);
		if (p)
			p[0] = 1;
		p = hp_ctx_realloc(ctx, p, 5 * MiB);
		hp_ctx_free(ctx, p, 5 * MiB);
	}
}

static void shared(void)
{
	int fd;
	struct hp_shared_info info;
	char *p = hp_shared_alloc(2 * MiB, 0, &fd);
	if (!p)
		return;
	p[0] = 1;
	hp_shared_info(p, &info);
	hp_shared_free(p);
}

/* The workers' first blocks at one moment: each is its thread's first
 * huge mapping, and the process's first look at its memory cgroup was
 * made by whichever came first -- main before the fix let them all look
 * at once, writing the same record (CI's run at 9b2e56f). */
static pthread_barrier_t start;

static void *worker(void *arg)
{
	long id = (long)arg;
	pthread_barrier_wait(&start);
	for (unsigned round = 0; round < ROUNDS; round++) {
		struct hp_stats st;
		struct hp_backing b;
		contexts(round);
		char *p = hp_calloc(1, (size_t)(round % 3 + 2) * MiB);
		hp_backing(p, &b);
		hp_free(p);
		hp_stats_get(&st);
		if (round % 10 == (unsigned)id) {
			shared();
			hp_cache_flush();
			hp_knob_set("cache_max", round % 20 ? "0" : "32M");
		}
	}
	return NULL;
}

static void *short_lived(void *arg)
{
	(void)arg;
	hp_free(hp_malloc(100)); /* a stats slot, retired at exit */
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];

	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	pthread_barrier_init(&start, NULL, THREADS);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < 50; i++) {
		pthread_t s;
		pthread_create(&s, NULL, short_lived, NULL);
		pthread_join(s, NULL);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	hp_release_drain();
	puts("tsan_stress: done");
	return 0;
}
