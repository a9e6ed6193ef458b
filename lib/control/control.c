/* Control directory: where it is, and live reload of its knob files.
 *
 * The control directory ($HPALLOC_CONTROL_DIR, else /run/hpalloc for root,
 * else $XDG_RUNTIME_DIR/hpalloc, else -- a batch job, `su -`, no session --
 * /tmp/hpalloc-<euid>) holds one file per knob, named like the
 * knob, whose body is what hp_knob_render() prints.  Values found there form
 * the HP_SOURCE_CONTROL layer.  <dir>/proc/<pid>/override/<knob> files,
 * written by `hpctl -p PID set`, form this process's HP_SOURCE_PROCESS layer.
 *
 * All the work happens in control_poll(), called by the janitor thread about
 * every 250 ms (and by hp_control_reload()): the allocation path never looks
 * at any of this, it only reads hp_knob().  A poll costs one open+fstat of the
 * directory and one fstatat per knob file; a file is re-read only when its
 * identity (inode, size, mtime, ctime, owner, mode) changed.
 *
 * Security: a file or directory is used only if securedir.c's rules accept
 * it (regular file, no symlink, owner, mode, size: see there).
 * Secure-execution processes (setuid/setgid, AT_SECURE) ignore the control
 * directory entirely.  A refused file never
 * changes behaviour: the layer keeps its last good value and the reason goes
 * to knobs_note_reject().
 *
 * Nobody has to create the directory: a default one that is missing is
 * made by the first process that publishes itself (publish.c), or by hpctl
 * set, through securedir_make(), only below a parent no other user can
 * write to, so no other user can have made it first or own it -- or, for
 * /tmp/hpalloc-<euid>, in a sticky /tmp (nobody else can remove or replace
 * it), mode 0700, and refused if someone else made it first (a planted
 * one is said, never used: securedir.c).  The library, publish.c and hpctl
 * all find it through control_dir_choose(), so a user's hpctl finds that
 * user's processes in every session.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "../core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What we remember about one knob file between polls. */
struct file_state {
	bool present;        /* existed at the last poll                    */
	bool recheck;        /* modified "just now": identity may lie, re-read */
	dev_t dev;
	ino_t ino;
	off_t size;
	mode_t mode;
	uid_t uid;
	struct timespec mtime, ctime;
	bool applied;        /* we set the layer from this file             */
	char canon[HP_KNOB_VALUE_MAX];      /* value we applied             */
	char why[HP_KNOB_ERROR_MAX];        /* last reason we noted, or ""  */
};

/* One directory of knob files: they form one of knobs.c's layers. */
struct knob_dir {
	int source;                         /* HP_SOURCE_CONTROL / _PROCESS */
	struct file_state files[KNOB_COUNT];
	char dir_why[HP_KNOB_ERROR_MAX];    /* last reason the dir was refused */
};

/* The control directory and its two layers' files, under ctl.lock. */
static struct {
	pthread_mutex_t lock;
	bool initialized;
	bool enabled;                 /* a control directory is configured  */
	int kind;                     /* how it was chosen: CONTROL_DIR_*   */
	char dir[PATH_MAX];
	struct knob_dir control;
	struct knob_dir override;
} ctl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.control = { .source = HP_SOURCE_CONTROL },
	.override = { .source = HP_SOURCE_PROCESS },
};

/* ---- where the directory is (publish.c and hpctl ask too) ---------------- */

int control_dir_choose(char *buf, size_t len, int *kind)
{
	const char *env = getenv("HPALLOC_CONTROL_DIR");
	int n;

	if (hp_secure_exec()) {
		errno = EPERM;
		return -1;
	}
	*kind = CONTROL_DIR_GIVEN;
	if (env && *env && env[0] != '/') {
		/* Relative: anchor it now, so a later chdir() cannot move it. */
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return -1;
		n = snprintf(buf, len, "%s/%s", cwd, env);
	} else if (env && *env)
		n = snprintf(buf, len, "%s", env);
	else if (geteuid() == 0) {
		*kind = CONTROL_DIR_ROOT;
		n = snprintf(buf, len, "%s", HP_CONTROL_DIR_ROOT);
	} else if ((env = getenv("XDG_RUNTIME_DIR")) && *env) {
		*kind = CONTROL_DIR_USER;
		n = snprintf(buf, len, "%s/hpalloc", env);
	} else {
		/* a batch job, `su -`: no session, no XDG_RUNTIME_DIR */
		*kind = CONTROL_DIR_TMP;
		n = snprintf(buf, len, "%s/hpalloc-%u", HP_CONTROL_DIR_TMP_PARENT, (unsigned)geteuid());
	}
	if (n < 0 || (size_t)n >= len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int control_dir_resolve(char *buf, size_t len)
{
	int kind;

	return control_dir_choose(buf, len, &kind);
}

/* ---- polling ------------------------------------------------------------- */

/* Reasons are cut at HP_KNOB_ERROR_MAX on purpose: no truncation warning. */
__attribute__((format(printf, 3, 4)))
static void reason(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static bool same_identity(const struct file_state *f, const struct stat *st)
{
	return f->present && f->dev == st->st_dev && f->ino == st->st_ino &&
	       f->size == st->st_size && f->mode == st->st_mode &&
	       f->uid == st->st_uid &&
	       f->mtime.tv_sec == st->st_mtim.tv_sec &&
	       f->mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       f->ctime.tv_sec == st->st_ctim.tv_sec &&
	       f->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

static void remember_identity(struct file_state *f, const struct stat *st)
{
	struct timespec now;

	f->present = true;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->size = st->st_size;
	f->mode = st->st_mode;
	f->uid = st->st_uid;
	f->mtime = st->st_mtim;
	f->ctime = st->st_ctim;
	/* Timestamps are coarse: a same-size rewrite within the same tick
	 * would look unchanged.  Files touched in the last 2 s are re-read
	 * at the next poll too (as git does for "racily clean" files). */
	clock_gettime(CLOCK_REALTIME, &now);
	f->recheck = now.tv_sec - st->st_mtim.tv_sec < 2 ||
		     now.tv_sec - st->st_ctim.tv_sec < 2;
}

/* Note a refusal once per distinct reason, so an unchanged bad file does
 * not count again at every poll. */
static void note_reject(int knob, struct file_state *f, const char *why)
{
	if (strcmp(f->why, why) == 0)
		return;
	snprintf(f->why, sizeof(f->why), "%s", why);
	knobs_note_reject(knob, why);
}

static void clear_file(struct knob_dir *l, int knob)
{
	struct file_state *f = &l->files[knob];

	if (f->applied)
		knobs_set_layer(knob, l->source, NULL);
	memset(f, 0, sizeof(*f));
}

static void apply_value(struct knob_dir *l, int knob, const char *canon)
{
	struct file_state *f = &l->files[knob];

	f->why[0] = '\0';
	if (f->applied && strcmp(f->canon, canon) == 0)
		return;
	if (knobs_set_layer(knob, l->source, canon) == 0) {
		f->applied = true;
		snprintf(f->canon, sizeof(f->canon), "%s", canon);
	}
}

/* Read, check and apply one knob file that changed. */
static void load_file(struct knob_dir *l, int dirfd, const char *dirpath,
		      int knob)
{
	const char *name = knob_name(knob);
	char body[HP_CONTROL_FILE_MAX + 1];
	char canon[HP_KNOB_VALUE_MAX];
	char err[HP_KNOB_ERROR_MAX], why[HP_KNOB_ERROR_MAX];

	if (securedir_read_file(dirfd, name, body, sizeof(body), err,
			      sizeof(err)) != 0) {
		reason(why, sizeof(why), "%s/%s ignored: %s", dirpath, name,
			 err);
		note_reject(knob, &l->files[knob], why);
		return;
	}
	if (hp_knob_parse_file(name, body, canon, sizeof(canon), err,
			       sizeof(err)) != 0) {
		reason(why, sizeof(why), "%s/%s ignored: %s", dirpath, name,
			 err);
		note_reject(knob, &l->files[knob], why);
		return;
	}
	apply_value(l, knob, canon);
}

static void poll_file(struct knob_dir *l, int dirfd, const char *dirpath,
		      int knob, bool force)
{
	struct file_state *f = &l->files[knob];
	struct stat st;

	if (fstatat(dirfd, knob_name(knob), &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT)
			clear_file(l, knob); /* deleted: back to lower layers */
		return;
	}
	if (!force && !f->recheck && same_identity(f, &st))
		return;
	remember_identity(f, &st);
	load_file(l, dirfd, dirpath, knob);
}

/* dirfd < 0: the directory does not exist, so the layer is empty. */
static void poll_layer(struct knob_dir *l, int dirfd, const char *dirpath,
		       bool force)
{
	l->dir_why[0] = '\0';
	for (int k = 0; k < KNOB_COUNT; k++) {
		if (dirfd < 0)
			clear_file(l, k);
		else
			poll_file(l, dirfd, dirpath, k, force);
	}
}

/* An insecure directory: keep every value, say why once per reason. */
static void refuse_layer(struct knob_dir *l, const char *dirpath, const char *err)
{
	char why[HP_KNOB_ERROR_MAX];

	reason(why, sizeof(why), "directory %s ignored: %s", dirpath, err);
	if (strcmp(l->dir_why, why) == 0)
		return;
	snprintf(l->dir_why, sizeof(l->dir_why), "%s", why);
	for (int k = 0; k < KNOB_COUNT; k++)
		knobs_note_reject(k, why);
}

/* Open a directory for a layer: fd, -1 if it does not exist (empty layer),
 * -2 if it exists but is refused (keep the layer).  An absolute path is the
 * control directory itself: only it is checked, not its parents (it may
 * well live in /tmp); a relative one (proc/<pid>/override) is checked at
 * every component. */
static int open_layer_dir(struct knob_dir *l, int at, const char *rel,
			  const char *path)
{
	char err[HP_KNOB_ERROR_MAX];
	int fd = rel[0] == '/' ? securedir_open(at, rel, err, sizeof(err))
			       : securedir_open_path(at, rel, err, sizeof(err));

	if (fd >= 0)
		return fd;
	if (errno == ENOENT)
		return -1;
	refuse_layer(l, path, err);
	return -2;
}

static void poll_control(bool force)
{
	int fd = open_layer_dir(&ctl.control, AT_FDCWD, ctl.dir, ctl.dir);

	if (fd == -2)
		return;
	poll_layer(&ctl.control, fd, ctl.dir, force);
	if (fd >= 0)
		close(fd);
}

/* <dir>/proc/<pid>/override, only once publish.c has claimed proc/<pid> for
 * this process: a directory left by a dead process whose pid we recycled
 * must not leak its overrides into us. */
static void poll_override(bool force)
{
	char rel[64], path[PATH_MAX + 64];
	int root, fd;

	if (!publish_claimed()) {
		poll_layer(&ctl.override, -1, NULL, force);
		return;
	}
	snprintf(rel, sizeof(rel), "proc/%ld/override", (long)getpid());
	root = securedir_open(AT_FDCWD, ctl.dir, path, sizeof(path));
	if (root < 0) {
		if (errno == ENOENT) /* gone, and our overrides with it */
			poll_layer(&ctl.override, -1, NULL, force);
		return; /* refused: poll_control() said why, keep the layer */
	}
	snprintf(path, sizeof(path), "%s/%s", ctl.dir, rel);
	fd = open_layer_dir(&ctl.override, root, rel, path);
	close(root);
	if (fd == -2)
		return;
	poll_layer(&ctl.override, fd, path, force);
	if (fd >= 0)
		close(fd);
}

static void control_poll_locked(bool force)
{
	if (!ctl.initialized) {
		ctl.initialized = true;
		ctl.enabled = control_dir_choose(ctl.dir, sizeof(ctl.dir), &ctl.kind) == 0;
		if (!ctl.enabled)
			hp_log(1, "no control directory (%s): environment and "
			       "defaults only, and this process publishes nothing "
			       "(hpctl stats cannot see it)", hp_secure_exec() ?
			       "secure execution" : strerror(errno));
	}
	if (!ctl.enabled)
		return;
	poll_control(force);
	poll_override(force);
}

void control_init(void)
{
	pthread_mutex_lock(&ctl.lock);
	control_poll_locked(true);
	pthread_mutex_unlock(&ctl.lock);
}

void control_poll(void)
{
	pthread_mutex_lock(&ctl.lock);
	control_poll_locked(false);
	pthread_mutex_unlock(&ctl.lock);
}

const char *control_dir(void)
{
	return ctl.initialized && ctl.enabled ? ctl.dir : NULL;
}

int control_dir_kind(void)
{
	return ctl.kind;
}

/* Around fork the lock is held, so the janitor cannot be mid-poll; in the
 * child our pid changed, so the next poll looks at our own (absent)
 * override directory and drops the parent's per-process overrides.  ctl.lock
 * nests outside publish.c's lock (poll_override asks publish_claimed()):
 * the control part's fork hook (control_layer_fork, below) calls
 * control_fork before publish_fork. */
void control_fork(int phase)
{
	fork_mutex(&ctl.lock, phase);
}

/* Reads files and may log with ctl.lock held: no cancellation point (see
 * HP_NOCANCEL_BEGIN). */
void hp_control_reload(void)
{
	HP_ERRNO_SAVE;
	HP_NOCANCEL_BEGIN;
	hp_init();
	pthread_mutex_lock(&ctl.lock);
	control_poll_locked(true);
	pthread_mutex_unlock(&ctl.lock);
	HP_NOCANCEL_END;
	HP_ERRNO_RESTORE;
}

/* ---- the control plane joins the core (internal.h: "the layers above join") ------- */

static void control_layer_fork(int phase)
{
	/* ctl.lock nests outside publish.c's (poll_override asks publish_claimed) */
	static void (*const hooks[])(int) = {control_fork, publish_fork};
	fork_in_order(hooks, sizeof(hooks) / sizeof(hooks[0]), phase);
}

static const struct hp_part control_part = {
	.init = control_init,
	.fork = control_layer_fork,
	.exit = publish_exit,
	.tool_mode = publish_disable,
};

const int hp_control_joins = 1; /* the anchor AM_LDFLAGS names */

__attribute__((constructor)) static void control_join(void)
{
	hp_join(SLOT_CONTROL, &control_part);
}
