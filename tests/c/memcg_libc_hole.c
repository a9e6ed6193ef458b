/* A fresh block in a memory cgroup near its limit, while libc holds free
 * memory (issue 34, make bench's reuse-pressure row).
 *
 * glibc keeps the heap memory a program freed below a chunk still in use:
 * resident, charged, and with no swap the kernel cannot take it.  Without
 * hpalloc the program's next large buffer comes from there (glibc looks in
 * its free lists before it maps): no new charge.  hpalloc mapped a fresh
 * huge block instead -- charged on top, up to the limit, where the next
 * page fault finds nothing to reclaim and the OOM killer kills the process
 * (the bench's row under load: 2 of 6 processes killed where NumPy's
 * default ran on, and the limit hit in most of the rest).
 *   - One step, deterministic: a 128 MiB hole in libc's heap, the cgroup
 *     filled to 65 MiB under its limit, hp_malloc(64 MiB) written whole:
 *     the cgroup's peak grows by less than a quarter of the block (before:
 *     by the whole block, to 1 MiB under the limit), contents intact,
 *     freed as any block; as glibc alone does (the control, mode=off).
 *   - The bench's row in C: a ballast, 4 x 64 MiB made, written, freed, and
 *     256 MiB of 256 KiB buffers made and freed, 16 rounds, in a cgroup
 *     where the freed memory, all kept, would not fit: no OOM kill and the
 *     limit never hit, as with glibc alone (the control).
 * The kernel's numbers judge: the cgroup's peak (max_usage_in_bytes, reset
 * before the step), its failcnt, its OOM kills, the child's exit status.
 * Root and a memory controller (tests/c/memcg_util.c). */
#include "harness.h"
#include "memcg_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define LIMIT (512 * MiB)
#define BLOCK (64 * MiB)
#define SMALL (256 * KiB)

/* glibc's heap is the subject: ASan's allocator replaces it (and keeps
 * 256 MiB of freed memory in its quarantine). */
static void need_glibc_heap(void)
{
#if defined(__SANITIZE_ADDRESS__)
	harness_skip("ASan's malloc replaces glibc's: no glibc heap to hold free memory (the plain build runs this)");
#endif
}

static void knobs(const char *mode)
{
	harness_knob("mode", mode);
	harness_knob("threshold", "1M");
}

/* child(mode) in a fresh cgroup limited to LIMIT: it must exit 0 with no
 * OOM kill; its exit 5 says what went wrong (why5). */
static void in_cgroup(int (*child)(void *), const char *mode, const char *why5)
{
	need_glibc_heap();
	harness_need_thp();
	tmemcg_make(LIMIT);
	int status = tmemcg_spawn(child, (void *)mode);
	size_t kills = tmemcg_oom_kills();
	tmemcg_remove();
	if (WIFEXITED(status) && WEXITSTATUS(status) == 5)
		fail_msg("mode=%s: %s", mode, why5);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("mode=%s: %s (%zu OOM kills)", mode, tmemcg_status_text(status), kills);
	assert_int_equal(kills, 0);
}

/* n buffers of SMALL through hpalloc's small path (libc's), each written. */
static void **smalls(size_t n)
{
	void **v = calloc(n, sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		v[i] = hp_malloc(SMALL);
		if (!v[i])
			return NULL;
		memset(v[i], 1, SMALL);
	}
	return v;
}

static void free_smalls(void **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		hp_free(v[i]);
	free(v);
}

/* Ballast of SMALL buffers until the cgroup has about `left` free. */
static void **ballast_to(size_t left, size_t *n)
{
	size_t usage = tmemcg_usage();
	*n = usage + left < LIMIT ? (LIMIT - usage - left) / SMALL : 0;
	return smalls(*n);
}

/* ---- one step ---------------------------------------------------------------- */

static int one_step_child(void *arg)
{
	knobs(arg);
	const size_t hole_n = 128 * MiB / SMALL;
	/* glibc maps a first 256 KiB chunk and, once it is freed, keeps such
	 * chunks in its heap (its dynamic mmap threshold), as in any program
	 * that has freed one */
	hp_free(hp_malloc(SMALL));
	size_t nb;
	void **ballast = ballast_to(128 * MiB + BLOCK + MiB, &nb);
	void **hole = smalls(hole_n);
	void *cap = hp_malloc(SMALL); /* in use above the hole: libc cannot trim it */
	if (!ballast || !hole || !cap)
		return 2;
	free_smalls(hole, hole_n);
	size_t before = tmemcg_usage(), hits = tmemcg_limit_hits();
	bool peak = tmemcg_reset_peak(); /* else the usage after the fill judges */
	char *p = hp_malloc(BLOCK);
	if (!p)
		return 3;
	harness_fill_slowly(p, BLOCK, 5, 0);
	size_t top = peak ? tmemcg_peak() : tmemcg_usage();
	size_t grew = top > before ? top - before : 0;
	print_message("  mode=%s: %zu MiB free before, the block's peak growth %zu MiB, "
		      "limit hits %zu\n", (const char *)arg, (LIMIT - before) >> 20, grew >> 20,
		      tmemcg_limit_hits() - hits);
	if (harness_check_filled(p, BLOCK, 5) != SIZE_MAX)
		return 4;
	hp_free(p);
	hp_free(cap);
	free_smalls(ballast, nb);
	return grew < BLOCK / 4 ? 0 : 5;
}

static void one_step(const char *mode)
{
	in_cgroup(one_step_child, mode, "a fresh 64 MiB block near the limit was charged whole "
		  "while libc held 128 MiB free");
}

static void test_one_step_libc_alone(void **state)
{
	(void)state;
	one_step("off");
}

static void test_one_step(void **state)
{
	(void)state;
	one_step("thp");
}

/* ---- the bench's row ---------------------------------------------------------- */

#define ROUNDS 16
#define ARRAYS 4
#define CHURN (256 * MiB)

static int arrays(void)
{
	void *held[ARRAYS];
	for (int i = 0; i < ARRAYS; i++) {
		held[i] = hp_malloc(BLOCK);
		if (!held[i])
			return -1;
		memset(held[i], 1, BLOCK);
	}
	for (int i = 0; i < ARRAYS; i++)
		hp_free(held[i]);
	return 0;
}

static int churn(void)
{
	void **v = smalls(CHURN / SMALL);
	if (!v)
		return -1;
	free_smalls(v, CHURN / SMALL);
	return 0;
}

static int row_child(void *arg)
{
	knobs(arg);
	size_t nb;
	/* live + the churn + half of the arrays fit; the freed arrays kept too
	 * would not (bench/numpy_workloads.py reuse()) */
	void **ballast = ballast_to(CHURN + ARRAYS * BLOCK / 2, &nb);
	if (!ballast)
		return 2;
	for (int r = 0; r < 2; r++)
		if (arrays() || churn())
			return 3;
	size_t hits = tmemcg_limit_hits();
	for (int r = 0; r < ROUNDS; r++)
		if (arrays() || churn())
			return 3;
	hits = tmemcg_limit_hits() - hits;
	print_message("  mode=%s: %d rounds, the limit hit %zu times\n", (const char *)arg, ROUNDS, hits);
	free_smalls(ballast, nb);
	return hits ? 5 : 0;
}

static void row(const char *mode)
{
	in_cgroup(row_child, mode, "the reuse rounds hit the limit (glibc alone never does)");
}

static void test_row_libc_alone(void **state)
{
	(void)state;
	row("off");
}

static void test_row(void **state)
{
	(void)state;
	row("thp");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_one_step_libc_alone),
		HTEST(test_one_step),
		HTEST(test_row_libc_alone),
		HTEST(test_row),
	};
	harness_init(argc, argv);
	return harness_run("memcg_libc_hole", tests, ARRAY_SIZE(tests));
}
