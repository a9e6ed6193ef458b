/* Fuzz target: hpctl's command line, in-process: its real argument parser
 * (parse_args in tools/hpctl.c: global options, subcommands, their
 * options, run's split) and, for the command it picks, the validation that
 * command does before it acts -- knob names (get, reset), KNOB=VALUE
 * (set, run: parse_assignments), SIZE=COUNT (pool: parse_pool_arg), PIDs
 * (stats).  Nothing is ever acted on: no file written, no pool resized,
 * no command run.  exit() is intercepted (-Wl,--wrap=exit), hpctl's
 * output captured.
 *
 * Input: the arguments after "hpctl", separated by NUL bytes.
 *
 * Promises checked: hpctl either goes on with a command or exits 2 after
 * saying why on stderr (exit 0 only for --help and --version, which print
 * to stdout); positional arguments are the caller's own strings, in
 * order; -p gives a positive pid; top's delay is 0.1..3600 s and its
 * count positive; a run command line is what follows the options and
 * knobs; every KNOB=VALUE accepted has a canonical value that parses to
 * itself; and nothing leaks, on either way out. */
#include "fuzz.h"

#define main hpctl_main /* hpctl's own main is not ours to run */
#include "../../tools/hpctl.c"
#undef main
/* hpctl-system.c's statics, parse_pool_arg among them; its parse_count is
 * another than hpctl.c's */
#define parse_count pool_parse_count
#include "../../tools/hpctl-system.c"
#undef parse_count

#define MAX_ARGS 64

static struct hpctl c;
static const struct command *cmd;
static struct assignment *as;
static int argc_;
static char **argv_;

static void check_assignments(void)
{
	for (int i = 0; i < c.argc; i++) {
		char again[HP_KNOB_VALUE_MAX];
		if (hp_knob_parse(as[i].name, as[i].canon, again, sizeof(again), NULL, 0) != 0 ||
		    strcmp(again, as[i].canon) != 0)
			fuzz_fail("%s=%s accepted, but its canonical value is no fixed point", as[i].name,
				  as[i].canon);
	}
}

/* What the command checks before it acts (exits 2 on a bad argument). */
static void validate(void)
{
	if (cmd->fn == cmd_get || cmd->fn == cmd_reset || cmd->fn == cmd_list_choices) {
		for (int i = 0; i < c.argc; i++)
			if (cmd->fn != cmd_reset || strcmp(c.argv[i], "--all") != 0)
				knob_or_die(c.argv[i]);
	} else if (cmd->fn == cmd_set || cmd->fn == cmd_run) {
		as = parse_assignments(c.argc, c.argv);
		check_assignments();
	} else if (cmd->fn == cmd_pool) {
		struct pool_request r;
		for (int i = 0; i < c.argc && i < MAX_POOLS; i++)
			parse_pool_arg(c.argv[i], &r);
	} else if (cmd->fn == cmd_stats) {
		for (int i = 0; i < c.argc; i++)
			parse_pid(c.argv[i]);
	}
}

static void run(void *unused)
{
	(void)unused;
	parse_args(&c, argc_, argv_, &cmd);
	validate();
}

static bool is_arg(char *p)
{
	for (int i = 0; i < argc_; i++)
		if (argv_[i] == p)
			return true;
	return false;
}

static void check_parsed(void)
{
	if (!cmd)
		fuzz_fail("parse_args returned without a command");
	for (int i = 0; i < c.argc; i++)
		if (!is_arg(c.argv[i]) || (i && c.argv[i] <= c.argv[i - 1]))
			fuzz_fail("positional argument %d is not one of mine, in order", i);
	if (c.pid < 0 || (c.pid && !cmd->takes_pid))
		fuzz_fail("pid %d for %s", (int)c.pid, cmd->name);
	if (!(c.top_delay >= 0.1 && c.top_delay <= 3600) || c.top_count < 0)
		fuzz_fail("top -d %g -n %ld", c.top_delay, c.top_count);
	if (cmd->fn == cmd_run &&
	    (c.cmd_argc < 0 || c.cmd_argv + c.cmd_argc != argv_ + argc_ || c.argv + c.argc > c.cmd_argv))
		fuzz_fail("run: the command line is not the tail of the arguments");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size), *args[MAX_ARGS + 2];
	char *out, *err;
	size_t olen, elen;

	fuzz_init();
	fuzz_input(data, size);
	argc_ = 0;
	args[argc_++] = "hpctl";
	for (size_t i = 0; i <= size && argc_ <= MAX_ARGS; i += strlen(text + i) + 1)
		args[argc_++] = text + i;
	args[argc_] = NULL;
	argv_ = args;
	memset(&c, 0, sizeof(c));
	c.top_delay = 1.0;
	cmd = NULL;
	as = NULL;

	fuzz_capture_begin();
	int status = fuzz_call(run, NULL);
	fuzz_capture_end(&out, &olen, &err, &elen);

	if (status == -1)
		check_parsed();
	else if (status == EXIT_USAGE ? elen == 0 : status != EXIT_OK || olen == 0 || elen != 0)
		fuzz_fail("exit %d with %zu bytes on stdout, %zu on stderr: %.*s", status, olen, elen, (int)elen,
			  err);
	if (cmd && cmd->fn != cmd_run)
		free(c.argv); /* parse_args's copy, on either way out */
	free(as);
	free(out);
	free(err);
	free(text);
	return 0;
}
