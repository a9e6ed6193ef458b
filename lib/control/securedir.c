/* Secure directories: the rules by which hpalloc trusts a directory or a
 * file another program may have put in its way, in one place for every
 * reader and writer of the control directory (control.c's knob files,
 * publish.c's and peers.c's proc/<pid> entries, hpctl).
 *
 * A directory is used only if opened without following a symlink, owned by
 * our euid or root and not writable by group or others, every component of
 * a relative path alike.  A file is read only if it is a regular file
 * (never through a symlink, never a FIFO or device: opened O_NONBLOCK and
 * checked before a read), with the same owner and mode rules, at most
 * HP_CONTROL_FILE_MAX bytes and without a NUL byte.  A file is written as a
 * temporary file in the same directory renamed over the old one, so a
 * reader never meets half of it; the temporary is created exclusively
 * (O_EXCL) under a random name, so nothing another user put in the
 * directory (a file, a symlink, a guess at the name) is ever written to.  A default control directory is made only
 * below a parent no other user can write to (check_parent() says why), or
 * in a sticky /tmp, where one someone else made first is refused.
 *
 * Every function says why it refused in its caller's buffer (why, wl);
 * none logs and none takes a lock: what to do about a refusal is the
 * caller's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "../core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* names tried for a temporary before giving up (each taken already: only
 * by someone filling the directory with guesses) */
#define TEMP_ATTEMPTS 64

/* Owner and mode rules common to files and directories. */
static int check_owner_mode(const struct stat *st, char *why, size_t wl)
{
	if (st->st_uid != geteuid() && st->st_uid != 0) {
		snprintf(why, wl, "owned by uid %u, not by uid %u or root",
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -1;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, wl, "writable by group or others (mode %04o)",
			 (unsigned)(st->st_mode & 07777));
		return -1;
	}
	return 0;
}

int securedir_check_fd(int fd, char *why, size_t wl)
{
	struct stat st;

	if (fstat(fd, &st) != 0) {
		snprintf(why, wl, "fstat: %s", strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, wl, "not a directory");
		return -1;
	}
	return check_owner_mode(&st, why, wl);
}

int securedir_open(int dirfd, const char *path, char *why, size_t wl)
{
	int fd = openat(dirfd, path,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		struct stat st;
		int saved = errno;

		/* O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink too. */
		if (saved == ELOOP || (saved == ENOTDIR &&
		    fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode)))
			snprintf(why, wl, "is a symbolic link");
		else if (saved == ENOTDIR)
			snprintf(why, wl, "not a directory");
		else
			snprintf(why, wl, "%s", strerror(saved));
		errno = saved;
		return -1;
	}
	if (securedir_check_fd(fd, why, wl) != 0) {
		close(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

/* The parent a default control directory is made in must be one no other
 * user can write to, so nobody else can have made (or can later replace)
 * the directory: root's /run is root's and not writable by others; a
 * user's $XDG_RUNTIME_DIR is the user's and private (mode 0700, as the XDG
 * Base Directory Specification requires of it). */
static int check_parent(const struct stat *st, int kind, const char *parent,
			char *why, size_t wl)
{
	/* /tmp: anyone may make a name there, but in a sticky one nobody may
	 * remove or rename another user's (securedir_open checks the owner of
	 * the name found there; tests/cli/tmp-parent.sh stages other /tmps) */
	if (kind == CONTROL_DIR_TMP &&
	    (st->st_uid != 0 || ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)))) {
		snprintf(why, wl, "%s is not root's and sticky (owner uid %u, mode %04o)",
			 parent, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
		return -1;
	}
	if (kind == CONTROL_DIR_ROOT &&
	    (st->st_uid != 0 || (st->st_mode & (S_IWGRP | S_IWOTH)))) {
		snprintf(why, wl, "%s is not root's alone (owner uid %u, mode %04o)",
			 parent, (unsigned)st->st_uid,
			 (unsigned)(st->st_mode & 07777));
		return -1;
	}
	if (kind == CONTROL_DIR_USER &&
	    (st->st_uid != geteuid() || (st->st_mode & 077))) {
		snprintf(why, wl, "XDG_RUNTIME_DIR %s is not private to uid %u "
			 "(owner uid %u, mode %04o; it must be 0700)", parent,
			 (unsigned)geteuid(), (unsigned)st->st_uid,
			 (unsigned)(st->st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Open the parent of a default control directory ("/run/hpalloc",
 * "$XDG_RUNTIME_DIR/hpalloc", "/tmp/hpalloc-<uid>") if it passes
 * check_parent(): fd, or -1 + errno and why. */
static int open_parent(const char *path, int kind, char *why, size_t wl)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t plen = slash ? (size_t)(slash - path) : 0;
	struct stat st;
	int fd, saved;

	if (!slash || plen >= sizeof(parent)) {
		errno = ENAMETOOLONG;
		snprintf(why, wl, "path too long");
		return -1;
	}
	memcpy(parent, path, plen);
	parent[plen] = '\0';
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		saved = errno;
		snprintf(why, wl, "%s: %s", parent, strerror(saved));
		errno = saved;
		return -1;
	}
	if (fstat(fd, &st) != 0 || check_parent(&st, kind, parent, why, wl) != 0) {
		close(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

int securedir_make(const char *path, int kind, char *why, size_t wl)
{
	const char *slash = strrchr(path, '/');
	const char *name = kind == CONTROL_DIR_GIVEN || !slash ? path : slash + 1;
	mode_t mode = kind == CONTROL_DIR_TMP ? 0700 : 0755;
	int at = AT_FDCWD, fd, saved;
	bool made;

	/* There already: its own owner and mode rules decide, whoever the
	 * parent lets in (a replacement would not be ours or root's; in /tmp,
	 * a name anyone could have taken first, securedir_open's owner rule
	 * is what refuses another user's). */
	fd = securedir_open(AT_FDCWD, path, why, wl);
	if (fd >= 0 || errno != ENOENT)
		return fd;
	if (kind != CONTROL_DIR_GIVEN && (at = open_parent(path, kind, why, wl)) < 0)
		return -1;
	made = mkdirat(at, name, mode) == 0;
	if (!made && errno != EEXIST) {
		saved = errno;
		snprintf(why, wl, "mkdir: %s", strerror(saved));
		fd = -1;
	} else {
		/* somebody else's name got there between the two: refused by
		 * its owner */
		fd = securedir_open(at, name, why, wl);
		saved = errno;
		/* 0755 whatever the umask: a non-root process may follow root's
		 * knob files (HPALLOC_CONTROL_DIR=/run/hpalloc); in /tmp, 0700:
		 * the user's processes are nobody else's to look at */
		if (fd >= 0 && made)
			(void)fchmod(fd, mode);
	}
	if (at != AT_FDCWD)
		close(at);
	errno = saved;
	return fd;
}

int securedir_open_path(int at, const char *rel, char *why, size_t wl)
{
	char part[NAME_MAX + 1];
	int fd = at;

	while (*rel) {
		size_t n = strcspn(rel, "/");
		int next;

		if (n == 0 || n > NAME_MAX) {
			snprintf(why, wl, "bad path component");
			errno = EINVAL;
			goto fail;
		}
		memcpy(part, rel, n);
		part[n] = '\0';
		next = securedir_open(fd, part, why, wl);
		if (next < 0)
			goto fail;
		if (fd != at)
			close(fd);
		fd = next;
		rel += n;
		rel += strspn(rel, "/");
	}
	return fd == at ? dup(at) : fd;
fail:
	if (fd != at) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -1;
}

/* Read all of fd (at most cap - 1 bytes plus one to detect growth). */
static ssize_t read_small(int fd, char *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap - 1) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	return (ssize_t)got;
}

int securedir_read_file(int dirfd, const char *name, char *buf, size_t cap,
		      char *why, size_t wl)
{
	char body[HP_CONTROL_FILE_MAX + 2];
	struct stat st;
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC | O_NOCTTY);

	if (fd < 0) {
		if (errno == ELOOP)
			snprintf(why, wl, "is a symbolic link");
		else
			snprintf(why, wl, "open: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, wl, "not a regular file");
		goto refuse;
	}
	if (check_owner_mode(&st, why, wl) != 0)
		goto refuse;
	if (st.st_size > HP_CONTROL_FILE_MAX) {
		snprintf(why, wl, "larger than %d bytes", HP_CONTROL_FILE_MAX);
		goto refuse;
	}
	n = read_small(fd, body, sizeof(body));
	if (n < 0) {
		snprintf(why, wl, "read: %s", strerror(errno));
		goto refuse;
	}
	if (n > HP_CONTROL_FILE_MAX) {
		snprintf(why, wl, "larger than %d bytes", HP_CONTROL_FILE_MAX);
		goto refuse;
	}
	if (memchr(body, '\0', (size_t)n)) {
		snprintf(why, wl, "contains a NUL byte");
		goto refuse;
	}
	close(fd);
	if ((size_t)n >= cap) {
		snprintf(why, wl, "larger than %zu bytes", cap - 1);
		return -1;
	}
	memcpy(buf, body, (size_t)n + 1);
	return 0;
refuse:
	close(fd);
	return -1;
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* 64 bits no other process can guess: the kernel's random source
 * (prim_random); where it has none to give (a kernel before 3.17, a
 * seccomp filter, a pool not yet initialised), the clock, pid and a counter
 * mixed -- still unique, only guessable, and the caller creates the name
 * exclusively anyway. */
static uint64_t unpredictable64(void)
{
	static _Atomic uint64_t counter;
	uint64_t v;
	struct timespec ts;

	if (prim_random(&v, sizeof(v)) == 0)
		return v;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	v = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	v ^= (uint64_t)getpid() << 32 ^ atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u;
	v ^= v >> 31; /* splitmix64's finaliser */
	v *= 0xbf58476d1ce4e5b9u;
	v ^= v >> 27;
	return v;
}

/* A temporary in dirfd next to name, created exclusively (O_EXCL: never a
 * file or symlink someone else put there, whatever its name) under a name
 * no other user can predict, retried on a name taken.  Its fd, the name
 * in tmp; or -1 + errno. */
static int create_temporary(int dirfd, const char *name, mode_t mode, char *tmp, size_t tl)
{
	for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
		if (snprintf(tmp, tl, ".%s.%016llx.tmp", name,
			     (unsigned long long)unpredictable64()) >= (int)tl) {
			errno = ENAMETOOLONG;
			return -1;
		}
		int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
				O_CLOEXEC, mode);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	errno = EEXIST;
	return -1;
}

int securedir_write_atomic(int dirfd, const char *name, const char *data,
			 size_t len, mode_t mode, bool durable)
{
	char tmp[NAME_MAX + 1];
	int fd, saved;

	fd = create_temporary(dirfd, name, mode, tmp, sizeof(tmp));
	if (fd < 0)
		return -1;
	if (fchmod(fd, mode) != 0 || write_all(fd, data, len) != 0 ||
	    (durable && fsync(fd) != 0))
		goto fail;
	if (close(fd) != 0) {
		fd = -1;
		goto fail;
	}
	if (renameat(dirfd, tmp, dirfd, name) != 0) {
		fd = -1;
		goto fail;
	}
	if (durable)
		(void)fsync(dirfd); /* make the rename itself durable */
	return 0;
fail:
	saved = errno;
	if (fd >= 0)
		close(fd);
	unlinkat(dirfd, tmp, 0); /* ours: made exclusively above */
	errno = saved;
	return -1;
}
