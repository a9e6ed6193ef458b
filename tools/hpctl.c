/* hpctl — look at and tune hpalloc: knobs, control directory, pools, stats.
 *
 * Exit status: 0 success, 2 usage error or invalid value (the message names
 * the knob, the bad value and what is accepted), 1 runtime failure.  A
 * refused command changes nothing: arguments are all validated before
 * anything is written.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h" /* lifecycle_tool_mode */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
	"Usage: hpctl [--json] [-p PID] COMMAND [ARGS...]\n"
	"\n"
	"Commands:\n"
	"  get [KNOB...]             effective knob values (of process PID with -p)\n"
	"  set KNOB=VALUE...         write control files (per-process override with -p)\n"
	"  reset KNOB...|--all       remove control files (overrides with -p)\n"
	"  show                      every knob: value, source, default, accepted, help,\n"
	"                            last rejected input\n"
	"  status                    THP and its page sizes, hugetlb pools (whole and\n"
	"                            per NUMA node), hugetlbfs mounts, io_uring,\n"
	"                            effective knobs\n"
	"  pool [--node N] SIZE=COUNT...\n"
	"                            resize hugetlb pools (root; of NUMA node N only\n"
	"                            with --node) and report what the kernel gave,\n"
	"                            e.g. pool 2M=512 1G=2\n"
	"  stats [--long] [PID...]   processes using hpalloc, one line each, largest\n"
	"                            first, and a total (--long: every counter and\n"
	"                            knob; entries of dead processes are pruned)\n"
	"  top [-d SECONDS] [-n COUNT]\n"
	"                            the stats table, redrawn every second (-d) until\n"
	"                            interrupted (or COUNT times)\n"
	"  metrics [--textfile FILE | --listen [ADDR:]PORT] [PID...]\n"
	"                            the stats in Prometheus' text format: on\n"
	"                            standard output, into FILE (replaced atomically,\n"
	"                            for node_exporter's textfile collector), or\n"
	"                            served over HTTP at /metrics (ADDR 127.0.0.1\n"
	"                            unless given) until interrupted\n"
	"  run [--check] [--preload] [KNOB=VALUE...] [--] COMMAND [ARG...]\n"
	"                            run COMMAND with hpalloc backing NumPy and these\n"
	"                            knobs for that process alone; --preload: the\n"
	"                            large allocations of any (dynamically linked)\n"
	"                            program instead, through libhpalloc-preload.so;\n"
	"                            --check: exit 1 if no process of COMMAND\n"
	"                            activated hpalloc\n"
	"\n"
	"Options:\n"
	"  --json                    machine-readable output\n"
	"  -p, --pid PID             get/set/reset act on that process only\n"
	"  -h, --help                this help\n"
	"  -V, --version             version\n"
	"\n"
	"Control directory: $HPALLOC_CONTROL_DIR, else /run/hpalloc (root), else\n"
	"$XDG_RUNTIME_DIR/hpalloc, else /tmp/hpalloc-UID.  See hpctl(8) and hpalloc(7).\n";

void warnx(const char *fmt, ...)
{
	va_list ap;

	fputs("hpctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void die_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("hpctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'hpctl --help'.\n", stderr);
	exit(EXIT_USAGE);
}

void warn_unknown_knob(const char *name)
{
	struct hp_knob_info ki;
	char known[512] = "";

	for (int k = 0; k < hp_knob_count(); k++) {
		if (hp_knob_info(k, &ki) != 0)
			continue;
		strncat(known, " ", sizeof(known) - strlen(known) - 1);
		strncat(known, ki.name, sizeof(known) - strlen(known) - 1);
	}
	warnx("unknown knob '%s' (knobs:%s)", name, known);
}

int knob_or_die(const char *name)
{
	int i = hp_knob_index(name);

	if (i >= 0)
		return i;
	warn_unknown_knob(name);
	exit(EXIT_USAGE);
}

pid_t parse_pid(const char *text)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v <= 0 || v > 0x3fffffff ||
	    text[0] == '+' || text[0] == ' ')
		die_usage("invalid PID '%s' (a positive process id)", text);
	return (pid_t)v;
}

struct command {
	const char *name;
	int (*fn)(struct hpctl *);
	bool takes_pid;
};

static const struct command commands[] = {
	{ "get", cmd_get, true },
	{ "set", cmd_set, true },
	{ "reset", cmd_reset, true },
	{ "show", cmd_show, false },
	{ "status", cmd_status, false },
	{ "pool", cmd_pool, false },
	{ "stats", cmd_stats, false },
	{ "top", cmd_top, false },
	{ "metrics", cmd_metrics, false },
	{ "run", cmd_run, false },
	{ "--list-knobs", cmd_list_knobs, false },     /* for bash completion */
	{ "--list-choices", cmd_list_choices, false },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/* Global options, recognised before and after the subcommand.  Returns
 * how many argv entries were consumed (0: not an option). */
static int global_option(struct hpctl *c, int argc, char **argv, int i)
{
	const char *a = argv[i];

	if (!strcmp(a, "--json")) {
		c->json = true;
		return 1;
	}
	if (!strcmp(a, "-p") || !strcmp(a, "--pid")) {
		if (i + 1 >= argc)
			die_usage("%s needs a PID", a);
		c->pid = parse_pid(argv[i + 1]);
		return 2;
	}
	if (!strncmp(a, "--pid=", 6)) {
		c->pid = parse_pid(a + 6);
		return 1;
	}
	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		fputs(usage_text, stdout);
		exit(EXIT_OK);
	}
	if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
		printf("hpctl (hpalloc) %s, library %s\n", PACKAGE_VERSION,
		       hp_version());
		exit(EXIT_OK);
	}
	return 0;
}

/* `run`: options (--check, --preload), KNOB=VALUE words, then the command
 * (after "--" or at the first word that is not KNOB=VALUE). */
static void split_run(struct hpctl *c, int argc, char **argv, int i)
{
	for (; i < argc && !strncmp(argv[i], "--", 2) && argv[i][2]; i++) {
		if (!strcmp(argv[i], "--check"))
			c->run_check = true;
		else if (!strcmp(argv[i], "--preload"))
			c->run_preload = true;
		else
			die_usage("run: unknown option '%s'", argv[i]);
	}
	c->argv = argv + i;
	c->argc = 0;
	while (i < argc && strcmp(argv[i], "--") != 0 && strchr(argv[i], '=')) {
		c->argc++;
		i++;
	}
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	c->cmd_argv = argv + i;
	c->cmd_argc = argc - i;
}

/* A number of seconds for top -d: 0.1 to 3600. */
static double parse_delay(const char *text)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (errno || end == text || *end || !(v >= 0.1 && v <= 3600))
		die_usage("invalid delay '%s' (seconds, 0.1 to 3600)", text);
	return v;
}

static long parse_count(const char *text)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v <= 0 || text[0] == '+')
		die_usage("invalid count '%s' (a positive number of frames)", text);
	return v;
}

/* pool --node N / --node=N: a node number (whether it exists is pool's
 * to say, from the library's list of nodes). */
static int pool_node_option(struct hpctl *c, int argc, char **argv, int i)
{
	const char *text = argv[i][6] == '=' ? argv[i] + 7 : (i + 1 < argc ? argv[i + 1] : NULL);
	char *end;
	long v;

	if (!text)
		die_usage("--node needs a node number");
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < 0 || v > 65535 || text[0] == '+' || text[0] == ' ')
		die_usage("invalid node '%s' (a NUMA node number, e.g. --node 0)", text);
	if (c->node_given)
		die_usage("--node given more than once");
	c->node_given = true;
	c->node = (int)v;
	return argv[i][6] == '=' ? 1 : 2;
}

/* metrics --textfile FILE / --listen SPEC (also as --opt=VALUE). */
static int metrics_option(struct hpctl *c, int argc, char **argv, int i)
{
	static const char *const names[] = { "--textfile", "--listen" };
	const char **slot[] = { &c->metrics_textfile, &c->metrics_listen };

	for (int k = 0; k < 2; k++) {
		size_t n = strlen(names[k]);
		if (strncmp(argv[i], names[k], n) != 0 || (argv[i][n] && argv[i][n] != '='))
			continue;
		if (*slot[k])
			die_usage("%s given more than once", names[k]);
		if (argv[i][n] == '=') {
			*slot[k] = argv[i] + n + 1;
			return 1;
		}
		if (i + 1 >= argc)
			die_usage("%s needs a value", names[k]);
		*slot[k] = argv[i + 1];
		return 2;
	}
	return 0;
}

/* Options of one subcommand, after it.  Returns how many argv entries were
 * consumed (0: not one of its options). */
static int command_option(struct hpctl *c, const struct command *cmd,
			  int argc, char **argv, int i)
{
	const char *a = argv[i];
	bool delay = !strcmp(a, "-d") || !strcmp(a, "--delay");
	bool count = !strcmp(a, "-n") || !strcmp(a, "--iterations");

	if (cmd->fn == cmd_stats && !strcmp(a, "--long")) {
		c->long_form = true;
		return 1;
	}
	if (cmd->fn == cmd_metrics)
		return metrics_option(c, argc, argv, i);
	if (cmd->fn == cmd_pool && (!strcmp(a, "--node") || !strncmp(a, "--node=", 7)))
		return pool_node_option(c, argc, argv, i);
	if (cmd->fn != cmd_top || !(delay || count))
		return 0;
	if (i + 1 >= argc)
		die_usage("%s needs a value", a);
	if (delay)
		c->top_delay = parse_delay(argv[i + 1]);
	else
		c->top_count = parse_count(argv[i + 1]);
	return 2;
}

/* Every command but run: positional arguments, among which global options
 * and the command's own may follow the command.  c->argv is a copy the
 * caller frees. */
static void split_positional(struct hpctl *c, const struct command *cmd,
			     int argc, char **argv, int i)
{
	int n;

	c->argv = calloc((size_t)argc + 1, sizeof(char *));
	if (!c->argv) {
		warnx("out of memory");
		exit(EXIT_RUNTIME);
	}
	while (i < argc) {
		if ((n = global_option(c, argc, argv, i)) ||
		    (n = command_option(c, cmd, argc, argv, i))) {
			i += n;
			continue;
		}
		if (argv[i][0] == '-' && strcmp(argv[i], "--all") != 0)
			die_usage("unknown option '%s'", argv[i]);
		c->argv[c->argc++] = argv[i++];
	}
}

static void parse_args(struct hpctl *c, int argc, char **argv,
		       const struct command **cmd)
{
	int i = 1, n;

	*cmd = NULL;
	while (i < argc && !*cmd) {
		if ((n = global_option(c, argc, argv, i))) {
			i += n;
			continue;
		}
		*cmd = find_command(argv[i]);
		if (!*cmd)
			die_usage(argv[i][0] == '-' ? "unknown option '%s'"
				  : "unknown command '%s'", argv[i]);
		i++;
	}
	if (!*cmd)
		die_usage("no command given");
	if ((*cmd)->fn == cmd_run)
		split_run(c, argc, argv, i);
	else
		split_positional(c, *cmd, argc, argv, i);
	/* global options given before a command they do not apply to */
	if (c->pid && !(*cmd)->takes_pid)
		die_usage("-p PID works with get, set and reset only");
	if (c->json && ((*cmd)->fn == cmd_top || (*cmd)->fn == cmd_run ||
			(*cmd)->fn == cmd_metrics))
		die_usage("%s has no --json%s", (*cmd)->name,
			  (*cmd)->fn == cmd_run ? "" : " (use stats --json)");
}

int main(int argc, char **argv)
{
	struct hpctl c = { .top_delay = 1.0 };
	const struct command *cmd;
	char **owned;
	int rc;

	/* hpctl uses the library to read knobs; it must not become an
	 * allocator of its own (janitor, ring, published entry, env knobs). */
	lifecycle_tool_mode();
	parse_args(&c, argc, argv, &cmd);
	owned = cmd->fn == cmd_run ? NULL : c.argv;
	rc = cmd->fn(&c);
	free(owned);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		warnx("write error on standard output");
		return EXIT_RUNTIME;
	}
	return rc;
}
