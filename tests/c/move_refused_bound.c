/* A move the kernel refuses before it cleared its destination leaves the
 * reservation hpalloc was moving into (lib/door/prim.c prim_move_into): nothing
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

/* Whether a PROT_NONE mapping (a reservation) holds addr. */
static bool reserved_at(const void *addr)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long start, end;
		char perms[8] = "";
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start <= (uintptr_t)addr &&
		    (uintptr_t)addr < end)
			found = strncmp(perms, "---", 3) == 0;
	}
	fclose(f);
	return found;
}

/* The reservation of the move just refused is still there (none refused:
 * false). */
static bool left_behind(void)
{
	void *dest = fault_move_refused_dest();
	return dest && reserved_at(dest);
}

static uint64_t stranded(void)
{
	return harness_stat(HP_STAT_STRANDED_RESERVATIONS);
}

/* One grow of a block that cannot grow in place (a page mapped after its
 * guard), while the kernel refuses the move into the reservation: the
 * realloc keeps every byte all the same. */
static void grow_refused(int i, int *left)
{
	char *p = hp_malloc(4 * MiB);
	assert_non_null(p);
	harness_fill(p, 4 * MiB, (uint64_t)i);
	void *neighbour = harness_block_neighbour(p, 4 * MiB);
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_REFUSED, 1);
	char *q = hp_realloc(p, 16 * MiB);
	*left += left_behind();
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
static bool shared_refused(int i, int *left)
{
	int fd;
	fault_mremap_fixed(ENOMEM, FAULT_MOVE_REFUSED, 1);
	fault_map_off_boundary(1);
	char *p = hp_shared_alloc(4 * MiB, 0, &fd);
	int err = errno;
	*left += left_behind();
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

/* ROUNDS refusals of one kind, twice: in the first batch reservations
 * may be left behind, each counted, fewer than ROUNDS; in the second none
 * (the bound was reached: nothing is moved any more) and every request of
 * it succeeds. */
static void refused_twice(bool grow)
{
	harness_knob("mode", "thp");
	harness_knob("threshold", "2M");
	harness_knob("cache_max", "0");
	harness_knob("populate", "off");
	harness_janitor_start();
	for (int batch = 0; batch < 2; batch++) {
		int left = 0, placed = 0;
		uint64_t counted = stranded();
		for (int i = 0; i < ROUNDS; i++) {
			if (grow) {
				grow_refused(i, &left);
				placed++;
			} else {
				placed += shared_refused(i, &left);
			}
		}
		counted = stranded() - counted;
		fprintf(stderr, "%s, batch %d: %d moves to refuse, %d requests served, %d reservations left, "
			"%llu counted\n", grow ? "grow" : "shared", batch, ROUNDS, placed, left,
			(unsigned long long)counted);
		if (left >= ROUNDS)
			fail_msg("batch %d: each of %d refused moves left its reservation: no bound", batch, ROUNDS);
		if ((uint64_t)left != counted)
			fail_msg("batch %d: %d reservations left, %llu counted", batch, left,
				 (unsigned long long)counted);
		if (batch == 1 && (left || placed != ROUNDS))
			fail_msg("past the bound: %d more reservations left, %d of %d requests served", left, placed,
				 ROUNDS);
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
