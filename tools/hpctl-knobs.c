/* hpctl get / set / reset / show / run: knobs.  Every value is validated
 * and rendered by the library (hp_knob_parse, hp_knob_render). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Validate every KNOB=VALUE before anything happens: all errors are
 * reported, then exit 2 if there was any. */
struct assignment *parse_assignments(int argc, char **argv)
{
	struct assignment *as = calloc((size_t)argc + 1, sizeof(*as));
	char err[HP_KNOB_ERROR_MAX];
	int bad = 0;

	if (!as) {
		warnx("out of memory");
		exit(EXIT_RUNTIME);
	}
	for (int i = 0; i < argc; i++) {
		struct hp_knob_info ki;

		as[i].knob = hp_knob_parse_assignment(argv[i], as[i].canon,
						      sizeof(as[i].canon), err, sizeof(err));
		if (as[i].knob < 0 || hp_knob_info(as[i].knob, &ki) != 0) {
			warnx("%s", err);
			bad++;
			continue;
		}
		snprintf(as[i].name, sizeof(as[i].name), "%s", ki.name);
		for (int j = 0; j < i; j++)
			if (as[j].knob == as[i].knob && as[j].name[0]) {
				warnx("knob '%s' given more than once", as[i].name);
				bad++;
			}
	}
	if (bad) {
		free(as);
		exit(EXIT_USAGE);
	}
	return as;
}

/* ---- get ----------------------------------------------------------------- */

static void print_value(struct json *j, bool json, const char *name,
			const char *value)
{
	if (json)
		json_str(j, name, value);
	else
		printf("%s=%s\n", name, value);
}

static int get_of_process(struct hpctl *c)
{
	static struct hp_proc proc;
	struct json j;

	if (ctl_proc_lookup(c->pid, &proc) != 0)
		return EXIT_RUNTIME;
	json_begin(&j, stdout);
	if (c->json)
		json_obj(&j, NULL);
	for (int k = 0; k < proc.nknobs; k++) {
		bool wanted = c->argc == 0;
		for (int i = 0; i < c->argc; i++)
			wanted |= !strcmp(c->argv[i], proc.knobs[k].name);
		if (wanted)
			print_value(&j, c->json, proc.knobs[k].name,
				    proc.knobs[k].value);
	}
	if (c->json) {
		json_end_obj(&j);
		json_finish(&j);
	}
	return EXIT_OK;
}

int cmd_get(struct hpctl *c)
{
	struct hp_knob_info ki;
	struct json j;

	for (int i = 0; i < c->argc; i++)
		knob_or_die(c->argv[i]);
	if (c->pid)
		return get_of_process(c);
	hp_control_reload();
	json_begin(&j, stdout);
	if (c->json)
		json_obj(&j, NULL);
	for (int i = 0; i < (c->argc ? c->argc : hp_knob_count()); i++) {
		int k = c->argc ? hp_knob_index(c->argv[i]) : i;
		if (hp_knob_info(k, &ki) == 0)
			print_value(&j, c->json, ki.name, ki.value);
	}
	if (c->json) {
		json_end_obj(&j);
		json_finish(&j);
	}
	return EXIT_OK;
}

/* ---- set / reset ----------------------------------------------------------- */

static int write_knob_file(int dirfd, const struct assignment *a)
{
	char body[HP_CONTROL_FILE_MAX];

	if (hp_knob_render(a->name, a->canon, body, sizeof(body)) != 0) {
		warnx("cannot render %s=%s", a->name, a->canon);
		return -1;
	}
	if (securedir_write_atomic(dirfd, a->name, body, strlen(body), 0644,
				 true) != 0) {
		warnx("cannot write %s: %s", a->name, strerror(errno));
		return -1;
	}
	return 0;
}

int cmd_set(struct hpctl *c)
{
	struct assignment *as;
	int fd, rc = EXIT_OK;

	if (c->argc == 0)
		die_usage("set needs KNOB=VALUE arguments");
	as = parse_assignments(c->argc, c->argv);
	fd = c->pid ? ctl_override_open(c->pid, true) : ctl_dir_open(true);
	for (int i = 0; i < c->argc; i++)
		if (write_knob_file(fd, &as[i]) != 0)
			rc = EXIT_RUNTIME;
		else if (c->pid)
			give_to_owner_of(fd, fd, as[i].name);
	close(fd);
	free(as);
	return rc;
}

int cmd_reset(struct hpctl *c)
{
	bool all = c->argc == 1 && !strcmp(c->argv[0], "--all");
	int fd, rc = EXIT_OK;

	if (c->argc == 0)
		die_usage("reset needs KNOB names or --all");
	for (int i = 0; !all && i < c->argc; i++) {
		if (!strcmp(c->argv[i], "--all"))
			die_usage("reset: --all cannot be combined with knob names");
		knob_or_die(c->argv[i]);
	}
	fd = c->pid ? ctl_override_open(c->pid, false) : ctl_dir_open(false);
	if (fd < 0)
		return EXIT_OK; /* nothing was set */
	for (int i = 0; i < (all ? hp_knob_count() : c->argc); i++) {
		struct hp_knob_info ki;
		const char *name = all ? (hp_knob_info(i, &ki) == 0 ? ki.name : NULL)
				       : c->argv[i];
		if (name && unlinkat(fd, name, 0) != 0 && errno != ENOENT) {
			warnx("cannot remove %s: %s", name, strerror(errno));
			rc = EXIT_RUNTIME;
		}
	}
	if (all || rc == EXIT_OK)
		(void)fsync(fd);
	close(fd);
	return rc;
}

/* ---- show -------------------------------------------------------------------- */

static void show_json(void)
{
	struct hp_knob_info ki;
	struct json j;

	json_begin(&j, stdout);
	json_obj(&j, NULL);
	json_str(&j, "control_dir", ctl_dir_path());
	json_obj(&j, "knobs");
	for (int k = 0; k < hp_knob_count(); k++) {
		if (hp_knob_info(k, &ki) != 0)
			continue;
		json_obj(&j, ki.name);
		json_str(&j, "value", ki.value);
		json_str(&j, "source", hp_source_name(ki.source));
		json_str(&j, "default", ki.default_value);
		json_str(&j, "type", ki.type);
		json_str(&j, "accepted", ki.accepted);
		json_str(&j, "choices", ki.choices);
		json_str(&j, "help", ki.help);
		json_str(&j, "rejected", ki.rejected);
		json_end_obj(&j);
	}
	json_end_obj(&j);
	json_obj(&j, "environment");
	const struct knob_env_extra *e;
	for (int i = 0; (e = knob_env_extra(i)); i++) {
		json_obj(&j, e->env);
		json_str(&j, "default", e->default_text);
		json_str(&j, "accepted", e->accepted);
		json_str(&j, "help", e->help);
		json_end_obj(&j);
	}
	json_end_obj(&j);
	json_end_obj(&j);
	json_finish(&j);
}

static void show_text(void)
{
	struct hp_knob_info ki;
	struct stat st;
	const char *dir = ctl_dir_path();

	printf("control directory: %s%s\n\n", dir,
	       stat(dir, &st) == 0 ? "" : " (does not exist)");
	for (int k = 0; k < hp_knob_count(); k++) {
		if (hp_knob_info(k, &ki) != 0)
			continue;
		printf("%s = %s  (source: %s, default: %s)\n", ki.name,
		       ki.value, hp_source_name(ki.source), ki.default_value);
		printf("    %s\n    accepted: %s\n", ki.help, ki.accepted);
		if (ki.rejected[0])
			printf("    rejected: %s\n", ki.rejected);
	}
	printf("\nread by the Python activation at interpreter start-up (environment only):\n");
	const struct knob_env_extra *e;
	for (int i = 0; (e = knob_env_extra(i)); i++)
		printf("%s  (default: %s)\n    %s\n    accepted: %s\n", e->env, e->default_text,
		       e->help, e->accepted);
}

int cmd_show(struct hpctl *c)
{
	if (c->argc)
		die_usage("show takes no arguments");
	hp_control_reload();
	if (c->json)
		show_json();
	else
		show_text();
	return EXIT_OK;
}

void print_effective_knobs_json(struct json *j, const char *key)
{
	struct hp_knob_info ki;

	json_obj(j, key);
	for (int k = 0; k < hp_knob_count(); k++) {
		if (hp_knob_info(k, &ki) != 0)
			continue;
		json_obj(j, ki.name);
		json_str(j, "value", ki.value);
		json_str(j, "source", hp_source_name(ki.source));
		json_end_obj(j);
	}
	json_end_obj(j);
}

/* ---- completion helpers ------------------------------------------------------------ */

int cmd_list_knobs(struct hpctl *c)
{
	struct hp_knob_info ki;

	(void)c;
	for (int k = 0; k < hp_knob_count(); k++)
		if (hp_knob_info(k, &ki) == 0)
			printf("%s\n", ki.name);
	return EXIT_OK;
}

int cmd_list_choices(struct hpctl *c)
{
	struct hp_knob_info ki;

	if (c->argc != 1)
		die_usage("--list-choices needs one KNOB");
	if (hp_knob_info(knob_or_die(c->argv[0]), &ki) == 0 && ki.choices) {
		for (const char *p = ki.choices; *p;) {
			size_t n = strcspn(p, " ");
			printf("%.*s\n", (int)n, p);
			p += n + strspn(p + n, " ");
		}
	}
	return EXIT_OK;
}
