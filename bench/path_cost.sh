#!/bin/bash
# bench-paths: the instructions of one hp_malloc + hp_free pair on each
# allocation path (bench/path_cost.c says which), counted by callgrind
# inside hp_malloc and hp_free only (any thread): runs with 1000 and 11000
# pairs, the difference / 10000.  A count, not a time: it means the same
# on a busy machine, and a restructuring must leave it within 2 % (issue 48).
#   path_cost.sh PROGRAM [PATH...]   (default: small resident offered)
set -eu
prog=$1
shift
paths=("${@:-small}")
[ $# -gt 0 ] || paths=(small resident offered)
command -v valgrind >/dev/null || { echo "bench-paths: valgrind is not installed (Debian: valgrind)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/path-cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Instructions collected in one run of PROGRAM PATH PAIRS.
instructions() {
	local out=$tmp/cg.$1.$2
	valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
		--toggle-collect=hp_malloc --toggle-collect=hp_free \
		"$prog" "$1" "$2" 2>"$tmp/vg.log" || { cat "$tmp/vg.log" >&2; return 1; }
	awk '/^summary:/ { s += $2 } END { print s + 0 }' "$out"*
}

printf '%-10s %s\n' path "instructions per hp_malloc+hp_free pair"
for path in "${paths[@]}"; do
	few=$(instructions "$path" 1000)
	many=$(instructions "$path" 11000)
	printf '%-10s %s\n' "$path" "$(awk -v a="$few" -v b="$many" 'BEGIN { printf "%.1f", (b - a) / 10000 }')"
done
