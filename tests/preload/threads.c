/* 8 threads of random allocations under the preload library: malloc,
 * calloc, realloc across the threshold both ways, posix_memalign, frees
 * of blocks another thread allocated; every block's contents checked
 * before it is resized or freed, every byte a realloc keeps checked after
 * it, every byte of a calloc checked zero.  A quarter of the requests are at or above
 * the threshold (1 MiB here), and the large blocks alive at the end must be
 * on huge pages, the small ones not.  A small threshold (64 KiB) and a
 * small cache make the huge path, the cache and the release ring busy. */
#include "common.h"

#include <malloc.h>
#include <pthread.h>
#include <string.h>

#define THREADS 8
#define SLOTS 64
#define ROUNDS 3000
#define THRESHOLD (64 * KiB)

struct slot {
	pthread_mutex_t lock;
	char *p;
	size_t size;
	uint64_t seed;
};
static struct slot slots[SLOTS];

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static size_t random_size(uint64_t *x)
{
	switch (rnd(x) % 4) {
	case 0: return 1 + rnd(x) % 256;
	case 1: return 1 + rnd(x) % (16 * KiB);
	case 2: return THRESHOLD / 2 + rnd(x) % THRESHOLD; /* around the threshold */
	default: return THRESHOLD + rnd(x) % (6 * MiB);
	}
}

/* Between operations, contents are checked on a sample: the first and
 * last KiB and 64 bytes per MiB, so that 8 threads x 3000 rounds stay
 * quick.  A realloc, which may copy, is checked on every byte it keeps. */
static void stamp(char *p, size_t n, uint64_t seed)
{
	size_t head = n < KiB ? n : KiB;
	fill(p, head, seed);
	if (n >= 2 * KiB)
		fill(p + n - KiB, KiB, seed + 1);
	for (size_t off = MiB; off + 4096 <= n; off += MiB)
		fill(p + off, 64, seed + off);
}

static bool stamped(const char *p, size_t n, uint64_t seed)
{
	size_t head = n < KiB ? n : KiB;
	bool ok = check(p, head, seed) && (n < 2 * KiB || check(p + n - KiB, KiB, seed + 1));
	for (size_t off = MiB; ok && off + 4096 <= n; off += MiB)
		ok = check(p + off, 64, seed + off);
	return ok;
}

static void *new_block(size_t size, uint64_t *x)
{
	void *p = NULL;
	switch (rnd(x) % 3) {
	case 0: p = malloc(size); break;
	case 1:
		p = calloc(1, size);
		CHECK(p && all_zero(p, size), "calloc(%zu) not zeroed", size);
		break;
	default:
		CHECK(posix_memalign(&p, (size_t)64 << (rnd(x) % 6), size) == 0, "posix_memalign");
	}
	return p;
}

static void one_round(uint64_t *x)
{
	struct slot *s = &slots[rnd(x) % SLOTS];
	pthread_mutex_lock(&s->lock);
	if (s->p)
		CHECK(stamped(s->p, s->size, s->seed), "block %p of %zu bytes was changed", s->p, s->size);
	size_t size = random_size(x);
	uint64_t action = rnd(x) % 3;
	if (s->p && action == 0) {
		free(s->p);
		s->p = NULL;
	} else if (s->p && action == 1) {
		uint64_t whole = rnd(x);
		fill(s->p, s->size, whole);
		char *q = after_realloc(realloc(s->p, size));
		CHECK(q != NULL, "realloc(%zu)", size);
		size_t kept = size < s->size ? size : s->size, bad = first_wrong(q, kept, whole);
		CHECK(bad == SIZE_MAX, "realloc %zu -> %zu bytes: wrong from byte %zu of the %zu kept",
		      s->size, size, bad, kept);
		s->p = q;
	} else {
		if (s->p)
			free(s->p);
		s->p = new_block(size, x);
		CHECK(s->p != NULL, "allocation of %zu", size);
	}
	if (s->p) {
		CHECK(malloc_usable_size(s->p) >= size, "usable size");
		s->size = size;
		s->seed = rnd(x);
		stamp(s->p, size, s->seed);
	}
	pthread_mutex_unlock(&s->lock);
}

static void *worker(void *arg)
{
	uint64_t x = 0x1234567 + (uintptr_t)arg * 7919;
	/* memcheck is ~50 times slower: fewer rounds there */
	int rounds = getenv("HPALLOC_TEST_VALGRIND") ? ROUNDS / 10 : ROUNDS;
	for (int i = 0; i < rounds; i++)
		one_round(&x);
	return NULL;
}

/* On failure, the block's mappings as smaps has them, and the machine's
 * split counters: which of a fallback, a split or a mapping without THP
 * advice it was. */
static void why_not_huge(void *p, size_t len)
{
	struct harness_smaps r;
	if (harness_smaps_range(p, len, &r) == 0)
		fprintf(stderr, "  smaps: %d mappings, Rss %zu KiB, AnonHugePages %zu KiB, LazyFree %zu KiB, "
			"THP-eligible %d, page size %zu\n", r.mappings, r.rss >> 10, r.anon_huge >> 10,
			r.lazyfree >> 10, r.thp_eligible, r.kernel_page_size);
	FILE *f = fopen("/proc/vmstat", "re");
	char line[128];
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "thp_", 4) == 0 && (strstr(line, "split") || strstr(line, "fallback")))
			fprintf(stderr, "  %s", line);
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	static const char *const knobs[] = {"HPALLOC_MODE=thp", "HPALLOC_THRESHOLD=64K",
					    "HPALLOC_CACHE_MAX=64M", NULL};
	pthread_t t[THREADS];

	preload_test_init(argc, argv, knobs, NULL);
	for (int i = 0; i < SLOTS; i++)
		pthread_mutex_init(&slots[i].lock, NULL);
	for (long i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	int huge = 0, small = 0;
	for (int i = 0; i < SLOTS; i++) {
		struct slot *s = &slots[i];
		if (!s->p)
			continue;
		CHECK(stamped(s->p, s->size, s->seed), "slot %d changed", i);
		if (s->size >= 2 * MiB) {
			CHECK(hpalloc_owns(s->p), "a %zu-byte block at %p is not hpalloc's", s->size, s->p);
			size_t huge_now = huge_bytes(s->p, s->size);
			if (huge_now < (s->size & ~(2 * MiB - 1)))
				why_not_huge(s->p, s->size); /* says what smaps says of it */
			CHECK(huge_now >= (s->size & ~(2 * MiB - 1)),
			      "a %zu-byte block at %p is not on huge pages: %zu KiB huge", s->size, s->p,
			      huge_now >> 10);
			huge++;
		} else if (s->size < THRESHOLD) {
			CHECK(!hpalloc_owns(s->p), "a %zu-byte block is hpalloc's", s->size);
			small++;
		}
		free(s->p);
	}
	CHECK(huge > 0 && small > 0, "%d huge and %d small blocks at the end", huge, small);
	CHECK(hpalloc_stat("cache_hits") > 0, "the cache was never used");
	CHECK(hpalloc_stat("preload_huge_bytes") == 0, "%llu preload bytes still live",
	      (unsigned long long)hpalloc_stat("preload_huge_bytes"));
	preload_pass("preload/threads");
}
