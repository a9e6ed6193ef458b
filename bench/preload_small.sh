#!/bin/bash
# make bench-preload-small: what libhpalloc-preload.so adds to the
# allocations it leaves to glibc (issue 13).  Runs bench/preload_small
# ROUNDS times without and with the preload library, alternating which goes
# first, and prints per case the median ns per operation of each and the
# difference.
#
#     preload_small.sh PROGRAM PRELOAD_LIBRARY [ROUNDS] [ITERATIONS]
set -euo pipefail
prog=$1 lib=$2 rounds=${3:-7} iters=${4:-20000000}
[ -x "$prog" ] && [ -f "$lib" ] || { echo "usage: $0 PROGRAM PRELOAD_LIBRARY [ROUNDS] [ITERATIONS]" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # $1: contender name
	if [ "$1" = preload ]; then
		LD_PRELOAD=$lib "$prog" "$iters"
	else
		"$prog" "$iters"
	fi | sed "s/^/$1 /" >>"$out"
}
for ((r = 0; r < rounds; r++)); do
	if ((r % 2)); then run preload; run glibc; else run glibc; run preload; fi
done
# lines: contender case size ns
awk '
function median(key,   n, i, j, t, a) {
	n = split(vals[key], a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ key = $2 " " $3; vals[$1 "|" key] = vals[$1 "|" key] " " $4; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
END {
	print "| operation | size | glibc ns | with libhpalloc-preload.so ns | difference ns |"
	print "|---|---:|---:|---:|---:|"
	for (i = 1; i <= n; i++) {
		split(order[i], k, " ")
		g = median("glibc|" order[i]); p = median("preload|" order[i])
		printf "| %s | %s | %.2f | %.2f | %+.2f |\n", k[1], k[2], g, p, p - g
	}
}' "$out"
