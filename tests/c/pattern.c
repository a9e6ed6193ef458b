/* See pattern.h. */
#include "pattern.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static inline uint64_t pattern_word(uint64_t seed, size_t index)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + index * 0xBF58476D1CE4E5B9ull + 1;
	x ^= x >> 31;
	return x;
}

static inline uint8_t pattern_byte(uint64_t seed, size_t offset)
{
	return (uint8_t)(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

void harness_fill(void *p, size_t n, uint64_t seed)
{
	unsigned char *b = p;
	size_t words = n / 8;

	for (size_t i = 0; i < words; i++) {
		uint64_t w = pattern_word(seed, i);
		memcpy(b + i * 8, &w, 8); /* little endian: matches pattern_byte */
	}
	for (size_t off = words * 8; off < n; off++)
		b[off] = pattern_byte(seed, off);
}

size_t harness_check(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *b = p;
	size_t words = n / 8;

	for (size_t i = 0; i < words; i++) {
		uint64_t w;
		memcpy(&w, b + i * 8, 8);
		if (w != pattern_word(seed, i)) {
			for (size_t off = i * 8;; off++)
				if (b[off] != pattern_byte(seed, off))
					return off;
		}
	}
	for (size_t off = words * 8; off < n; off++)
		if (b[off] != pattern_byte(seed, off))
			return off;
	return SIZE_MAX;
}

size_t harness_first_nonzero(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t off = 0;

	for (; off + 8 <= n; off += 8) {
		uint64_t w;
		memcpy(&w, b + off, 8);
		if (w)
			break;
	}
	for (; off < n; off++)
		if (b[off])
			return off;
	return SIZE_MAX;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

#define FILL_PIECE ((size_t)2 << 20)

void harness_fill_slowly(void *p, size_t n, uint64_t seed, unsigned pause_ms)
{
	for (size_t off = 0; off < n; off += FILL_PIECE) {
		size_t len = n - off < FILL_PIECE ? n - off : FILL_PIECE;
		harness_fill((char *)p + off, len, seed + off);
		if (pause_ms)
			sleep_ms(pause_ms);
	}
}

size_t harness_check_filled(const void *p, size_t n, uint64_t seed)
{
	for (size_t off = 0; off < n; off += FILL_PIECE) {
		size_t len = n - off < FILL_PIECE ? n - off : FILL_PIECE;
		size_t bad = harness_check((const char *)p + off, len, seed + off);
		if (bad != SIZE_MAX)
			return off + bad;
	}
	return SIZE_MAX;
}

void harness_touch(void *p, size_t n)
{
	volatile unsigned char *b = p;

	for (size_t off = 0; off < n; off += 4096)
		b[off] = 1;
	if (n)
		b[n - 1] = 1;
}
