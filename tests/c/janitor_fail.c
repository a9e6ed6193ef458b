/* The janitor thread cannot be created (a pids cgroup, RLIMIT_NPROC; here
 * pthread_create is made to fail).  Nobody would reap an io_uring, so
 * hpalloc must not use one: every release is synchronous and the mapping is
 * gone when hp_free returns, the cache decays on the free path, the gauges
 * say so.  On main before the fix the ring was set up anyway: 600 frees of
 * 4 MiB left 2.4 GB mapped.  Runs in a fresh process (the janitor starts
 * with the first huge block, and is tried once: pthread_create fails for
 * that one). */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define ROUNDS 600
#define SIZE (4 * MiB)

static uint64_t stat_of(int s)
{
	struct hp_stats st;
	return hp_stats_get(&st) == 0 ? st.v[s] : UINT64_MAX;
}

static int child_no_janitor(void)
{
	fault_pthread_create(EAGAIN);
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_free(hp_malloc(SIZE)); /* the first huge block: the janitor's one try */
	fault_pthread_create(0); /* the program's own threads may start again */
	int bad = 0;
	for (int i = 0; i < ROUNDS; i++) {
		char *p = hp_malloc(SIZE);
		if (!p)
			return harness_expect(false, "allocation failed");
		p[0] = p[SIZE - 1] = 1;
		hp_free(p);
		if (harness_mapped(p, SIZE) != 0) {
			fprintf(stderr, "FAIL: round %d: freed block still mapped\n", i);
			return 1;
		}
	}
	hp_release_drain(); /* returns: nothing is in flight */
	bad |= harness_expect(stat_of(HP_STAT_JANITOR_ACTIVE) == 0, "janitor_active should be 0");
	bad |= harness_expect(stat_of(HP_STAT_URING_ACTIVE) == 0, "uring_active should be 0");
	bad |= harness_expect(stat_of(HP_STAT_URING_RELEASES) == 0, "released through a ring nobody reaps");
	bad |= harness_expect(stat_of(HP_STAT_SYNC_RELEASES) >= ROUNDS, "releases were not synchronous");
	bad |= harness_expect(stat_of(HP_STAT_MAPPED_BYTES) == 0, "mapped_bytes should be 0");
	return bad;
}

/* Without the janitor the cache still decays: on the free path. */
static int child_decay_on_free(void)
{
	fault_pthread_create(EAGAIN);
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "1G");
	hp_knob_set("cache_decay_ms", "50");
	hp_free(hp_malloc(SIZE)); /* the first huge block: the janitor's one try */
	fault_pthread_create(0);
	char *a = hp_malloc(16 * MiB), *b = hp_malloc(2 * MiB);
	if (!a || !b)
		return 1;
	a[0] = 1;
	hp_free(a); /* cached */
	if (harness_mapped(a, 16 * MiB) != 16 * MiB)
		return harness_expect(false, "the first block should be cached (still mapped)");
	usleep(120 * 1000);
	hp_free(b); /* this free finds a past its decay */
	int bad = harness_expect(harness_mapped(a, 16 * MiB) == 0, "a decayed block stayed mapped");
	bad |= harness_expect(stat_of(HP_STAT_CACHE_DECAYS) >= 1, "cache_decays should count it");
	return bad;
}

static const struct harness_child_case children[] = {
	{"no_janitor", child_no_janitor},
	{"decay_on_free", child_decay_on_free},
};

static void test_no_janitor_releases_synchronously(void **state)
{
	(void)state;
	harness_child_passes("no_janitor");
}

static void test_no_janitor_cache_decays_on_free(void **state)
{
	(void)state;
	harness_child_passes("decay_on_free");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_no_janitor_releases_synchronously),
		HTEST(test_no_janitor_cache_decays_on_free),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("janitor_fail", tests, ARRAY_SIZE(tests));
}
