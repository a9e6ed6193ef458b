/* HPALLOC_TEST_REQUIRE=cap,cap...: the capabilities (tests/capabilities)
 * whose lack fails a test instead of skipping it, read for the C tests --
 * the cmocka harness and the preload programs, which link no cmocka. */
#ifndef HP_TESTS_CAPS_H
#define HP_TESTS_CAPS_H

#include <stdbool.h>
#include <stddef.h>

/* Reads HPALLOC_TEST_REQUIRE now (before the environment is cleaned) and
 * keeps it.  Returns the first name that known() (may be NULL: any)
 * refuses, its length in *len; NULL if none. */
const char *caps_read(bool (*known)(const char *name, size_t len), size_t *len);
/* Whether the list read names cap. */
bool caps_required(const char *cap);

#endif
