#!/bin/bash
# bench-numa: what the numa knob costs on the allocation fast path, counted
# in instructions (callgrind), not time, so the number means something on a
# shared, noisy machine.
#
#   numa_cost.sh PROGRAM [POLICY...]
#
# For each policy (default: "default" and the ones given), PROGRAM (bench/
# numa_cost) runs twice under callgrind with only hp_malloc and hp_free
# collected (any thread), with 1000 and 11000 cached 64 MiB pairs; the
# difference / 10000 is the instructions of one cached malloc+free pair.
# docs/numa.md quotes the result next to the same count for the tree
# before the numa knob.
set -eu
prog=$1
shift
policies=("${@:-default}")
command -v valgrind >/dev/null || { echo "bench-numa: valgrind is not installed (Debian: valgrind)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/numa-cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Instructions collected in one run of PROGRAM PAIRS POLICY.
instructions() {
	local out=$tmp/cg.$1.$RANDOM args=("$1")
	[ "$2" = default ] || args+=("$2")
	valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
		--toggle-collect=hp_malloc --toggle-collect=hp_free \
		"$prog" "${args[@]}" 2>"$tmp/vg.log" || { cat "$tmp/vg.log" >&2; return 1; }
	# "summary: N": every thread's instructions inside the collected calls
	awk '/^summary:/ { s += $2 } END { print s + 0 }' "$out"*
}

printf '%-14s %s\n' policy "instructions per cached 64 MiB hp_malloc+hp_free pair"
for policy in "${policies[@]}"; do
	small=$(instructions 1000 "$policy")
	large=$(instructions 11000 "$policy")
	printf '%-14s %s\n' "$policy" "$(awk -v a="$small" -v b="$large" 'BEGIN { printf "%.1f", (b - a) / 10000 }')"
done
