/* See caps.h. */
#include "caps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char required[256]; /* " cap cap ... " */

const char *caps_read(bool (*known)(const char *name, size_t len), size_t *len)
{
	const char *req = getenv("HPALLOC_TEST_REQUIRE");
	size_t used = 0;

	required[used++] = ' ';
	for (const char *c = req ? req : ""; *c;) {
		size_t n = strcspn(c, ", ");
		if (n && known && !known(c, n)) {
			*len = n;
			return c;
		}
		if (n && used + n + 2 < sizeof(required)) {
			memcpy(required + used, c, n);
			used += n;
			required[used++] = ' ';
		}
		c += n + (c[n] != '\0');
	}
	required[used] = '\0';
	return NULL;
}

bool caps_required(const char *cap)
{
	char want[32];

	snprintf(want, sizeof(want), " %s ", cap);
	return strstr(required, want) != NULL;
}
