/* What the kernel's transparent huge page settings give hpalloc's THP
 * blocks, read live from sysfs.
 *
 * hpalloc advises MADV_HUGEPAGE on its own mappings only, so a page size
 * serves them when its setting is `always` or `madvise`, or `inherit` with
 * the top-level setting `always` or `madvise`.  Besides the PMD size
 * (2 MiB), Linux 6.8+ offers smaller multi-size THP (mTHP) folios, each
 * size switched on its own under hugepages-<N>kB/enabled (all `never` but
 * 2 MiB's `inherit` by default).  hpalloc needs no change to use them: a
 * size an administrator enables for madvised memory serves hpalloc's
 * blocks where a 2 MiB page cannot -- a block below 2 MiB, the partial
 * last 2 MiB of a larger one -- with one fault per folio instead of one per
 * 4 KiB page.  This file is the one interpreter of those settings (prim.c
 * reads the files): `hpctl status` prints what it says.
 *
 * And of what the kernel does to huge pages afterwards.  Under memory
 * pressure Linux 6.12+ splits under-used THPs -- ones with more pages of
 * zeros than khugepaged/max_ptes_none -- and frees their zero pages: a
 * block the populate workers faulted ahead and the program has not written
 * yet is all zeros, and with max_ptes_none lowered (511, the default, keeps
 * that shrinker off) a memory cgroup's reclaim split 120 of 128 such huge
 * pages here (6.18, max_ptes_none 64).  The program then writes those pages
 * on 4 KiB pages.  Whose pages the kernel split /proc/vmstat does not say,
 * only that it did: thp_watch_splits() (the janitor's) counts the splits
 * seen while this process holds THP blocks, and hpctl stats says so. */
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for every size the kernel lists (4 KiB to 2 MiB: 10 on x86-64). */
#define MAX_LISTED 64

/* The word a sysfs choice file of the THP directory selects: "always
 * [madvise] never" -> "madvise"; a file without brackets as it is.  -1 if
 * unreadable. */
static int selected_word(const char *rel, char *out, size_t len)
{
	char line[256];

	if (prim_thp_read(rel, line, sizeof(line)) < 0)
		return -1;
	char *l = strchr(line, '['), *r = l ? strchr(l, ']') : NULL;
	if (l && r) {
		*r = '\0';
		snprintf(out, len, "%s", l + 1);
	} else {
		snprintf(out, len, "%s", line);
	}
	return 0;
}

int thp_setting(const char *file, char *out, size_t len)
{
	if (selected_word(file, out, len) == 0)
		return 0;
	snprintf(out, len, "unavailable");
	return -1;
}

static bool serves_madvised(const char *word)
{
	return strcmp(word, "always") == 0 || strcmp(word, "madvise") == 0;
}

static int pmd_size_only(const char *top, struct thp_size *out)
{
	char word[32];
	if (selected_word("hpage_pmd_size", word, sizeof(word)) != 0 || strcmp(top, "unavailable") == 0)
		return 0;
	out->size = (size_t)strtoull(word, NULL, 10);
	snprintf(out->enabled, sizeof(out->enabled), "%s", top);
	out->serves = serves_madvised(top);
	return out->size ? 1 : 0;
}

/* The janitor's, every round: the machine's split counters since the last
 * look, counted while this process held THP blocks (holding).  At most
 * every SPLITS_LOOK_MS: a read of /proc/vmstat is tens of microseconds. */
#define SPLITS_LOOK_MS 250
void thp_watch_splits(bool holding)
{
	static const char *const keys[] = {"thp_split_page", "thp_underused_split_page"};
	static unsigned long long last[2];
	static uint64_t looked_ms;
	static bool have;
	unsigned long long now[2] = {0, 0};
	uint64_t ms = hp_now_ms();

	if (have && ms - looked_ms < SPLITS_LOOK_MS)
		return;
	looked_ms = ms;
	if (prim_vmstat(keys, now, 2) < 1)
		return; /* no /proc: nothing to say */
	if (have && holding) {
		if (now[0] > last[0])
			stat_add(HP_STAT_THP_SPLITS_SEEN, now[0] - last[0]);
		if (now[1] > last[1])
			stat_add(HP_STAT_THP_UNDERUSED_SPLITS_SEEN, now[1] - last[1]);
	}
	last[0] = now[0];
	last[1] = now[1];
	have = true;
}

int thp_sizes(struct thp_size *out, int max)
{
	char top[32], rel[64];
	size_t listed[MAX_LISTED];
	int nlisted = prim_thp_sizes(listed, MAX_LISTED), n = 0;

	if (nlisted < 0)
		return -1;
	thp_setting("enabled", top, sizeof(top));
	for (int i = 0; i < nlisted && n < max; i++) {
		struct thp_size *s = &out[n];
		s->size = listed[i];
		snprintf(rel, sizeof(rel), "hugepages-%zukB/enabled", listed[i] >> 10);
		if (selected_word(rel, s->enabled, sizeof(s->enabled)) != 0)
			continue;
		s->serves = serves_madvised(s->enabled) ||
			    (strcmp(s->enabled, "inherit") == 0 && serves_madvised(top));
		n++;
	}
	if (n == 0 && max > 0) /* before Linux 6.8: the PMD size alone, the top-level setting */
		n = pmd_size_only(top, out);
	return n; /* ascending, as prim_thp_sizes() lists them */
}
