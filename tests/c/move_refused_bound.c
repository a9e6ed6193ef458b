/* A move the kernel refuses before it cleared its destination leaves the
 * reservation hpalloc was moving into (lib/prim.c prim_move_into): nothing
 * tells it from a mapping another thread made where the kernel did clear
 * the destination, so it stays for good -- address space, no memory, but
 * one mapping of the map count each.  Repeated refusals (staged with
 * tests/c/fault.c) must not pile them up without bound (issue 45): each is
 * counted (stranded_reservations, in hpctl stats and the metrics), and
 * after a bound nothing is moved any more -- a grow copies, a block that
 * needs a boundary is placed by hint -- so the mappings stop growing while
 * every request still succeeds with every byte.  Its own program: the
 * bound is the process's for good. */
#include "harness.h"
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define ROUNDS 40

/* Lines of /proc/self/maps, and the bytes of PROT_NONE mappings. */
static int maps_lines(size_t *none_bytes)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	*none_bytes = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end;
		char perms[8] = "";
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && strncmp(perms, "---", 3) == 0)
			*none_bytes += end - start;
		n++;
	}
	fclose(f);
	return n;
}

static uint64_t stranded(void)
{
	return harness_stat(HP_STAT_STRANDED_RESERVATIONS);
}

/* One grow of a block that cannot grow in place (a page mapped after its
 * guard), while the kernel refuses the move into the reservation: the
 * realloc keeps every byte all the same. */
static void grow_refused(int i)
{
	char *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	harness_fill(p, 4 * MiB, (uint64_t)i);
	void *neighbour = harness_block_neighbour(p, 4 * MiB);
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_REFUSED, 1);
	char *q = hp_realloc(p, 16 * MiB);
	fault_mremap_fixed(0, FAULT_MOVE_REFUSED, 0);
	assert_non_null(q);
	assert_filled(q, 4 * MiB, (uint64_t)i);
	harness_fill(q, 16 * MiB, (uint64_t)i + 100);
	assert_filled(q, 16 * MiB, (uint64_t)i + 100);
	hp_free(q);
	if (neighbour)
		munmap(neighbour, 4096);
}

/* One shared block placed off a boundary, whose move is refused: ENOMEM,
 * or (placed by hint) a block on a boundary that keeps its bytes.  Whether
 * it was placed. */
static bool shared_refused(int i)
{
	int fd;
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_REFUSED, 1);
	fault_map_off_boundary(1);
	char *p = hp_shared_alloc(4 * MiB, 0, &fd);
	int err = errno;
	fault_mremap_fixed(0, FAULT_MOVE_REFUSED, 0);
	fault_map_off_boundary(0);
	if (!p) {
		assert_int_equal(err, ENOMEM);
		return false;
	}
	assert_int_equal((uintptr_t)p % (2 * MiB), 0);
	harness_fill(p, 4 * MiB, (uint64_t)i);
	assert_filled(p, 4 * MiB, (uint64_t)i);
	assert_int_equal(hp_shared_free(p), 0);
	return true;
}

/* ROUNDS refusals of one kind, twice: the first batch may leave
 * reservations (each counted), fewer than ROUNDS; the second leaves none
 * (the bound was reached: nothing is moved any more) and every request of
 * it succeeds.  (Two mappings of slack: the harness's own.) */
static void refused_twice(bool grow)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
	harness_knob("populate", "off");
	harness_janitor_start();
	for (int batch = 0; batch < 2; batch++) {
		size_t none_before, none_after;
		int before = maps_lines(&none_before), placed = 0;
		uint64_t counted = stranded();
		for (int i = 0; i < ROUNDS; i++)
			placed += grow ? (grow_refused(i), 1) : shared_refused(i);
		hp_release_drain();
		int after = maps_lines(&none_after);
		uint64_t left = stranded() - counted;
		fprintf(stderr, "%s, batch %d: %d refused moves, %d placed, %llu reservations left (counted), "
			"%d more mappings, %zu KiB more PROT_NONE\n", grow ? "grow" : "shared", batch, ROUNDS,
			placed, (unsigned long long)left, after - before, (none_after - none_before) >> 10);
		if (after - before > (int)left + 2)
			fail_msg("batch %d: %d refused moves left %d mappings behind, %llu counted", batch, ROUNDS,
				 after - before, (unsigned long long)left);
		if (left >= ROUNDS)
			fail_msg("batch %d: each of %d refused moves left its reservation: no bound", batch, ROUNDS);
		if (batch == 1 && (left || placed != ROUNDS))
			fail_msg("past the bound: %llu more reservations left, %d of %d placed",
				 (unsigned long long)left, placed, ROUNDS);
	}
}

static void test_grow_refused(void **state)
{
	(void)state;
	refused_twice(true);
}

static void test_shared_refused(void **state)
{
	(void)state;
	refused_twice(false);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		HTEST(test_grow_refused),
		HTEST(test_shared_refused),
	};
	harness_init(argc, argv);
	return harness_run("move_refused_bound", tests, ARRAY_SIZE(tests));
}
