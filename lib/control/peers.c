/* The peers: every process's published entry, read back -- hp_proc_get(),
 * hp_proc_list() -- and judged stale or alive; and the processes started
 * with a variable set, whether or not they publish (hp_proc_marked(): how
 * hpalloc.ray finds its workers).
 *
 * publish.c writes <control dir>/proc/<pid>/stats (format in internal.h);
 * this file is its only reader -- hpctl, the Python package and the Dask
 * plugin all come through here -- and owns the rule for when an entry is
 * stale:
 *
 *   A pid means something only in its own pid namespace, and only a /proc
 *   of that namespace says who holds it.  So an entry is judged only from
 *   the publisher's pid namespace (recorded in the entry, compared with
 *   ours); there, it is stale when kill(pid, 0) says ESRCH (no such
 *   process) or when the pid's start time differs from the published one
 *   (the pid was recycled).  Anything that cannot be known -- no /proc, a
 *   /proc of another namespace, another pid namespace, a start time we may
 *   not read -- is not proof: the entry stays, reported with alive = -1.
 *
 * Only a stale entry is ever removed (with the publisher's override files:
 * it is the process's whole directory).  An entry that cannot be parsed is
 * skipped, not removed: it is not proof of anything either.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "../core/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- what /proc says (prim.c reads it) ------------------------------------- */

int peers_pidns_self(struct pub_ns *out)
{
	return prim_proc_ident("self/ns/pid", &out->dev, &out->ino);
}

/* The /proc we see numbers processes as our pid namespace does: /proc/self
 * names our own pid.  (A /proc of a parent namespace shows other numbers,
 * one of another namespace does not show us at all.) */
static bool proc_is_ours(void)
{
	char link[32], want[32];
	if (prim_proc_readlink("self", link, sizeof(link)) <= 0)
		return false;
	snprintf(want, sizeof(want), "%ld", (long)getpid());
	return strcmp(link, want) == 0;
}

int peers_start_time(pid_t pid, unsigned long long *out)
{
	char rel[32], buf[1024];
	const char *p;

	snprintf(rel, sizeof(rel), "%ld/stat", (long)pid);
	if (prim_proc_read(rel, buf, sizeof(buf)) <= 0)
		return -1;
	/* comm may hold spaces and parentheses: fields restart after the
	 * last ')'; starttime is field 22, the 20th after it. */
	p = strrchr(buf, ')');
	if (!p)
		goto bad;
	for (int field = 2; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			goto bad;
	}
	*out = strtoull(p + 1, NULL, 10);
	return 0;
bad:
	errno = EINVAL;
	return -1;
}

/* ---- parsing the entry ------------------------------------------------------ */

/* Split off the next space-separated field; the rest stays in *s (NULL
 * once the line is used up). */
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

/* A whole decimal number and nothing else. */
static bool parse_u64(const char *text, unsigned long long *out)
{
	char *end;

	if (!text || *text < '0' || *text > '9')
		return false;
	errno = 0;
	*out = strtoull(text, &end, 10);
	return errno == 0 && *end == '\0';
}

static int stat_index(const char *name)
{
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if (strcmp(hp_stat_name(s), name) == 0)
			return s;
	return -1;
}

static int source_index(const char *name)
{
	for (int s = 0; s < HP_SOURCE_COUNT; s++)
		if (strcmp(hp_source_name(s), name) == 0)
			return s;
	return -1;
}

/* Length of the valid UTF-8 sequence at s, 0 if there is none (overlong
 * forms, surrogates, above U+10FFFF, cut short). */
static size_t utf8_seq(const unsigned char *s)
{
	unsigned lo = 0x80, hi = 0xbf;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi) /* the NUL at the end stops this too */
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* The entry is another process's (another user's, where the directory
 * allows), and its text goes to terminals (hpctl), JSON and Python str:
 * every byte that is not part of printable UTF-8 -- control characters
 * (C0, DEL, C1), bytes of no valid sequence, one cut by truncation --
 * becomes '?', as publish.c does for comm when it writes. */
static void printable(char *text)
{
	unsigned char *s = (unsigned char *)text;

	while (*s) {
		size_t n = utf8_seq(s);
		if (n == 0 || (n == 1 && (*s < 0x20 || *s == 0x7f)) || (n == 2 && s[0] == 0xc2 && s[1] < 0xa0))
			*s++ = '?';
		else
			s += n;
	}
}

#define COPY(dst, src) (snprintf((dst), sizeof(dst), "%s", (src)), printable(dst))

static void parse_stat(char *name, char **s, struct hp_proc *p)
{
	unsigned long long v;
	int i = stat_index(name);

	if (i >= 0 && parse_u64(next_field(s), &v)) {
		p->stats.v[i] = v;
		p->stat_mask |= (uint64_t)1 << i;
	}
}

static void parse_knob(char *name, char **s, struct hp_proc *p)
{
	char *value = next_field(s), *source = next_field(s);
	struct hp_proc_knob *k;

	if (!value || p->nknobs >= HP_PROC_KNOBS_MAX)
		return;
	k = &p->knobs[p->nknobs++];
	COPY(k->name, name);
	COPY(k->value, value);
	k->source = source ? source_index(source) : -1;
	k->rejected[0] = '\0';
}

static void parse_rejected(const char *name, const char *why, struct hp_proc *p)
{
	for (int k = 0; k < p->nknobs; k++)
		if (strcmp(p->knobs[k].name, name) == 0)
			COPY(p->knobs[k].rejected, why);
}

static void parse_line(char *line, struct peer_entry *e)
{
	char *s = line, *kind = next_field(&s), *a = next_field(&s);
	unsigned long long v, w;

	if (!kind || !a)
		return;
	if (!strcmp(kind, "pid") && parse_u64(a, &v) && v > 0 && v <= INT_MAX)
		e->p.pid = (long)v;
	else if (!strcmp(kind, "start_time") && parse_u64(a, &v))
		e->p.start_time = v;
	else if (!strcmp(kind, "comm")) {
		snprintf(e->p.comm, sizeof(e->p.comm), "%s%s%s", a, s ? " " : "",
			 s ? s : "");
		printable(e->p.comm);
	} else if (!strcmp(kind, "pidns") && parse_u64(a, &v) &&
		 parse_u64(next_field(&s), &w)) {
		e->ns.dev = v;
		e->ns.ino = w;
		e->has_ns = true;
	} else if (!strcmp(kind, "stat"))
		parse_stat(a, &s, &e->p);
	else if (!strcmp(kind, "knob"))
		parse_knob(a, &s, &e->p);
	else if (!strcmp(kind, "rejected") && s)
		parse_rejected(a, s, &e->p);
	/* anything else: a later version's record, ignored */
}

/* Read the whole stats file below piddir into buf (cap bytes). */
static ssize_t read_entry_file(int piddir, char *buf, size_t cap)
{
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int fd = openat(piddir, "stats", O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	while (got < cap - 1 && (n = read(fd, buf + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

int peers_read(int piddir, struct peer_entry *e)
{
	char *buf = malloc(PUB_MAX + 1), *save = NULL;

	memset(e, 0, sizeof(*e));
	if (!buf)
		return -1;
	if (read_entry_file(piddir, buf, PUB_MAX + 1) < 0)
		goto fail;
	if (strncmp(buf, PUB_MAGIC, strlen(PUB_MAGIC)) != 0) {
		errno = EINVAL;
		goto fail;
	}
	for (char *line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		parse_line(line, e);
	free(buf);
	if (e->p.pid > 0)
		return 0;
	errno = EINVAL;
	return -1;
fail:
	free(buf);
	return -1;
}

/* ---- the staleness rule (see the top of this file) ------------------------------ */

/* Where we judge from: computed once per call. */
struct vantage {
	bool ns_known;
	struct pub_ns ns;
	bool proc_ours;
};

static void vantage_get(struct vantage *v)
{
	v->ns_known = peers_pidns_self(&v->ns) == 0;
	v->proc_ours = v->ns_known && proc_is_ours();
}

enum liveness { ENTRY_GONE, ENTRY_LIVE, ENTRY_UNKNOWN };

static enum liveness judge(const struct peer_entry *e,
			   const struct vantage *v)
{
	unsigned long long start;
	pid_t pid = (pid_t)e->p.pid;

	if (!e->has_ns || !v->ns_known || e->ns.dev != v->ns.dev ||
	    e->ns.ino != v->ns.ino)
		return ENTRY_UNKNOWN;
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return ENTRY_GONE;
	/* someone holds the pid (EPERM: another user's process): the
	 * publisher, unless it started at another time */
	if (!v->proc_ours || e->p.start_time == 0 ||
	    peers_start_time(pid, &start) != 0)
		return ENTRY_UNKNOWN;
	return start == e->p.start_time ? ENTRY_LIVE : ENTRY_GONE;
}

/* ---- the control directory's proc/ -------------------------------------------- */

static int open_proc_dir(void)
{
	const char *dir;
	char why[HP_KNOB_ERROR_MAX];
	int root, procfd;

	hp_init();
	dir = control_dir();
	if (!dir) {
		errno = ENOENT;
		return -1;
	}
	root = securedir_open(AT_FDCWD, dir, why, sizeof(why));
	if (root < 0)
		return -1;
	/* proc/<pid> entries belong to the processes' users: read them
	 * without the owner rule, but never through a symlink */
	procfd = openat(root, "proc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);
	close(root);
	return procfd;
}

/* Read proc/<name> and judge it.  0 with the entry (valid, not stale),
 * 1 if it was stale (and is removed when removable), -1 + errno if there
 * is no valid entry. */
static int visit(int procfd, pid_t pid, const struct vantage *v,
		 struct hp_proc *out, bool *removed)
{
	struct peer_entry e;
	char name[32];
	int fd, rc;

	*removed = false;
	snprintf(name, sizeof(name), "%ld", (long)pid);
	fd = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = peers_read(fd, &e);
	close(fd);
	if (rc != 0)
		return -1;
	if (e.p.pid != (long)pid) {
		errno = EINVAL; /* not what its name says: not ours to judge */
		return -1;
	}
	switch (judge(&e, v)) {
	case ENTRY_GONE:
		*removed = publish_remove_pid_dir(procfd, pid) == 0;
		return 1;
	case ENTRY_LIVE:
		e.p.alive = 1;
		break;
	default:
		e.p.alive = -1;
	}
	memcpy(out, &e.p, sizeof(*out));
	return 0;
}

static int proc_get(long pid, struct hp_proc *out)
{
	struct vantage v;
	bool removed;
	int saved = errno, procfd, rc;

	if (pid <= 0 || pid > INT_MAX || !out) {
		errno = EINVAL;
		return -1;
	}
	procfd = open_proc_dir();
	if (procfd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			errno = ENOENT;
		return -1;
	}
	vantage_get(&v);
	rc = visit(procfd, (pid_t)pid, &v, out, &removed);
	close(procfd);
	if (rc == 1) {
		errno = ESRCH;
		return -1;
	}
	if (rc < 0) {
		if (errno == ENOTDIR || errno == ELOOP)
			errno = ENOENT; /* not a directory of ours */
		return -1;
	}
	errno = saved;
	return 0;
}

/* These read the control directory: no cancellation point (see
 * HP_NOCANCEL_BEGIN), and no descriptor left open by one. */
int hp_proc_get(long pid, struct hp_proc *out)
{
	HP_NOCANCEL_BEGIN;
	int rc = proc_get(pid, out);
	HP_NOCANCEL_END;
	return rc;
}

static bool is_pid_name(const char *s, pid_t *pid)
{
	unsigned long long v;

	if (!parse_u64(s, &v) || v == 0 || v > INT_MAX || s[0] == '0')
		return false;
	*pid = (pid_t)v;
	return true;
}

/* Append one element to a growing array; false when out of memory. */
static bool grow(void **v, size_t n, size_t *cap, size_t elem)
{
	void *nv;

	if (n < *cap)
		return true;
	*cap = *cap ? 2 * *cap : 16;
	nv = realloc(*v, *cap * elem);
	if (!nv)
		return false;
	*v = nv;
	return true;
}

static int by_pid(const void *a, const void *b)
{
	const struct hp_proc *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int scan(int procfd, struct hp_proc_list *out)
{
	size_t cap = 0, pcap = 0;
	struct vantage v;
	struct dirent *d;
	bool removed;
	pid_t pid;
	int fd = dup(procfd);
	DIR *dir = fd < 0 ? NULL : fdopendir(fd);

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	vantage_get(&v);
	while ((d = readdir(dir))) {
		if (!is_pid_name(d->d_name, &pid))
			continue;
		if (!grow((void **)&out->procs, out->count, &cap, sizeof(*out->procs)) ||
		    !grow((void **)&out->pruned, out->npruned, &pcap, sizeof(*out->pruned)))
			goto nomem;
		switch (visit(procfd, pid, &v, &out->procs[out->count], &removed)) {
		case 0:
			out->count++;
			break;
		case 1:
			if (removed)
				out->pruned[out->npruned++] = pid;
			break;
		}
	}
	closedir(dir);
	if (out->count > 1) /* qsort(NULL, 0, ...) is undefined */
		qsort(out->procs, out->count, sizeof(*out->procs), by_pid);
	return 0;
nomem:
	closedir(dir);
	errno = ENOMEM;
	return -1;
}

static int proc_list(struct hp_proc_list *out)
{
	int saved = errno, procfd, rc;

	if (!out) {
		errno = EINVAL;
		return -1;
	}
	memset(out, 0, sizeof(*out));
	procfd = open_proc_dir();
	if (procfd < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			return -1;
		errno = saved; /* no directory yet: nobody publishes */
		return 0;
	}
	rc = scan(procfd, out);
	close(procfd);
	if (rc != 0) {
		hp_proc_list_free(out);
		return -1;
	}
	errno = saved;
	return 0;
}

int hp_proc_list(struct hp_proc_list *out)
{
	HP_NOCANCEL_BEGIN;
	int rc = proc_list(out);
	HP_NOCANCEL_END;
	return rc;
}

void hp_proc_list_free(struct hp_proc_list *list)
{
	if (!list)
		return;
	free(list->procs);
	free(list->pruned);
	memset(list, 0, sizeof(*list));
}

/* ---- the processes started with a variable set ------------------------------- */

struct env_want {
	const char *var;
	size_t len;
	char *value;    /* the caller's, cap bytes */
	size_t cap;
};

/* One string of an environ: 1 (stop) once it is var=value, as getenv()
 * would find it (the first of two wins). */
static int env_match(char *s, void *arg)
{
	struct env_want *w = arg;

	if (strncmp(s, w->var, w->len) != 0 || s[w->len] != '=')
		return 0;
	snprintf(w->value, w->cap, "%s", s + w->len + 1);
	return 1;
}

struct marked {
	const char *var;
	struct hp_proc_mark *v;
	size_t n, cap;
	bool nomem;
};

/* Process pid, if its starting environment sets the variable. */
static void take_marked(long pid, void *arg)
{
	struct marked *m = arg;
	struct hp_proc_mark one = {.pid = pid};
	struct env_want w = {m->var, strlen(m->var), one.value, sizeof(one.value)};
	char rel[32];
	ssize_t n;

	if (m->nomem)
		return;
	snprintf(rel, sizeof(rel), "%ld/environ", pid);
	if (prim_proc_strings(rel, env_match, &w) != 1)
		return; /* not set, not ours to read, or gone */
	snprintf(rel, sizeof(rel), "%ld/comm", pid);
	n = prim_proc_read(rel, one.comm, sizeof(one.comm));
	if (n < 0 && (errno == ENOENT || errno == ESRCH))
		return; /* gone since */
	if (n < 0)
		one.comm[0] = '\0';
	one.comm[strcspn(one.comm, "\n")] = '\0';
	printable(one.value);
	printable(one.comm);
	if (!grow((void **)&m->v, m->n, &m->cap, sizeof(*m->v))) {
		m->nomem = true;
		return;
	}
	m->v[m->n++] = one;
}

static int by_mark_pid(const void *a, const void *b)
{
	const struct hp_proc_mark *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int proc_marked(const char *var, struct hp_proc_mark **out, size_t *count)
{
	struct marked m = {.var = var};
	int saved = errno;

	if (!var || !*var || strchr(var, '=') || !out || !count) {
		errno = EINVAL;
		return -1;
	}
	/* pids mean something only in /proc's own namespace */
	if (!proc_is_ours()) {
		errno = ENOENT;
		return -1;
	}
	if (prim_proc_pids(take_marked, &m) != 0 || m.nomem) {
		if (m.nomem)
			errno = ENOMEM;
		free(m.v);
		return -1;
	}
	if (m.n > 1)
		qsort(m.v, m.n, sizeof(*m.v), by_mark_pid);
	*out = m.v;
	*count = m.n;
	errno = saved;
	return 0;
}

/* It reads /proc: no cancellation point (see HP_NOCANCEL_BEGIN). */
int hp_proc_marked(const char *var, struct hp_proc_mark **out, size_t *count)
{
	HP_NOCANCEL_BEGIN;
	int rc = proc_marked(var, out, count);
	HP_NOCANCEL_END;
	return rc;
}
