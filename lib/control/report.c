/* The activation report of `hpctl run --check`: its one line format, its
 * writer (hp_report_activation: libhpalloc-preload.so, the Python
 * adapters) and its reader (report_parse_line: hpctl).
 *
 * hpctl names a file, <its private directory>/report, in HPALLOC_REPORT;
 * every process that tries to activate hpalloc appends one line to it:
 *
 *   <pid> <adapter> ok|failed[ <detail>]
 *
 * detail is one line (line breaks become spaces), possibly cut to fit
 * REPORT_LINE_MAX.  Every descendant of the command inherits the name, also
 * once hpctl has removed that directory and another user may have made one
 * there: so nothing in secure execution, the directory must be ours and
 * private (0700, not a symbolic link), and the file a regular file of ours,
 * opened without following a link, creating it, or blocking (a FIFO). */
#include "../core/internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The report file at path, opened for appending under the rules above; -1. */
static int report_open(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];
	struct stat st;
	int dfd, fd;

	if (!slash || slash == path || (size_t)(slash - path) >= sizeof(dir))
		return -1;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	if (fstat(dfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(dfd);
		return -1;
	}
	fd = openat(dfd, slash + 1, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
		    O_CLOEXEC);
	close(dfd);
	if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
		close(fd);
		return -1;
	}
	return fd;
}

/* One line: "<pid> <adapter> ok|failed[ <detail>]\n"; its length, or -1. */
static int report_format(char *line, size_t len, const char *adapter, int ok, const char *detail)
{
	int n = snprintf(line, len, "%ld %s %s%s", (long)getpid(), adapter, ok ? "ok" : "failed",
			 detail && *detail ? " " : "");
	if (n < 0 || (size_t)n + 1 >= len)
		return -1;
	size_t used = (size_t)n;
	for (const char *c = detail ? detail : ""; *c && used + 2 < len; c++)
		line[used++] = *c == '\n' || *c == '\r' ? ' ' : *c;
	while (used > 0 && line[used - 1] == ' ')
		used--;
	line[used++] = '\n';
	line[used] = '\0';
	return (int)used;
}

static bool adapter_valid(const char *adapter)
{
	size_t n = adapter ? strlen(adapter) : 0;
	return n > 0 && n < REPORT_ADAPTER_MAX && adapter[strcspn(adapter, " \t\r\n")] == '\0';
}

static int report_activation(const char *adapter, int ok, const char *detail)
{
	const char *path = hp_secure_exec() ? NULL : getenv(HP_REPORT_ENV);
	char line[REPORT_LINE_MAX];

	if (!adapter_valid(adapter)) {
		errno = EINVAL;
		return -1;
	}
	if (!path || !*path)
		return 0;
	int n = report_format(line, sizeof(line), adapter, ok, detail);
	int fd = n < 0 ? -1 : report_open(path);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, line, (size_t)n);
	close(fd);
	return w == n ? 1 : -1;
}

int hp_report_activation(const char *adapter, int ok, const char *detail)
{
	HP_NOCANCEL_BEGIN;
	HP_ERRNO_SAVE;
	int rc = report_activation(adapter, ok, detail);
	if (rc >= 0)
		HP_ERRNO_RESTORE;
	HP_NOCANCEL_END;
	return rc;
}

int report_parse_line(char *line, struct report_line *out)
{
	int used = 0;
	char result[16];

	line[strcspn(line, "\n")] = '\0';
	if (sscanf(line, "%ld %31s %15s%n", &out->pid, out->adapter, result, &used) < 3)
		return -1;
	out->ok = strcmp(result, "ok") == 0;
	out->detail = line + used + strspn(line + used, " ");
	return 0;
}
