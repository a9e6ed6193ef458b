/* An interposer's free() asks hp_owns() about every 2 MiB aligned pointer
 * (libhpalloc-preload.so does).  hpalloc itself frees its block records
 * with free() while holding release.c's lock; a record that glibc happened
 * to place on a 2 MiB boundary then made hp_owns() wait for hp_heap_lock
 * inside that lock -- the inverse of the lock order -- while another thread
 * freeing a block held hp_heap_lock and waited for the release lock: a
 * deadlock (on main before the fix: the watchdog fires).  hp_owns() now
 * takes only the registry's own lock, under which nothing waits.
 *
 * This program is that interposer: it defines calloc and free (the
 * executable comes first in symbol lookup), hands out one block record on a
 * 2 MiB boundary, and when hpalloc frees it lets the other thread in first.
 * Not under ASan, whose runtime must own malloc. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#if !defined(__SANITIZE_ADDRESS__)
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *ptr);

static __thread bool next_calloc_aligned;
static void *aligned_record;
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool other_may_go;

void *calloc(size_t nmemb, size_t size)
{
	if (!next_calloc_aligned)
		return __libc_calloc(nmemb, size);
	next_calloc_aligned = false;
	void *p = __libc_memalign(2 * MiB, nmemb * size);
	if (p)
		memset(p, 0, nmemb * size);
	aligned_record = p;
	return p;
}

void free(void *ptr)
{
	if (ptr && ptr == aligned_record) {
		/* hpalloc frees the record under its release lock: let the
		 * other thread take hp_heap_lock and block on that lock first */
		pthread_mutex_lock(&gate);
		other_may_go = true;
		pthread_cond_signal(&gate_cond);
		pthread_mutex_unlock(&gate);
		harness_sleep_ms(300);
		aligned_record = NULL;
	}
	if (ptr && ((uintptr_t)ptr & (2 * MiB - 1)) == 0 && hp_owns(ptr)) {
		hp_free(ptr);
		return;
	}
	__libc_free(ptr);
}

static void *other_frees(void *block)
{
	pthread_mutex_lock(&gate);
	while (!other_may_go)
		pthread_cond_wait(&gate_cond, &gate);
	pthread_mutex_unlock(&gate);
	hp_free(block); /* takes hp_heap_lock, then waits for the release lock */
	return NULL;
}

static void test_record_freed_on_a_2m_boundary(void **state)
{
	pthread_t t;
	(void)state;
	harness_set_watchdog(30);
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");  /* a freed block goes to release.c */
	harness_knob("uring", "off");    /* and is unmapped by the freeing thread */
	next_calloc_aligned = true;
	void *x = hp_malloc(4 * MiB);
	next_calloc_aligned = false;
	assert_non_null(x);
	assert_non_null(aligned_record); /* its record is on a 2 MiB boundary */
	void *y = hp_malloc(4 * MiB);
	assert_non_null(y);
	assert_int_equal(pthread_create(&t, NULL, other_frees, y), 0);
	hp_free(x);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_null(aligned_record);
	assert_int_equal(harness_stat(HP_STAT_THP_LIVE_BLOCKS), 0);
}
#else
static void test_record_freed_on_a_2m_boundary(void **state)
{
	(void)state;
	harness_skip("this test interposes calloc and free itself, which ASan's runtime forbids");
}
#endif

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_record_freed_on_a_2m_boundary),
	};
	harness_init(argc, argv);
	return harness_run("owns_during_release_no_deadlock", tests, ARRAY_SIZE(tests));
}
