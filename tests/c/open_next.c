/* harness_open_next(): for the tests that interpose open(2) to count or
 * refuse the library's reads of a file (rss_bound_statm, memcg_files).  A
 * file of its own so that only they link dlsym's library. */
#include "harness.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>

int harness_open_next(const char *path, int flags, va_list ap)
{
	static int (*next)(const char *, int, ...);
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE))
		mode = va_arg(ap, mode_t);
	if (!next)
		next = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	return next(path, flags, mode);
}
