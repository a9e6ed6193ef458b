/* A memory cgroup of a C test's own: see memcg_util.h. */
#include "harness.h"
#include "memcg_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PREFIX "hpalloc-ctest-"
#define V1_PARENT "/sys/fs/cgroup/memory"

struct tmemcg tmemcg;
static bool inside;       /* this process was moved in */
static bool exit_handler; /* tmemcg_remove registered with atexit */

static bool write_text(const char *dir, const char *file, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool write_text(const char *dir, const char *file, const char *fmt, ...)
{
	char path[700];
	va_list ap;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *f = fopen(path, "we");
	if (!f)
		return false;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	return fclose(f) == 0;
}

static size_t read_num(const char *file)
{
	char path[700], buf[64];
	snprintf(path, sizeof(path), "%s/%s", tmemcg.dir, file);
	if (harness_read_text(path, buf, sizeof(buf)) < 0)
		fail_msg("cannot read %s", path);
	return (size_t)strtoull(buf, NULL, 10);
}

size_t tmemcg_key(const char *file, const char *key)
{
	char path[700], buf[8192];
	size_t klen = strlen(key);
	snprintf(path, sizeof(path), "%s/%s", tmemcg.dir, file);
	if (harness_read_text(path, buf, sizeof(buf)) < 0)
		fail_msg("cannot read %s", path);
	for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
			return (size_t)strtoull(line + klen + 1, NULL, 10);
	return 0;
}

size_t tmemcg_usage(void)
{
	return read_num(tmemcg.version == 1 ? "memory.usage_in_bytes" : "memory.current");
}

size_t tmemcg_peak(void)
{
	char path[700], buf[64];
	snprintf(path, sizeof(path), "%s/%s", tmemcg.dir,
		 tmemcg.version == 1 ? "memory.max_usage_in_bytes" : "memory.peak");
	return harness_read_text(path, buf, sizeof(buf)) >= 0 ? (size_t)strtoull(buf, NULL, 10) : 0;
}

bool tmemcg_reset_peak(void)
{
	/* v2's memory.peak resets only for the file descriptor written */
	return tmemcg.version == 1 && write_text(tmemcg.dir, "memory.max_usage_in_bytes", "0");
}

size_t tmemcg_limit_hits(void)
{
	if (tmemcg.version == 1)
		return read_num("memory.failcnt");
	return tmemcg_key("memory.events", "max");
}

size_t tmemcg_oom_kills(void)
{
	return tmemcg_key(tmemcg.version == 1 ? "memory.oom_control" : "memory.events", "oom_kill");
}

bool tmemcg_try_limit(size_t limit)
{
	return write_text(tmemcg.dir, tmemcg.version == 1 ? "memory.limit_in_bytes" : "memory.max", "%zu", limit);
}

void tmemcg_set_limit(size_t limit)
{
	const char *file = tmemcg.version == 1 ? "memory.limit_in_bytes" : "memory.max";
	bool ok = limit == TMEMCG_NO_LIMIT ? write_text(tmemcg.dir, file, "%s", tmemcg.version == 1 ? "-1" : "max")
					   : write_text(tmemcg.dir, file, "%zu", limit);
	if (!ok)
		fail_msg("cannot set the limit of %s: %s", tmemcg.dir, strerror(errno));
}

/* Where cgroups of a version with the memory controller can be made here. */
static bool find_parent(char *why, size_t len)
{
	char buf[512], line[512], path[300];
	tmemcg.version = 0;
	if (access(V1_PARENT "/memory.limit_in_bytes", F_OK) == 0) {
		tmemcg.version = 1;
		snprintf(tmemcg.parent, sizeof(tmemcg.parent), V1_PARENT);
		return true;
	}
	FILE *f = fopen("/proc/self/mounts", "re");
	while (f && fgets(line, sizeof(line), f)) {
		char mnt[256], type[64];
		if (sscanf(line, "%*s %255s %63s", mnt, type) == 2 && strcmp(type, "cgroup2") == 0) {
			snprintf(tmemcg.parent, sizeof(tmemcg.parent), "%s", mnt);
			tmemcg.version = 2;
			break;
		}
	}
	if (f)
		fclose(f);
	if (tmemcg.version != 2) {
		snprintf(why, len, "no cgroup v1 memory hierarchy, no cgroup2 mount");
		return false;
	}
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", tmemcg.parent);
	if (harness_read_text(path, buf, sizeof(buf)) < 0 || !strstr(buf, "memory")) {
		snprintf(why, len, "cgroup v2 at %s: the memory controller is not in cgroup.subtree_control",
			 tmemcg.parent);
		return false;
	}
	return true;
}

/* The process's cgroup of that version, as a directory. */
static void find_home(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/cgroup", "re");
	tmemcg.home[0] = '\0';
	if (!f)
		fail_msg("cannot read /proc/self/cgroup: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*b = '\0';
		bool v1_memory = strstr(a + 1, "memory") != NULL, v2 = b == a + 1 && line[0] == '0';
		if ((tmemcg.version == 1 && v1_memory) || (tmemcg.version == 2 && v2))
			snprintf(tmemcg.home, sizeof(tmemcg.home), "%s%s", tmemcg.parent, b + 1);
	}
	fclose(f);
	if (!tmemcg.home[0])
		fail_msg("the process's cgroup of v%d is not in /proc/self/cgroup", tmemcg.version);
}

/* PREFIX<pid>... cgroups whose pid is gone (a run killed outright). */
static void remove_stale(void)
{
	DIR *d = opendir(tmemcg.parent);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		long pid;
		char path[700];
		if (sscanf(e->d_name, PREFIX "%ld", &pid) != 1 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmemcg.parent, e->d_name);
		rmdir(path);
	}
	if (d)
		closedir(d);
}

static void kill_inside(void)
{
	char path[700], buf[4096];
	snprintf(path, sizeof(path), "%s/cgroup.procs", tmemcg.dir);
	if (harness_read_text(path, buf, sizeof(buf)) < 0)
		return;
	for (char *s = buf, *end; *s; s = end) {
		long pid = strtol(s, &end, 10);
		if (end == s)
			break;
		if (pid > 0 && pid != getpid())
			kill((pid_t)pid, SIGKILL);
	}
}

void tmemcg_remove(void)
{
	if (!tmemcg.dir[0])
		return;
	if (inside)
		write_text(tmemcg.home, "cgroup.procs", "%d", (int)getpid());
	inside = false;
	for (int i = 0; i < 250 && rmdir(tmemcg.dir) != 0 && (errno == EBUSY || errno == EAGAIN); i++) {
		kill_inside();
		usleep(20000);
	}
	tmemcg.dir[0] = '\0';
}

void tmemcg_make(size_t limit)
{
	char why[512];
	tmemcg_remove();
	if (!harness_is_root())
		harness_skip_cap("root", "making a memory cgroup needs root");
	if (!find_parent(why, sizeof(why)))
		harness_skip_cap("memcg", "%s", why);
	find_home();
	remove_stale();
	snprintf(tmemcg.dir, sizeof(tmemcg.dir), "%s/" PREFIX "%d", tmemcg.parent, (int)getpid());
	if (mkdir(tmemcg.dir, 0755) != 0 && errno != EEXIST) {
		int err = errno;
		tmemcg.dir[0] = '\0';
		harness_skip_cap("memcg", "cannot make a cgroup in %s: %s", tmemcg.parent, strerror(err));
	}
	if (!exit_handler) {
		atexit(tmemcg_remove); /* a failed case leaves it: removed at exit */
		exit_handler = true;
	}
	tmemcg_set_limit(limit);
	if (tmemcg.version == 2)
		write_text(tmemcg.dir, "memory.swap.max", "0");
	else /* no swap for it: anonymous memory stays charged, as without swap */
		write_text(tmemcg.dir, "memory.swappiness", "0");
}

void tmemcg_enter(void)
{
	if (!write_text(tmemcg.dir, "cgroup.procs", "%d", (int)getpid()))
		fail_msg("cannot move into %s: %s", tmemcg.dir, strerror(errno));
	inside = true;
}

int tmemcg_spawn(int (*fn)(void *), void *arg)
{
	int status;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		fail_msg("fork: %s", strerror(errno));
	if (pid == 0) {
		if (!write_text(tmemcg.dir, "cgroup.procs", "%d", (int)getpid()))
			_exit(120);
		_exit(fn(arg));
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			fail_msg("waitpid: %s", strerror(errno));
	return status;
}

const char *tmemcg_status_text(int status)
{
	static char text[128];
	if (WIFSIGNALED(status))
		snprintf(text, sizeof(text), "killed by signal %d%s", WTERMSIG(status),
			 WTERMSIG(status) == SIGKILL ? " (the OOM killer's)" : "");
	else
		snprintf(text, sizeof(text), "exit %d", WEXITSTATUS(status));
	return text;
}
