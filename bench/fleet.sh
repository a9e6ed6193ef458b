#!/bin/bash
# bench-fleet: how long `hpctl stats` takes with many processes using
# hpalloc (issue 16's target: 50 processes, 50 rows and a total, within
# 0.5 s).  Starts N holders (tests/cli/holder, 2 MiB each) in a private
# control directory, waits until every one has published, then times R runs
# of `hpctl stats` and of `hpctl --json stats` (wall clock, after one
# untimed run) and prints median, min and max with PASS/MISS.
#
#   fleet.sh [-n PROCESSES] [-r RUNS]       (defaults 50 and 21)
#
# Run through tests/run-test (make bench-fleet): one at a time on the machine.
set -u
builddir=${top_builddir:-.}
HPCTL=${HPCTL:-$builddir/tools/hpctl}
HOLDER=${HOLDER:-$builddir/tests/cli/holder}
n=50 runs=21 target_ms=500
while getopts n:r: opt; do
	case $opt in
	n) n=$OPTARG ;;
	r) runs=$OPTARG ;;
	*) echo "usage: fleet.sh [-n PROCESSES] [-r RUNS]" >&2; exit 2 ;;
	esac
done
for f in "$HPCTL" "$HOLDER"; do
	[ -x "$f" ] || { echo "fleet.sh: $f not built (make bench-fleet builds it)" >&2; exit 1; }
done

tmp=$(mktemp -d "${HPALLOC_TEST_TMPDIR:-${TMPDIR:-/tmp}}/fleet.XXXXXX") || exit 1
export HPALLOC_CONTROL_DIR=$tmp/control
mkdir -m 0755 "$HPALLOC_CONTROL_DIR"
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

for i in $(seq "$n"); do
	"$HOLDER" -t 600 2M >"$tmp/holder.$i" 2>&1 &
	pids+=("$!")
done
deadline=$(( $(date +%s) + 60 ))
while :; do
	ready=$(ls "$HPALLOC_CONTROL_DIR/proc" 2>/dev/null | wc -l)
	[ "$ready" -ge "$n" ] && break
	[ "$(date +%s)" -ge "$deadline" ] && { echo "fleet.sh: only $ready of $n published" >&2; exit 1; }
	sleep 0.1
done
rows=$("$HPCTL" stats | awk 'NR > 1 && $1 != "total"' | wc -l)
[ "$rows" = "$n" ] || { echo "fleet.sh: $rows rows for $n processes" >&2; exit 1; }

# time_ms CMD...: wall time of one run, in ms with two decimals
time_ms() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1
	t1=$(date +%s%N)
	awk -v d=$(( t1 - t0 )) 'BEGIN { printf "%.2f\n", d / 1e6 }'
}

# measure NAME CMD...: median/min/max of $runs runs, PASS/MISS against target
measure() {
	local name=$1 i
	shift
	"$@" >/dev/null 2>&1 # warm: page cache, the binary
	for i in $(seq "$runs"); do time_ms "$@"; done | sort -n >"$tmp/times"
	awk -v name="$name" -v n="$n" -v runs="$runs" -v target="$target_ms" '
		{ t[NR] = $1 }
		END {
			med = t[int((NR + 1) / 2)]
			printf "%-26s %3d processes  median %7.2f ms  min %7.2f  max %7.2f  (%d runs)  target %d ms: %s\n",
				name, n, med, t[1], t[NR], runs, target, med <= target ? "PASS" : "MISS"
		}' "$tmp/times"
}

echo "bench-fleet: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) (shared machine: wall times are noisy)"
measure "hpctl stats" "$HPCTL" stats
measure "hpctl --json stats" "$HPCTL" --json stats
measure "hpctl stats --long" "$HPCTL" stats --long
