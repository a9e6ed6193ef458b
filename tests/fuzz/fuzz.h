/* Shared helpers of the fuzz targets (tests/fuzz/).
 *
 * Every target is one file defining LLVMFuzzerTestOneInput(): built with
 * clang and libFuzzer by `make fuzz` (tests/fuzz/fuzz-<target>), and with
 * the ordinary compiler into tests/fuzz/replay-<target>, which replays the
 * target's corpus (tests/fuzz/corpus/<target>/) in `make check`.  A target
 * calls the library's real parser on the input and checks what the
 * parser's contract promises beyond "no crash"; a broken promise is
 * fuzz_fail(), which aborts: libFuzzer keeps the input, the replay fails.
 */
#ifndef HP_TESTS_FUZZ_H
#define HP_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Once per process: a private directory (mode 0700, removed at exit; in
 * $FUZZ_TMPDIR, else /dev/shm, else $HPALLOC_TEST_TMPDIR, $TMPDIR, /tmp) with
 * an empty control directory in it, HPALLOC_CONTROL_DIR naming that one,
 * and the library in hpctl's tool mode (no janitor, no published entry,
 * no environment knobs), initialised. */
void fuzz_init(void);
const char *fuzz_dir(void);         /* the private directory */
const char *fuzz_control_dir(void); /* <fuzz_dir>/ctl */

/* A broken promise: print it (with the input, escaped) and abort. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* The current input, for fuzz_fail()'s message (set by fuzz_input()). */
void fuzz_input(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string in a buffer of exactly size + 1
 * bytes (so the sanitizers see any read past it); free() it. */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* Run fn(arg) with exit() intercepted (the link wraps exit with
 * -Wl,--wrap=exit): returns -1 if fn returned, else the status it passed
 * to exit().  Nothing fn allocated before exiting is freed. */
int fuzz_call(void (*fn)(void *), void *arg);

/* Capture stdout and stderr (the FILE streams, not the descriptors: the
 * sanitizers still report on fd 2) until fuzz_capture_end(), which
 * returns what was written to each (free both). */
void fuzz_capture_begin(void);
void fuzz_capture_end(char **out, size_t *out_len, char **err, size_t *err_len);

/* One JSON text (RFC 8259: UTF-8, no raw control characters in strings)
 * followed only by whitespace.  On false, *why says what is wrong. */
bool fuzz_json_valid(const char *s, size_t len, const char **why);
/* No control characters -- C0, DEL, or C1 (U+0080..U+009F) written as
 * UTF-8 -- except those in allowed (e.g. "\n"), in len bytes (NULs
 * included); with utf8, also nothing but valid UTF-8. */
bool fuzz_text_clean(const char *s, size_t len, const char *allowed, bool utf8);
/* Printable ASCII only (what the library's messages promise). */
bool fuzz_printable(const char *s);

/* Files for the code under test.  Paths are relative to dirfd. */
int fuzz_write_file(int dirfd, const char *name, const void *data, size_t len, mode_t mode);
/* Remove everything below dirfd (the directory itself stays). */
void fuzz_empty_dir(int dirfd);

#endif
