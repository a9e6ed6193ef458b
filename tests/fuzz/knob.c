/* Fuzz target: knob values, the one parser of every knob (hp_knob_parse,
 * hp_knob_parse_file, hp_knob_render; NUMA node lists through the numa
 * knob) as the environment, control files, hpctl and Python reach it.
 *
 * Input: "KNOB=VALUE" (hpctl's form; KNOB may be unknown), or without '='
 * a VALUE tried on every knob.  Promises checked:
 *   - a refused value: EINVAL and a message of printable ASCII that names
 *     the knob (or says it is unknown);
 *   - a value that parses has a canonical form that is printable, shorter
 *     than HP_KNOB_VALUE_MAX, and a fixed point: it parses to itself, also
 *     with surrounding whitespace and as a control file; its rendering
 *     (the control file body) ends in a newline and parses back to it;
 *   - hp_knob_parse_file agrees with hp_knob_parse on a body without '[',
 *     and what it accepts is canonical the same way;
 *   - the table's internal parser (knobs_parse) agrees;
 *   - short canon/err buffers are never overrun (exact-size buffers). */
#include "fuzz.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void check_refusal(const char *name, const char *err, const char *what)
{
	char want[HP_KNOB_ERROR_MAX];

	if (errno != EINVAL)
		fuzz_fail("%s(%s) refused with errno %d", what, name, errno);
	if (!fuzz_printable(err))
		fuzz_fail("%s(%s): message is not printable: '%s'", what, name, err);
	if (hp_knob_index(name) < 0)
		snprintf(want, sizeof(want), "unknown knob '");
	else
		snprintf(want, sizeof(want), "%s: invalid value '", name);
	if (strncmp(err, want, strlen(want)) != 0)
		fuzz_fail("%s(%s): message '%s' does not start '%s'", what, name, err, want);
}

static void check_canon(const char *name, const char *canon)
{
	char again[HP_KNOB_VALUE_MAX], body[512], spaced[HP_KNOB_VALUE_MAX + 8];
	char err[HP_KNOB_ERROR_MAX];

	if (!canon[0] || strlen(canon) >= HP_KNOB_VALUE_MAX - 1 || !fuzz_printable(canon))
		fuzz_fail("%s: canonical form '%s' is empty, too long or not printable", name, canon);
	if (hp_knob_parse(name, canon, again, sizeof(again), err, sizeof(err)) != 0 || strcmp(again, canon))
		fuzz_fail("%s: canonical '%s' is no fixed point ('%s', %s)", name, canon, again, err);
	snprintf(spaced, sizeof(spaced), " \t%s \n", canon);
	if (hp_knob_parse(name, spaced, again, sizeof(again), err, sizeof(err)) != 0 || strcmp(again, canon))
		fuzz_fail("%s: '%s' with whitespace around parses differently (%s)", name, canon, err);
	if (hp_knob_render(name, canon, body, sizeof(body)) != 0)
		fuzz_fail("%s: canonical '%s' does not render", name, canon);
	size_t n = strlen(body);
	if (n < 2 || body[n - 1] != '\n' || strchr(body, '\n') != body + n - 1)
		fuzz_fail("%s: rendering of '%s' is not one line: '%s'", name, canon, body);
	if (hp_knob_parse_file(name, body, again, sizeof(again), err, sizeof(err)) != 0 || strcmp(again, canon))
		fuzz_fail("%s: rendering '%s' of '%s' does not parse back (%s)", name, body, canon, err);
}

/* Exact-size buffers, lengths from the input: overruns are the
 * sanitizers' to see; whatever is written is NUL-terminated inside. */
static void short_buffers(const char *name, const char *value, size_t clen, size_t elen)
{
	char *canon = malloc(clen ? clen : 1), *err = malloc(elen ? elen : 1);

	if (!canon || !err)
		abort();
	hp_knob_parse(name, value, clen ? canon : NULL, clen, elen ? err : NULL, elen);
	if (clen && !memchr(canon, '\0', clen) && hp_knob_parse(name, value, NULL, 0, NULL, 0) == 0)
		fuzz_fail("%s: canon not terminated in %zu bytes", name, clen);
	hp_knob_parse_file(name, value, clen ? canon : NULL, clen, elen ? err : NULL, elen);
	free(canon);
	free(err);
}

static void one(const char *name, const char *value, uint8_t sizes)
{
	char canon[HP_KNOB_VALUE_MAX], fcanon[HP_KNOB_VALUE_MAX];
	char err[HP_KNOB_ERROR_MAX], ferr[HP_KNOB_ERROR_MAX];
	int k = hp_knob_index(name);

	errno = 0;
	int rc = hp_knob_parse(name, value, canon, sizeof(canon), err, sizeof(err));
	if (rc == 0)
		check_canon(name, canon);
	else
		check_refusal(name, err, "hp_knob_parse");
	errno = 0;
	int frc = hp_knob_parse_file(name, value, fcanon, sizeof(fcanon), ferr, sizeof(ferr));
	if (frc == 0)
		check_canon(name, fcanon);
	else
		check_refusal(name, ferr, "hp_knob_parse_file");
	if (!strchr(value, '[') && (rc != frc || (rc == 0 && strcmp(canon, fcanon))))
		fuzz_fail("%s: parse (%d '%s') and parse_file (%d '%s') disagree", name, rc,
			  rc ? err : canon, frc, frc ? ferr : fcanon);
	if (k >= 0) {
		uint64_t v;
		char kerr[HP_KNOB_ERROR_MAX];
		if ((knobs_parse(k, value, &v, kerr, sizeof(kerr)) == 0) != (rc == 0))
			fuzz_fail("%s: knobs_parse and hp_knob_parse disagree", name);
	}
	short_buffers(name, value, sizes % 16, (sizes >> 4) * 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char *eq = strchr(text, '=');
	uint8_t sizes = size ? data[size - 1] : 0;

	fuzz_init();
	fuzz_input(data, size);
	if (eq) {
		*eq = '\0';
		one(text, eq + 1, sizes);
	} else {
		for (int k = 0; k < hp_knob_count(); k++)
			one(knob_name(k), text, sizes);
	}
	free(text);
	return 0;
}
