/* Fuzz target: sizes, hp_parse_size() and hp_format_size() (knob values
 * of threshold and cache_max, hpctl pool's SIZE=COUNT, pagesize).
 *
 * Input: the text to parse.  Promises checked:
 *   - it parses exactly when it is digits with at most one K/M/G/T suffix
 *     (either case) and the value fits in 64 bits: computed here on its
 *     own, in 128-bit arithmetic;
 *   - a refused text sets EINVAL and leaves *out alone;
 *   - a parsed value renders (hp_format_size) and reparses to itself, and
 *     its rendering is a fixed point;
 *   - the first 8 input bytes as a value also render and reparse to
 *     themselves, and rendering into a buffer too small (its length from
 *     byte 8) is ERANGE with nothing written past the buffer. */
#include "fuzz.h"
#include "hpalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What the grammar says, independently of knobs.c. */
static bool expected(const char *text, uint64_t *out)
{
	unsigned __int128 v = 0;
	const char *p = text;
	unsigned shift = 0;

	if (!isdigit((unsigned char)*p))
		return false;
	for (; isdigit((unsigned char)*p); p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT64_MAX)
			return false;
	}
	if (*p) {
		const char *units = "kmgt";
		const char *u = strchr(units, tolower((unsigned char)*p));
		if (!u || p[1])
			return false;
		shift = 10 * (unsigned)(u - units + 1);
	}
	v <<= shift;
	if (v > UINT64_MAX)
		return false;
	*out = (uint64_t)v;
	return true;
}

static void round_trip(uint64_t v)
{
	char text[32], again[32];
	uint64_t w = ~v;

	if (hp_format_size(v, text, sizeof(text)) != 0)
		fuzz_fail("hp_format_size(%llu) failed", (unsigned long long)v);
	if (hp_parse_size(text, &w) != 0 || w != v)
		fuzz_fail("%llu renders as '%s', which does not parse back", (unsigned long long)v, text);
	if (hp_format_size(w, again, sizeof(again)) != 0 || strcmp(text, again) != 0)
		fuzz_fail("'%s' is not a fixed point of parse+format", text);
}

static void too_small(uint64_t v, size_t len)
{
	char full[32];
	char *buf = malloc(len ? len : 1);

	if (!buf)
		abort();
	hp_format_size(v, full, sizeof(full));
	errno = 0;
	int rc = hp_format_size(v, buf, len);
	if (strlen(full) < len ? rc != 0 || strcmp(buf, full) != 0 : rc != -1 || errno != ERANGE)
		fuzz_fail("hp_format_size(%llu, buf, %zu): %d (errno %d)", (unsigned long long)v, len, rc, errno);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	const uint64_t untouched = 0x5a5a5a5a5a5a5a5aULL;
	uint64_t v = untouched, want = 0;

	fuzz_input(data, size);
	errno = 0;
	int rc = hp_parse_size(text, &v);
	bool ok = expected(text, &want); /* up to a NUL: what C callers pass */
	if (ok && (rc != 0 || v != want))
		fuzz_fail("'%s' is a size of %llu bytes: parsed %d, %llu", text, (unsigned long long)want, rc,
			  (unsigned long long)v);
	if (!ok && rc == 0)
		fuzz_fail("'%s' is no size, yet parsed as %llu", text, (unsigned long long)v);
	if (rc != 0 && (errno != EINVAL || v != untouched))
		fuzz_fail("refused, but errno %d and *out %llu", errno, (unsigned long long)v);
	if (rc == 0)
		round_trip(v);
	if (size >= 8) {
		uint64_t raw;
		memcpy(&raw, data, sizeof(raw));
		round_trip(raw);
		too_small(raw, size > 8 ? data[8] % 24 : 0);
	}
	free(text);
	return 0;
}
