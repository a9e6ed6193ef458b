/* Shared helpers of the fuzz targets: see fuzz.h. */
#include "fuzz.h"
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[PATH_MAX], ctl[PATH_MAX + 8];
static const uint8_t *input;
static size_t input_size;

/* ---- the private directory ------------------------------------------------ */

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void remove_dir(void)
{
	if (dir[0])
		nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Where the private directory goes: a tmpfs if there is one (a target
 * makes and removes files at every input: on ext4 that is ten times
 * slower), else the test's scratch directory, else $TMPDIR or /tmp. */
static const char *tmp_parent(void)
{
	const char *names[] = {"FUZZ_TMPDIR", NULL, "HPALLOC_TEST_TMPDIR", "TMPDIR"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *t = names[i] ? getenv(names[i]) : "/dev/shm";
		if (t && *t && access(t, W_OK | X_OK) == 0)
			return t;
	}
	return "/tmp";
}

void fuzz_init(void)
{
	const char *tmp = tmp_parent();

	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "%s/hpalloc-fuzz.XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		perror("fuzz: mkdtemp");
		abort();
	}
	atexit(remove_dir);
	snprintf(ctl, sizeof(ctl), "%s/ctl", dir);
	if (mkdir(ctl, 0755) != 0) {
		perror("fuzz: mkdir");
		abort();
	}
	setenv("HPALLOC_CONTROL_DIR", ctl, 1);
	lifecycle_tool_mode();
	hp_control_reload(); /* initialises the library */
}

const char *fuzz_dir(void)
{
	return dir;
}

const char *fuzz_control_dir(void)
{
	return ctl;
}

/* ---- failing ------------------------------------------------------------------ */

void fuzz_input(const uint8_t *data, size_t size)
{
	input = data;
	input_size = size;
}

/* Bytes as C would write them: the log stays printable whatever failed. */
static void escaped(const char *s, size_t len, bool newlines)
{
	for (size_t i = 0; i < len && i < 8192; i++) {
		unsigned c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(stderr, "\\%c", c);
		else if ((c >= 0x20 && c < 0x7f) || (c == '\n' && newlines))
			fputc((int)c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
}

void fuzz_fail(const char *fmt, ...)
{
	char msg[16384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fflush(NULL);
	fputs("fuzz: FAILED: ", stderr);
	escaped(msg, strlen(msg), true);
	fputs("\nfuzz: input: \"", stderr);
	if (input)
		escaped((const char *)input, input_size, false);
	fputs("\"\n", stderr);
	abort();
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* ---- exit() intercepted ----------------------------------------------------- */

void __real_exit(int status) __attribute__((noreturn));
void __wrap_exit(int status) __attribute__((noreturn));

static jmp_buf *exit_jump;
static int exit_status;

void __wrap_exit(int status)
{
	jmp_buf *j = exit_jump;

	if (!j)
		__real_exit(status);
	exit_jump = NULL;
	exit_status = status;
	longjmp(*j, 1);
}

int fuzz_call(void (*fn)(void *), void *arg)
{
	jmp_buf here;

	if (setjmp(here)) /* fn called exit() */
		return exit_status;
	exit_jump = &here;
	fn(arg);
	exit_jump = NULL;
	return -1;
}

/* ---- output captured -------------------------------------------------------- */

static FILE *saved_out, *saved_err, *cap_out, *cap_err;
static char *out_buf, *err_buf;
static size_t out_len, err_len;

void fuzz_capture_begin(void)
{
	cap_out = open_memstream(&out_buf, &out_len);
	cap_err = open_memstream(&err_buf, &err_len);
	if (!cap_out || !cap_err)
		abort();
	saved_out = stdout;
	saved_err = stderr;
	stdout = cap_out;
	stderr = cap_err;
}

void fuzz_capture_end(char **out, size_t *olen, char **err, size_t *elen)
{
	stdout = saved_out;
	stderr = saved_err;
	fclose(cap_out);
	fclose(cap_err);
	*out = out_buf;
	*olen = out_len;
	*err = err_buf;
	*elen = err_len;
}

/* ---- what text must look like --------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (of at most n bytes), 0 if
 * invalid: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

bool fuzz_text_clean(const char *text, size_t len, const char *allowed, bool utf8)
{
	const unsigned char *s = (const unsigned char *)text;

	for (size_t i = 0; i < len;) {
		size_t n = utf8_len(s + i, len - i);
		if (n == 0 && utf8)
			return false;
		if (n == 0) { /* not UTF-8: one byte, which is no control */
			i++;
			continue;
		}
		if (n == 1 && (s[i] < 0x20 || s[i] == 0x7f) &&
		    !(s[i] && allowed && strchr(allowed, s[i])))
			return false;
		if (n == 2 && s[i] == 0xc2 && s[i + 1] <= 0x9f) /* C1 */
			return false;
		i += n;
	}
	return true;
}

bool fuzz_printable(const char *s)
{
	for (; *s; s++)
		if (!isprint((unsigned char)*s))
			return false;
	return true;
}

/* A recursive descent over RFC 8259's grammar. */
struct json_in {
	const unsigned char *s, *end;
	const char *why;
	int depth;
};

static bool json_value(struct json_in *in);

static void json_ws(struct json_in *in)
{
	while (in->s < in->end && (*in->s == ' ' || *in->s == '\t' || *in->s == '\n' || *in->s == '\r'))
		in->s++;
}

static bool json_bad(struct json_in *in, const char *why)
{
	in->why = why;
	return false;
}

static bool json_literal(struct json_in *in, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(in->end - in->s) < n || memcmp(in->s, word, n) != 0)
		return json_bad(in, "bad literal");
	in->s += n;
	return true;
}

static bool json_string(struct json_in *in)
{
	in->s++; /* the opening quote */
	while (in->s < in->end && *in->s != '"') {
		if (*in->s < 0x20)
			return json_bad(in, "raw control character in a string");
		if (*in->s == '\\') {
			if (++in->s >= in->end)
				return json_bad(in, "unfinished escape");
			if (*in->s == 'u') {
				for (int i = 1; i <= 4; i++)
					if (in->s + i >= in->end || !isxdigit(in->s[i]))
						return json_bad(in, "bad \\u escape");
				in->s += 5;
			} else if (strchr("\"\\/bfnrt", *in->s) && *in->s) {
				in->s++;
			} else {
				return json_bad(in, "bad escape");
			}
			continue;
		}
		size_t n = utf8_len(in->s, (size_t)(in->end - in->s));
		if (n == 0)
			return json_bad(in, "invalid UTF-8 in a string");
		in->s += n;
	}
	if (in->s >= in->end)
		return json_bad(in, "unterminated string");
	in->s++;
	return true;
}

static bool json_digits(struct json_in *in)
{
	const unsigned char *start = in->s;

	while (in->s < in->end && isdigit(*in->s))
		in->s++;
	return in->s > start;
}

static bool json_number(struct json_in *in)
{
	if (*in->s == '-')
		in->s++;
	if (in->s < in->end && *in->s == '0')
		in->s++;
	else if (!json_digits(in))
		return json_bad(in, "bad number");
	if (in->s < in->end && *in->s == '.' && (in->s++, !json_digits(in)))
		return json_bad(in, "bad fraction");
	if (in->s < in->end && (*in->s == 'e' || *in->s == 'E')) {
		in->s++;
		if (in->s < in->end && (*in->s == '+' || *in->s == '-'))
			in->s++;
		if (!json_digits(in))
			return json_bad(in, "bad exponent");
	}
	return true;
}

/* Members of an object (close '}') or elements of an array (close ']'). */
static bool json_container(struct json_in *in, unsigned char close)
{
	if (++in->depth > 64)
		return json_bad(in, "nested too deep");
	in->s++;
	json_ws(in);
	if (in->s < in->end && *in->s == close) {
		in->s++;
		in->depth--;
		return true;
	}
	for (;;) {
		if (close == '}') {
			json_ws(in);
			if (in->s >= in->end || *in->s != '"')
				return json_bad(in, "expected a key");
			if (!json_string(in))
				return false;
			json_ws(in);
			if (in->s >= in->end || *in->s++ != ':')
				return json_bad(in, "expected ':'");
		}
		if (!json_value(in))
			return false;
		json_ws(in);
		if (in->s < in->end && *in->s == ',') {
			in->s++;
			continue;
		}
		if (in->s < in->end && *in->s == close) {
			in->s++;
			in->depth--;
			return true;
		}
		return json_bad(in, "expected ',' or a closing bracket");
	}
}

static bool json_value(struct json_in *in)
{
	json_ws(in);
	if (in->s >= in->end)
		return json_bad(in, "expected a value");
	switch (*in->s) {
	case '{': return json_container(in, '}');
	case '[': return json_container(in, ']');
	case '"': return json_string(in);
	case 't': return json_literal(in, "true");
	case 'f': return json_literal(in, "false");
	case 'n': return json_literal(in, "null");
	default:
		if (*in->s == '-' || isdigit(*in->s))
			return json_number(in);
		return json_bad(in, "unexpected character");
	}
}

bool fuzz_json_valid(const char *s, size_t len, const char **why)
{
	struct json_in in = {(const unsigned char *)s, (const unsigned char *)s + len, NULL, 0};

	if (!json_value(&in)) {
		*why = in.why;
		return false;
	}
	json_ws(&in);
	if (in.s != in.end) {
		*why = "text after the value";
		return false;
	}
	return true;
}

/* ---- files ------------------------------------------------------------------------ */

int fuzz_write_file(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
	const char *p = data;

	if (fd < 0)
		return -1;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n <= 0) {
			close(fd);
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	if (fchmod(fd, mode) != 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

void fuzz_empty_dir(int dirfd)
{
	int fd = dup(dirfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d); /* the dup shares dirfd's offset: maybe at the end */
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd, e->d_name, 0) == 0)
			continue;
		int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			fuzz_empty_dir(sub);
			close(sub);
		}
		unlinkat(dirfd, e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}
