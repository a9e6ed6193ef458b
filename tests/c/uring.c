/* Page release through io_uring versus synchronous: with uring on (knob or
 * HPALLOC_URING) releases are counted as uring releases, with it off (knob,
 * environment) or with io_uring unavailable (seccomp, as Docker's default
 * profile does) as sync releases; every path really gives the memory back:
 * the pages (statm RSS, smaps of the range, the hugetlb pool) and the
 * mapping itself (/proc/self/maps: nothing left at the block's address). */
#include "harness.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BLOCK (64 * MiB)
#define SLACK (8 * MiB)

enum expect { EXPECT_URING, EXPECT_SYNC };

/* Allocates, touches and frees one BLOCK with cache_max=0; checks the
 * counters and that the memory left the process.  Returns NULL or what was
 * wrong (usable from child processes, where cmocka is not running). */
static const char *release_one_block(enum expect expect)
{
	static char why[256];
	struct hp_stats a, b;
	struct harness_smaps range;

	size_t rss0 = harness_statm_rss();
	unsigned char *p = hp_malloc(BLOCK);
	if (!p)
		return "hp_malloc failed";
	harness_touch(p, BLOCK);
	size_t rss1 = harness_statm_rss();
	hp_stats_get(&a);
	hp_free(p);
	hp_release_drain();
	hp_stats_get(&b);
	size_t rss2 = harness_statm_rss();
	size_t mapped = harness_mapped(p, BLOCK);
	harness_smaps_range(p, BLOCK, &range);

	uint64_t uring = b.v[HP_STAT_URING_RELEASES] - a.v[HP_STAT_URING_RELEASES];
	uint64_t sync = b.v[HP_STAT_SYNC_RELEASES] - a.v[HP_STAT_SYNC_RELEASES];
	uint64_t released = b.v[HP_STAT_RELEASED_BYTES] - a.v[HP_STAT_RELEASED_BYTES];
	if (rss1 < rss0 + BLOCK - SLACK)
		snprintf(why, sizeof(why), "touching did not raise RSS (%zu -> %zu)", rss0, rss1);
	else if (expect == EXPECT_URING && (uring == 0 || sync != 0))
		snprintf(why, sizeof(why), "expected an io_uring release: uring +%llu, sync +%llu",
			 (unsigned long long)uring, (unsigned long long)sync);
	else if (expect == EXPECT_SYNC && (sync == 0 || uring != 0))
		snprintf(why, sizeof(why), "expected a sync release: uring +%llu, sync +%llu",
			 (unsigned long long)uring, (unsigned long long)sync);
	else if (released < BLOCK)
		snprintf(why, sizeof(why), "released_bytes grew by %llu only",
			 (unsigned long long)released);
	else if (rss2 + BLOCK - SLACK > rss1)
		snprintf(why, sizeof(why), "RSS did not drop after free+drain (%zu -> %zu)",
			 rss1, rss2);
	else if (range.rss != 0)
		snprintf(why, sizeof(why), "smaps: %zu bytes still resident in the range",
			 range.rss);
	else if (mapped != 0)
		snprintf(why, sizeof(why), "maps: %zu bytes of the block still mapped after "
			 "free+drain (pages dropped, mapping leaked)", mapped);
	else
		return NULL;
	return why;
}

static void assert_release(enum expect expect)
{
	const char *why = release_one_block(expect);
	if (why)
		fail_msg("%s", why);
}

static void release_knobs(void)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", "0");
}

static void skip_unless_uring(void)
{
	harness_need_uring();
}

static void test_uring_on(void **state)
{
	(void)state;
	skip_unless_uring();
	release_knobs();
	harness_knob("uring", "on");
	/* the janitor sets the ring up after start-up: under ASan on a loaded
	 * machine a free can come first and is then (rightly) synchronous */
	if (!harness_ring_ready_within(10000))
		fail_msg("the janitor set up no io_uring within 10 s");
	assert_release(EXPECT_URING);
}

static void test_uring_off_knob(void **state)
{
	(void)state;
	release_knobs();
	harness_knob("uring", "off");
	assert_release(EXPECT_SYNC);
}

static void test_uring_toggle(void **state)
{
	(void)state;
	skip_unless_uring();
	release_knobs();
	harness_knob("uring", "on");
	assert_release(EXPECT_URING);
	harness_knob("uring", "off");
	assert_release(EXPECT_SYNC);
	harness_knob("uring", "on");
	assert_release(EXPECT_URING);
}

/* Cached blocks released by decay take the same path, and are gone (pages
 * and mapping) within 3 decay periods of the free, with no call into the
 * library: the janitor does it.  It looks at least every 250 ms, so a
 * block goes between DECAY_MS and DECAY_MS + 250 ms plus the io_uring
 * round trip; a decay that waited for the next library call, or a second
 * period, would miss the bound. */
#define DECAY_MS 300
static void test_decay_through_uring(void **state)
{
	(void)state;
	skip_unless_uring();
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("uring", "on");
	harness_knob("cache_max", "1G");
	harness_knob("cache_decay_ms", "300");
	void *p = hp_malloc(16 * MiB);
	assert_non_null(p);
	harness_touch(p, 16 * MiB);
	uint64_t uring = harness_stat(HP_STAT_URING_RELEASES);
	uint64_t decays = harness_stat(HP_STAT_CACHE_DECAYS);
	uint64_t freed = harness_now_ms();
	hp_free(p);
	/* only the kernel is asked while waiting */
	while (harness_mapped(p, 16 * MiB) != 0 && harness_now_ms() < freed + 3 * DECAY_MS)
		harness_sleep_ms(5);
	uint64_t took = harness_now_ms() - freed;
	assert_int_equal(harness_mapped(p, 16 * MiB), 0);
	print_message("decayed and unmapped %llu ms after the free (decay %d ms)\n",
		      (unsigned long long)took, DECAY_MS);
	assert_true(took + 10 >= DECAY_MS); /* not released before its time */
	assert_true(harness_stat(HP_STAT_CACHE_DECAYS) > decays);
	assert_true(harness_stat(HP_STAT_URING_RELEASES) > uring);
}

/* Huge pages go back to the pool on both paths. */
static void test_hugetlb_pages_return(void **state)
{
	(void)state;
	char why[256];
	harness_pool_or_skip(2 * MiB, 8, true);
	harness_knob("mode", "hugetlb");
	harness_knob("pagesize", "2M");
	harness_knob("threshold", "1M");
	harness_knob("fallback", "fail");
	harness_knob("cache_max", "0");
	bool uring_ok = harness_uring_usable(why, sizeof(why));
	(void)uring_ok; /* unused when built without liburing */
	for (int on = 0; on < 2; on++) {
		harness_knob("uring", on ? "on" : "off");
		uint64_t u0 = harness_stat(HP_STAT_URING_RELEASES);
		void *p = hp_malloc(16 * MiB);
		assert_non_null(p);
		harness_touch(p, 16 * MiB);
		assert_int_equal(harness_pool_available(2 * MiB), 0);
		hp_free(p);
		hp_release_drain();
		assert_int_equal(harness_pool_available(2 * MiB), 8);
		assert_int_equal(harness_mapped(p, 16 * MiB), 0);
#ifdef HAVE_LIBURING
		if (on && uring_ok)
			assert_true(harness_stat(HP_STAT_URING_RELEASES) > u0);
#endif
		if (!on)
			assert_int_equal(harness_stat(HP_STAT_URING_RELEASES), u0);
	}
}

/* ---- cases in a fresh process: the environment is read at first use -------- */
static const char *const env_common[] = {
	"HPALLOC_MODE=thp", "HPALLOC_THRESHOLD=1M", "HPALLOC_CACHE_MAX=0",
};

static int child_release(enum expect expect, const char *uring_value)
{
	char value[HP_KNOB_VALUE_MAX];
	int source = hp_knob_get("uring", value, sizeof(value));
	if (source != HP_SOURCE_ENV || strcmp(value, uring_value) != 0) {
		fprintf(stderr, "uring knob is %s from %s, expected %s from env\n",
			value, hp_source_name(source), uring_value);
		return 1;
	}
	const char *why = release_one_block(expect);
	if (why) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	return 0;
}

static int child_env_off(void)
{
	return child_release(EXPECT_SYNC, "off");
}

static int child_env_on(void)
{
	/* as test_uring_on: the janitor sets the ring up after start-up, and
	 * on a loaded machine a free can come first and is then (rightly)
	 * synchronous */
	if (!harness_ring_ready_within(10000)) {
		fprintf(stderr, "the janitor set up no io_uring within 10 s\n");
		return 1;
	}
	return child_release(EXPECT_URING, "on");
}

/* io_uring_setup refused the way Docker's seccomp profile does it. */
static int deny_io_uring(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = ARRAY_SIZE(filter), .filter = filter };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		fprintf(stderr, "cannot install a seccomp filter: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static int child_seccomp(void)
{
	if (deny_io_uring() != 0)
		return 1; /* an unprivileged process may always do this */
	return child_release(EXPECT_SYNC, "on");
}

static const struct harness_child_case child_cases[] = {
	{ "env_off", child_env_off },
	{ "env_on", child_env_on },
	{ "seccomp", child_seccomp },
};

static void run_child_case(const char *name, const char *uring)
{
	const char *env[ARRAY_SIZE(env_common) + 2];
	char err[2048];

	memcpy(env, env_common, sizeof(env_common));
	env[ARRAY_SIZE(env_common)] = uring;
	env[ARRAY_SIZE(env_common) + 1] = NULL;
	int status = harness_run_child(name, env, err, sizeof(err));
	if (status == HARNESS_EXIT_SKIP)
		harness_skip("%s", err);
	if (status != 0)
		fail_msg("child case %s exited %d: %s", name, status, err);
}

static void test_env_off(void **state)
{
	(void)state;
	run_child_case("env_off", "HPALLOC_URING=off");
}

static void test_env_on(void **state)
{
	(void)state;
	skip_unless_uring();
	run_child_case("env_on", "HPALLOC_URING=on");
}

static void test_unavailable_falls_back(void **state)
{
	(void)state;
	run_child_case("seccomp", "HPALLOC_URING=on");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_uring_on),
		HTEST(test_uring_off_knob),
		HTEST(test_uring_toggle),
		HTEST(test_decay_through_uring),
		HTEST(test_hugetlb_pages_return),
		HTEST(test_env_off),
		HTEST(test_env_on),
		HTEST(test_unavailable_falls_back),
	};

	harness_child_dispatch(argc, argv, child_cases, ARRAY_SIZE(child_cases));
	harness_init(argc, argv);
	return harness_run("uring", tests, ARRAY_SIZE(tests));
}
