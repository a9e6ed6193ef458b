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
 * 4 KiB page.  This file is the one reader of those settings: `hpctl
 * status` prints what it says. */
#include "internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THP_DIR "/sys/kernel/mm/transparent_hugepage"

static const char *thp_dir = THP_DIR;

void thp_sysfs_root(const char *dir)
{
	thp_dir = dir ? dir : THP_DIR;
}

/* The word a sysfs choice file selects: "always [madvise] never" ->
 * "madvise"; a file without brackets as it is.  -1 if unreadable. */
static int selected_word(const char *path, char *out, size_t len)
{
	char line[256];
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return -1;
	ok = fgets(line, sizeof(line), f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	line[strcspn(line, "\n")] = '\0';
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
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", thp_dir, file);
	if (selected_word(path, out, len) == 0)
		return 0;
	snprintf(out, len, "unavailable");
	return -1;
}

static bool serves_madvised(const char *word)
{
	return strcmp(word, "always") == 0 || strcmp(word, "madvise") == 0;
}

static int by_size(const void *a, const void *b)
{
	const struct thp_size *x = a, *y = b;
	return (x->size > y->size) - (x->size < y->size);
}

static int pmd_size_only(const char *top, struct thp_size *out)
{
	char path[512], word[32];
	snprintf(path, sizeof(path), "%s/hpage_pmd_size", thp_dir);
	if (selected_word(path, word, sizeof(word)) != 0 || strcmp(top, "unavailable") == 0)
		return 0;
	out->size = (size_t)strtoull(word, NULL, 10);
	snprintf(out->enabled, sizeof(out->enabled), "%s", top);
	out->serves = serves_madvised(top);
	return out->size ? 1 : 0;
}

int thp_sizes(struct thp_size *out, int max)
{
	char top[32], path[512];
	DIR *d = opendir(thp_dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	thp_setting("enabled", top, sizeof(top));
	while ((e = readdir(d)) && n < max) {
		size_t size = os_hugepages_dir_size(e->d_name);
		if (!size)
			continue;
		struct thp_size *s = &out[n];
		s->size = size;
		snprintf(path, sizeof(path), "%s/%s/enabled", thp_dir, e->d_name);
		if (selected_word(path, s->enabled, sizeof(s->enabled)) != 0)
			continue;
		s->serves = serves_madvised(s->enabled) ||
			    (strcmp(s->enabled, "inherit") == 0 && serves_madvised(top));
		n++;
	}
	closedir(d);
	if (n == 0 && max > 0) /* before Linux 6.8: the PMD size alone, the top-level setting */
		n = pmd_size_only(top, out);
	qsort(out, (size_t)n, sizeof(*out), by_size);
	return n;
}
