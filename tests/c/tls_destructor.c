/* A thread-local destructor that runs after hpalloc's own (another
 * library's, registered later) frees hpalloc memory at thread exit.
 * hpalloc's per-thread stats slot is gone by then; on main before the fix
 * the free wrote into the freed slot (heap-use-after-free under ASan) and
 * its bytes were lost from the counters.  Now: no touch of freed memory,
 * and the counters balance. */
#include "harness.h"

#include <pthread.h>

static pthread_key_t late_key;

struct owned {
	void *small, *huge;
};

static void late_destructor(void *arg)
{
	struct owned *o = arg;
	hp_free(o->small);
	hp_free(o->huge);
	hp_free(o); /* itself hpalloc memory */
}

static void *worker(void *arg)
{
	(void)arg;
	struct owned *o = hp_malloc(sizeof(*o));
	o->small = hp_malloc(1000); /* this thread's slot counts these */
	o->huge = hp_malloc(4 * MiB);
	void *more = hp_malloc(300);
	hp_free(more);
	pthread_setspecific(late_key, o);
	return NULL;
}

static void test_free_in_late_tls_destructor(void **state)
{
	(void)state;
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	/* hpalloc's keys first (lower index: their destructors run first) */
	void *warm = hp_malloc(100);
	hp_free(warm);
	assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
	uint64_t small0 = harness_stat(HP_STAT_SMALL_LIVE_BYTES);
	uint64_t blocks0 = harness_stat(HP_STAT_SMALL_LIVE_BLOCKS);
	uint64_t thp0 = harness_stat(HP_STAT_THP_LIVE_BYTES);
	for (int i = 0; i < 20; i++) {
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, worker, NULL), 0);
		assert_int_equal(pthread_join(t, NULL), 0);
	}
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BYTES), small0);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), blocks0);
	assert_int_equal(harness_stat(HP_STAT_THP_LIVE_BYTES), thp0);
	pthread_key_delete(late_key);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_free_in_late_tls_destructor),
	};
	harness_init(argc, argv);
	return harness_run("tls_destructor", tests, ARRAY_SIZE(tests));
}
