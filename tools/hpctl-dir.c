/* The control directory and the per-process entries, as hpctl sees them.
 * The rules (where the directory is, what makes it acceptable) are the
 * library's: control_dir_resolve() and control_open_dir(). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ctl_dir_path(void)
{
	static char path[PATH_MAX];

	if (path[0])
		return path;
	if (control_dir_resolve(path, sizeof(path)) == 0)
		return path;
	path[0] = '\0';
	if (errno == EPERM)
		warnx("secure execution (setuid/setgid): the control directory is ignored");
	else if (errno == ENOENT)
		warnx("no control directory: not root, and neither "
		      "HPALLOC_CONTROL_DIR nor XDG_RUNTIME_DIR is set");
	else
		warnx("control directory path: %s", strerror(errno));
	exit(EXIT_RUNTIME);
}

int ctl_dir_open(bool create)
{
	const char *path = ctl_dir_path();
	char why[HP_KNOB_ERROR_MAX];
	int fd;

	if (create && mkdir(path, 0755) != 0 && errno != EEXIST) {
		warnx("cannot create control directory %s: %s", path,
		      strerror(errno));
		exit(EXIT_RUNTIME);
	}
	fd = control_open_dir(AT_FDCWD, path, why, sizeof(why));
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

int ctl_proc_lookup(pid_t pid, struct published *pub)
{
	char rel[64];
	int root = ctl_dir_open(false), fd;

	snprintf(rel, sizeof(rel), "proc/%ld", (long)pid);
	fd = root < 0 ? -1 : open_nofollow_dir(root, rel);
	if (fd < 0 || published_read(fd, pub) != 0) {
		warnx("process %ld does not publish hpalloc stats in %s/proc "
		      "(not using hpalloc, or using another control directory)",
		      (long)pid, ctl_dir_path());
		goto fail;
	}
	close(fd);
	fd = -1;
	if (pub->pid != pid || !published_alive(pub)) {
		int procfd = open_nofollow_dir(root, "proc");
		if (procfd >= 0) {
			publish_remove_pid_dir(procfd, pid);
			close(procfd);
		}
		warnx("process %ld is not running (its stale entry was pruned)",
		      (long)pid);
		goto fail;
	}
	close(root);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (root >= 0)
		close(root);
	return -1;
}

int ctl_proc_open(pid_t pid)
{
	static struct published pub;
	char rel[64];
	int root, fd;

	if (ctl_proc_lookup(pid, &pub) != 0)
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

/* ---- the published file (format: lib/publish.c) ------------------------- */

/* Split off the next space-separated field; the remainder stays in *s
 * (NULL when the line is used up). */
static char *next_field(char **s)
{
	char *f = *s, *sp;

	if (!f)
		return NULL;
	sp = strchr(f, ' ');
	if (sp) {
		*sp = '\0';
		*s = sp + 1;
	} else {
		*s = NULL;
	}
	return f;
}

#define COPY(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

static void parse_knob(char *a, char **s, struct published *p)
{
	char *value = next_field(s), *source = next_field(s);

	if (!value || p->nknobs >= 64)
		return;
	COPY(p->knobs[p->nknobs].name, a);
	COPY(p->knobs[p->nknobs].value, value);
	COPY(p->knobs[p->nknobs].source, source ? source : "?");
	p->knobs[p->nknobs++].rejected[0] = '\0';
}

static void parse_line(char *line, struct published *p)
{
	char *s = line, *kind = next_field(&s), *a = next_field(&s), *b;

	if (!kind || !a)
		return;
	if (!strcmp(kind, "pid")) {
		p->pid = strtol(a, NULL, 10);
	} else if (!strcmp(kind, "start_time")) {
		p->start_time = strtoull(a, NULL, 10);
	} else if (!strcmp(kind, "comm")) {
		snprintf(p->comm, sizeof(p->comm), "%s%s%s", a, s ? " " : "",
			 s ? s : "");
	} else if (!strcmp(kind, "stat")) {
		b = next_field(&s);
		if (!b || p->nstats >= 64)
			return;
		COPY(p->stats[p->nstats].name, a);
		p->stats[p->nstats++].value = strtoull(b, NULL, 10);
	} else if (!strcmp(kind, "knob")) {
		parse_knob(a, &s, p);
	} else if (!strcmp(kind, "rejected") && s) {
		for (int k = 0; k < p->nknobs; k++)
			if (!strcmp(p->knobs[k].name, a))
				COPY(p->knobs[k].rejected, s);
	}
}

int published_read(int piddir, struct published *out)
{
	static char buf[32768];
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd = openat(piddir, "stats", O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC);

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	while (got < sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	if (strncmp(buf, "hpalloc-stats 1\n", 16) != 0) {
		errno = EINVAL;
		return -1;
	}
	for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		parse_line(line, out);
	return out->pid > 0 ? 0 : (errno = EINVAL, -1);
}

int published_alive(const struct published *p)
{
	unsigned long long start;

	if (kill((pid_t)p->pid, 0) != 0 && errno == ESRCH)
		return 0;
	if (publish_start_time((pid_t)p->pid, &start) != 0)
		return 0; /* no /proc entry: gone */
	return p->start_time == 0 || start == p->start_time;
}
