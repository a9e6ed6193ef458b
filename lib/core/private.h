/* The library's private functions hpctl calls: the one interface between
 * lib/ and tools/ beyond the public hpalloc.h.  Not installed.  hpctl links
 * the library's convenience archive (lib/libhpalloc-core.la), so these
 * hidden symbols resolve for it; lib/core/internal.h includes this header, so
 * each is declared once.  Each is here because hpctl must apply the very
 * rule the library applies (where the control directory is, what makes a
 * directory or file trustworthy, a knob's environment variable, the
 * io_uring probe, the kernel's view of THP, hugetlb pools and nodes), not a
 * copy of it -- or because prim.c is the one door to the kernel, hpctl's
 * reads of /proc included (prim_proc_*).
 */
#ifndef HP_PRIVATE_H
#define HP_PRIVATE_H

#include "hpalloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../base.h" /* HP_HIDDEN */

/* ---- lifecycle.c ---------------------------------------------------------------- */
HP_HIDDEN void lifecycle_tool_mode(void); /* hpctl: read-only, no janitor */

/* ---- knobs.c -------------------------------------------------------------------- */
/* The knob's environment variable, HPALLOC_<NAME>, into buf (the library
 * reads it, `hpctl run` sets it): 0, or -1 + errno. */
HP_HIDDEN int knob_env_name(int knob, char *buf, size_t len);

/* The environment variables beside the knob table: read once, at
 * interpreter start-up, by the Python activation (hpalloc_activate.py),
 * never by the library; no layers, no control file.  hpctl show lists them
 * with the knobs.  The i-th one (0, 1, ...), or NULL past the last. */
struct knob_env_extra {
	const char *env;      /* HPALLOC_NUMPY, HPALLOC_ADAPTERS */
	const char *help;
	const char *accepted;
	const char *default_text;
};
HP_HIDDEN const struct knob_env_extra *knob_env_extra(int i);

/* ---- control.c: where the control directory is -------------------------------- */
#define HP_CONTROL_DIR_ROOT "/run/hpalloc"
#define HP_CONTROL_DIR_TMP_PARENT "/tmp"
/* $HPALLOC_CONTROL_DIR, else /run/hpalloc (euid 0), else
 * $XDG_RUNTIME_DIR/hpalloc, else /tmp/hpalloc-<euid>.  -1 + EPERM in
 * secure exec, ENAMETOOLONG if it does not fit. */
HP_HIDDEN int control_dir_resolve(char *buf, size_t len);
/* The same, saying which of the four it chose in *kind. */
enum { CONTROL_DIR_GIVEN, CONTROL_DIR_ROOT, CONTROL_DIR_USER, CONTROL_DIR_TMP };
HP_HIDDEN int control_dir_choose(char *buf, size_t len, int *kind);

/* ---- securedir.c: what hpalloc trusts in a directory others can reach ---------
 * For control.c, publish.c, peers.c and hpctl: one place for the rules. */
#define HP_CONTROL_FILE_MAX 4096
/* Open the control directory at path as securedir_open() does, making it
 * first (mode 0755 whatever the umask) if it is missing.  A default one
 * (kind ROOT or USER) only below a parent no other user can write to:
 * /run root's and not writable by group or others, $XDG_RUNTIME_DIR ours
 * and mode 0700; kind TMP in a /tmp that is root's and sticky, mode 0700,
 * and only if ours (one somebody else made is refused).  fd, or -1 +
 * errno with the reason in why. */
HP_HIDDEN int securedir_make(const char *path, int kind, char *why, size_t wl);
/* Open a directory without following a symlink and check it: owned by euid
 * or root, not group/other-writable.  -1 + errno, reason in why. */
HP_HIDDEN int securedir_open(int at, const char *name, char *why, size_t wl);
HP_HIDDEN int securedir_check_fd(int fd, char *why, size_t wl);
/* Same for every component of a relative path "a/b/c". */
HP_HIDDEN int securedir_open_path(int at, const char *rel, char *why, size_t wl);
/* Read a control file with every check (regular, owner, mode, size). */
HP_HIDDEN int securedir_read_file(int dirfd, const char *name, char *buf,
				  size_t cap, char *why, size_t wl);
/* A temporary file in the same directory, created exclusively under a random
 * name (.NAME.<16 hex digits>.tmp), + (fsync) + rename over name. */
HP_HIDDEN int securedir_write_atomic(int dirfd, const char *name,
				     const char *data, size_t len, mode_t mode,
				     bool durable);

/* ---- report.c: the activation report of `hpctl run --check` ------------------ */
#define HP_REPORT_ENV "HPALLOC_REPORT" /* names the file (hpctl sets it) */
#define REPORT_LINE_MAX 1024           /* a line, its newline included */
#define REPORT_ADAPTER_MAX 32
struct report_line {
	long pid;
	char adapter[REPORT_ADAPTER_MAX];
	bool ok;
	const char *detail; /* the rest of the line, "" if none */
};
/* One line of the file as hp_report_activation() writes it, parsed in
 * place (its newline cut): 0, or -1 if it is no such line. */
HP_HIDDEN int report_parse_line(char *line, struct report_line *out);

/* ---- ring.c --------------------------------------------------------------------- */
/* Can this process release through io_uring?  The one probe, used by the
 * janitor's setup and by `hpctl status`; why says what it found. */
HP_HIDDEN bool ring_probe(char *why, size_t len);

/* ---- prim.c: the hugetlb pools as sysfs shows them (prim.h: the rest) ------------ */
/* The page sizes the kernel has pools of (hugepages-<N>kB), ascending, at
 * most max; -1 unknown. */
HP_HIDDEN int prim_pool_sizes(size_t *out, int max);
/* A file's counter (nr_hugepages, free_hugepages, ...) of node's pool of
 * pagesize, or of the whole pool with node -1; -1 unknown. */
HP_HIDDEN long long prim_pool_counter(int node, size_t pagesize, const char *file);
/* `hpctl pool`: pages written to the nr_hugepages of that pool (node -1:
 * the whole pool), the file prim_pool_counter() reads.  0, or -1 with the
 * kernel's errno, as a system call wrapper (ENOMEM: the kernel gave fewer;
 * the counter says how many). */
HP_HIDDEN int prim_pool_write(int node, size_t pagesize, unsigned long long pages);

/* ---- prim.c: /proc, the kernel's files of processes ------------------------------
 * rel is a path below /proc, the real one ("self/statm", "<pid>/stat",
 * "sys/kernel/io_uring_disabled"); the caller interprets what it reads.
 * The file's first len - 1 bytes (one read), NUL-terminated: their number,
 * or -1 + errno (the kernel's). */
HP_HIDDEN ssize_t prim_proc_read(const char *rel, char *buf, size_t len);
/* Each line of /proc/<rel>, whole whatever its length and without its
 * newline, to fn (which may write into it) until fn returns non-zero,
 * which is returned; 0 at the end, errno as it was.  -1 + errno if the
 * file cannot be opened, or ENOMEM if a line of more than 1 MiB (or no
 * memory to hold a long one) stopped the reading.  A line of up to 4 KiB
 * needs no memory; a longer one gets a private mapping, never malloc. */
HP_HIDDEN int prim_proc_lines(const char *rel, int (*fn)(char *line, void *arg), void *arg);
/* The target of the symbolic link /proc/<rel> ("self", "self/exe"),
 * NUL-terminated (cut at len - 1 bytes): its length, or -1 + errno. */
HP_HIDDEN ssize_t prim_proc_readlink(const char *rel, char *buf, size_t len);

/* ---- numa.c --------------------------------------------------------------------- */
/* Node n exists on this machine (its sysfs directory, looked at once). */
HP_HIDDEN bool numa_node_exists(int node);
/* The next existing node after `after` (-1: the first), or -1. */
HP_HIDDEN int numa_node_next(int after);

/* ---- thp.c ---------------------------------------------------------------------- */
/* The word a file of /sys/kernel/mm/transparent_hugepage selects
 * ("enabled": "always [madvise] never" -> "madvise"); "unavailable" and -1
 * if it cannot be read. */
HP_HIDDEN int thp_setting(const char *file, char *out, size_t len);
/* One THP page size: its own setting (hugepages-<N>kB/enabled), and
 * whether it serves madvised memory such as hpalloc's blocks. */
struct thp_size {
	size_t size;
	char enabled[32];
	bool serves;
};
/* Every size the kernel offers, ascending (before multi-size THP: the PMD
 * size with the top-level setting); at most max; -1 without THP. */
HP_HIDDEN int thp_sizes(struct thp_size *out, int max);

#endif
