/* One value in a kernel file; see kfile.h. */
#include "kfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int harness_read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	ssize_t r = 0;

	if (fd < 0)
		return -1;
	/* a seq_file (memory.stat) may come in more than one read */
	while (n < len - 1 && (r = read(fd, buf + n, len - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	if (r < 0)
		return -1;
	buf[n] = '\0';
	return (int)n;
}

int harness_read_long_at(const char *path, long *value)
{
	char buf[64], *end;

	if (harness_read_text(path, buf, sizeof(buf)) <= 0)
		return -1;
	*value = (long)strtoull(buf, &end, 10);
	return end == buf ? -1 : 0;
}

long harness_read_long(const char *path)
{
	long v;

	return harness_read_long_at(path, &v) == 0 ? v : -1;
}

int harness_write_long(const char *path, long value)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", value);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, buf, (size_t)n);
	int saved = errno;
	close(fd);
	errno = saved;
	return w == n ? 0 : -1;
}
