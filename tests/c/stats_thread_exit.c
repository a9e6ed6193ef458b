/* hp_stats_get() while threads exit.  The small path counts into a slot per
 * thread; at thread exit the slot's count moves to what exited threads left
 * behind.  A snapshot must see each count exactly once: in the slot or in
 * the leftovers.  On main before the fix the move added to the leftovers
 * first and unlinked the slot after, and the snapshot read the leftovers
 * before looking at the slots: it saw some counts twice (one block more
 * than were ever allocated) or not at all.
 *
 * Each worker thread allocates one small block and exits, one at a time,
 * while another thread takes snapshots: small_live_blocks must stay between
 * the blocks whose hp_malloc() returned before the snapshot and those
 * whose hp_malloc() had been called after it. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define THREADS 3000

static void *blocks[THREADS];
static _Atomic long called, returned;
static _Atomic bool stop;
static _Atomic long over, under, snapshots;

static void *worker(void *arg)
{
	long i = (long)(intptr_t)arg;
	blocks[i] = hp_malloc(64);
	atomic_fetch_add(&returned, 1);
	return NULL;
}

static void *snapshotter(void *arg)
{
	long base = (long)(intptr_t)arg;
	while (!atomic_load(&stop)) {
		struct hp_stats s;
		long lo = atomic_load(&returned);
		hp_stats_get(&s);
		long hi = atomic_load(&called);
		long v = (long)s.v[HP_STAT_SMALL_LIVE_BLOCKS] - base;
		if (v > hi && atomic_fetch_add(&over, 1) == 0)
			fprintf(stderr, "snapshot counted %ld blocks, only %ld were allocated\n", v, hi);
		if (v < lo && atomic_fetch_add(&under, 1) == 0)
			fprintf(stderr, "snapshot counted %ld blocks, %ld were live\n", v, lo);
		atomic_fetch_add(&snapshots, 1);
	}
	return NULL;
}

static void test_snapshot_while_threads_exit(void **state)
{
	pthread_t snap;
	struct hp_stats s;
	(void)state;
	hp_stats_get(&s);
	long base = (long)s.v[HP_STAT_SMALL_LIVE_BLOCKS];
	assert_int_equal(pthread_create(&snap, NULL, snapshotter, (void *)(intptr_t)base), 0);
	for (long i = 0; i < THREADS; i++) {
		pthread_t t;
		atomic_fetch_add(&called, 1);
		assert_int_equal(pthread_create(&t, NULL, worker, (void *)(intptr_t)i), 0);
		pthread_join(t, NULL);
	}
	atomic_store(&stop, true);
	pthread_join(snap, NULL);
	hp_stats_get(&s);
	assert_int_equal((long)s.v[HP_STAT_SMALL_LIVE_BLOCKS] - base, THREADS);
	for (long i = 0; i < THREADS; i++)
		hp_free(blocks[i]);
	if (atomic_load(&snapshots) < 100)
		fail_msg("only %ld snapshots: the test did not test", atomic_load(&snapshots));
	if (atomic_load(&over) || atomic_load(&under))
		fail_msg("%ld of %ld snapshots counted a thread's blocks twice, %ld not at all",
			 atomic_load(&over), atomic_load(&snapshots), atomic_load(&under));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_snapshot_while_threads_exit),
	};
	harness_init(argc, argv);
	return harness_run("stats_thread_exit", tests, ARRAY_SIZE(tests));
}
