/* One value in a kernel file (sysfs, procfs, cgroupfs) read or written
 * whole, with plain open/read/write: the C tests' one read_long and
 * write_long.  Knows neither cmocka nor hpalloc (the preload programs, the
 * soak workload and bench/micro link it too). */
#ifndef HP_TESTS_KFILE_H
#define HP_TESTS_KFILE_H

#include <stddef.h>

/* The file's first len - 1 bytes, NUL-terminated: their count, or -1. */
int harness_read_text(const char *path, char *buf, size_t len);
/* Counters are unsigned in the kernel; one that went "below zero" (seen:
 * resv_hugepages 18446744073709551612) reads as the small negative value
 * the kernel's own unsigned arithmetic also works with.  0, or -1 if the
 * file cannot be read or holds no number. */
int harness_read_long_at(const char *path, long *value);
/* The same, -1 when it cannot be read (ambiguous with a counter at -1). */
long harness_read_long(const char *path);
/* Writes value and a newline in one write(2).  0, or -1 with errno. */
int harness_write_long(const char *path, long value);

#endif
