/* hpctl internals shared by its source files.
 *
 * hpctl is a thin adapter: every knob is validated, rendered and parsed by
 * the library (hp_knob_*), the control-directory rules come from
 * lib/control/control.c and lib/control/securedir.c (hpctl links the library's convenience
 * archive, so the hidden helpers lib/core/private.h declares are reachable; it
 * includes no other header of lib/), and the per-process entries -- their
 * format and when one is stale -- are read by the library (hp_proc_get /
 * hp_proc_list).
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
	bool long_form;     /* stats --long: every counter and knob */
	double top_delay;   /* top -d SECONDS between frames (default 1) */
	long top_count;     /* top -n COUNT frames, 0 = until interrupted */
	pid_t pid;          /* -p PID, 0 if not given */
	int argc;           /* positional arguments after the subcommand */
	char **argv;
	int cmd_argc;       /* run: the command after "--" (or after knobs) */
	bool run_check;     /* run --check */
	bool node_given;    /* pool --node N */
	int node;
	bool run_preload;   /* run --preload */
	const char *metrics_textfile; /* metrics --textfile FILE */
	const char *metrics_listen;   /* metrics --listen [ADDR:]PORT */
	char **cmd_argv;
};

/* hpctl.c */
void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "unknown knob 'x' (knobs: ...)" on stderr. */
void warn_unknown_knob(const char *name);
/* Knob index of name, or exit 2 naming the known knobs. */
int knob_or_die(const char *name);
/* One KNOB=VALUE of a command line, validated (hpctl-knobs.c). */
struct assignment {
	int knob;
	char name[64];
	char canon[HP_KNOB_VALUE_MAX];
};
/* Every KNOB=VALUE validated before anything happens: all errors are
 * reported, then exit 2 if there was any.  Free the array. */
struct assignment *parse_assignments(int argc, char **argv);

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
/* Resolved path (the library's control_dir_resolve), or NULL with the
 * reason in why (secure execution). */
const char *ctl_dir_find(char *why, size_t wl);
/* Resolved path, or exit 1 saying why there is none. */
const char *ctl_dir_path(void);
/* Open the control directory (create it 0755 when create): fd, or -1 if it
 * does not exist and !create.  Exits 1 if it is refused. */
int ctl_dir_open(bool create);
/* The published entry of a process using hpalloc (lib/control/peers.c reads
 * it): 0, or -1 after saying why (a dead one's entry is pruned on the way). */
int ctl_proc_lookup(pid_t pid, struct hp_proc *proc);
/* Open <dir>/proc/<pid> of a live hpalloc process (exit 1 otherwise). */
int ctl_proc_open(pid_t pid);
/* Open or create <dir>/proc/<pid>/override of a live process. */
int ctl_override_open(pid_t pid, bool create);
/* As root, chown dirfd (name NULL) or dirfd/name to the owner of piddir. */
void give_to_owner_of(int piddir, int dirfd, const char *name);
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
int cmd_top(struct hpctl *c);
int cmd_metrics(struct hpctl *c);
int cmd_list_knobs(struct hpctl *c);
int cmd_list_choices(struct hpctl *c);

/* hpctl-installed.c: a directory configure chose, at the same place
 * relative to this executable as to configure's bindir (moved or DESTDIR
 * trees). */
bool relocated_dir(const char *configured, char *buf, size_t len);
/* hpctl-preload.c: run --preload.  Checks that LD_PRELOAD can reach
 * COMMAND and appends the preload library to it: 0, or an exit status
 * after saying why not. */
int preload_prepare(struct hpctl *c);

/* hpctl-stats.c: the entries of the PIDs given (each must publish; exit 1
 * after saying why not), else every entry (pruned ones said on stderr).
 * Returns an exit status; free the list with hp_proc_list_free(). */
int stats_collect(struct hpctl *c, struct hp_proc_list *l);

/* Shared printers. */
void print_effective_knobs_json(struct json *j, const char *key);

#endif
