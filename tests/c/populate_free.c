/* A block freed or resized while a populate worker is inside it
 * (lib/threads/populate.c, issue 27).  The rule: no worker touches a block once it
 * left the registry -- it may be cached, released, unmapped, its address
 * reused by anyone's mapping.  So hp_free and hp_realloc end the block's
 * job and wait until no worker is inside it.
 *
 * A worker is held inside the block by a userfaultfd (populate_util.h): the
 * free (or realloc) must wait in a futex until it is let go, and once it
 * returns, nothing is ever faulted at the block's old address again -- a
 * fresh mapping placed there stays untouched.  Before populate_forget() was
 * called there, hp_free returned at once, unmapping the block under the
 * worker.  The last case races frees against live workers, 20 rounds. */
#include "harness.h"
#include "cancel_util.h"
#include "fault.h"
#include "populate_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define SIZE (256 * MiB)

/* Pages of [p, p + len) that are resident (mincore). */
static size_t resident_pages(void *p, size_t len)
{
	static unsigned char vec[SIZE / 4096];
	size_t n = len / 4096, count = 0;
	if (mincore(p, len, vec) < 0)
		return SIZE_MAX;
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	return count;
}

/* The block's old range, mapped afresh by the test and never touched: a
 * worker still at work there would fault pages in.  0 if none came. */
static int nothing_faults_at(void *old, size_t len)
{
	void *q = mmap(old, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (q != old) {
		fprintf(stderr, "FAIL: could not map the freed range again (%s)\n", strerror(errno));
		if (q != MAP_FAILED)
			munmap(q, len);
		return 1;
	}
	harness_sleep_ms(300);
	size_t n = resident_pages(q, len);
	munmap(q, len);
	if (n) {
		fprintf(stderr, "FAIL: %zu pages were faulted in at the freed block's address\n", n);
		return 1;
	}
	return 0;
}

/* The victim's call blocks while the worker is held, returns once it goes. */
static int waits_for_worker(struct victim *v, const char *what)
{
	cancel_victim_start(v);
	if (!cancel_victim_blocked_in(v, 202 /* futex */, 5000))
		return 1;
	harness_sleep_ms(300);
	if (atomic_load(&v->returned)) {
		fprintf(stderr, "FAIL: %s returned while a worker was inside the block\n", what);
		return 1;
	}
	pop_hold_workers(false);
	for (int i = 0; i < 1000 && !atomic_load(&v->returned); i++)
		harness_sleep_ms(10);
	pthread_join(v->thread, NULL);
	if (!atomic_load(&v->returned)) {
		fprintf(stderr, "FAIL: %s did not return once the worker was let go\n", what);
		return 1;
	}
	return 0;
}

/* A worker held inside a fresh block, then v->call(block) on a thread of
 * its own: it must wait until the worker is let go.  0, 1 (said why) or 77
 * (no worker can be held here). */
static int call_with_worker_inside(struct victim *v, const char *what)
{
	bool skip;
	char why[256];
	char *p = pop_hold_block(SIZE, &skip, why, sizeof(why));
	if (!p) {
		fprintf(stderr, "%s\n", why);
		return skip ? 77 : 1;
	}
	v->arg = p;
	int bad = waits_for_worker(v, what);
	pop_hold_stop();
	return bad;
}

static void *free_it(void *p)
{
	hp_free(p);
	return NULL;
}

static int child_free_waits(void)
{
	static struct victim v = {.call = free_it};
	int bad = call_with_worker_inside(&v, "hp_free");
	if (bad == 77)
		return bad;
	char *p = v.arg;
	bad |= harness_expect(harness_mapped(p, SIZE) == 0, "the freed block is still mapped (cache_max=0)");
	bad |= nothing_faults_at(p, SIZE);
	return bad | pop_fresh_block_whole(SIZE, 2, pop_workers_populated); /* the workers go on as ever */
}

static void *grow_it(void *p)
{
	return hp_realloc(p, 2 * SIZE);
}

static int child_realloc_waits(void)
{
	static struct victim v = {.call = grow_it};
	int bad = call_with_worker_inside(&v, "hp_realloc");
	if (bad == 77)
		return bad;
	char *p = v.arg, *q = v.result;
	bad |= harness_expect(q != NULL, "hp_realloc failed");
	if (!q)
		return 1;
	bad |= harness_expect(harness_check(q, POP_FILLED, 1) == SIZE_MAX, "the grown block lost the program's data");
	if (q != p)
		bad |= nothing_faults_at(p, SIZE);
	hp_free(q);
	return bad;
}

/* No worker held: frees race live workers, 20 rounds, the block's address
 * then mapped afresh and watched. */
static int child_free_races(void)
{
	int bad = 0;
	hp_knob_set("mode", "thp");
	hp_knob_set("threshold", "1M");
	hp_knob_set("cache_max", "0");
	hp_knob_set("uring", "off");
	hp_knob_set("populate", "2");
	uint64_t ahead0 = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
	for (int round = 0; round < 20 && !bad; round++) {
		char *p = hp_malloc(SIZE);
		if (!p)
			return harness_expect(false, "hp_malloc failed");
		uint64_t before = harness_stat(HP_STAT_POPULATE_AHEAD_BYTES);
		harness_fill_slowly(p, 24 * MiB, 3, 0); /* the workers start */
		for (int i = 0; i < 200 && harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) == before; i++)
			harness_sleep_ms(1);
		bad |= harness_expect(harness_check_filled(p, 24 * MiB, 3) == SIZE_MAX, "the block lost data");
		hp_free(p); /* the workers are at it */
		bad |= nothing_faults_at(p, SIZE);
	}
	fprintf(stderr, "populated ahead over the rounds: %llu MiB\n",
		(unsigned long long)(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) - ahead0) >> 20);
	bad |= harness_expect(harness_stat(HP_STAT_POPULATE_AHEAD_BYTES) > ahead0,
		     "no worker ever populated: the test did not test");
	return bad;
}

static const struct harness_child_case children[] = {
	{"free_waits", child_free_waits},
	{"realloc_waits", child_realloc_waits},
	{"free_races", child_free_races},
};

static void test_free_waits_for_worker_inside(void **state)
{
	(void)state;
	pop_hold_require();
	harness_child_passes("free_waits");
}

static void test_realloc_waits_for_worker_inside(void **state)
{
	(void)state;
	pop_hold_require();
	harness_child_passes("realloc_waits");
}

static void test_frees_race_workers(void **state)
{
	(void)state;
	harness_need_thp();
	harness_child_passes("free_races");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_free_waits_for_worker_inside),
		HTEST(test_realloc_waits_for_worker_inside),
		HTEST(test_frees_race_workers),
	};
	harness_child_dispatch(argc, argv, children, ARRAY_SIZE(children));
	harness_init(argc, argv);
	return harness_run("populate_free", tests, ARRAY_SIZE(tests));
}
