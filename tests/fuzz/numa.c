/* Fuzz target: NUMA policies and node lists, numa_parse() and
 * numa_format() (lib/core/numa.c, the grammar behind the numa knob and
 * hp_ctx_numa), on raw words: the knob target reaches them only through
 * the knob's one-word trimming.
 *
 * Input: the word.  Promises checked:
 *   - refused: EINVAL and a reason of printable ASCII;
 *   - accepted: a known mode; default takes no nodes, bind and preferred
 *     name some, preferred exactly one; every named node exists here (and
 *     is below NUMA_NODE_BITS); the canonical text fits HP_KNOB_VALUE_MAX
 *     and parses back to the same policy, and is a fixed point. */
#include "fuzz.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void check_policy(const char *word, hp_numa_t p)
{
	int mode = numa_mode(p);
	uint32_t nodes = numa_nodes(p);
	char text[HP_KNOB_VALUE_MAX + 16], again[HP_KNOB_VALUE_MAX + 16], why[128] = "";
	hp_numa_t q = ~p;

	if ((p >> 40) != 0 || mode < NUMA_DEFAULT || mode > NUMA_PREFERRED)
		fuzz_fail("'%s' parsed to an impossible policy %#llx", word, (unsigned long long)p);
	if (mode == NUMA_DEFAULT && p != HP_NUMA_DEFAULT)
		fuzz_fail("'%s': default with nodes", word);
	if (mode == NUMA_LOCAL && nodes)
		fuzz_fail("'%s': local with nodes", word);
	if ((mode == NUMA_BIND || mode == NUMA_PREFERRED) && !nodes)
		fuzz_fail("'%s': %d without nodes", word, mode);
	if (mode == NUMA_PREFERRED && (nodes & (nodes - 1)))
		fuzz_fail("'%s': preferred with more than one node", word);
	for (int n = 0; n < NUMA_NODE_BITS; n++)
		if ((nodes >> n & 1) && !numa_node_exists(n))
			fuzz_fail("'%s': names node %d, which does not exist", word, n);
	numa_format(p, text, sizeof(text));
	if (strlen(text) >= HP_KNOB_VALUE_MAX)
		fuzz_fail("'%s': canonical text '%s' does not fit a knob value", word, text);
	if (numa_parse(text, &q, why, sizeof(why)) != 0 || q != p)
		fuzz_fail("'%s' -> '%s' does not parse back (%s)", word, text, why);
	numa_format(q, again, sizeof(again));
	if (strcmp(text, again) != 0)
		fuzz_fail("'%s' is no fixed point ('%s')", text, again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *word = fuzz_strndup(data, size);
	char why[128] = "";
	hp_numa_t p = 0;

	fuzz_init();
	fuzz_input(data, size);
	errno = 0;
	if (numa_parse(word, &p, why, sizeof(why)) == 0) {
		check_policy(word, p);
	} else {
		if (errno != EINVAL)
			fuzz_fail("refused with errno %d", errno);
		if (!why[0] || !fuzz_printable(why))
			fuzz_fail("reason is empty or not printable: '%s'", why);
	}
	free(word);
	return 0;
}
