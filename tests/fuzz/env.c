/* Fuzz target: the HPALLOC_* environment -- the knobs' environment layer
 * as knobs_init() reads it at a process's first hp_* call, and the control
 * directory's location (control_dir_resolve: HPALLOC_CONTROL_DIR,
 * XDG_RUNTIME_DIR).
 *
 * Input: lines NAME=VALUE.  Only names starting with HPALLOC_ and
 * XDG_RUNTIME_DIR are set (nothing else of this process's environment is
 * the fuzzer's to change); the last byte also gives the length of the
 * buffer control_dir_resolve() writes to.
 *
 * Promises checked, per knob: with HPALLOC_<KNOB> set to a value
 * hp_knob_parse accepts, that canonical value is in force from the env
 * layer; set to anything else it is refused -- the value is not from the
 * environment -- with a printable reason naming the variable; unset, the
 * environment has no say.  The control directory resolves to HPALLOC_CONTROL_DIR
 * (made absolute) when set, else /run/hpalloc for root, else
 * $XDG_RUNTIME_DIR/hpalloc, else ENOENT; ENAMETOOLONG when it does not fit,
 * and nothing written past the buffer. */
#include "fuzz.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_VARS 32

static char *set_names[MAX_VARS];
static int nset;

static void var_of(int k, char *var, size_t len)
{
	snprintf(var, len, "HPALLOC_%s", knob_name(k));
	for (char *c = var; *c; c++)
		*c = (char)toupper((unsigned char)*c);
}

static void set_vars(char *text)
{
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && nset < MAX_VARS;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq || eq == line)
			continue;
		*eq = '\0';
		if (strncmp(line, "HPALLOC_", 8) != 0 && strcmp(line, "XDG_RUNTIME_DIR") != 0)
			continue;
		if (setenv(line, eq + 1, 1) == 0)
			set_names[nset++] = strdup(line);
	}
}

static void unset_vars(void)
{
	for (int i = 0; i < nset; i++) {
		unsetenv(set_names[i]);
		free(set_names[i]);
	}
	nset = 0;
	setenv("HPALLOC_CONTROL_DIR", fuzz_control_dir(), 1);
}

static void check_knob(int k)
{
	char var[64], canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX], want[128];
	struct hp_knob_info ki;
	const char *text;

	var_of(k, var, sizeof(var));
	text = getenv(var);
	if (hp_knob_info(k, &ki) != 0)
		fuzz_fail("hp_knob_info(%s) failed", knob_name(k));
	if (!text) {
		if (ki.source == HP_SOURCE_ENV)
			fuzz_fail("%s unset, yet %s comes from the environment", var, ki.value);
		return;
	}
	if (hp_knob_parse(knob_name(k), text, canon, sizeof(canon), err, sizeof(err)) == 0) {
		if (ki.source != HP_SOURCE_ENV || strcmp(ki.value, canon))
			fuzz_fail("%s=%s: in force is %s from %s, not %s", var, text, ki.value,
				  hp_source_name(ki.source), canon);
		return;
	}
	snprintf(want, sizeof(want), "%s ignored: ", var);
	if (ki.source == HP_SOURCE_ENV)
		fuzz_fail("%s=%s was refused (%s), yet %s comes from the environment", var, text, err, ki.value);
	if (strncmp(ki.rejected, want, strlen(want)) != 0 || !fuzz_printable(ki.rejected))
		fuzz_fail("%s refused: the reason '%s' does not start '%s' or is not printable", var,
			  ki.rejected, want);
}

static void check_dir(size_t len)
{
	char *buf = malloc(len ? len : 1), want[PATH_MAX * 2] = "", cwd[PATH_MAX];
	const char *env = getenv("HPALLOC_CONTROL_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
	int want_errno = 0;

	if (!buf)
		abort();
	if (env && *env && env[0] != '/')
		snprintf(want, sizeof(want), "%s/%s", getcwd(cwd, sizeof(cwd)) ? cwd : "?", env);
	else if (env && *env)
		snprintf(want, sizeof(want), "%s", env);
	else if (geteuid() == 0)
		snprintf(want, sizeof(want), "/run/hpalloc");
	else if (xdg && *xdg)
		snprintf(want, sizeof(want), "%s/hpalloc", xdg);
	else
		snprintf(want, sizeof(want), "/tmp/hpalloc-%u", (unsigned)geteuid());
	if (!want_errno && strlen(want) >= len)
		want_errno = ENAMETOOLONG;
	errno = 0;
	int rc = control_dir_resolve(buf, len);
	if (want_errno ? rc != -1 || errno != want_errno : rc != 0 || strcmp(buf, want) != 0)
		fuzz_fail("control_dir_resolve(%zu): %d errno %d '%s', expected '%s' errno %d", len, rc, errno,
			  rc == 0 ? buf : "", want, want_errno);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strndup(data, size);
	char *out, *err;
	size_t olen, elen;

	fuzz_init();
	fuzz_input(data, size);
	for (int k = 0; k < KNOB_COUNT; k++) {
		char var[64];
		var_of(k, var, sizeof(var));
		unsetenv(var);
	}
	unsetenv("HPALLOC_CONTROL_DIR");
	unsetenv("XDG_RUNTIME_DIR");
	set_vars(text);
	knobs_clear_source(HP_SOURCE_ENV);
	fuzz_capture_begin(); /* verbose=1 logs every refusal */
	knobs_init(true);
	fuzz_capture_end(&out, &olen, &err, &elen);
	for (int k = 0; k < KNOB_COUNT; k++)
		check_knob(k);
	check_dir(size ? (size_t)data[size - 1] * 2 : 0);
	if (olen)
		fuzz_fail("knobs_init wrote to stdout: %s", out);
	if (!fuzz_text_clean(err, elen, "\n", true))
		fuzz_fail("knobs_init logged control characters or invalid UTF-8: %s", err);
	free(out);
	free(err);
	unset_vars();
	knobs_clear_source(HP_SOURCE_ENV);
	free(text);
	return 0;
}
