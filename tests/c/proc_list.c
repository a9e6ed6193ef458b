/* hp_proc_get / hp_proc_list: reading the entries processes publish, and the
 * staleness rule -- only proof that a process is gone removes its entry.
 *
 * Entries are real (this process, a forked child) or written by hand into
 * the harness's private control directory to stand for the cases a test
 * cannot stage otherwise: a recycled pid (a live process with another start
 * time), a process of another pid namespace, a corrupt file.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char proc_dir[512];

static void setup_paths(void)
{
	const char *ctl = getenv("HPALLOC_CONTROL_DIR");

	assert_non_null(ctl);
	snprintf(proc_dir, sizeof(proc_dir), "%s/proc", ctl);
	mkdir(proc_dir, 0755);
}

static bool exists(const char *fmt, long pid)
{
	char path[600], rel[64];
	struct stat st;

	snprintf(rel, sizeof(rel), fmt, pid);
	snprintf(path, sizeof(path), "%s/%s", proc_dir, rel);
	return lstat(path, &st) == 0;
}

/* Our pid namespace as the entry format writes it. */
static void pidns(unsigned long long *dev, unsigned long long *ino)
{
	struct stat st;

	assert_int_equal(stat("/proc/self/ns/pid", &st), 0);
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
}

static unsigned long long start_time_of(pid_t pid)
{
	char path[64], buf[1024], *p;
	FILE *f;
	unsigned long long v = 0;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	assert_non_null(p);
	v = strtoull(p + 1, NULL, 10);
	return v;
}

/* Write proc/<pid>/stats with body, plus an override file. */
static void fake_entry(long pid, const char *body)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%ld", proc_dir, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%ld/override", proc_dir, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%ld/override/threshold", proc_dir, pid);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("64M\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/%ld/stats", proc_dir, pid);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(body, f);
	fclose(f);
}

/* A well-formed entry for pid with start time st, from namespace dev/ino
 * (ino 0: no pidns record). */
static void fake_process(long pid, unsigned long long st,
			 unsigned long long dev, unsigned long long ino)
{
	char body[512];
	int n = snprintf(body, sizeof(body),
			 "hpalloc-stats 1\npid %ld\ncomm fake proc\nstart_time %llu\n",
			 pid, st);

	if (ino)
		n += snprintf(body + n, sizeof(body) - (size_t)n,
			      "pidns %llu %llu\n", dev, ino);
	snprintf(body + n, sizeof(body) - (size_t)n,
		 "stat thp_live_bytes 4194304\nstat bogus_future_counter 7\n"
		 "knob threshold 64M process\nrejected threshold 4Q: no\n"
		 "future_record x y z\n");
	fake_entry(pid, body);
}

/* A pid no process holds: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	return pid;
}

/* A live child that sleeps until killed. */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		pause();
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static const struct hp_proc *find(const struct hp_proc_list *l, long pid)
{
	for (size_t i = 0; i < l->count; i++)
		if (l->procs[i].pid == pid)
			return &l->procs[i];
	return NULL;
}

static bool was_pruned(const struct hp_proc_list *l, long pid)
{
	for (size_t i = 0; i < l->npruned; i++)
		if (l->pruned[i] == pid)
			return true;
	return false;
}

/* ---- cases ------------------------------------------------------------------ */

/* This process publishes itself; what it published comes back, alive. */
static void test_own_entry(void **state)
{
	static struct hp_proc p;
	void *block;
	int tries;

	(void)state;
	setup_paths();
	block = hp_malloc(8 * MiB);
	assert_non_null(block);
	harness_touch(block, 8 * MiB);
	/* the janitor publishes at least every 250 ms: 1 s is four chances */
	for (tries = 0; tries < 50; tries++) {
		errno = 4242;
		if (hp_proc_get(getpid(), &p) == 0 &&
		    p.stats.v[HP_STAT_THP_LIVE_BYTES] +
		    p.stats.v[HP_STAT_HUGETLB_LIVE_BYTES] >= 8 * MiB)
			break;
		harness_sleep_ms(20);
	}
	assert_true(tries < 50);
	assert_int_equal(errno, 4242); /* success leaves errno alone */
	assert_int_equal(p.pid, getpid());
	assert_int_equal(p.alive, 1);
	assert_int_equal(p.start_time, start_time_of(getpid()));
	assert_true(p.stat_mask & ((uint64_t)1 << HP_STAT_CONFIG_GENERATION));
	assert_int_equal(p.nknobs, hp_knob_count());
	hp_free(block);
}

static void test_errors(void **state)
{
	static struct hp_proc p;

	(void)state;
	setup_paths();
	errno = 0;
	assert_int_equal(hp_proc_get(0, &p), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_proc_get(-5, &p), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_proc_get(1L << 40, &p), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_proc_get(getpid(), NULL), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(hp_proc_list(NULL), -1);
	assert_int_equal(errno, EINVAL);
	/* no entry at all */
	assert_int_equal(hp_proc_get(dead_pid(), &p), -1);
	assert_int_equal(errno, ENOENT);
	hp_proc_list_free(NULL);
}

/* A child killed before it could clean up: its entry (with an override
 * file) is pruned by the next reader, which says so. */
static void test_killed_child_pruned(void **state)
{
	static struct hp_proc p;
	struct hp_proc_list l;
	char override[600];
	int pipefd[2];
	pid_t pid;
	char c;

	(void)state;
	setup_paths();
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		harness_janitor_start(); /* a fresh library state: publishes */
		for (int i = 0; i < 200 && !exists("%ld/stats", getpid()); i++)
			usleep(20000);
		c = exists("%ld/stats", getpid()) ? 'y' : 'n';
		if (write(pipefd[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	close(pipefd[0]);
	assert_int_equal(c, 'y');
	snprintf(override, sizeof(override), "%s/%ld/override", proc_dir, (long)pid);
	assert_int_equal(mkdir(override, 0755), 0);
	assert_int_equal(hp_proc_get(pid, &p), 0);
	assert_int_equal(p.alive, 1);
	reap(pid); /* SIGKILL: no exit handler */
	assert_true(exists("%ld/stats", pid));
	errno = 4242;
	assert_int_equal(hp_proc_list(&l), 0);
	assert_int_equal(errno, 4242);
	assert_true(was_pruned(&l, pid));
	assert_null(find(&l, pid));
	assert_non_null(find(&l, getpid()));
	hp_proc_list_free(&l);
	assert_false(exists("%ld", pid));
}

/* hp_proc_get of a dead process's entry: ESRCH, and the entry is gone. */
static void test_get_dead_is_esrch(void **state)
{
	static struct hp_proc p;
	unsigned long long dev, ino;
	pid_t pid = dead_pid();

	(void)state;
	setup_paths();
	pidns(&dev, &ino);
	fake_process(pid, 12345, dev, ino);
	assert_int_equal(hp_proc_get(pid, &p), -1);
	assert_int_equal(errno, ESRCH);
	assert_false(exists("%ld", pid));
}

/* A live pid with another start time was recycled: stale.  The same pid
 * with its real start time is live. */
static void test_recycled_pid(void **state)
{
	static struct hp_proc p;
	unsigned long long dev, ino, st;
	pid_t pid = sleeper();

	(void)state;
	setup_paths();
	pidns(&dev, &ino);
	st = start_time_of(pid);
	fake_process(pid, st + 1, dev, ino);
	assert_int_equal(hp_proc_get(pid, &p), -1);
	assert_int_equal(errno, ESRCH);
	assert_false(exists("%ld", pid));
	fake_process(pid, st, dev, ino);
	assert_int_equal(hp_proc_get(pid, &p), 0);
	assert_int_equal(p.alive, 1);
	assert_string_equal(p.comm, "fake proc");
	assert_int_equal(p.stats.v[HP_STAT_THP_LIVE_BYTES], 4 * MiB);
	assert_int_equal(p.stat_mask, (uint64_t)1 << HP_STAT_THP_LIVE_BYTES);
	assert_int_equal(p.nknobs, 1);
	assert_string_equal(p.knobs[0].name, "threshold");
	assert_string_equal(p.knobs[0].value, "64M");
	assert_int_equal(p.knobs[0].source, HP_SOURCE_PROCESS);
	assert_string_equal(p.knobs[0].rejected, "4Q: no");
	reap(pid);
}

/* Published from another pid namespace, or with no namespace recorded:
 * the pid means nothing here, so even a pid nobody holds proves nothing.
 * Kept, listed with alive = -1, override files untouched. */
static void test_no_proof_no_prune(void **state)
{
	struct hp_proc_list l;
	unsigned long long dev, ino;
	pid_t other = dead_pid(), unknown = dead_pid();
	const struct hp_proc *p;

	(void)state;
	setup_paths();
	pidns(&dev, &ino);
	fake_process(other, 12345, dev, ino + 1);
	fake_process(unknown, 12345, 0, 0);
	assert_int_equal(hp_proc_list(&l), 0);
	assert_false(was_pruned(&l, other));
	assert_false(was_pruned(&l, unknown));
	p = find(&l, other);
	assert_non_null(p);
	assert_int_equal(p->alive, -1);
	p = find(&l, unknown);
	assert_non_null(p);
	assert_int_equal(p->alive, -1);
	hp_proc_list_free(&l);
	assert_true(exists("%ld/override/threshold", other));
	assert_true(exists("%ld/override/threshold", unknown));
}

/* Entries that are not hpalloc's (or not what their name says) are skipped,
 * never removed: they prove nothing either. */
static void test_corrupt_entries_kept(void **state)
{
	static const char *const bodies[] = {
		"",
		"garbage\n",
		"hpalloc-stats 2\npid %ld\n",
		"hpalloc-stats 1\npid 1%ld\n",      /* another pid than its name */
		"hpalloc-stats 1\npid x%ld\n",
		"hpalloc-stats 1\ncomm no pid %ld\n",
	};
	struct hp_proc_list l;
	static struct hp_proc p;
	char body[128], link[600];
	pid_t pid = dead_pid();

	(void)state;
	setup_paths();
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
		snprintf(body, sizeof(body), bodies[i], (long)pid);
		fake_entry(pid, body);
		assert_int_equal(hp_proc_list(&l), 0);
		assert_null(find(&l, pid));
		assert_false(was_pruned(&l, pid));
		hp_proc_list_free(&l);
		assert_int_equal(hp_proc_get(pid, &p), -1);
		assert_true(errno == EINVAL || errno == ENOENT);
		assert_true(exists("%ld/override/threshold", pid));
	}
	/* a symlink named like a pid is not followed */
	snprintf(link, sizeof(link), "%s/%ld", proc_dir, (long)dead_pid());
	assert_int_equal(symlink("/", link), 0);
	assert_int_equal(hp_proc_list(&l), 0);
	hp_proc_list_free(&l);
	assert_int_equal(access(link, F_OK), 0);
}

/* A child that starts using hpalloc when told, finds the entry the parent
 * left at its pid and reports: 'f' if that entry is still the fake one,
 * 'o' if the child published its own, '?' otherwise. */
static char child_claims_over(unsigned long long dev, unsigned long long ino)
{
	int go[2], answer[2];
	char c = '?';
	pid_t pid;

	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(answer), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char path[600], line[64] = "";
		FILE *f;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		harness_janitor_start(); /* the janitor claims proc/<pid> */
		usleep(800 * 1000);
		snprintf(path, sizeof(path), "%s/%ld/stats", proc_dir, (long)getpid());
		f = fopen(path, "r");
		for (int i = 0; f && i < 3 && fgets(line, sizeof(line), f); i++)
			;
		if (f)
			fclose(f);
		c = !strcmp(line, "comm fake proc\n") ? 'f' :
		    !strncmp(line, "comm proc_list", 14) ? 'o' : '?';
		if (write(answer[1], &c, 1) != 1)
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	close(answer[1]);
	fake_process(pid, 12345, dev, ino);
	assert_int_equal(write(go[1], "x", 1), 1);
	assert_int_equal(read(answer[0], &c, 1), 1);
	close(go[1]);
	close(answer[0]);
	waitpid(pid, NULL, 0);
	return c;
}

/* A new process finding an entry at its own pid: left by a dead process of
 * its own namespace, it is replaced (overrides included); published from
 * another namespace sharing the directory, it is left alone. */
static void test_claim(void **state)
{
	unsigned long long dev, ino;

	(void)state;
	setup_paths();
	pidns(&dev, &ino);
	assert_int_equal(child_claims_over(dev, ino), 'o');
	assert_int_equal(child_claims_over(dev, ino + 1), 'f');
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_own_entry),
		HTEST(test_errors),
		HTEST(test_killed_child_pruned),
		HTEST(test_get_dead_is_esrch),
		HTEST(test_recycled_pid),
		HTEST(test_no_proof_no_prune),
		HTEST(test_corrupt_entries_kept),
		HTEST(test_claim),
	};

	harness_init(argc, argv);
	return harness_run("proc_list", tests, ARRAY_SIZE(tests));
}
