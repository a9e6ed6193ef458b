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

#endif
