/* hpctl stats [PID...]: the stats each process using hpalloc publishes in
 * <control dir>/proc/<pid>/stats (lib/publish.c).  Entries of processes
 * that died (kill(pid, 0) == ESRCH, or the pid now belongs to a process
 * with another start time) are pruned on the way. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct found {
	struct published **v;
	int n, cap;
};

static void add(struct found *f, const struct published *p)
{
	if (f->n == f->cap) {
		int cap = f->cap ? 2 * f->cap : 16;
		struct published **v = realloc(f->v, (size_t)cap * sizeof(*v));
		if (!v)
			return;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n] = malloc(sizeof(*p));
	if (f->v[f->n]) {
		memcpy(f->v[f->n], p, sizeof(*p));
		f->n++;
	}
}

static void release(struct found *f)
{
	for (int i = 0; i < f->n; i++)
		free(f->v[i]);
	free(f->v);
}

static int by_pid(const void *a, const void *b)
{
	const struct published *x = *(struct published *const *)a;
	const struct published *y = *(struct published *const *)b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static bool is_pid_name(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s) && strlen(s) < 11;
}

static void prune(int procfd, pid_t pid)
{
	if (publish_remove_pid_dir(procfd, pid) == 0)
		warnx("pruned the entry of dead process %ld", (long)pid);
}

/* One proc/<pid> entry: collect it if live, prune it if dead.  An entry
 * without a readable stats file of a live pid is being set up: skip it. */
static void visit(int procfd, const char *name, struct found *f)
{
	static struct published pub;
	pid_t pid = (pid_t)strtol(name, NULL, 10);
	int fd = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);

	if (fd < 0)
		return;
	if (published_read(fd, &pub) != 0) {
		close(fd);
		if (kill(pid, 0) != 0 && errno == ESRCH)
			prune(procfd, pid);
		return;
	}
	close(fd);
	if (pub.pid != pid || !published_alive(&pub))
		prune(procfd, pid);
	else
		add(f, &pub);
}

static void scan_all(struct found *f)
{
	int root = ctl_dir_open(false), procfd;
	DIR *d;
	struct dirent *e;

	if (root < 0)
		return;
	procfd = openat(root, "proc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);
	close(root);
	if (procfd < 0)
		return;
	d = fdopendir(procfd);
	if (!d) {
		close(procfd);
		return;
	}
	while ((e = readdir(d)))
		if (is_pid_name(e->d_name))
			visit(dirfd(d), e->d_name, f);
	closedir(d);
}

static void print_text(const struct published *p)
{
	printf("pid %ld (%s), start time %llu\n", p->pid, p->comm,
	       p->start_time);
	printf("  stats:\n");
	for (int i = 0; i < p->nstats; i++)
		printf("    %-24s %llu\n", p->stats[i].name, p->stats[i].value);
	printf("  knobs:\n");
	for (int i = 0; i < p->nknobs; i++) {
		printf("    %s=%s (%s)\n", p->knobs[i].name, p->knobs[i].value,
		       p->knobs[i].source);
		if (p->knobs[i].rejected[0])
			printf("      rejected: %s\n", p->knobs[i].rejected);
	}
}

static void print_json(struct json *j, const struct published *p)
{
	json_obj(j, NULL);
	json_num(j, "pid", p->pid);
	json_str(j, "comm", p->comm);
	json_u64(j, "start_time", p->start_time);
	json_obj(j, "stats");
	for (int i = 0; i < p->nstats; i++)
		json_u64(j, p->stats[i].name, p->stats[i].value);
	json_end_obj(j);
	json_obj(j, "knobs");
	for (int i = 0; i < p->nknobs; i++) {
		json_obj(j, p->knobs[i].name);
		json_str(j, "value", p->knobs[i].value);
		json_str(j, "source", p->knobs[i].source);
		json_str(j, "rejected", p->knobs[i].rejected);
		json_end_obj(j);
	}
	json_end_obj(j);
	json_end_obj(j);
}

/* Explicit PIDs: each must be a live hpalloc process; a bad one is
 * reported (exit 1) without hiding the others. */
static int collect_pids(struct hpctl *c, struct found *f)
{
	static struct published pub;
	int rc = EXIT_OK;

	for (int i = 0; i < c->argc; i++)
		parse_pid(c->argv[i]); /* all usage errors first */
	for (int i = 0; i < c->argc; i++) {
		if (ctl_proc_lookup(parse_pid(c->argv[i]), &pub) == 0)
			add(f, &pub);
		else
			rc = EXIT_RUNTIME;
	}
	return rc;
}

int cmd_stats(struct hpctl *c)
{
	struct found f = { 0 };
	struct json j;
	int rc = EXIT_OK;

	if (c->argc)
		rc = collect_pids(c, &f);
	else
		scan_all(&f);
	if (f.n > 1)
		qsort(f.v, (size_t)f.n, sizeof(*f.v), by_pid);
	json_begin(&j, stdout);
	if (c->json)
		json_arr(&j, NULL);
	for (int i = 0; i < f.n; i++) {
		if (c->json)
			print_json(&j, f.v[i]);
		else
			print_text(f.v[i]);
	}
	if (c->json) {
		json_end_arr(&j);
		json_finish(&j);
	} else if (f.n == 0 && c->argc == 0) {
		printf("no live process publishes hpalloc stats in %s/proc\n",
		       ctl_dir_path());
	}
	release(&f);
	return rc;
}
