/* What libhpalloc-preload.so costs an allocation it leaves to glibc
 * (issue 13: "no more than a few nanoseconds, measured"): ns per
 * malloc+free pair, calloc+free, realloc within the small range, and
 * malloc_usable_size, for sizes below any threshold.  Run it with and
 * without LD_PRELOAD (bench/preload_small.sh interleaves the two and takes
 * medians); it only prints what one process measured.
 *
 *     preload_small [ITERATIONS]
 *
 * Output: one line per case, "case size ns_per_op". */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Stores the pointer where the compiler cannot prove nobody reads it, so
 * a malloc/free pair is not optimised away (gcc knows their semantics). */
static void *volatile sink;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Eight blocks in flight, so the pair is not always the same chunk. */
#define LIVE 8

static double pairs(size_t size, long n)
{
	void *p[LIVE] = {0};
	double t = now_ns();
	for (long i = 0; i < n; i++) {
		int k = i % LIVE;
		free(p[k]);
		p[k] = malloc(size);
		sink = p[k];
	}
	t = now_ns() - t;
	for (int k = 0; k < LIVE; k++)
		free(p[k]);
	return t / n;
}

static double calloc_pairs(size_t size, long n)
{
	double t = now_ns();
	for (long i = 0; i < n; i++) {
		sink = calloc(1, size);
		free(sink);
	}
	return (now_ns() - t) / n;
}

static double reallocs(size_t size, long n)
{
	void *p = malloc(size);
	double t = now_ns();
	for (long i = 0; i < n; i++) {
		p = realloc(p, size + (size_t)(i & 1) * size);
		sink = p;
	}
	t = now_ns() - t;
	free(p);
	return t / n;
}

static double usable(size_t size, long n)
{
	void *p = malloc(size);
	size_t sum = 0;
	double t = now_ns();
	for (long i = 0; i < n; i++) {
		sink = p;
		sum += malloc_usable_size(sink);
	}
	t = now_ns() - t;
	free(p);
	return sum ? t / n : -1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000000;
	static const size_t sizes[] = {16, 64, 512, 4096, 65536};

	pairs(64, n / 10); /* warm-up: glibc's arena, the interposer's init */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		printf("malloc+free %zu %.2f\n", sizes[i], pairs(sizes[i], n));
	printf("calloc+free 64 %.2f\n", calloc_pairs(64, n));
	printf("realloc 64 %.2f\n", reallocs(64, n));
	printf("malloc_usable_size 64 %.2f\n", usable(64, n));
	return 0;
}
