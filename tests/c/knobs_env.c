/* Knobs from HPALLOC_<KNOB> environment variables (read by a fresh process
 * at first use), the knob table, and bad input: a rejected value changes
 * nothing, the reason is visible in hp_knob_info().rejected and counted in
 * HP_STAT_CONFIG_REJECTS, and the library prints nothing unless verbose. */
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const knob_names[] = {
	"mode", "threshold", "pagesize", "fallback",
	"cache_max", "cache_decay_ms", "uring", "verbose",
};

/* ---- checks usable in child processes (stdout for diagnostics) ------------ */
static int expect_knob(const char *name, const char *value, int source)
{
	char got[HP_KNOB_VALUE_MAX] = "";
	int got_source = hp_knob_get(name, got, sizeof(got));

	if (got_source == source && strcmp(got, value) == 0)
		return 0;
	printf("knob %s: \"%s\" from %s, expected \"%s\" from %s\n", name, got,
	       hp_source_name(got_source), value, hp_source_name(source));
	return 1;
}

static int get_info(const char *name, struct hp_knob_info *info)
{
	memset(info, 0, sizeof(*info));
	return hp_knob_info(hp_knob_index(name), info);
}

/* The knob kept its default and says why `bad` was refused. */
static int expect_rejected(const char *name, const char *bad)
{
	struct hp_knob_info info;

	if (get_info(name, &info) != 0) {
		printf("hp_knob_info(%s) failed\n", name);
		return 1;
	}
	int failed = expect_knob(name, info.default_value, HP_SOURCE_DEFAULT);
	if (bad[0] && !strstr(info.rejected, bad)) {
		printf("knob %s: rejected is \"%s\", should name the bad value \"%s\"\n",
		       name, info.rejected, bad);
		failed = 1;
	}
	return failed;
}

static int backend_of(size_t size)
{
	struct hp_backing b;
	void *p = hp_malloc(size);
	int backend = (p && hp_backing(p, &b) == 0) ? b.backend : -1;
	hp_free(p);
	return backend;
}

static int child_env_good(void)
{
	int failed = 0;

	failed |= expect_knob("mode", "thp", HP_SOURCE_ENV);
	failed |= expect_knob("threshold", "2M", HP_SOURCE_ENV);
	failed |= expect_knob("pagesize", "1G", HP_SOURCE_ENV);
	failed |= expect_knob("fallback", "small", HP_SOURCE_ENV);
	failed |= expect_knob("cache_max", "128M", HP_SOURCE_ENV);
	failed |= expect_knob("cache_decay_ms", "250", HP_SOURCE_ENV);
	failed |= expect_knob("uring", "off", HP_SOURCE_ENV);
	failed |= expect_knob("verbose", "0", HP_SOURCE_ENV);
	/* and the allocator follows them */
	if (backend_of(3 * MiB) != HP_BACKEND_THP || backend_of(2 * MiB - 1) != HP_BACKEND_SMALL) {
		printf("routing does not follow HPALLOC_MODE/HPALLOC_THRESHOLD\n");
		failed = 1;
	}
	return failed;
}

static int child_env_canonical(void)
{
	int failed = 0;

	failed |= expect_knob("threshold", "4M", HP_SOURCE_ENV);     /* 4194304 */
	failed |= expect_knob("cache_max", "1536K", HP_SOURCE_ENV);  /* 1572864 */
	failed |= expect_knob("cache_decay_ms", "0", HP_SOURCE_ENV);
	return failed;
}

static const char *const all_bad[][2] = {
	{ "mode", "bogus" },       { "threshold", "-1" },
	{ "pagesize", "3M" },      { "fallback", "none" },
	{ "cache_max", "12Q" },    { "cache_decay_ms", "abc" },
	{ "uring", "maybe" },      { "verbose", "7" },
};

static int child_env_all_bad(void)
{
	int failed = 0;
	struct hp_stats st;

	for (size_t i = 0; i < ARRAY_SIZE(all_bad); i++)
		failed |= expect_rejected(all_bad[i][0], all_bad[i][1]);
	hp_stats_get(&st);
	if (st.v[HP_STAT_CONFIG_REJECTS] < ARRAY_SIZE(all_bad)) {
		printf("config_rejects is %llu, expected >= %zu\n",
		       (unsigned long long)st.v[HP_STAT_CONFIG_REJECTS], ARRAY_SIZE(all_bad));
		failed = 1;
	}
	/* still a working allocator */
	void *p = hp_malloc(8 * MiB);
	failed |= p == NULL;
	hp_free(p);
	return failed;
}

/* HPTEST_KNOB names the knob whose HPALLOC_ variable holds a bad value. */
static int child_env_one_bad(void)
{
	const char *name = getenv("HPTEST_KNOB");
	char var[64];

	snprintf(var, sizeof(var), "HPALLOC_%s", name);
	for (char *c = var; *c; c++)
		*c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
	const char *bad = getenv(var);
	return expect_rejected(name, bad ? bad : "");
}

static int child_env_mixed(void)
{
	int failed = expect_knob("mode", "thp", HP_SOURCE_ENV);
	failed |= expect_rejected("threshold", "junk");
	return failed;
}

static int child_precedence(void)
{
	int failed = expect_knob("mode", "thp", HP_SOURCE_ENV);
	if (hp_knob_set("mode", "off") != 0) {
		printf("hp_knob_set(mode, off) failed\n");
		return 1;
	}
	failed |= expect_knob("mode", "off", HP_SOURCE_PROCESS);
	errno = 0;
	if (hp_knob_set("mode", "sideways") != -1 || errno != EINVAL) {
		printf("hp_knob_set(mode, sideways) was not refused with EINVAL\n");
		failed = 1;
	}
	failed |= expect_knob("mode", "off", HP_SOURCE_PROCESS);
	hp_knob_unset("mode");
	failed |= expect_knob("mode", "thp", HP_SOURCE_ENV);
	return failed;
}

static int child_verbose_reports(void)
{
	return expect_rejected("mode", "bogus");
}

static const struct harness_child_case child_cases[] = {
	{ "env_good", child_env_good },
	{ "env_canonical", child_env_canonical },
	{ "env_all_bad", child_env_all_bad },
	{ "env_one_bad", child_env_one_bad },
	{ "env_mixed", child_env_mixed },
	{ "precedence", child_precedence },
	{ "verbose_reports", child_verbose_reports },
};

/* Runs a child case; the library must not have written to stderr unless
 * stderr_wanted. */
static void run_child(const char *name, const char *const *env, bool stderr_wanted,
		      char *err, size_t err_len)
{
	int status = harness_run_child(name, env, err, err_len);
	if (status != 0)
		fail_msg("child case %s exited %d; stderr: %s", name, status, err);
	if (!stderr_wanted && err[0])
		fail_msg("child case %s: the library printed without being asked: %s",
			 name, err);
}

/* ---- cases ----------------------------------------------------------------------- */
static void test_env_good(void **state)
{
	(void)state;
	const char *env[] = {
		"HPALLOC_MODE=thp", "HPALLOC_THRESHOLD=2M", "HPALLOC_PAGESIZE=1G",
		"HPALLOC_FALLBACK=small", "HPALLOC_CACHE_MAX=128M",
		"HPALLOC_CACHE_DECAY_MS=250", "HPALLOC_URING=off", "HPALLOC_VERBOSE=0",
		NULL,
	};
	char err[4096];
	run_child("env_good", env, false, err, sizeof(err));
}

static void test_env_canonical(void **state)
{
	(void)state;
	const char *env[] = {
		"HPALLOC_THRESHOLD=4194304", "HPALLOC_CACHE_MAX=1572864",
		"HPALLOC_CACHE_DECAY_MS=0", NULL,
	};
	char err[4096];
	run_child("env_canonical", env, false, err, sizeof(err));
}

static void test_env_all_bad(void **state)
{
	(void)state;
	const char *env[] = {
		"HPALLOC_MODE=bogus", "HPALLOC_THRESHOLD=-1", "HPALLOC_PAGESIZE=3M",
		"HPALLOC_FALLBACK=none", "HPALLOC_CACHE_MAX=12Q",
		"HPALLOC_CACHE_DECAY_MS=abc", "HPALLOC_URING=maybe", "HPALLOC_VERBOSE=7",
		NULL,
	};
	char err[4096];
	run_child("env_all_bad", env, false, err, sizeof(err));
}

static void test_env_bad_sizes(void **state)
{
	(void)state;
	static const char *const bad_sizes[] = {
		"-1", "-4M", "", "4Mx", "12Q", "M", "1 M", "0x",
		"18446744073709551616", "16777216T", "99999999999999999999999",
	};
	char var[128], err[4096];

	for (size_t i = 0; i < ARRAY_SIZE(bad_sizes); i++) {
		snprintf(var, sizeof(var), "HPALLOC_THRESHOLD=%s", bad_sizes[i]);
		const char *env[] = { "HPTEST_KNOB=threshold", var, NULL };
		print_message("HPALLOC_THRESHOLD=\"%s\"\n", bad_sizes[i]);
		run_child("env_one_bad", env, false, err, sizeof(err));
	}
	const char *env[] = { "HPTEST_KNOB=cache_max", "HPALLOC_CACHE_MAX=2G2", NULL };
	run_child("env_one_bad", env, false, err, sizeof(err));
}

static void test_env_mixed(void **state)
{
	(void)state;
	const char *env[] = { "HPALLOC_MODE=thp", "HPALLOC_THRESHOLD=junk", NULL };
	char err[4096];
	run_child("env_mixed", env, false, err, sizeof(err));
}

static void test_process_beats_env(void **state)
{
	(void)state;
	const char *env[] = { "HPALLOC_MODE=thp", NULL };
	char err[4096];
	run_child("precedence", env, false, err, sizeof(err));
}

static void test_verbose_reports_rejects(void **state)
{
	(void)state;
	const char *env[] = { "HPALLOC_VERBOSE=1", "HPALLOC_MODE=bogus", NULL };
	char err[4096];
	run_child("verbose_reports", env, true, err, sizeof(err));
	if (!strstr(err, "bogus"))
		fail_msg("verbose=1 did not log the rejected HPALLOC_MODE value; stderr: \"%s\"", err);
}

/* The table itself, in this process. */
static void test_table(void **state)
{
	(void)state;
	assert_true(hp_knob_count() >= (int)ARRAY_SIZE(knob_names));
	for (size_t i = 0; i < ARRAY_SIZE(knob_names); i++) {
		struct hp_knob_info info;
		char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX];
		int idx = hp_knob_index(knob_names[i]);
		assert_true(idx >= 0 && idx < hp_knob_count());
		assert_int_equal(hp_knob_info(idx, &info), 0);
		assert_string_equal(info.name, knob_names[i]);
		assert_non_null(info.type);
		assert_non_null(info.help);
		assert_true(info.help[0] != '\0');
		assert_non_null(info.accepted);
		assert_string_equal(info.value, info.default_value);
		assert_int_equal(info.source, HP_SOURCE_DEFAULT);
		/* the default is a canonical value of its own parser */
		assert_int_equal(hp_knob_parse(knob_names[i], info.default_value, canon,
					       sizeof(canon), err, sizeof(err)), 0);
		assert_string_equal(canon, info.default_value);
	}
	errno = 0;
	assert_int_equal(hp_knob_index("no_such_knob"), -1);
	assert_int_equal(errno, ENOENT);
	struct hp_knob_info info;
	assert_int_equal(hp_knob_info(-1, &info), -1);
	assert_int_equal(hp_knob_info(hp_knob_count(), &info), -1);
	/* index and name are one-to-one over the library's whole table, and
	 * only an exact name finds a knob */
	for (int i = 0; i < hp_knob_count(); i++) {
		assert_int_equal(hp_knob_info(i, &info), 0);
		assert_int_equal(hp_knob_index(info.name), i);
	}
	static const char *const near_misses[] = {
		"MODE", "Mode", "mode ", " mode", "mod", "cache", "cache_max_", "",
	};
	for (size_t i = 0; i < ARRAY_SIZE(near_misses); i++) {
		errno = 0;
		if (hp_knob_index(near_misses[i]) != -1)
			fail_msg("hp_knob_index(\"%s\") found a knob", near_misses[i]);
		assert_int_equal(errno, ENOENT);
	}
	assert_int_equal(hp_knob_index(NULL), -1);
	assert_int_equal(get_info("mode", &info), 0);
	assert_non_null(info.choices);
	assert_string_equal(info.choices, "auto hugetlb thp off");
}

static void test_parse_errors_explain(void **state)
{
	(void)state;
	char canon[HP_KNOB_VALUE_MAX] = "untouched", err[HP_KNOB_ERROR_MAX] = "";

	assert_int_equal(hp_knob_parse("mode", "sideways", canon, sizeof(canon),
				       err, sizeof(err)), -1);
	assert_string_equal(canon, "untouched");
	assert_non_null(strstr(err, "mode"));
	assert_non_null(strstr(err, "sideways"));
	assert_non_null(strstr(err, "hugetlb")); /* what is accepted */

	assert_int_equal(hp_knob_parse("threshold", "4Mx", canon, sizeof(canon),
				       err, sizeof(err)), -1);
	assert_non_null(strstr(err, "threshold"));
	assert_non_null(strstr(err, "4Mx"));
	assert_int_equal(hp_knob_parse("threshold", "4096K", canon, sizeof(canon),
				       err, sizeof(err)), 0);
	assert_string_equal(canon, "4M");
	assert_int_equal(hp_knob_parse("no_such_knob", "1", canon, sizeof(canon),
				       err, sizeof(err)), -1);
}

/* The one KNOB=VALUE parser (hpctl's command line, the Dask option). */
static void test_parse_assignment(void **state)
{
	(void)state;
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX];
	static const char *const refused[][2] = {
		{"threshold", "expected KNOB=VALUE"},
		{"=4M", "expected KNOB=VALUE"},
		{"", "expected KNOB=VALUE"},
		{"bogus=1", "unknown knob 'bogus'"},
		{"MODE=thp", "unknown knob 'MODE'"},
		{"threshold=4Q", "'4Q'"},
		{"threshold=", "threshold"},
	};

	assert_int_equal(hp_knob_parse_assignment("threshold=4096K", canon, sizeof(canon),
						  err, sizeof(err)), hp_knob_index("threshold"));
	assert_string_equal(canon, "4M");
	assert_int_equal(hp_knob_parse_assignment("mode=thp", canon, sizeof(canon),
						  err, sizeof(err)), hp_knob_index("mode"));
	assert_string_equal(canon, "thp");
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		err[0] = '\0';
		errno = 0;
		assert_int_equal(hp_knob_parse_assignment(refused[i][0], canon, sizeof(canon),
							  err, sizeof(err)), -1);
		assert_int_equal(errno, EINVAL);
		if (!strstr(err, refused[i][1]))
			fail_msg("'%s': message '%s' lacks '%s'", refused[i][0], err, refused[i][1]);
	}
	assert_int_equal(hp_knob_parse_assignment(NULL, canon, sizeof(canon), err, sizeof(err)), -1);
}

static void test_set_refused_changes_nothing(void **state)
{
	(void)state;
	char before[HP_KNOB_VALUE_MAX], after[HP_KNOB_VALUE_MAX];
	struct hp_knob_info info;

	harness_knob("threshold", "8M");
	uint64_t generation = harness_stat(HP_STAT_CONFIG_GENERATION);
	uint64_t rejects = harness_stat(HP_STAT_CONFIG_REJECTS);
	assert_int_equal(hp_knob_get("threshold", before, sizeof(before)), HP_SOURCE_PROCESS);
	errno = 0;
	assert_int_equal(hp_knob_set("threshold", "-5M"), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_knob_get("threshold", after, sizeof(after)), HP_SOURCE_PROCESS);
	assert_string_equal(before, after);
	assert_int_equal(harness_stat(HP_STAT_CONFIG_GENERATION), generation);
	assert_int_equal(harness_stat(HP_STAT_CONFIG_REJECTS), rejects + 1);
	assert_int_equal(get_info("threshold", &info), 0);
	assert_non_null(strstr(info.rejected, "-5M"));
	errno = 0;
	assert_int_equal(hp_knob_set("no_such_knob", "1"), -1);
	assert_true(errno == EINVAL || errno == ENOENT);

	/* an effective change bumps the generation */
	harness_knob("threshold", "16M");
	assert_true(harness_stat(HP_STAT_CONFIG_GENERATION) > generation);
}

static void test_render_and_parse_file(void **state)
{
	(void)state;
	char buf[128], canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX];

	assert_true(hp_knob_render("mode", "thp", buf, sizeof(buf)) >= 0);
	assert_string_equal(buf, "auto hugetlb [thp] off\n");
	assert_true(hp_knob_render("threshold", "4M", buf, sizeof(buf)) >= 0);
	assert_string_equal(buf, "4M\n");
	assert_int_equal(hp_knob_parse_file("mode", "auto [hugetlb] thp off\n", canon,
					    sizeof(canon), err, sizeof(err)), 0);
	assert_string_equal(canon, "hugetlb");
	assert_int_equal(hp_knob_parse_file("mode", "thp\n", canon, sizeof(canon),
					    err, sizeof(err)), 0);
	assert_string_equal(canon, "thp");
	assert_int_equal(hp_knob_parse_file("mode", "[auto] hugetlb [thp] off\n", canon,
					    sizeof(canon), err, sizeof(err)), -1);
	assert_int_equal(hp_knob_parse_file("threshold", "4096K\n", canon, sizeof(canon),
					    err, sizeof(err)), 0);
	assert_string_equal(canon, "4M");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_env_good),
		HTEST(test_env_canonical),
		HTEST(test_env_all_bad),
		HTEST(test_env_bad_sizes),
		HTEST(test_env_mixed),
		HTEST(test_process_beats_env),
		HTEST(test_verbose_reports_rejects),
		HTEST(test_table),
		HTEST(test_parse_errors_explain),
		HTEST(test_parse_assignment),
		HTEST(test_set_refused_changes_nothing),
		HTEST(test_render_and_parse_file),
	};

	harness_child_dispatch(argc, argv, child_cases, ARRAY_SIZE(child_cases));
	harness_init(argc, argv);
	return harness_run("knobs_env", tests, ARRAY_SIZE(tests));
}
