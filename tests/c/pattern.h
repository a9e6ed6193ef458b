/* Block contents the tests write and check: a deterministic pattern in
 * which every 8-byte word depends on the seed and its position, so a copy
 * that stopped short or started at the wrong place cannot match, nor can
 * an older fill of the same block with another seed.  A prefix of the
 * same pattern whatever n.  Shared by the cmocka tests (harness.h) and
 * the preload tests (tests/preload/common.h), which link no cmocka. */
#ifndef HP_TESTS_PATTERN_H
#define HP_TESTS_PATTERN_H

#include <stddef.h>
#include <stdint.h>

void harness_fill(void *p, size_t n, uint64_t seed);
/* The offset of the first byte that differs from the pattern, or SIZE_MAX. */
size_t harness_check(const void *p, size_t n, uint64_t seed);
/* Index of the first non-zero byte, or SIZE_MAX. */
size_t harness_first_nonzero(const void *p, size_t n);

/* A program filling [p, p + n) from its start, as a loop computing what it
 * writes: 2 MiB at a time (each piece harness_fill()ed with seed plus its
 * offset), pause_ms after each.  harness_check_filled() checks such a fill
 * back: the first bad offset, or SIZE_MAX. */
void harness_fill_slowly(void *p, size_t n, uint64_t seed, unsigned pause_ms);
size_t harness_check_filled(const void *p, size_t n, uint64_t seed);
/* Write one byte in every 4 KiB page. */
void harness_touch(void *p, size_t n);

#endif
