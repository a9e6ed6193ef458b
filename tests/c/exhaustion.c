/* A tiny hugetlb pool and many allocations: never a SIGBUS (pool pages are
 * reserved at map time), the `fallback` knob decides what happens when the
 * pool is short, and HP_STAT_FALLBACKS / HP_STAT_FAILURES count it. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#include <unistd.h>

#define POOL_PAGES 2
#define BLOCKS 24
#define BLOCK_SIZE (2 * MiB)

static void on_sigbus(int sig)
{
	static const char msg[] =
		"exhaustion: SIGBUS touching a block: the pool was not reserved "
		"at map time (MAP_NORESERVE?)\n";
	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* exiting anyway */
	}
	_exit(1);
}

static void setup_tiny_pool(const char *fallback)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigbus;
	sigaction(SIGBUS, &sa, NULL);
	harness_pool_or_skip(2 * MiB, POOL_PAGES, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
	harness_knob("fallback", fallback);
}

/* Allocates BLOCKS blocks, touches and checks them all, frees them and
 * checks the pool came back. */
static void exhaust_with_fallback(int fallback_backend)
{
	void *blocks[BLOCKS];
	int per_backend[HP_BACKEND_COUNT] = { 0 };
	uint64_t fallbacks = harness_stat(HP_STAT_FALLBACKS);

	for (int i = 0; i < BLOCKS; i++) {
		blocks[i] = hp_malloc(BLOCK_SIZE);
		assert_non_null(blocks[i]);
		harness_fill(blocks[i], BLOCK_SIZE, (uint64_t)i);
		struct hp_backing b;
		assert_int_equal(hp_backing(blocks[i], &b), 0);
		assert_true(b.backend >= 0 && b.backend < HP_BACKEND_COUNT);
		per_backend[b.backend]++;
		if (b.backend == HP_BACKEND_HUGETLB)
			assert_int_equal(b.kernel.kernel_page_size, 2 * MiB);
	}
	assert_int_equal(per_backend[HP_BACKEND_HUGETLB], POOL_PAGES);
	assert_int_equal(per_backend[fallback_backend], BLOCKS - POOL_PAGES);
	assert_int_equal(harness_stat(HP_STAT_FALLBACKS) - fallbacks, BLOCKS - POOL_PAGES);
	assert_int_equal(harness_pool_available(2 * MiB), 0);
	for (int i = 0; i < BLOCKS; i++) {
		assert_filled(blocks[i], BLOCK_SIZE, (uint64_t)i);
		hp_free(blocks[i]);
	}
	hp_release_drain();
	assert_int_equal(harness_pool_available(2 * MiB), POOL_PAGES);
}

static void test_fallback_thp(void **state)
{
	(void)state;
	setup_tiny_pool("thp");
	exhaust_with_fallback(HP_BACKEND_THP);
}

static void test_fallback_small(void **state)
{
	(void)state;
	setup_tiny_pool("small");
	exhaust_with_fallback(HP_BACKEND_SMALL);
}

static void test_fallback_fail(void **state)
{
	(void)state;
	setup_tiny_pool("fail");
	void *blocks[POOL_PAGES];
	for (int i = 0; i < POOL_PAGES; i++) {
		blocks[i] = hp_malloc(BLOCK_SIZE);
		assert_non_null(blocks[i]);
		harness_touch(blocks[i], BLOCK_SIZE);
	}
	uint64_t failures = harness_stat(HP_STAT_FAILURES);
	for (int i = 0; i < 8; i++) {
		errno = 0;
		assert_null(hp_malloc(BLOCK_SIZE));
		assert_int_equal(errno, ENOMEM);
		errno = 0;
		assert_null(hp_calloc(1, BLOCK_SIZE));
		assert_int_equal(errno, ENOMEM);
	}
	assert_int_equal(harness_stat(HP_STAT_FAILURES) - failures, 16);
	/* a failed realloc leaves the block as it was */
	harness_fill(blocks[0], BLOCK_SIZE, 5);
	errno = 0;
	assert_null(hp_realloc(blocks[0], 3 * BLOCK_SIZE));
	assert_int_equal(errno, ENOMEM);
	assert_filled(blocks[0], BLOCK_SIZE, 5);

	for (int i = 0; i < POOL_PAGES; i++)
		hp_free(blocks[i]);
	hp_release_drain();
	/* the pool is usable again */
	void *again = hp_malloc(BLOCK_SIZE);
	assert_non_null(again);
	harness_touch(again, BLOCK_SIZE);
	hp_free(again);
}

/* A block bigger than the whole pool: one fallback, no partial mapping. */
static void test_block_larger_than_pool(void **state)
{
	(void)state;
	setup_tiny_pool("thp");
	uint64_t fallbacks = harness_stat(HP_STAT_FALLBACKS);
	void *p = hp_malloc(3 * BLOCK_SIZE);
	assert_non_null(p);
	harness_touch(p, 3 * BLOCK_SIZE);
	struct hp_backing b;
	assert_int_equal(hp_backing(p, &b), 0);
	assert_int_equal(b.backend, HP_BACKEND_THP);
	assert_int_equal(harness_stat(HP_STAT_FALLBACKS), fallbacks + 1);
	assert_int_equal(harness_pool_available(2 * MiB), POOL_PAGES);
	hp_free(p);
}

/* Pool pages taken by a mapping hpalloc does not know about: the library
 * must ask the kernel, not trust its own records; the explicit page size
 * path (hp_malloc_pagesize) follows `fallback` as well. */
static void test_pool_taken_by_foreign_mapping(void **state)
{
	(void)state;
	setup_tiny_pool("small");
	size_t len = BLOCK_SIZE * POOL_PAGES;
	void *foreign = mmap(NULL, len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT),
			     -1, 0);
	assert_true(foreign != MAP_FAILED);
	assert_int_equal(harness_pool_available(2 * MiB), 0);

	uint64_t fallbacks = harness_stat(HP_STAT_FALLBACKS);
	unsigned char *b = hp_malloc_pagesize(BLOCK_SIZE, 2 * MiB, 1);
	assert_non_null(b);
	assert_zeroed(b, BLOCK_SIZE);
	void *c = hp_malloc(BLOCK_SIZE);
	assert_non_null(c);
	harness_touch(c, BLOCK_SIZE);
	struct hp_backing info;
	assert_int_equal(hp_backing(b, &info), 0);
	assert_int_equal(info.backend, HP_BACKEND_SMALL);
	assert_int_equal(hp_backing(c, &info), 0);
	assert_int_equal(info.backend, HP_BACKEND_SMALL);
	assert_int_equal(harness_stat(HP_STAT_FALLBACKS), fallbacks + 2);
	hp_free(b);
	hp_free(c);
	munmap(foreign, len);
}

/* Free then allocate again at once, the pool exactly one block large and
 * releases asynchronous (io_uring): the pages of the freed block are still
 * being released, but the next allocation must get them (wait for them)
 * rather than fall back or fail. */
static void test_reuse_pool_right_after_free(void **state)
{
	(void)state;
	setup_tiny_pool("fail");
	harness_knob("uring", "on");
	uint64_t fallbacks = harness_stat(HP_STAT_FALLBACKS);
	for (int i = 0; i < 50; i++) {
		void *p = hp_malloc(BLOCK_SIZE * POOL_PAGES);
		if (!p)
			fail_msg("round %d: pool of %d pages short right after a free "
				 "(release still in flight?)", i, POOL_PAGES);
		harness_touch(p, BLOCK_SIZE * POOL_PAGES);
		hp_free(p);
	}
	assert_int_equal(harness_stat(HP_STAT_FALLBACKS), fallbacks);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_fallback_thp),
		HTEST(test_fallback_small),
		HTEST(test_fallback_fail),
		HTEST(test_block_larger_than_pool),
		HTEST(test_pool_taken_by_foreign_mapping),
		HTEST(test_reuse_pool_right_after_free),
	};

	harness_init(argc, argv);
	return harness_run("exhaustion", tests, ARRAY_SIZE(tests));
}
