/* The completion queue overflows: the ring is made tiny (2 entries, a
 * 4-entry completion queue, io_uring_queue_init interposed) and hundreds
 * of blocks are freed in a burst from several threads.  With
 * IORING_FEAT_NODROP the kernel keeps the overflow; no completion may be
 * lost (a lost one would leave its block mapped forever and drain hanging),
 * no live block may be touched.  Fresh process: the ring is set up at
 * start. */
#include "harness.h"
#include "fault.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 4
#define PER_THREAD 150
#define SIZE (2 * MiB)

static pthread_barrier_t start;

/* The /proc/self/maps lines overlapping [addr, addr + len): who holds it. */
static void print_maps(const void *addr, size_t len)
{
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	while (f && fgets(line, sizeof(line), f)) {
		uintmax_t s, e;
		if (sscanf(line, "%jx-%jx", &s, &e) == 2 && s < hi && e > lo)
			fputs(line, stderr);
	}
	if (f)
		fclose(f);
}

/* Each thread makes its glibc arena (first malloc) and has its stack before
 * any block is freed: a new glibc mapping landing in a released block's hole
 * would look like a block still mapped. */
static void *burst(void *arg)
{
	void **freed = arg;
	free(malloc(64));
	pthread_barrier_wait(&start);
	for (int i = 0; i < PER_THREAD; i++) {
		char *p = hp_malloc(SIZE);
		if (!p)
			return (void *)1;
		p[0] = 1;
		hp_free(p);
		freed[i] = p;
	}
	return NULL;
}

static int child_overflow(void)
{
	static void *freed[THREADS][PER_THREAD];
	pthread_t t[THREADS];

	fault_ring_entries(2);
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	struct hp_stats st;
	if (!harness_ring_ready_within(10000)) {
		fprintf(stderr, "FAIL: io_uring is usable but the janitor set up no ring in 10 s\n");
		return 1;
	}
	unsigned char *live = hp_malloc(32 * MiB);
	harness_fill(live, 32 * MiB, 5);
	pthread_barrier_init(&start, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, burst, freed[i]);
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		if (r)
			return 1;
	}
	hp_release_drain(); /* hangs (watchdog) if a completion was lost */
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER_THREAD; j++)
			if (harness_mapped(freed[i][j], SIZE) && !((char *)freed[i][j] >= (char *)live &&
								  (char *)freed[i][j] < (char *)live + 32 * MiB)) {
				/* a later block may sit at a freed address: only live ones count */
				fprintf(stderr, "FAIL: freed block %d/%d at %p still mapped:\n", i, j,
					freed[i][j]);
				print_maps(freed[i][j], SIZE);
				return 1;
			}
	if (harness_check(live, 32 * MiB, 5) != SIZE_MAX) {
		fprintf(stderr, "FAIL: live block corrupted\n");
		return 1;
	}
	hp_stats_get(&st);
	if (st.v[HP_STAT_URING_RELEASES] < THREADS * PER_THREAD / 2) {
		fprintf(stderr, "FAIL: only %llu releases went through the ring: no overflow tested\n",
			(unsigned long long)st.v[HP_STAT_URING_RELEASES]);
		return 1;
	}
	hp_free(live);
	return 0;
}

static const struct harness_child_case children[] = {
	{"overflow", child_overflow},
};

static void test_cq_overflow_loses_nothing(void **state)
{
	char err[4096], why[256];
	(void)state;
	if (!harness_uring_usable(why, sizeof(why)))
		harness_skip("io_uring: %s", why);
	int rc = harness_run_child("overflow", (const char *const[]){NULL}, err, sizeof(err));
	if (rc != 0)
		fail_msg("child exited %d:\n%s", rc, err);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_cq_overflow_loses_nothing),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("cq_overflow", tests, ARRAY_SIZE(tests));
}
