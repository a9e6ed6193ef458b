/* A hugetlb mapping that fails never takes down another thread's memory.
 *
 * A hugetlb block comes with its guard (the 2 MiB after it, hpalloc(7)), so
 * its mapping is placed inside a reservation.  Mapped there with MAP_FIXED,
 * a pool too short fails after the kernel cleared the range, leaving a hole;
 * a thread mapping meanwhile gets the hole, and the cleanup of the failed
 * block unmapped that thread's memory (found by tests/c/tsan.sh: another
 * thread's block faulting in memcpy).  Here two threads map, fill and check
 * small anonymous mappings while the main thread's hugetlb requests fail
 * (no free pages, fallback=fail) and then succeed (a small pool): a fault
 * kills the program, a wrong byte fails it. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#define MAPPERS 2
#define ROUNDS 3000

static atomic_bool stop;

static void *mapper(void *arg)
{
	unsigned char seed = (unsigned char)(uintptr_t)arg;
	size_t bad = 0, rounds = 0;

	while (!atomic_load(&stop)) {
		/* the size of the hole a failed 4 MiB mapping would leave */
		size_t len = (rounds % 3 + 2) * MiB;
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			continue;
		for (size_t i = 0; i < len; i += 4 * KiB)
			p[i] = seed;
		sched_yield(); /* the main thread's failed mapping gets its turn */
		for (size_t i = 0; i < len; i += 4 * KiB)
			bad += p[i] != seed;
		munmap(p, len);
		rounds++;
	}
	return (void *)bad;
}

static void race(size_t expect_blocks)
{
	pthread_t t[MAPPERS];
	size_t got = 0;

	atomic_store(&stop, false);
	for (uintptr_t i = 0; i < MAPPERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, mapper, (void *)(i + 1)), 0);
	for (int i = 0; i < ROUNDS; i++) {
		char *p = hp_malloc(4 * MiB);
		if (p) {
			memset(p, 3, 4 * MiB);
			hp_free(p);
			got++;
		}
	}
	atomic_store(&stop, true);
	for (int i = 0; i < MAPPERS; i++) {
		void *bad;
		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
	if (expect_blocks)
		assert_true(got >= expect_blocks);
	else
		assert_int_equal(got, 0);
}

static void knobs(void)
{
	if (!hp_ctx(HP_ORIGIN_API, 2 * MiB))
		harness_skip("no 2 MiB hugetlb page size here");
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "fail");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
}

/* No free page: every hugetlb mapping fails, thousands of times. */
static void test_failing_maps(void **state)
{
	(void)state;
	knobs();
	harness_pool_or_skip(2 * MiB, 0, true);
	race(0);
	assert_true(harness_stat(HP_STAT_FAILURES) >= ROUNDS);
}

/* A pool for one block at a time: mappings succeed, unmap, succeed. */
static void test_succeeding_maps(void **state)
{
	(void)state;
	knobs();
	harness_pool_or_skip(2 * MiB, 2, true);
	race(ROUNDS);
	hp_release_drain();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_failing_maps),
		HTEST(test_succeeding_maps),
	};

	harness_init(argc, argv);
	return harness_run("hugetlb_map_race", tests, ARRAY_SIZE(tests));
}
