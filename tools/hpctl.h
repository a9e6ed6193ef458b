/* hpctl internals shared by its source files.
 *
 * hpctl is a thin adapter: every knob is validated, rendered and parsed by
 * the library (hp_knob_*), the control-directory rules come from lib/control.c
 * and the per-process file from lib/publish.c (hpctl links the library's
 * convenience archive, so their hidden helpers are reachable).
 */
#ifndef HPCTL_H
#define HPCTL_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "hpalloc.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

struct hpctl {
	bool json;
	pid_t pid;          /* -p PID, 0 if not given */
	int argc;           /* positional arguments after the subcommand */
	char **argv;
	int cmd_argc;       /* run: the command after "--" (or after knobs) */
	char **cmd_argv;
};

/* hpctl.c */
void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "unknown knob 'x' (knobs: ...)" on stderr. */
void warn_unknown_knob(const char *name);
/* Knob index of name, or exit 2 naming the known knobs. */
int knob_or_die(const char *name);

/* hpctl-json.c: a tiny streaming JSON writer (commas and escaping). */
struct json {
	FILE *f;
	int depth;
	bool need_comma[32];
};
void json_begin(struct json *j, FILE *f);
void json_obj(struct json *j, const char *key);   /* key NULL in arrays */
void json_arr(struct json *j, const char *key);
void json_end_obj(struct json *j);
void json_end_arr(struct json *j);
void json_str(struct json *j, const char *key, const char *val);
void json_num(struct json *j, const char *key, long long val);
void json_u64(struct json *j, const char *key, unsigned long long val);
void json_bool(struct json *j, const char *key, bool val);
void json_null(struct json *j, const char *key);
void json_finish(struct json *j);                /* newline */

/* hpctl-dir.c: the control directory as hpctl sees it. */
/* Resolved path, or exit 1 saying why there is none. */
const char *ctl_dir_path(void);
/* Open the control directory (create it 0755 when create): fd, or -1 if it
 * does not exist and !create.  Exits 1 if it is refused. */
int ctl_dir_open(bool create);
struct published;
/* The published stats of a live hpalloc process: 0, or -1 after saying why
 * (and pruning the entry of a dead one). */
int ctl_proc_lookup(pid_t pid, struct published *pub);
/* Open <dir>/proc/<pid> of a live hpalloc process (exit 1 otherwise). */
int ctl_proc_open(pid_t pid);
/* Open or create <dir>/proc/<pid>/override of a live process. */
int ctl_override_open(pid_t pid, bool create);
/* As root, chown dirfd (name NULL) or dirfd/name to the owner of piddir. */
void give_to_owner_of(int piddir, int dirfd, const char *name);
/* A process's published stats file. */
struct published {
	long pid;
	char comm[64];
	unsigned long long start_time;
	int nstats;
	struct { char name[48]; unsigned long long value; } stats[64];
	int nknobs;
	struct {
		char name[48];
		char value[HP_KNOB_VALUE_MAX];
		char source[16];
		char rejected[HP_KNOB_ERROR_MAX];
	} knobs[64];
};
/* Read and parse proc/<pid>/stats below procfd; -1 + errno. */
int published_read(int piddir, struct published *out);
/* 1 live (same process that published), 0 dead or pid recycled. */
int published_alive(const struct published *p);
pid_t parse_pid(const char *text); /* > 0, or exit 2 */

/* Subcommands: each returns the exit status. */
int cmd_get(struct hpctl *c);
int cmd_set(struct hpctl *c);
int cmd_reset(struct hpctl *c);
int cmd_show(struct hpctl *c);
int cmd_run(struct hpctl *c);
int cmd_status(struct hpctl *c);
int cmd_pool(struct hpctl *c);
int cmd_stats(struct hpctl *c);
int cmd_list_knobs(struct hpctl *c);
int cmd_list_choices(struct hpctl *c);

/* Shared printers. */
void print_effective_knobs_json(struct json *j, const char *key);

#endif
