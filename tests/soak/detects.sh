#!/bin/bash
# tests/soak/detects.sh -- the soak's checks can fail (docs/soak.md).
#
# A short soak of a few seconds passes; the same soak with a fault planted
# in its workload fails, naming it:
#   --inject corrupt  one byte of a live block flipped behind the
#                     allocator's back: the workload's check of the block's
#                     contents (before its free, realloc or a look) aborts
#                     with the block's history;
#   --inject foreign  a huge mapping that is no block of hpalloc's: the
#                     driver's check of smaps against the published counters
#                     finds more huge memory than live + cached + releasing.
# Root: the soak reserves hugetlb pages and makes a memory cgroup.
. "${top_srcdir:-.}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "the soak reserves hugetlb pages and makes a memory cgroup"
py=${PYTHON:-python3}
soak() {
	"$py" "${top_srcdir:-.}/tests/soak/soak.py" --builddir "${abs_top_builddir:-$PWD}" \
		--progress 0 --seed 7 "$@" > "$tmp/out" 2>&1
	status=$?
}
show() { sed 's/^/    | /' "$tmp/out" >&2; }

soak --seconds 6
[ "$status" -eq 0 ] || { show; fail "a clean 6 s soak failed (exit $status)"; }
grep -q '^  violations      0$' "$tmp/out" || { show; fail "a clean soak did not report 0 violations"; }
grep -Eq '^  checks made     [1-9][0-9]* invariant checks' "$tmp/out" || { show; fail "no checks counted"; }
ok

soak --seconds 6 --no-plain --inject corrupt
[ "$status" -eq 1 ] || { show; fail "a flipped byte: the soak exited $status, not 1"; }
grep -q 'injected: one byte of block' "$tmp/out" || { show; fail "the corruption was not planted"; }
grep -q 'CONTENTS MISMATCH' "$tmp/out" || { show; fail "a flipped byte went unnoticed"; }
grep -q 'history of block' "$tmp/out" || { show; fail "the mismatch came without the block's history"; }
ok

soak --seconds 6 --no-plain --inject foreign
[ "$status" -eq 1 ] || { show; fail "a foreign huge mapping: the soak exited $status, not 1"; }
grep -q 'VIOLATION.*huge mappings outside every live block' "$tmp/out" ||
	{ show; fail "a foreign huge mapping went unnoticed"; }
ok

done_ok
