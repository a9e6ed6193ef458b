/* hpctl stats [PID...] and hpctl top: what the processes using hpalloc
 * publish in <control dir>/proc/<pid>/stats.  The library reads the entries
 * and decides which are stale (hp_proc_list / hp_proc_get, lib/control/peers.c):
 * this file only presents them.
 *
 *   stats          one line per process, largest huge-page user first, and
 *                  a total line
 *   stats --long   every counter and knob of each process
 *   stats --json   the same as --long, as JSON
 *   top            the table of `stats`, redrawn every second
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- gathering ------------------------------------------------------------ */

/* Explicit PIDs: each must be a live hpalloc process; a bad one is
 * reported (exit 1) without hiding the others. */
static int collect_pids(struct hpctl *c, struct hp_proc_list *l)
{
	int rc = EXIT_OK;

	for (int i = 0; i < c->argc; i++)
		parse_pid(c->argv[i]); /* all usage errors first */
	l->procs = calloc((size_t)c->argc + 1, sizeof(*l->procs));
	if (!l->procs) {
		warnx("out of memory");
		exit(EXIT_RUNTIME);
	}
	for (int i = 0; i < c->argc; i++) {
		if (ctl_proc_lookup(parse_pid(c->argv[i]), &l->procs[l->count]) == 0)
			l->count++;
		else
			rc = EXIT_RUNTIME;
	}
	return rc;
}

/* Every entry; the stale ones the library pruned are said on stderr. */
static int collect_all(struct hp_proc_list *l)
{
	int root = ctl_dir_open(false); /* exits saying why if refused */

	if (root < 0)
		return EXIT_OK; /* no directory: nobody publishes */
	close(root);
	if (hp_proc_list(l) != 0) {
		warnx("cannot read %s/proc: %s", ctl_dir_path(), strerror(errno));
		return EXIT_RUNTIME;
	}
	for (size_t i = 0; i < l->npruned; i++)
		warnx("pruned the entry of dead process %ld", l->pruned[i]);
	return EXIT_OK;
}

/* ---- the table ------------------------------------------------------------------ */

/* 1536 -> "1.5K", 1 GiB -> "1.0G", below 1 KiB plain bytes: one decimal,
 * binary units, never more than 6 characters. */
static void human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu", (unsigned long long)bytes);
		return;
	}
	while (u < 5 && (v >= 1024 || u < 0)) {
		v /= 1024;
		u++;
	}
	if (v >= 1023.95 && u < 5) { /* would print as 1024.0 */
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f%c", v, units[u]);
}

/* What one line shows: the published counters a user looks at first. */
struct row {
	uint64_t hugetlb, thp, cached, hits, misses, fallbacks, failures, ahead, saved_us;
	uint64_t origin[HP_ORIGIN_COUNT], shared;
};

static const int origin_stat[HP_ORIGIN_COUNT] = {
	[HP_ORIGIN_API] = HP_STAT_API_HUGE_BYTES,
	[HP_ORIGIN_NUMPY] = HP_STAT_NUMPY_HUGE_BYTES,
	[HP_ORIGIN_PYTHON] = HP_STAT_PYTHON_HUGE_BYTES,
	[HP_ORIGIN_TORCH] = HP_STAT_TORCH_HUGE_BYTES,
	[HP_ORIGIN_NUMBA] = HP_STAT_NUMBA_HUGE_BYTES,
	[HP_ORIGIN_PRELOAD] = HP_STAT_PRELOAD_HUGE_BYTES,
};

static void row_of(const struct hp_proc *p, struct row *r)
{
	const uint64_t *v = p->stats.v;

	r->hugetlb = v[HP_STAT_HUGETLB_LIVE_BYTES];
	r->thp = v[HP_STAT_THP_LIVE_BYTES];
	r->cached = v[HP_STAT_CACHED_BYTES];
	r->hits = v[HP_STAT_CACHE_HITS];
	r->misses = v[HP_STAT_CACHE_MISSES];
	r->fallbacks = v[HP_STAT_FALLBACKS];
	r->failures = v[HP_STAT_FAILURES];
	r->ahead = v[HP_STAT_POPULATE_AHEAD_BYTES];
	r->saved_us = v[HP_STAT_POPULATE_SAVED_US];
	for (int o = 0; o < HP_ORIGIN_COUNT; o++)
		r->origin[o] = v[origin_stat[o]];
	r->shared = v[HP_STAT_SHARED_LIVE_BYTES];
}

static void row_add(struct row *sum, const struct row *r)
{
	sum->hugetlb += r->hugetlb;
	sum->thp += r->thp;
	sum->cached += r->cached;
	sum->hits += r->hits;
	sum->misses += r->misses;
	sum->fallbacks += r->fallbacks;
	sum->failures += r->failures;
	sum->ahead += r->ahead;
	sum->saved_us += r->saved_us;
	for (int o = 0; o < HP_ORIGIN_COUNT; o++)
		sum->origin[o] += r->origin[o];
	sum->shared += r->shared;
}

/* "numpy=1.0G torch=64.0M shared=32.0M": the non-zero ones only. */
static void origins_text(const struct row *r, char *buf, size_t len)
{
	char size[16];
	size_t pos = 0;

	snprintf(buf, len, "-");
	for (int o = 0; o <= HP_ORIGIN_COUNT && pos < len; o++) {
		uint64_t bytes = o < HP_ORIGIN_COUNT ? r->origin[o] : r->shared;
		if (!bytes)
			continue;
		human_size(bytes, size, sizeof(size));
		int n = snprintf(buf + pos, len - pos, "%s%s=%s", pos ? " " : "",
				 o < HP_ORIGIN_COUNT ? hp_origin_name(o) : "shared",
				 size);
		if (n < 0)
			break;
		pos += (size_t)n;
	}
}

/* Microseconds as seconds, "0" for none: "0.25s", "12.5s". */
static void human_seconds(uint64_t us, char *buf, size_t len)
{
	if (!us)
		snprintf(buf, len, "0");
	else if (us < 10000000)
		snprintf(buf, len, "%.2fs", (double)us / 1e6);
	else
		snprintf(buf, len, "%.1fs", (double)us / 1e6);
}

#define TABLE_HEAD "%7s %-15s %7s %7s %7s %6s %9s %8s %7s %7s  %s\n"

static void print_row(const char *pid, const char *comm, const struct row *r)
{
	char ht[16], thp[16], cached[16], hit[16], ahead[16], saved[24], origins[160];

	human_size(r->ahead, ahead, sizeof(ahead));
	human_seconds(r->saved_us, saved, sizeof(saved));
	human_size(r->hugetlb, ht, sizeof(ht));
	human_size(r->thp, thp, sizeof(thp));
	human_size(r->cached, cached, sizeof(cached));
	if (r->hits + r->misses)
		snprintf(hit, sizeof(hit), "%.1f",
			 100.0 * (double)r->hits / (double)(r->hits + r->misses));
	else
		snprintf(hit, sizeof(hit), "-");
	origins_text(r, origins, sizeof(origins));
	printf("%7s %-15.15s %7s %7s %7s %6s %9llu %8llu %7s %7s  %s\n", pid, comm, ht,
	       thp, cached, hit, (unsigned long long)r->fallbacks,
	       (unsigned long long)r->failures, ahead, saved, origins);
}

static uint64_t huge_bytes(const struct hp_proc *p)
{
	return p->stats.v[HP_STAT_HUGETLB_LIVE_BYTES] +
	       p->stats.v[HP_STAT_THP_LIVE_BYTES];
}

/* Largest huge-page user first; pid breaks ties, so the order is stable. */
static int by_huge_bytes(const void *a, const void *b)
{
	const struct hp_proc *x = a, *y = b;
	uint64_t hx = huge_bytes(x), hy = huge_bytes(y);

	if (hx != hy)
		return hx < hy ? 1 : -1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The kernel split huge pages while the process held THP blocks (the
 * library counts /proc/vmstat's counters, machine-wide): said on stderr,
 * so the table stays a table. */
static void split_note(const struct hp_proc *p)
{
	uint64_t all = p->stats.v[HP_STAT_THP_SPLITS_SEEN];
	uint64_t underused = p->stats.v[HP_STAT_THP_UNDERUSED_SPLITS_SEEN];

	if (!all && !underused)
		return;
	warnx("note: process %ld: the kernel split %llu huge pages (%llu of them under-used: "
	      "pages of zeros) while it held THP blocks; its blocks may be on 4 KiB pages "
	      "now (machine-wide counters: see AnonHugePages in /proc/%ld/smaps)",
	      p->pid, (unsigned long long)all, (unsigned long long)underused, p->pid);
}

static void print_table(struct hp_proc_list *l)
{
	struct row r, sum = { 0 };
	char pid[24], what[32];

	if (l->count > 1) /* procs is NULL when empty */
		qsort(l->procs, l->count, sizeof(*l->procs), by_huge_bytes);
	printf(TABLE_HEAD, "PID", "COMMAND", "HUGETLB", "THP", "CACHED", "HIT%",
	       "FALLBACKS", "FAILURES", "AHEAD", "SAVED", "ORIGINS");
	for (size_t i = 0; i < l->count; i++) {
		row_of(&l->procs[i], &r);
		row_add(&sum, &r);
		snprintf(pid, sizeof(pid), "%ld", l->procs[i].pid);
		print_row(pid, l->procs[i].comm, &r);
	}
	snprintf(what, sizeof(what), "%zu process%s", l->count,
		 l->count == 1 ? "" : "es");
	print_row("total", what, &sum);
	for (size_t i = 0; i < l->count; i++)
		split_note(&l->procs[i]);
}

/* ---- --long and --json: everything that was published --------------------------- */

static const char *source_text(int source)
{
	const char *s = hp_source_name(source);

	return s ? s : "?";
}

static void print_long(const struct hp_proc *p)
{
	printf("pid %ld (%s), start time %llu\n", p->pid, p->comm, p->start_time);
	if (p->alive < 0)
		printf("  (cannot tell from here whether it still runs: another pid "
		       "namespace, or no /proc)\n");
	printf("  stats:\n");
	int width = 0; /* the values in one column, whatever names come */
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if ((int)strlen(hp_stat_name(s)) > width)
			width = (int)strlen(hp_stat_name(s));
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if (p->stat_mask & ((uint64_t)1 << s))
			printf("    %-*s %llu\n", width, hp_stat_name(s),
			       (unsigned long long)p->stats.v[s]);
	printf("  knobs:\n");
	for (int i = 0; i < p->nknobs; i++) {
		printf("    %s=%s (%s)\n", p->knobs[i].name, p->knobs[i].value,
		       source_text(p->knobs[i].source));
		if (p->knobs[i].rejected[0])
			printf("      rejected: %s\n", p->knobs[i].rejected);
	}
}

static void print_json(struct json *j, const struct hp_proc *p)
{
	json_obj(j, NULL);
	json_num(j, "pid", p->pid);
	json_str(j, "comm", p->comm);
	json_u64(j, "start_time", p->start_time);
	json_obj(j, "stats");
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if (p->stat_mask & ((uint64_t)1 << s))
			json_u64(j, hp_stat_name(s), p->stats.v[s]);
	json_end_obj(j);
	json_obj(j, "knobs");
	for (int i = 0; i < p->nknobs; i++) {
		json_obj(j, p->knobs[i].name);
		json_str(j, "value", p->knobs[i].value);
		json_str(j, "source", source_text(p->knobs[i].source));
		json_str(j, "rejected", p->knobs[i].rejected);
		json_end_obj(j);
	}
	json_end_obj(j);
	json_end_obj(j);
}

static void print_all_json(const struct hp_proc_list *l)
{
	struct json j;

	json_begin(&j, stdout);
	json_arr(&j, NULL);
	for (size_t i = 0; i < l->count; i++)
		print_json(&j, &l->procs[i]);
	json_end_arr(&j);
	json_finish(&j);
}

/* Nobody to show: say why, so that an empty answer is not taken for
 * "nothing uses hpalloc here" when the processes publish elsewhere. */
static void say_none(void)
{
	const char *dir = ctl_dir_path();
	char buf[PATH_MAX], who[32];
	int kind = CONTROL_DIR_GIVEN;
	struct stat st;

	control_dir_choose(buf, sizeof(buf), &kind);
	if (geteuid() == 0)
		snprintf(who, sizeof(who), "root");
	else
		snprintf(who, sizeof(who), "uid %u", (unsigned)geteuid());
	printf("no live process publishes hpalloc stats in %s/proc: ", dir);
	if (stat(dir, &st) != 0 && errno == ENOENT && kind == CONTROL_DIR_GIVEN)
		printf("%s does not exist (processes do not make a directory "
		       "HPALLOC_CONTROL_DIR names; hpctl set does)\n", dir);
	else if (stat(dir, &st) != 0 && errno == ENOENT)
		printf("%s does not exist yet (the first process using hpalloc "
		       "as %s makes it)\n", dir, who);
	else
		printf("no process using hpalloc runs as %s with this control "
		       "directory (each user's processes publish in that user's "
		       "own: see hpalloc(7); setuid and setgid programs publish "
		       "nowhere)\n", who);
}

int stats_collect(struct hpctl *c, struct hp_proc_list *l)
{
	return c->argc ? collect_pids(c, l) : collect_all(l);
}

int cmd_stats(struct hpctl *c)
{
	struct hp_proc_list l = { 0 };
	int rc = stats_collect(c, &l);

	if (c->json)
		print_all_json(&l);
	else if (l.count == 0 && c->argc == 0)
		say_none();
	else if (c->long_form)
		for (size_t i = 0; i < l.count; i++)
			print_long(&l.procs[i]);
	else if (l.count)
		print_table(&l);
	hp_proc_list_free(&l);
	return rc;
}

/* ---- top ---------------------------------------------------------------------- */

static volatile sig_atomic_t top_stop;

static void on_stop(int sig)
{
	(void)sig;
	top_stop = 1;
}

static void sleep_interruptible(double seconds)
{
	struct timespec t = { (time_t)seconds,
			      (long)((seconds - (double)(time_t)seconds) * 1e9) };

	while (!top_stop && nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

static void top_frame(bool tty)
{
	struct hp_proc_list l = { 0 };
	char when[32];
	time_t now = time(NULL);

	strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
	if (tty)
		fputs("\033[H\033[2J", stdout); /* home, clear: any VT100 */
	printf("hpctl top - %s - %s/proc\n\n", when, ctl_dir_path());
	collect_all(&l);
	print_table(&l);
	hp_proc_list_free(&l);
	if (!tty)
		putchar('\n');
	fflush(stdout);
}

int cmd_top(struct hpctl *c)
{
	struct sigaction sa = { .sa_handler = on_stop };
	bool tty = isatty(STDOUT_FILENO);

	if (c->argc)
		die_usage("top takes no arguments (options: -d SECONDS, -n COUNT)");
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (long i = 0; !top_stop && (c->top_count == 0 || i < c->top_count); i++) {
		if (i)
			sleep_interruptible(c->top_delay);
		if (!top_stop)
			top_frame(tty);
	}
	return EXIT_OK;
}
