/* The library under test, as the cmocka tests drive it: knobs set or the
 * case fails, a known state between cases, its counters, its janitor and
 * ring started; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void harness_knob(const char *name, const char *value)
{
	if (hp_knob_set(name, value) != 0) {
		int saved = errno;
		struct hp_knob_info info;
		int idx = hp_knob_index(name);

		memset(&info, 0, sizeof(info));
		if (idx >= 0)
			hp_knob_info(idx, &info);
		fail_msg("hp_knob_set(\"%s\", \"%s\") refused: %s (%s)", name,
			 value, strerror(saved), info.rejected);
	}
}

void harness_thp_cache(const char *cache_max, const char *decay_ms)
{
	harness_need_thp();
	/* no populate worker: its stack could land where a released block was,
	 * and /proc/self/maps would count it as the cache's */
	harness_knob("populate", "off");
	harness_knob("mode", "thp");
	harness_knob("threshold", "1M");
	harness_knob("cache_max", cache_max);
	harness_knob("cache_decay_ms", decay_ms);
	harness_janitor_start();
	hp_cache_flush();
	hp_release_drain();
}

void harness_reset(void)
{
	hp_knob_unset(NULL);
	hp_cache_flush();
	hp_release_drain();
}

uint64_t harness_stat(int stat)
{
	struct hp_stats s;

	assert_int_equal(hp_stats_get(&s), 0);
	return s.v[stat];
}

bool harness_stat_reaches(int stat, uint64_t value, unsigned ms)
{
	struct hp_stats s;
	uint64_t end = harness_now_ms() + ms;

	do {
		if (hp_stats_get(&s) == 0 && s.v[stat] >= value)
			return true;
		harness_sleep_ms(1);
	} while (harness_now_ms() < end);
	return false;
}

void harness_janitor_start(void)
{
	if (harness_stat(HP_STAT_JANITOR_ACTIVE))
		return;
	size_t t = hp_huge_threshold();
	if (t != SIZE_MAX)
		hp_free(hp_malloc(t < 2 * MiB ? 2 * MiB : t));
}

bool harness_ring_ready_within(unsigned ms)
{
	harness_janitor_start();
	for (unsigned waited = 0;; waited += 5) {
		if (harness_stat(HP_STAT_URING_ACTIVE))
			return true;
		if (waited >= ms)
			return false;
		harness_sleep_ms(5);
	}
}
