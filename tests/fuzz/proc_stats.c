/* Fuzz target: the per-process stats file, <control dir>/proc/<pid>/stats,
 * which another process writes (format: lib/core/internal.h), as the library
 * reads it -- peers_read(), hp_proc_get(), hp_proc_list(), with the
 * staleness rule that may remove the entry -- and as hpctl shows it
 * (`hpctl stats`, `stats --long`, `stats --json`, run in-process).
 *
 * Input: the file's contents.  Promises checked:
 *   - peers_read() reports nothing the file does not say: a pid > 0
 *     from a pid record; comm, knob names, values and rejected reasons are
 *     pieces of the input (byte for byte, or '?' where a byte was unfit to
 *     show), only counters it names, at most as many knobs as knob records;
 *   - every string it reports is valid UTF-8 without control characters:
 *     they go to terminals, JSON and Python str (another user may have
 *     written them);
 *   - hp_proc_get() and hp_proc_list() return the same entry, or find it
 *     stale (ESRCH, listed as pruned) and then, only then, have removed it;
 *   - hpctl's table and --long output carry no control characters but
 *     newlines, its --json output is valid JSON, and it exits 0. */
#include "fuzz.h"
#include "hpctl.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *in;
static size_t in_len;

/* s occurs in the input, '?' in s matching any byte. */
static bool from_input(const char *s)
{
	size_t n = strlen(s);

	if (n > in_len)
		return false;
	for (size_t i = 0; i + n <= in_len; i++) {
		size_t j = 0;
		while (j < n && (s[j] == '?' || s[j] == in[i + j]))
			j++;
		if (j == n)
			return true;
	}
	return false;
}

static size_t count_of(const char *word)
{
	size_t n = 0;

	for (const char *p = in; (p = memmem(p, in_len - (size_t)(p - in), word, strlen(word))); p++)
		n++;
	return n;
}

static void check_string(const char *what, const char *s, size_t cap)
{
	if (!memchr(s, '\0', cap))
		fuzz_fail("%s is not terminated", what);
	if (s[0] && !from_input(s))
		fuzz_fail("%s '%s' is not from the input", what, s);
	if (!fuzz_text_clean(s, strlen(s), NULL, true))
		fuzz_fail("%s '%s' holds a control character or invalid UTF-8", what, s);
}

static void check_entry(const struct peer_entry *e)
{
	const struct hp_proc *p = &e->p;
	char rec[64];

	if (p->pid <= 0 || p->pid > INT_MAX || !count_of("\npid "))
		fuzz_fail("pid %ld without a pid record", p->pid);
	if (p->comm[0] && !count_of("\ncomm "))
		fuzz_fail("comm without a comm record");
	check_string("comm", p->comm, sizeof(p->comm));
	for (int s = 0; s < HP_STAT_CAPACITY; s++) {
		bool named = s < HP_STAT_COUNT && (snprintf(rec, sizeof(rec), "\nstat %s ", hp_stat_name(s)),
						   count_of(rec));
		if (p->stat_mask >> s & 1 ? !named : p->stats.v[s] != 0)
			fuzz_fail("counter %d reported (%llu) without its record", s,
				  (unsigned long long)p->stats.v[s]);
	}
	if (p->nknobs < 0 || p->nknobs > HP_PROC_KNOBS_MAX || (size_t)p->nknobs > count_of("\nknob "))
		fuzz_fail("%d knobs reported", p->nknobs);
	for (int k = 0; k < p->nknobs; k++) {
		const struct hp_proc_knob *kn = &p->knobs[k];
		check_string("knob name", kn->name, sizeof(kn->name));
		check_string("knob value", kn->value, sizeof(kn->value));
		check_string("rejected", kn->rejected, sizeof(kn->rejected));
		if (kn->source < -1 || kn->source >= HP_SOURCE_COUNT)
			fuzz_fail("knob %s: source %d", kn->name, kn->source);
	}
}

static bool same_proc(const struct hp_proc *a, const struct hp_proc *b)
{
	if (a->pid != b->pid || a->start_time != b->start_time || strcmp(a->comm, b->comm) ||
	    a->stat_mask != b->stat_mask || memcmp(&a->stats, &b->stats, sizeof(a->stats)) ||
	    a->nknobs != b->nknobs)
		return false;
	for (int k = 0; k < a->nknobs; k++)
		if (strcmp(a->knobs[k].name, b->knobs[k].name) || strcmp(a->knobs[k].value, b->knobs[k].value) ||
		    strcmp(a->knobs[k].rejected, b->knobs[k].rejected) || a->knobs[k].source != b->knobs[k].source)
			return false;
	return true;
}

/* ---- the files ----------------------------------------------------------------- */

static int procfd = -1, scratchfd = -1;

static void open_dirs(void)
{
	char path[PATH_MAX + 16];

	if (procfd >= 0)
		return;
	snprintf(path, sizeof(path), "%s/proc", fuzz_control_dir());
	mkdir(path, 0755);
	procfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/scratch", fuzz_dir());
	mkdir(path, 0700);
	scratchfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (procfd < 0 || scratchfd < 0)
		fuzz_fail("cannot make the directories: %s", strerror(errno));
}

static void plant(long pid)
{
	char name[32];
	int fd;

	snprintf(name, sizeof(name), "%ld", pid);
	if (mkdirat(procfd, name, 0755) != 0 && errno != EEXIST)
		fuzz_fail("mkdir proc/%s: %s", name, strerror(errno));
	fd = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fuzz_write_file(fd, "stats", in, in_len, 0644) != 0)
		fuzz_fail("write proc/%s/stats: %s", name, strerror(errno));
	close(fd);
}

static bool planted(long pid)
{
	char name[32];
	struct stat st;

	snprintf(name, sizeof(name), "%ld/stats", pid);
	return fstatat(procfd, name, &st, 0) == 0;
}

/* ---- the readers ----------------------------------------------------------------- */

static void check_get(const struct peer_entry *e)
{
	static struct hp_proc p;
	long pid = e->p.pid;

	plant(pid);
	if (hp_proc_get(pid, &p) == 0) {
		if (!same_proc(&p, &e->p) || (p.alive != 1 && p.alive != -1))
			fuzz_fail("hp_proc_get(%ld) differs from peers_read", pid);
		if (!planted(pid))
			fuzz_fail("hp_proc_get(%ld) removed a live entry", pid);
	} else if (errno != ESRCH || planted(pid)) {
		fuzz_fail("hp_proc_get(%ld): errno %d, entry %s", pid, errno, planted(pid) ? "kept" : "gone");
	}
}

/* A valid entry is listed (or pruned, then gone); an invalid file, planted
 * as proc/1, is skipped and kept: it proves nothing. */
static void check_list(const struct peer_entry *e)
{
	struct hp_proc_list l;
	long pid = e ? e->p.pid : 1;

	plant(pid);
	if (hp_proc_list(&l) != 0)
		fuzz_fail("hp_proc_list: %s", strerror(errno));
	if (!e && (l.count || l.npruned || !planted(pid)))
		fuzz_fail("hp_proc_list took an invalid file for an entry (%zu listed, %zu pruned)", l.count,
			  l.npruned);
	if (e && l.count + l.npruned != 1)
		fuzz_fail("hp_proc_list: %zu entries, %zu pruned, from one file", l.count, l.npruned);
	if (l.count && !same_proc(&l.procs[0], &e->p))
		fuzz_fail("hp_proc_list's entry differs from peers_read's");
	if (l.npruned && (l.pruned[0] != pid || planted(pid)))
		fuzz_fail("hp_proc_list pruned %ld but the entry of %ld is %s", l.pruned[0], pid,
			  planted(pid) ? "still there" : "gone");
	hp_proc_list_free(&l);
}

/* ---- hpctl ------------------------------------------------------------------------ */

static int stats_rc;

static void run_stats(void *arg)
{
	stats_rc = cmd_stats(arg);
}

static void check_hpctl(const struct peer_entry *e, bool json, bool long_form)
{
	struct hpctl c = {.json = json, .long_form = long_form, .top_delay = 1.0};
	char *out, *err;
	size_t olen, elen;
	const char *why = NULL;

	if (e)
		plant(e->p.pid);
	fuzz_capture_begin();
	int status = fuzz_call(run_stats, &c);
	fuzz_capture_end(&out, &olen, &err, &elen);
	if (status != -1 || stats_rc != EXIT_OK)
		fuzz_fail("hpctl stats%s%s: exit %d, status %d: %s", json ? " --json" : "",
			  long_form ? " --long" : "", status, stats_rc, err);
	if (json && !fuzz_json_valid(out, olen, &why))
		fuzz_fail("hpctl stats --json: %s: %.*s", why, (int)olen, out);
	if (!json && !fuzz_text_clean(out, olen, "\n", false))
		fuzz_fail("hpctl stats%s shows a control character: %.*s", long_form ? " --long" : "", (int)olen,
			  out);
	if (!fuzz_text_clean(err, elen, "\n", false))
		fuzz_fail("hpctl stats: a control character on stderr: %.*s", (int)elen, err);
	free(out);
	free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct peer_entry e;

	fuzz_init();
	fuzz_input(data, size);
	open_dirs();
	in = (const char *)data;
	in_len = size;

	if (fuzz_write_file(scratchfd, "stats", data, size, 0644) != 0)
		fuzz_fail("write: %s", strerror(errno));
	int rc = peers_read(scratchfd, &e);
	if (rc == 0) {
		check_entry(&e);
		check_get(&e);
	}
	check_list(rc == 0 ? &e : NULL);
	for (int mode = 0; mode < 3; mode++)
		check_hpctl(rc == 0 ? &e : NULL, mode == 2, mode == 1);
	fuzz_empty_dir(procfd);
	return 0;
}
