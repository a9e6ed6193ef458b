/* Fuzz target: the control directory as the library reads it -- knob
 * files through securedir_read_file() and hp_knob_parse_file(), applied to
 * the control layer by the real poll (hp_control_reload), with the file
 * checks (regular, no symlink, owner, mode, size, NUL bytes).
 *
 * Input: records, each a header line and a body:
 *
 *   === KNOB [KIND]
 *   BODY (up to the next "\n=== " or the end)
 *
 * KIND is how the file is made: file (default, mode 0644), writable (0666),
 * foreign (owned by uid 65534; root only), fifo, symlink (to a file with
 * the body), dir.  KNOB "." with KIND writable makes the directory itself
 * group-writable.  Files are written into the private control directory;
 * a later record for the same knob replaces the earlier one.
 *
 * Promises checked after the reload, per knob: a regular 0644 file without
 * NUL of at most HP_CONTROL_FILE_MAX bytes that hp_knob_parse_file accepts
 * is the effective value (source control, its canonical form); any other
 * file is refused -- the value stays the default -- and the reason,
 * printable, names the file; an insecure directory is refused as a whole.
 * After the files are removed and the directory reloaded, every knob is
 * back to its default. */
#include "fuzz.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum kind { K_NONE, K_FILE, K_WRITABLE, K_FOREIGN, K_FIFO, K_SYMLINK, K_DIR };
static const char *const kinds[] = {"", "file", "writable", "foreign", "fifo", "symlink", "dir"};

struct planted {
	enum kind kind;
	const char *body;
	size_t len;
};

static int ctlfd = -1;

static enum kind kind_of(const char *word)
{
	for (int k = K_FILE; k <= K_DIR; k++)
		if (!strcmp(word, kinds[k]))
			return (enum kind)k;
	return K_FILE;
}

/* Make the file; the kind it really got (foreign falls back to file when
 * chown is not ours to do). */
static enum kind plant(const char *name, enum kind kind, const char *body, size_t len)
{
	char target[96];

	switch (kind) {
	case K_FIFO:
		if (mkfifoat(ctlfd, name, 0644) != 0)
			fuzz_fail("mkfifo %s: %s", name, strerror(errno));
		return kind;
	case K_DIR:
		if (mkdirat(ctlfd, name, 0755) != 0)
			fuzz_fail("mkdir %s: %s", name, strerror(errno));
		return kind;
	case K_SYMLINK:
		snprintf(target, sizeof(target), "%s.target", name);
		if (fuzz_write_file(ctlfd, target, body, len, 0644) != 0 || symlinkat(target, ctlfd, name) != 0)
			fuzz_fail("symlink %s: %s", name, strerror(errno));
		return kind;
	default:
		if (fuzz_write_file(ctlfd, name, body, len, kind == K_WRITABLE ? 0666 : 0644) != 0)
			fuzz_fail("write %s: %s", name, strerror(errno));
		if (kind == K_FOREIGN && fchownat(ctlfd, name, 65534, 65534, AT_SYMLINK_NOFOLLOW) != 0)
			return K_FILE;
		return kind;
	}
}

static void remove_planted(const char *name)
{
	char target[96];

	if (unlinkat(ctlfd, name, 0) != 0)
		unlinkat(ctlfd, name, AT_REMOVEDIR);
	snprintf(target, sizeof(target), "%s.target", name);
	unlinkat(ctlfd, target, 0);
}

/* Split the input into records and plant them; returns whether the
 * directory was made insecure. */
static bool plant_all(const char *in, size_t size, struct planted *files)
{
	const char *end = in + size, *p = in;
	bool insecure = false;

	while (p < end) {
		const char *rec = p;
		if ((size_t)(end - p) < 4 || memcmp(p, "=== ", 4) != 0) {
			/* text before the first header: skip to one */
			const char *next = memmem(p, (size_t)(end - p), "\n=== ", 5);
			p = next ? next + 1 : end;
			continue;
		}
		const char *eol = memchr(rec, '\n', (size_t)(end - rec));
		const char *body = eol ? eol + 1 : end;
		const char *next = eol ? memmem(eol, (size_t)(end - eol), "\n=== ", 5) : NULL;
		const char *body_end = next ? (next > body ? next : body) : end; /* next == eol: empty */
		char header[64] = "", name[64] = "", word[16] = "";
		size_t hl = (size_t)((eol ? eol : end) - rec - 4);
		memcpy(header, rec + 4, hl < sizeof(header) - 1 ? hl : sizeof(header) - 1);
		sscanf(header, "%63s %15s", name, word);
		p = next ? next + 1 : end;

		int k = hp_knob_index(name);
		if (!strcmp(name, ".") && kind_of(word) == K_WRITABLE) {
			insecure = fchmod(ctlfd, 0775) == 0;
			continue;
		}
		if (k < 0)
			continue;
		if (files[k].kind != K_NONE)
			remove_planted(name);
		files[k].body = body;
		files[k].len = (size_t)(body_end - body);
		files[k].kind = plant(name, kind_of(word), body, files[k].len);
	}
	return insecure;
}

static void check_knob(int k, const struct planted *f, bool insecure)
{
	const char *name = knob_name(k);
	struct hp_knob_info ki;
	char canon[HP_KNOB_VALUE_MAX] = "", err[HP_KNOB_ERROR_MAX], want[HP_KNOB_ERROR_MAX + 512];
	char *body = f->kind == K_NONE ? NULL : fuzz_strndup((const uint8_t *)f->body, f->len);
	bool applies = f->kind == K_FILE && !insecure && strlen(body) == f->len &&
		       f->len <= HP_CONTROL_FILE_MAX &&
		       hp_knob_parse_file(name, body, canon, sizeof(canon), err, sizeof(err)) == 0;

	if (hp_knob_info(k, &ki) != 0)
		fuzz_fail("hp_knob_info(%s) failed", name);
	if (applies && (ki.source != HP_SOURCE_CONTROL || strcmp(ki.value, canon)))
		fuzz_fail("%s: a good file ('%s') is not in force: %s from %s", name, canon, ki.value,
			  hp_source_name(ki.source));
	if (!applies && ki.source != HP_SOURCE_DEFAULT)
		fuzz_fail("%s: a %s file that must be refused set %s (%s)", name, kinds[f->kind], ki.value,
			  hp_source_name(ki.source));
	if (!fuzz_printable(ki.rejected))
		fuzz_fail("%s: the reason is not printable: '%s'", name, ki.rejected);
	if (insecure && f->kind != K_NONE)
		snprintf(want, sizeof(want), "directory %s ignored: ", fuzz_control_dir());
	else
		snprintf(want, sizeof(want), "%s/%s ignored: ", fuzz_control_dir(), name);
	if (!applies && f->kind != K_NONE && strncmp(ki.rejected, want, strlen(want)) != 0)
		fuzz_fail("%s: refused, but the reason '%s' does not start '%s'", name, ki.rejected, want);
	free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct planted files[KNOB_COUNT] = {{0}};

	fuzz_init();
	fuzz_input(data, size);
	if (ctlfd < 0)
		ctlfd = open(fuzz_control_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ctlfd < 0)
		fuzz_fail("open %s: %s", fuzz_control_dir(), strerror(errno));

	bool insecure = plant_all((const char *)data, size, files);
	hp_control_reload();
	for (int k = 0; k < KNOB_COUNT; k++)
		check_knob(k, &files[k], insecure);

	fuzz_empty_dir(ctlfd);
	if (fchmod(ctlfd, 0755) != 0)
		fuzz_fail("chmod back: %s", strerror(errno));
	hp_control_reload();
	for (int k = 0; k < KNOB_COUNT; k++) {
		struct hp_knob_info ki;
		if (hp_knob_info(k, &ki) != 0 || ki.source != HP_SOURCE_DEFAULT)
			fuzz_fail("%s: still from %s after its file was removed", knob_name(k),
				  hp_source_name(ki.source));
	}
	return 0;
}
