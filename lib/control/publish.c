/* Per-process stats file for hpctl: <control dir>/proc/<pid>/stats.
 *
 * The format is in internal.h; peers.c is its reader.  hp_proc_self()
 * gives the same content, live, as a struct hp_proc (without the file).  The file is
 * replaced atomically (temporary file + rename) by the janitor thread when
 * its content changed, and removed at exit.
 *
 * The entry is created lazily, only when the control directory exists (the
 * default one is made if missing: open_root()), passes the securedir.c
 * checks and is writable by us, and it appears whole:
 * made as proc/.new.<pid> with its stats file, then renamed to proc/<pid>,
 * so a reader never meets a directory without one.  A proc/<pid> that exists
 * when we claim it belongs to a dead process with our pid (pids are unique
 * in a pid namespace): it is removed first, so its override files never
 * reach us -- unless its stats say it was published from another pid
 * namespace sharing this control directory: then it is not ours to remove,
 * and we do not publish.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "../core/internal.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* This process's entry, under pub.lock. */
static struct {
	pthread_mutex_t lock;
	bool disabled;
	pid_t pid;                     /* proc/<pid> claimed by us, or 0 */
	unsigned long long start_time;
	bool has_ns;
	struct pub_ns ns;              /* our pid namespace */
	char comm[HP_PROC_COMM_MAX];
	char last[PUB_MAX];            /* content of the last file written */
	size_t last_len;
	char why[HP_KNOB_ERROR_MAX];   /* why we last did not publish, or "" */
} pub = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- helpers shared with hpctl ------------------------------------------- */

/* Remove a directory's contents and itself, depth-limited, never following
 * a symlink (unlinkat removes the link, not its target). */
static int remove_tree(int at, const char *name, int depth)
{
	int fd, saved = 0;
	DIR *d;
	struct dirent *e;

	fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : unlinkat(at, name, 0);
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(fd, e->d_name, 0) == 0)
			continue;
		if ((errno == EISDIR || errno == EPERM) && depth > 0 &&
		    remove_tree(fd, e->d_name, depth - 1) == 0)
			continue;
		saved = errno;
	}
	closedir(d);
	if (unlinkat(at, name, AT_REMOVEDIR) != 0)
		return -1;
	if (saved) {
		errno = saved;
		return -1;
	}
	return 0;
}

int publish_remove_pid_dir(int procfd, pid_t pid)
{
	char name[32];

	snprintf(name, sizeof(name), "%ld", (long)pid);
	return remove_tree(procfd, name, 2);
}

/* ---- writing ------------------------------------------------------------- */

static void read_comm(char *buf, size_t len)
{
	if (prim_proc_read("self/comm", buf, len) < 0)
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	for (char *c = buf; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	if (!buf[0])
		snprintf(buf, len, "?");
}

/* Appends to buf at *pos; silently truncates (the buffer is generous). */
__attribute__((format(printf, 4, 5)))
static void put(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*pos >= cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *pos, cap - *pos, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n < cap - *pos ? (size_t)n : cap - *pos - 1;
}

/* Reasons are free text: keep each on one line. */
static void one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
}

static size_t compose(char *buf, size_t cap)
{
	struct hp_stats st;
	struct hp_knob_info ki;
	size_t pos = 0;

	put(buf, cap, &pos, PUB_MAGIC "pid %ld\ncomm %s\nstart_time %llu\n",
	    (long)pub.pid, pub.comm, pub.start_time);
	if (pub.has_ns)
		put(buf, cap, &pos, "pidns %llu %llu\n", pub.ns.dev, pub.ns.ino);
	if (hp_stats_get(&st) == 0)
		for (int s = 0; s < HP_STAT_COUNT; s++)
			put(buf, cap, &pos, "stat %s %llu\n", hp_stat_name(s),
			    (unsigned long long)st.v[s]);
	for (int k = 0; k < hp_knob_count(); k++) {
		if (hp_knob_info(k, &ki) != 0)
			continue;
		put(buf, cap, &pos, "knob %s %s %s\n", ki.name, ki.value,
		    hp_source_name(ki.source));
		if (ki.rejected[0]) {
			one_line(ki.rejected);
			put(buf, cap, &pos, "rejected %s %s\n", ki.name,
			    ki.rejected);
		}
	}
	return pos;
}

/* Write our stats file into dirfd if its content changed. */
static int write_file(int dirfd)
{
	static char buf[PUB_MAX]; /* under pub.lock */
	size_t len = compose(buf, sizeof(buf));

	if (len == pub.last_len && memcmp(buf, pub.last, len) == 0)
		return 0;
	if (securedir_write_atomic(dirfd, "stats", buf, len, 0644, false) != 0)
		return -1;
	memcpy(pub.last, buf, len);
	pub.last_len = len;
	return 0;
}

/* proc/<name> was published from a pid namespace other than ours. */
static bool foreign_entry(int procfd, const char *name)
{
	struct peer_entry e;
	int fd = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);
	bool foreign;

	if (fd < 0)
		return false;
	foreign = peers_read(fd, &e) == 0 && e.has_ns && pub.has_ns &&
		  (e.ns.dev != pub.ns.dev || e.ns.ino != pub.ns.ino);
	close(fd);
	return foreign;
}

static void remember_self(pid_t pid)
{
	pub.pid = pid;
	pub.last_len = 0;
	if (peers_start_time(pid, &pub.start_time) != 0)
		pub.start_time = 0;
	pub.has_ns = peers_pidns_self(&pub.ns) == 0;
	read_comm(pub.comm, sizeof(pub.comm));
}

/* Make proc/<pid> appear with its stats file in it (see the top). */
static int create_entry(int procfd, const char *name)
{
	char tmp[48];
	int fd;

	snprintf(tmp, sizeof(tmp), ".new.%s", name);
	remove_tree(procfd, tmp, 2); /* left by a crash of ours */
	if (mkdirat(procfd, tmp, 0755) != 0)
		return -1;
	fd = openat(procfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || write_file(fd) != 0 ||
	    renameat(procfd, tmp, procfd, name) != 0) {
		int saved = errno; /* for the caller's message */
		if (fd >= 0)
			close(fd);
		remove_tree(procfd, tmp, 2);
		errno = saved;
		return -1;
	}
	close(fd);
	return 0;
}

/* Why this process does not publish, said once per reason (claim() runs
 * again at every janitor tick until it succeeds). */
__attribute__((format(printf, 1, 2)))
static void not_publishing(const char *fmt, ...)
{
	char why[sizeof(pub.why)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (strcmp(why, pub.why) == 0)
		return;
	snprintf(pub.why, sizeof(pub.why), "%s", why);
	hp_log(1, "not publishing stats: %s", why);
}

/* The control directory, made first when it is one of the default places
 * (/run/hpalloc, $XDG_RUNTIME_DIR/hpalloc) and missing, so a fresh machine
 * needs no set-up for hpctl stats and hpctl -p to see this process.  One
 * HPALLOC_CONTROL_DIR names is used as it is: such a path is often shared
 * by several users or containers, and whose process happened to start
 * first must not decide who owns it (hpctl set makes it). */
static int open_root(const char *dir, char *why, size_t wl)
{
	int kind = control_dir_kind();

	if (kind == CONTROL_DIR_GIVEN)
		return securedir_open(AT_FDCWD, dir, why, wl);
	return securedir_make(dir, kind, why, wl);
}

/* Create proc/<pid> for this process; see the comment at the top. */
static void claim(const char *dir)
{
	char why[HP_KNOB_ERROR_MAX], name[32];
	pid_t pid = getpid();
	int root, procfd;

	root = open_root(dir, why, sizeof(why));
	if (root < 0) {
		if (errno == ENOENT && control_dir_kind() == CONTROL_DIR_GIVEN)
			not_publishing("%s does not exist", dir);
		else
			not_publishing("control directory %s: %s", dir, why);
		return;
	}
	if (access(dir, W_OK) != 0) {
		not_publishing("%s is not writable by uid %u", dir,
			       (unsigned)getuid());
		goto out_root;
	}
	if (mkdirat(root, "proc", 0755) != 0 && errno != EEXIST)
		goto out_root;
	procfd = securedir_open(root, "proc", why, sizeof(why));
	if (procfd < 0) {
		hp_log(1, "not publishing stats: %s/proc: %s", dir, why);
		goto out_root;
	}
	remember_self(pid);
	snprintf(name, sizeof(name), "%ld", (long)pid);
	if (foreign_entry(procfd, name)) {
		hp_log(1, "not publishing stats: %s/proc/%s belongs to a process "
		       "of another pid namespace", dir, name);
		pub.disabled = true; /* it will not become ours */
		pub.pid = 0;
		goto out;
	}
	if (publish_remove_pid_dir(procfd, pid) != 0 && errno != ENOENT)
		hp_log(1, "stale %s/proc/%s: %s", dir, name, strerror(errno));
	if (create_entry(procfd, name) != 0) {
		hp_log(1, "not publishing stats: %s/proc/%s: %s", dir, name,
		       strerror(errno));
		pub.pid = 0;
	} else {
		pub.why[0] = '\0'; /* a later failure is said again */
	}
out:
	close(procfd);
out_root:
	close(root);
}

static void write_stats(const char *dir)
{
	char rel[64], why[HP_KNOB_ERROR_MAX];
	int root, fd;

	root = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0)
		return;
	snprintf(rel, sizeof(rel), "proc/%ld", (long)pub.pid);
	fd = securedir_open_path(root, rel, why, sizeof(why));
	close(root);
	if (fd < 0) {
		if (errno == ENOENT)
			pub.pid = 0; /* pruned under us: claim again next time */
		return;
	}
	write_file(fd);
	close(fd);
}

void publish_update(void)
{
	const char *dir;

	pthread_mutex_lock(&pub.lock);
	dir = control_dir();
	if (!pub.disabled && dir) {
		if (pub.pid != getpid())
			claim(dir);
		if (pub.pid == getpid())
			write_stats(dir);
	}
	pthread_mutex_unlock(&pub.lock);
}

/* The entry this process would publish now (compose() above), as a reader
 * of it would see it, without the control directory: pid, start time,
 * comm, every counter, the effective knobs. */
static int proc_self(struct hp_proc *out)
{
	struct hp_knob_info ki;

	if (!out) {
		errno = EINVAL;
		return -1;
	}
	memset(out, 0, sizeof(*out));
	out->pid = (long)getpid();
	if (peers_start_time(getpid(), &out->start_time) != 0)
		out->start_time = 0;
	read_comm(out->comm, sizeof(out->comm));
	out->alive = 1;
	if (hp_stats_get(&out->stats) != 0)
		return -1;
	out->stat_mask = HP_STAT_COUNT >= 64 ? ~(uint64_t)0
					      : ((uint64_t)1 << HP_STAT_COUNT) - 1;
	for (int k = 0; k < hp_knob_count() && out->nknobs < HP_PROC_KNOBS_MAX; k++) {
		struct hp_proc_knob *kn = &out->knobs[out->nknobs];
		if (hp_knob_info(k, &ki) != 0)
			continue;
		snprintf(kn->name, sizeof(kn->name), "%s", ki.name);
		snprintf(kn->value, sizeof(kn->value), "%s", ki.value);
		kn->source = ki.source;
		one_line(ki.rejected);
		snprintf(kn->rejected, sizeof(kn->rejected), "%s", ki.rejected);
		out->nknobs++;
	}
	return 0;
}

int hp_proc_self(struct hp_proc *out)
{
	int saved = errno, rc;

	HP_NOCANCEL_BEGIN;
	rc = proc_self(out);
	HP_NOCANCEL_END;
	if (rc == 0)
		errno = saved;
	return rc;
}

bool publish_claimed(void)
{
	pthread_mutex_lock(&pub.lock);
	bool mine = pub.pid != 0 && pub.pid == getpid();
	pthread_mutex_unlock(&pub.lock);
	return mine;
}

void publish_exit(void)
{
	const char *dir = control_dir();
	char why[HP_KNOB_ERROR_MAX];
	int root, procfd;

	pthread_mutex_lock(&pub.lock);
	if (dir && pub.pid != 0 && pub.pid == getpid()) {
		root = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		procfd = root < 0 ? -1 : securedir_open(root, "proc", why,
							   sizeof(why));
		if (procfd >= 0) {
			publish_remove_pid_dir(procfd, pub.pid);
			close(procfd);
		}
		if (root >= 0)
			close(root);
	}
	pub.pid = 0;
	pub.disabled = true; /* nothing after exit re-creates it */
	pthread_mutex_unlock(&pub.lock);
}

void publish_disable(void)
{
	pthread_mutex_lock(&pub.lock);
	pub.disabled = true;
	pthread_mutex_unlock(&pub.lock);
}

/* The parent's directory stays the parent's; the child claims its own. */
void publish_fork(int phase)
{
	fork_mutex(&pub.lock, phase);
	if (phase == FORK_CHILD) {
		pub.pid = 0;
		pub.last_len = 0;
	}
}
