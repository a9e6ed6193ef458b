#!/bin/bash
# Everyday programs under hpctl run --preload give exactly what they give
# without it: sort of a large file (its buffer is a large malloc: hpalloc
# maps it, HPALLOC_VERBOSE=2 says so), gzip and xz round trips (xz's
# dictionary is a large malloc too).  Python with SciPy is in
# tests/python/test_preload.py.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

preload_test_start
# mode=thp: the checks below name the backend, and under mode=auto a pool
# with free pages (another program's, a bench's) would be taken instead
preloaded() { "$HPCTL" run --check --preload mode=thp verbose=2 -- "$@"; }

# 4 million random lines, ~45 MiB
awk 'BEGIN { srand(13); for (i = 0; i < 4000000; i++) printf "%d %x\n", int(rand() * 1e9), i }' \
	>"$tmp/lines"
env LC_ALL=C sort -S 256M "$tmp/lines" >"$tmp/sorted.plain"
run preloaded env LC_ALL=C sort -S 256M -o "$tmp/sorted.hp" "$tmp/lines"
[ "$rc" = 0 ] || fail "sort under the preload library: exit $rc: $err"
cmp -s "$tmp/sorted.plain" "$tmp/sorted.hp" || fail "sort's output differs under the preload library"
ok
contains "$err" "thp map" "sort's buffer mapped by hpalloc"

# binary output: into files, not through $(...)
preloaded gzip -c "$tmp/lines" >"$tmp/lines.gz" 2>"$tmp/err" || fail "gzip: $(cat "$tmp/err")"
gzip -c "$tmp/lines" | cmp -s - "$tmp/lines.gz" || fail "gzip's output differs under the preload library"
ok
preloaded gzip -dc "$tmp/lines.gz" >"$tmp/back" 2>"$tmp/err" || fail "gunzip: $(cat "$tmp/err")"
cmp -s "$tmp/back" "$tmp/lines" || fail "gunzip under the preload library"
ok

if command -v xz >/dev/null; then
	# xz -6 allocates its dictionary and match finder (~90 MiB) whatever
	# the input; 1 MiB keeps the round trip to a second (the whole file took
	# four minutes on a CI machine)
	head -c 1M "$tmp/lines" >"$tmp/part"
	preloaded xz -6 -T1 -c "$tmp/part" >"$tmp/part.xz" 2>"$tmp/err" || fail "xz: $(cat "$tmp/err")"
	contains "$(cat "$tmp/err")" "thp map" "xz's dictionary mapped by hpalloc"
	xz -6 -T1 -c "$tmp/part" | cmp -s - "$tmp/part.xz" || fail "xz's output differs"
	ok
	preloaded xz -dc "$tmp/part.xz" >"$tmp/back" 2>"$tmp/err" || fail "xz -d: $(cat "$tmp/err")"
	cmp -s "$tmp/back" "$tmp/part" || fail "xz -d under the preload library"
	ok
else
	echo "NOTE: xz not installed: its round trip is not run" >&2
fi
done_ok
