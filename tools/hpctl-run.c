/* hpctl run [--check] [--preload] [KNOB=VALUE...] [--] COMMAND: COMMAND (and
 * what it starts) with these knobs in its environment and hpalloc activated
 * for NumPy, from whatever prefix hpalloc was installed to (--preload:
 * libhpalloc-preload.so for any program instead, see hpctl-preload.c).
 *
 * Activation is the Python package's (python/hpalloc_activate.py): hpctl
 * only sets HPALLOC_NUMPY=1 and puts hpalloc/_boot first on PYTHONPATH,
 * whose sitecustomize.py imports hpalloc_activate at every interpreter
 * start-up (a .pth file would only run from a site directory).  Which
 * hpalloc package it activates:
 *   - $HPALLOC_PYTHON_DIR, when set (the build tree's tests): that one, put
 *     first on PYTHONPATH too;
 *   - else the interpreter's own, when it has one (a venv or conda
 *     environment with hpalloc's wheel), and only where it has none, the
 *     package installed with this hpctl (the wheel's: the package holding
 *     this hpctl) -- found at the same place relative to this executable as
 *     configure's pyexecdir is to bindir (a relocated or DESTDIR install),
 *     else at configure's pyexecdir -- which sitecustomize.py appends to
 *     sys.path (HPALLOC_PYTHON_FALLBACK), so it never shadows the
 *     interpreter's own packages.
 *
 * --check: every process that tries to activate appends a line to the file
 * named by HPALLOC_REPORT, in a directory of hpctl's own (report_make());
 * hpctl waits for COMMAND and exits with its status
 * if it failed, else 1 (saying why) when no process activated, else 0.
 * Meanwhile it stays transparent as the exec would be: signals sent to it
 * go on to COMMAND, and it dies of the signal that killed COMMAND. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h" /* knob_env_name, report_parse_line, prim_proc_readlink */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static bool has_activation(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	return snprintf(path, sizeof(path), "%s/hpalloc_activate.py", dir) < (int)sizeof(path) &&
	       stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory holding hpalloc_activate.py and the package installed with
 * this hpctl, or NULL. */
static const char *installed_python_dir(char *buf, size_t len)
{
#if defined(HPCTL_PYEXECDIR) && defined(HPCTL_BINDIR)
	if (relocated_dir(HPCTL_PYEXECDIR, buf, len) && has_activation(buf))
		return buf;
	if (has_activation(HPCTL_PYEXECDIR))
		return HPCTL_PYEXECDIR;
#else
	(void)buf;
	(void)len;
#endif
	return NULL;
}

/* PYTHONPATH = the start-up hook of dir's package, then (first) dir itself,
 * then what the caller had. */
static void prepend_pythonpath(const char *dir, bool first)
{
	const char *old = getenv("PYTHONPATH");
	size_t n = 2 * strlen(dir) + (old ? strlen(old) : 0) + 32;
	char *val = malloc(n);

	if (!val) {
		warnx("out of memory");
		exit(EXIT_RUNTIME);
	}
	snprintf(val, n, "%s/hpalloc/_boot%s%s%s%s", dir, first ? ":" : "", first ? dir : "",
		 old && *old ? ":" : "", old && *old ? old : "");
	setenv("PYTHONPATH", val, 1);
	free(val);
}

/* Where the activated package comes from (see the top of this file). */
static void choose_python_package(void)
{
	const char *env = getenv("HPALLOC_PYTHON_DIR");
	char buf[PATH_MAX];

	if (env && *env) {
		prepend_pythonpath(env, true);
		return;
	}
	const char *dir = installed_python_dir(buf, sizeof(buf));
	if (dir) {
		prepend_pythonpath(dir, false);
		setenv("HPALLOC_PYTHON_FALLBACK", dir, 1);
		return;
	}
#ifdef HPCTL_PYEXECDIR
	warnx("the hpalloc Python package is not installed next to hpctl (looked in %s): "
	      "Python programs run on NumPy's default allocator unless their environment "
	      "has its own (pip install hpalloc)", HPCTL_PYEXECDIR);
#endif
}

static void set_knobs(const struct assignment *as, int n)
{
	for (int i = 0; i < n; i++) {
		char var[80];
		if (knob_env_name(as[i].knob, var, sizeof(var)) == 0)
			setenv(var, as[i].canon, 1);
	}
}

/* ---- --check ----------------------------------------------------------------------- */

struct report {
	int activated, failed;
	char first_failure[512];
};

/* fd: the report file, open since hpctl made it (never opened again by
 * name: the command may have replaced what that name leads to). */
static void read_report(int fd, struct report *r)
{
	char line[REPORT_LINE_MAX];
	int copy = dup(fd);
	FILE *f = copy < 0 || lseek(copy, 0, SEEK_SET) < 0 ? NULL : fdopen(copy, "r");

	*r = (struct report){0};
	if (!f) {
		if (copy >= 0)
			close(copy);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		struct report_line l;
		if (report_parse_line(line, &l) != 0)
			continue;
		if (l.ok)
			r->activated++;
		else if (r->failed++ == 0)
			snprintf(r->first_failure, sizeof(r->first_failure), "pid %ld, %s: %s", l.pid,
				 l.adapter, l.detail);
	}
	fclose(f);
}

/* Signals someone sends hpctl to end the command (kill, Popen.terminate(),
 * a supervisor): without --check they would reach it (hpctl execs), so
 * they are passed on.  SIGINT and SIGQUIT come from the terminal to the
 * whole process group: the command has them already. */
static const int forwarded[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
static volatile sig_atomic_t command_pid;

static void forward(int sig)
{
	if (command_pid > 0)
		kill((pid_t)command_pid, sig);
}

static void forwarded_set(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(set, forwarded[i]);
}

static void forward_signals(void)
{
	struct sigaction sa = {.sa_handler = forward, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaction(forwarded[i], &sa, NULL);
	signal(SIGINT, SIG_IGN); /* the command decides what ^C means */
	signal(SIGQUIT, SIG_IGN);
}

/* The command was killed by sig: hpctl ends the same way, as the caller
 * would see it without --check (a shell script interrupted by ^C stops). */
static void die_of(int sig)
{
	struct rlimit no_core = {0, 0};
	sigset_t set;

	setrlimit(RLIMIT_CORE, &no_core); /* the command's crash, not ours */
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
}

static int wait_status(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

/* The report: <private directory>/report, named by HPALLOC_REPORT, which
 * every process of the command inherits -- also those that outlive hpctl,
 * once the directory is gone and another user may have made one at its
 * name.  So the writer (lib/control/report.c's hp_report_activation()) uses it
 * only if the directory is theirs and 0700 and the file a regular file of
 * theirs, opened without following a link or blocking.  The report file's
 * descriptor (the directory's in *dirfd), or -1 after saying why. */
static int report_make(char *dir, size_t len, int *dirfd)
{
	const char *tmp = getenv("TMPDIR");
	int fd;

	if (snprintf(dir, len, "%s/hpctl-run.XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)len) {
		warnx("run --check: TMPDIR is too long: %s", tmp);
		return -1;
	}
	if (!mkdtemp(dir)) {
		warnx("run --check: cannot create a report directory %s: %s", dir, strerror(errno));
		return -1;
	}
	*dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	fd = *dirfd < 0 || fchmod(*dirfd, 0700) != 0 ? -1 :
		openat(*dirfd, "report", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		warnx("run --check: cannot create a report file in %s: %s", dir, strerror(errno));
		if (*dirfd >= 0)
			close(*dirfd);
		rmdir(dir);
	}
	return fd;
}

static void report_remove(const char *dir, int dirfd, int fd)
{
	close(fd);
	unlinkat(dirfd, "report", 0);
	close(dirfd);
	rmdir(dir);
}

static int run_checked(struct hpctl *c)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct report r;
	int dirfd, fd = report_make(dir, sizeof(dir), &dirfd);

	if (fd < 0)
		return EXIT_RUNTIME;
	snprintf(path, sizeof(path), "%s/report", dir);
	setenv(HP_REPORT_ENV, path, 1);
	fflush(NULL);
	sigset_t block, old;
	forwarded_set(&block); /* held until the command's pid is known */
	sigprocmask(SIG_BLOCK, &block, &old);
	pid_t pid = fork();
	if (pid < 0) {
		warnx("run --check: fork: %s", strerror(errno));
		report_remove(dir, dirfd, fd);
		return EXIT_RUNTIME;
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(c->cmd_argv[0], c->cmd_argv);
		warnx("cannot run %s: %s", c->cmd_argv[0], strerror(errno));
		_exit(127);
	}
	command_pid = pid;
	forward_signals();
	sigprocmask(SIG_SETMASK, &old, NULL);
	int status, waited = wait_status(pid, &status);
	read_report(fd, &r);
	report_remove(dir, dirfd, fd);
	if (waited < 0)
		return EXIT_RUNTIME;
	if (WIFSIGNALED(status)) {
		die_of(WTERMSIG(status));
		return 128 + WTERMSIG(status); /* a signal that does not kill */
	}
	if (WEXITSTATUS(status) != 0)
		return WEXITSTATUS(status);
	if (r.activated)
		return EXIT_OK;
	if (r.failed)
		warnx("run --check: hpalloc was not activated in %s (%d process(es) tried; %s)",
		      c->cmd_argv[0], r.failed, r.first_failure);
	else if (c->run_preload)
		warnx("run --check: no process of %s loaded libhpalloc-preload.so (the dynamic "
		      "linker refused it: see its message above)", c->cmd_argv[0]);
	else
		warnx("run --check: no process of %s activated hpalloc (no Python interpreter "
		      "that reads PYTHONPATH started, or none imported NumPy)", c->cmd_argv[0]);
	return EXIT_RUNTIME;
}

static int run_exec(struct hpctl *c)
{
	fflush(NULL);
	execvp(c->cmd_argv[0], c->cmd_argv);
	warnx("cannot run %s: %s", c->cmd_argv[0], strerror(errno));
	return EXIT_RUNTIME;
}

int cmd_run(struct hpctl *c)
{
	struct assignment *as = parse_assignments(c->argc, c->argv);

	if (c->cmd_argc == 0) {
		free(as);
		die_usage("run needs a COMMAND (hpctl run [--check] [KNOB=VALUE...] -- COMMAND...)");
	}
	set_knobs(as, c->argc);
	free(as);
	if (c->run_preload) { /* malloc & co of every program: hpctl-preload.c */
		int rc = preload_prepare(c);
		if (rc)
			return rc;
		return c->run_check ? run_checked(c) : run_exec(c);
	}
	setenv("HPALLOC_NUMPY", "1", 1);
	choose_python_package();
	return c->run_check ? run_checked(c) : run_exec(c);
}
