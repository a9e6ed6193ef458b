/* Where the files installed with this hpctl are: a directory configure
 * chose (pyexecdir for hpctl run's Python package, libdir for the preload
 * library) seen from bindir, applied to the directory this executable
 * really is in -- so a relocated or DESTDIR tree, and the wheel's
 * site/hpalloc/bin, find their own files.  Used by hpctl-run.c and
 * hpctl-preload.c alike. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h" /* prim_proc_readlink */

#include <limits.h>
#include <stdio.h>
#include <string.h>

#ifdef HPCTL_BINDIR
/* The relative way from bindir ("../lib/python3/dist-packages") to the
 * configured directory, from this executable's real directory. */
bool relocated_dir(const char *py, char *buf, size_t len)
{
	const char *bin = HPCTL_BINDIR;
	char exe[PATH_MAX], rel[PATH_MAX] = "";
	size_t common = 0, i;

	for (i = 0; bin[i] && bin[i] == py[i]; i++)
		if (bin[i] == '/')
			common = i; /* last shared directory boundary */
	if (!bin[i] && py[i] == '/')
		common = i; /* bindir itself is a prefix of pyexecdir */
	if (!py[i] && bin[i] == '/')
		common = i; /* pyexecdir is above bindir (the wheel: site/hpalloc/bin) */
	for (const char *p = bin + common; *p; p++)
		if (*p == '/' && p[1])
			strncat(rel, "../", sizeof(rel) - strlen(rel) - 1);
	strncat(rel, py + common + (py[common] == '/'), sizeof(rel) - strlen(rel) - 1);
	if (prim_proc_readlink("self/exe", exe, sizeof(exe)) <= 0)
		return false;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return false;
	*slash = '\0';
	return snprintf(buf, len, "%s/%s", exe, rel) < (int)len;
}
#endif
