/* >= 8 threads doing random malloc/calloc/realloc/free/free_sized across the
 * small and huge paths (with the cache decaying and knobs changing under
 * them), each block carrying a pattern that is checked before every
 * realloc and free: any block handed out twice, released under its owner
 * or mixed up between threads shows up as a content mismatch.  At the end
 * the process has no huge mapping left (/proc/self/smaps). */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define THREADS 10
#define SLOTS 6
#define OPS_PER_THREAD 1500
#define SPARSE_ABOVE (256 * KiB)

struct slot {
	unsigned char *p;
	size_t size;
	uint64_t seed;
};

struct worker {
	pthread_t tid;
	unsigned id;
	uint64_t rng;
	struct slot slots[SLOTS];
	char error[256];
};

static _Atomic int stop_all;

static uint64_t next_random(uint64_t *state)
{
	/* xorshift64*: deterministic per thread, no shared state */
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static size_t random_size(uint64_t *rng)
{
	uint64_t r = next_random(rng);
	if (r % 10 < 6)
		return 1 + (size_t)(r >> 8) % (256 * KiB);   /* small path */
	return 1 * MiB + (size_t)(r >> 8) % (6 * MiB);  /* around the thresholds */
}

/* Big blocks: the first 64 bytes of every 4 KiB page and the last 64 bytes
 * carry the pattern; writing all of it would make the test slow under
 * ASan without finding more.  Page marks stop before the tail mark. */
#define MARK 64

static void mark(unsigned char *p, size_t size, uint64_t seed)
{
	if (size <= SPARSE_ABOVE) {
		harness_fill(p, size, seed);
		return;
	}
	for (size_t off = 0; off + MARK <= size - MARK; off += 4096)
		harness_fill(p + off, MARK, seed + off);
	harness_fill(p + size - MARK, MARK, seed ^ 0xFFFF);
}

/* Checks what survives in the first `size` bytes of a block that was
 * marked over `marked` bytes. */
static bool marked_ok(const unsigned char *p, size_t marked, size_t size, uint64_t seed)
{
	if (marked <= SPARSE_ABOVE)
		return harness_check(p, size < marked ? size : marked, seed) == SIZE_MAX;
	for (size_t off = 0; off + MARK <= marked - MARK && off + MARK <= size; off += 4096)
		if (harness_check(p + off, MARK, seed + off) != SIZE_MAX)
			return false;
	if (size >= marked)
		return harness_check(p + marked - MARK, MARK, seed ^ 0xFFFF) == SIZE_MAX;
	return true;
}

static bool fail_worker(struct worker *w, const char *what, const struct slot *s)
{
	snprintf(w->error, sizeof(w->error), "thread %u: %s (block %p, %zu bytes)",
		 w->id, what, (void *)s->p, s->size);
	atomic_store(&stop_all, 1);
	return false;
}

static bool fill_empty_slot(struct worker *w, struct slot *s)
{
	s->size = random_size(&w->rng);
	s->seed = next_random(&w->rng);
	bool zeroed = next_random(&w->rng) & 1;
	s->p = zeroed ? hp_calloc(1, s->size) : hp_malloc(s->size);
	if (!s->p)
		return fail_worker(w, "allocation failed", s);
	if (zeroed && harness_first_nonzero(s->p, s->size) != SIZE_MAX)
		return fail_worker(w, "calloc memory not zeroed", s);
	if (hp_usable_size(s->p) < s->size)
		return fail_worker(w, "usable size smaller than requested", s);
	mark(s->p, s->size, s->seed);
	return true;
}

static bool operate_on_full_slot(struct worker *w, struct slot *s)
{
	if (!marked_ok(s->p, s->size, s->size, s->seed))
		return fail_worker(w, "block contents changed under its owner", s);
	switch (next_random(&w->rng) % 3) {
	case 0:
		hp_free(s->p);
		break;
	case 1: /* NumPy may pass a wrong size */
		hp_free_sized(s->p, next_random(&w->rng) & 1 ? s->size : 0);
		break;
	default: {
		size_t size = random_size(&w->rng);
		unsigned char *q = hp_realloc(s->p, size);
		if (!q)
			return fail_worker(w, "realloc failed", s);
		if (!marked_ok(q, s->size, size, s->seed))
			return fail_worker(w, "realloc lost contents", s);
		s->p = q;
		s->size = size;
		mark(q, size, s->seed);
		return true;
	}
	}
	s->p = NULL;
	return true;
}

/* Thread 0 also moves the threshold and the mode under the others. */
static void maybe_turn_knobs(struct worker *w, int op)
{
	static const char *const thresholds[] = { "1M", "2M", "4M" };
	static const char *const modes[] = { "auto", "thp", "auto", "off" };

	if (w->id != 0 || op % 100 != 0)
		return;
	hp_knob_set("threshold", thresholds[(op / 100) % ARRAY_SIZE(thresholds)]);
	hp_knob_set("mode", modes[(op / 100) % ARRAY_SIZE(modes)]);
	if (op % 500 == 0)
		hp_cache_flush();
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int op = 0; op < OPS_PER_THREAD && !atomic_load(&stop_all); op++) {
		struct slot *s = &w->slots[next_random(&w->rng) % SLOTS];
		bool ok = s->p ? operate_on_full_slot(w, s) : fill_empty_slot(w, s);
		if (!ok)
			break;
		maybe_turn_knobs(w, op);
	}
	for (int i = 0; i < SLOTS; i++) {
		struct slot *s = &w->slots[i];
		if (s->p && !w->error[0] && !marked_ok(s->p, s->size, s->size, s->seed))
			fail_worker(w, "block contents changed under its owner", s);
		hp_free(s->p);
		s->p = NULL;
	}
	return NULL;
}

static void test_random_ops(void **state)
{
	(void)state;
	static struct worker workers[THREADS];
	uint64_t live_before[HP_BACKEND_COUNT] = {
		harness_stat(HP_STAT_SMALL_LIVE_BLOCKS),
		harness_stat(HP_STAT_THP_LIVE_BLOCKS),
		harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS),
	};
	char why[256];

	/* a small pool so auto mode mixes hugetlb and thp blocks; without
	 * one the test still runs, on thp and small blocks only -- unless
	 * hugetlb is required */
	int pool = harness_pool_reserve(2 * MiB, 16, false, why, sizeof(why));
	if (pool == HARNESS_POOL_BROKEN || (pool != 0 && harness_required("hugetlb")))
		fail_msg("%s", why);
	if (pool != 0)
		print_message("no hugetlb blocks in this run: %s\n", why);
	harness_knob("mode", "auto");
	harness_knob("pagesize", "2M");
	harness_knob("fallback", "thp");
	harness_knob("cache_max", "64M");
	harness_knob("cache_decay_ms", "30");

	uint64_t huge_requests = harness_stat(HP_STAT_CACHE_HITS) + harness_stat(HP_STAT_CACHE_MISSES);
	uint64_t released = harness_stat(HP_STAT_RELEASED_BYTES);
	atomic_store(&stop_all, 0);
	memset(workers, 0, sizeof(workers));
	for (unsigned i = 0; i < THREADS; i++) {
		workers[i].id = i;
		workers[i].rng = 0x9E3779B97F4A7C15ull * (i + 1);
		assert_int_equal(pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(workers[i].tid, NULL), 0);
	for (unsigned i = 0; i < THREADS; i++)
		if (workers[i].error[0])
			fail_msg("%s", workers[i].error);

	/* the huge path, the cache and page release were all exercised */
	huge_requests = harness_stat(HP_STAT_CACHE_HITS) + harness_stat(HP_STAT_CACHE_MISSES) - huge_requests;
	print_message("huge requests %llu (cache hits %llu), decays %llu, released %llu MiB\n",
		      (unsigned long long)huge_requests,
		      (unsigned long long)harness_stat(HP_STAT_CACHE_HITS),
		      (unsigned long long)harness_stat(HP_STAT_CACHE_DECAYS),
		      (unsigned long long)((harness_stat(HP_STAT_RELEASED_BYTES) - released) >> 20));
	assert_true(huge_requests > 1000);
	assert_true(harness_stat(HP_STAT_RELEASED_BYTES) > released);
	assert_int_equal(harness_stat(HP_STAT_SMALL_LIVE_BLOCKS), live_before[0]);
	assert_int_equal(harness_stat(HP_STAT_THP_LIVE_BLOCKS), live_before[1]);
	assert_int_equal(harness_stat(HP_STAT_HUGETLB_LIVE_BLOCKS), live_before[2]);
	hp_cache_flush();
	hp_release_drain();
	assert_int_equal(harness_stat(HP_STAT_CACHED_BYTES), 0);
	assert_int_equal(harness_stat(HP_STAT_MAPPED_BYTES), 0);
	/* and the kernel agrees: every THP-advised or hugetlb mapping of the
	 * process was a huge block, and none is left */
	size_t huge_bytes;
	int huge = harness_huge_vmas(&huge_bytes);
	if (huge)
		fail_msg("%d huge mappings (%zu MiB) left after free, flush and drain",
			 huge, huge_bytes >> 20);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_random_ops),
	};

	harness_init(argc, argv);
	return harness_run("threads", tests, ARRAY_SIZE(tests));
}
