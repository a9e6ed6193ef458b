/* hp_parse_size / hp_format_size: binary K/M/G/T suffixes, canonical
 * output, and every kind of bad input rejected without touching *out. */
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SENTINEL UINT64_C(0xDEADBEEF)

struct good_case {
	const char *text;
	uint64_t value;
};

static void test_valid_sizes(void **state)
{
	(void)state;
	static const struct good_case cases[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "100", 100 },
		{ "4096", 4096 },
		{ "1K", UINT64_C(1) << 10 },
		{ "4M", UINT64_C(4194304) },
		{ "1536K", UINT64_C(1536) << 10 },
		{ "2G", UINT64_C(2) << 30 },
		{ "1T", UINT64_C(1) << 40 },
		{ "0K", 0 },
		{ "16777215T", UINT64_C(16777215) << 40 },
		{ "18446744073709551615", UINT64_MAX },
		{ "17179869183G", UINT64_C(17179869183) << 30 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		uint64_t v = SENTINEL;
		print_message("\"%s\"\n", cases[i].text);
		assert_int_equal(hp_parse_size(cases[i].text, &v), 0);
		assert_int_equal(v, cases[i].value);
	}
}

static void test_invalid_sizes(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",                       /* empty */
		"-1", "-4M", "-0K",       /* negatives */
		"18446744073709551616",   /* 2^64 */
		"99999999999999999999999",
		"16777216T",              /* 2^64 through the suffix */
		"17179869184G",
		"4X", "4Q", "4Y", "4Z",   /* unknown suffixes */
		"4Mx", "4MM", "12abc", "4 M", "4M ", "1.5M", /* trailing junk */
		"M", "K4", "x", "+", "-",  /* no digits */
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		uint64_t v = SENTINEL;
		print_message("\"%s\"\n", bad[i]);
		assert_int_equal(hp_parse_size(bad[i], &v), -1);
		assert_int_equal(v, SENTINEL); /* nothing changed */
	}
	uint64_t v = SENTINEL;
	assert_int_equal(hp_parse_size(NULL, &v), -1);
	assert_int_equal(v, SENTINEL);
}

struct format_case {
	uint64_t value;
	const char *text;
};

static void test_format(void **state)
{
	(void)state;
	static const struct format_case cases[] = {
		{ 0, "0" },
		{ 1, "1" },
		{ 100, "100" },
		{ 1023, "1023" },
		{ 1024, "1K" },
		{ 1536, "1536" },
		{ UINT64_C(1536) << 10, "1536K" },
		{ UINT64_C(4) << 20, "4M" },
		{ (UINT64_C(4) << 20) + 1, "4194305" },
		{ UINT64_C(1) << 30, "1G" },
		{ UINT64_C(3) << 40, "3T" },
		{ UINT64_C(1) << 50, "1024T" },
		{ UINT64_MAX, "18446744073709551615" },
	};
	char buf[32];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		memset(buf, 'x', sizeof(buf));
		assert_true(hp_format_size(cases[i].value, buf, sizeof(buf)) >= 0);
		assert_string_equal(buf, cases[i].text);
	}
}

static void test_format_small_buffer(void **state)
{
	(void)state;
	char buf[4] = "abc";

	assert_int_equal(hp_format_size(123456, buf, sizeof(buf)), -1);
	assert_int_equal(hp_format_size(1024, buf, 2), -1);
	assert_true(hp_format_size(1024, buf, 3) >= 0); /* "1K" + NUL fits */
	assert_string_equal(buf, "1K");
	assert_int_equal(hp_format_size(1024, buf, 0), -1);
}

/* parse(format(v)) == v, over values with and without exact suffixes. */
static void test_round_trip(void **state)
{
	(void)state;
	uint64_t x = 88172645463325252ull;
	char buf[32];

	for (int i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t v = x >> (x % 64);
		if (i % 3 == 0)
			v &= ~((UINT64_C(1) << (10 * (1 + i % 4))) - 1); /* exact suffix */
		uint64_t back = SENTINEL;
		assert_true(hp_format_size(v, buf, sizeof(buf)) >= 0);
		assert_int_equal(hp_parse_size(buf, &back), 0);
		if (back != v)
			fail_msg("%" PRIu64 " formatted as \"%s\" parsed as %" PRIu64, v, buf, back);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_valid_sizes),
		HTEST(test_invalid_sizes),
		HTEST(test_format),
		HTEST(test_format_small_buffer),
		HTEST(test_round_trip),
	};

	harness_init(argc, argv);
	return harness_run("size_parse", tests, ARRAY_SIZE(tests));
}
