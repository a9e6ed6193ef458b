/* KEEPS(call): run a call that must succeed and fail the test (count it in
 * keeps_errno_failures) if it changed errno.  Used by the programs that
 * check "successful calls leave errno alone" (errno_kept, errno_pagesize). */
#ifndef HPALLOC_TEST_KEEPS_ERRNO_H
#define HPALLOC_TEST_KEEPS_ERRNO_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define KEEPS_SENTINEL 12345

static int keeps_errno_failures;

#define KEEPS(call)                                                                  \
	do {                                                                         \
		errno = KEEPS_SENTINEL;                                              \
		call;                                                                \
		if (errno != KEEPS_SENTINEL) {                                       \
			fprintf(stderr, "FAIL: %s changed errno to %d (%s)\n", #call, \
				errno, strerror(errno));                             \
			keeps_errno_failures++;                                      \
		}                                                                    \
	} while (0)

#endif
