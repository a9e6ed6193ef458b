#!/bin/bash
# run.sh — make fuzz-run: each libFuzzer target in turn, for a while, over
# its corpus.
#
#   run.sh --seconds N [--jobs J] --corpus DIR --bin DIR TARGET...
#
# For each TARGET: DIR(bin)/fuzz-TARGET runs N seconds over a scratch
# directory (where new inputs go) and DIR(corpus)/TARGET (read only: the
# tree is never written).  A crash, leak, UB report, timeout (10 s per
# input), out-of-memory or broken promise (the target aborts) fails the
# target: its log and the input that did it are kept, and their paths
# printed.  At the end one line per target: executions, coverage (cov:
# edges, ft: features), the corpus it ended with, and the verdict; the exit
# status is 1 if any target failed.  --jobs J runs J targets at a time
# (each is one process on one CPU; their reports print as each ends).  FUZZ_KEEP=1 keeps every scratch
# directory (to add what was found to the tree: see docs/fuzzing.md).
set -u

seconds=60 jobs=1 corpus= bin=
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--corpus) corpus=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
if [ -z "$corpus" ] || [ -z "$bin" ] || [ $# -eq 0 ]; then
	echo "usage: run.sh --seconds N --corpus DIR --bin DIR TARGET..." >&2
	exit 2
fi
case $seconds in '' | *[!0-9]*) echo "run.sh: --seconds takes a whole number" >&2; exit 2 ;; esac
case $jobs in '' | 0 | *[!0-9]*) echo "run.sh: --jobs takes a whole number above 0" >&2; exit 2 ;; esac

# fuzz_one TARGET: runs it, prints its report, writes its summary line to
# $results/TARGET; fails if the target did.
fuzz_one() {
	local target=$1 exe seeds scratch rc done_line execs cov ft corp artifacts verdict a
	exe=$bin/fuzz-$target
	seeds=$corpus/$target
	if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
		echo "run.sh: $target: no $exe or no $seeds" >&2
		printf '%-12s %s\n' "$target" MISSING >"$results/$target"
		return 1
	fi
	scratch=$(mktemp -d "${TMPDIR:-/tmp}/hpalloc-fuzz-$target.XXXXXX")
	mkdir "$scratch/corpus" "$scratch/artifacts"
	echo "==== fuzz-$target: ${seconds}s over $seeds (+ $scratch/corpus)"
	"$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$scratch/artifacts/" \
		"$scratch/corpus" "$seeds" >"$scratch/log" 2>&1
	rc=$?
	done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$scratch/log" | tail -n 1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/log" | tail -n 1)
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
	corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$done_line")
	artifacts=$(ls -A "$scratch/artifacts")
	if [ $rc -ne 0 ] || [ -n "$artifacts" ]; then
		verdict="FAILED (exit $rc)"
		echo "---- fuzz-$target FAILED (exit $rc); the end of its log ($scratch/log):"
		tail -n 60 "$scratch/log"
		for a in $artifacts; do
			echo "---- input that did it: $scratch/artifacts/$a"
			od -c "$scratch/artifacts/$a" | head -n 20
		done
	else
		verdict=ok
		tail -n 3 "$scratch/log"
		[ "${FUZZ_KEEP:-0}" = 1 ] || rm -rf "$scratch"
	fi
	printf '%-12s execs %-10s cov %-6s ft %-6s corpus %-12s %s\n' "$target" \
		"${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$verdict" >"$results/$target"
	[ "$verdict" = ok ]
}

results=$(mktemp -d "${TMPDIR:-/tmp}/hpalloc-fuzz-results.XXXXXX")
trap 'rm -rf "$results"' EXIT
failed=0 running=0
for target in "$@"; do
	# each report is printed whole when its target ends
	{ fuzz_one "$target" >"$results/$target.out" 2>&1; rc=$?; cat "$results/$target.out"; exit $rc; } &
	running=$((running + 1))
	if [ "$running" -ge "$jobs" ]; then
		wait -n || failed=1
		running=$((running - 1))
	fi
done
while [ "$running" -gt 0 ]; do
	wait -n || failed=1
	running=$((running - 1))
done
summary=()
for target in "$@"; do
	summary+=("$(cat "$results/$target")")
done

echo
echo "==== fuzz-run: ${seconds}s per target"
printf '%s\n' "${summary[@]}"
exit $failed
