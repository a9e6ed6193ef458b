/* The control directory and the per-process entries, as hpctl sees them.
 * The rules (where the directory is, what makes it acceptable) are the
 * library's: control_dir_resolve() and securedir_open(). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ctl_dir_find(char *why, size_t wl)
{
	static char path[PATH_MAX];

	if (path[0])
		return path;
	if (control_dir_resolve(path, sizeof(path)) == 0)
		return path;
	path[0] = '\0';
	if (errno == EPERM)
		snprintf(why, wl, "secure execution (setuid/setgid): the control directory is ignored");
	else
		snprintf(why, wl, "control directory path: %s", strerror(errno));
	return NULL;
}

const char *ctl_dir_path(void)
{
	char why[256];
	const char *path = ctl_dir_find(why, sizeof(why));

	if (path)
		return path;
	warnx("%s", why);
	exit(EXIT_RUNTIME);
}

int ctl_dir_open(bool create)
{
	const char *path = ctl_dir_path();
	char why[HP_KNOB_ERROR_MAX], buf[PATH_MAX];
	int fd, kind;

	if (create && control_dir_choose(buf, sizeof(buf), &kind) == 0) {
		fd = securedir_make(path, kind, why, sizeof(why));
		if (fd >= 0)
			return fd;
		if (errno == EACCES || errno == ELOOP || errno == ENOTDIR)
			warnx("control directory %s refused: %s", path, why);
		else
			warnx("cannot create control directory %s: %s", path, why);
		exit(EXIT_RUNTIME);
	}
	fd = securedir_open(AT_FDCWD, path, why, sizeof(why));
	if (fd >= 0)
		return fd;
	if (errno == ENOENT && !create)
		return -1;
	warnx("control directory %s refused: %s", path, why);
	exit(EXIT_RUNTIME);
}

/* proc/<pid> entries belong to the processes' users: hpctl (often root)
 * opens them without the owner rule, but never through a symlink. */
static int open_nofollow_dir(int at, const char *name)
{
	return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int ctl_proc_lookup(pid_t pid, struct hp_proc *proc)
{
	int root = ctl_dir_open(false); /* says why a directory is refused */

	if (root >= 0)
		close(root);
	if (root >= 0 && hp_proc_get(pid, proc) == 0)
		return 0;
	if (root >= 0 && errno == ESRCH)
		warnx("process %ld is not running (its stale entry was pruned)",
		      (long)pid);
	else
		warnx("process %ld does not publish hpalloc stats in %s/proc "
		      "(not using hpalloc, or using another control directory)",
		      (long)pid, ctl_dir_path());
	return -1;
}

int ctl_proc_open(pid_t pid)
{
	static struct hp_proc proc;
	char rel[64];
	int root, fd;

	if (ctl_proc_lookup(pid, &proc) != 0)
		exit(EXIT_RUNTIME);
	root = ctl_dir_open(false);
	snprintf(rel, sizeof(rel), "proc/%ld", (long)pid);
	fd = root < 0 ? -1 : open_nofollow_dir(root, rel);
	if (root >= 0)
		close(root);
	if (fd < 0) {
		warnx("process %ld: %s/%s: %s", (long)pid, ctl_dir_path(), rel,
		      strerror(errno));
		exit(EXIT_RUNTIME);
	}
	return fd;
}

void give_to_owner_of(int piddir, int dirfd, const char *name)
{
	struct stat st;

	/* Root writing into another user's process entry: hand the files to
	 * that user, so the process can remove them when it exits (it
	 * accepts files owned by itself or by root either way). */
	if (geteuid() != 0 || fstat(piddir, &st) != 0 || st.st_uid == 0)
		return;
	/* best effort: a file left to root only stays until pruned */
	int rc = name ? fchownat(dirfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW)
		      : fchown(dirfd, st.st_uid, st.st_gid);
	if (rc != 0)
		return;
}

int ctl_override_open(pid_t pid, bool create)
{
	int piddir = ctl_proc_open(pid), fd;

	if (create && mkdirat(piddir, "override", 0755) != 0 && errno != EEXIST) {
		warnx("cannot create %s/proc/%ld/override: %s", ctl_dir_path(),
		      (long)pid, strerror(errno));
		exit(EXIT_RUNTIME);
	}
	fd = open_nofollow_dir(piddir, "override");
	if (fd >= 0 && create)
		give_to_owner_of(piddir, fd, NULL);
	close(piddir);
	if (fd < 0 && (create || errno != ENOENT)) {
		warnx("cannot open %s/proc/%ld/override: %s", ctl_dir_path(),
		      (long)pid, strerror(errno));
		exit(EXIT_RUNTIME);
	}
	return fd;
}
