#!/bin/bash
# lib/'s layers call one way: door/ < core/ < control/ < threads/ (lib/
# Makemodule.am, docs/architecture.md "The layers").  A file may call the
# files of its own layer and of the layers below it; a call up is allowed
# only if tests/layers.known lists it -- the calls the core still makes up
# into the threads and the control plane, each to be turned into the one
# interface the layer above installs.  This test fails on a call up that
# is not listed (a new one, or one put back), and on a listed one that is
# gone (so the list says the truth and only shrinks).
#
# Calls are read from the objects of the library's convenience archive:
# every undefined symbol of one member that another member defines is one
# arrow, file -> file.  Inline functions and macros of a header are no
# calls; a function pointer is no call either.
#   layers.sh ARCHIVE   (make check: lib/.libs/libhpalloc-core.a)
set -euo pipefail

src=${abs_top_srcdir:-${top_srcdir:-.}}
archive=${1:-lib/.libs/libhpalloc-core.a}
known=$src/tests/layers.known
[ -r "$archive" ] || { echo "layers: no $archive (build the library first)" >&2; exit 99; }

# member -> its source, with its layer folder ("libhpalloc_core_la-heap.o"
# -> "core/heap.c")
declare -A where
for f in "$src"/lib/*/*.c; do
	rel=${f#"$src"/lib/}
	where[libhpalloc_core_la-$(basename "$f" .c).o]=$rel
done
rank() {
	case ${1%%/*} in
	door) echo 0 ;; core) echo 1 ;; control) echo 2 ;; threads) echo 3 ;;
	*) echo "layers: ${1%%/*}/ is no layer: add it to tests/layers.sh" >&2; exit 99 ;;
	esac
}

# "from to symbol" for every call between two members
arrows=$(nm -A "$archive" 2>/dev/null | awk '
	{ split($1, a, ":"); member = a[2] }
	$2 == "U" { need[member, $3] = 1; next }
	$2 ~ /^[TDBRCGS]$/ { owner[$3] = member }
	END { for (k in need) { split(k, b, SUBSEP); if (b[2] in owner && owner[b[2]] != b[1]) print b[1], owner[b[2]], b[2] } }' |
	sort -u)
[ -n "$arrows" ] || { echo "layers: no call read from $archive: the scanner is broken" >&2; exit 99; }

ups=""
while read -r from to sym; do
	f=${where[$from]:-} t=${where[$to]:-}
	[ -n "$f" ] && [ -n "$t" ] || { echo "layers: $from or $to has no source under lib/*/" >&2; exit 99; }
	if [ "$(rank "$f")" -lt "$(rank "$t")" ]; then
		ups+="$f -> $t: $sym"$'\n'
	fi
done <<<"$arrows"
ups=$(printf '%s' "$ups" | sort -u)

# The scanner must see what it looks for: a call down it knows of.
grep -q '^libhpalloc_core_la-os.o libhpalloc_core_la-prim.o prim_map_hugetlb$' <<<"$arrows" ||
	{ echo "layers: the call core/os.c -> door/prim.c (prim_map_hugetlb) was not seen: the scanner is broken" >&2; exit 99; }

listed=$({ grep -v -e '^#' -e '^$' "$known" || true; } | sort -u)
new=$(comm -23 <(printf '%s\n' "$ups") <(printf '%s\n' "$listed") | grep -v '^$' || true)
gone=$(comm -13 <(printf '%s\n' "$ups") <(printf '%s\n' "$listed") | grep -v '^$' || true)
status=0
if [ -n "$new" ]; then
	echo "calls up a layer that tests/layers.known does not list (call down, or through the layer's interface):" >&2
	printf '  %s\n' $'\n'"$new" | sed '/^  $/d' >&2
	status=1
fi
if [ -n "$gone" ]; then
	echo "tests/layers.known lists calls up that are gone: take them off the list" >&2
	printf '  %s\n' $'\n'"$gone" | sed '/^  $/d' >&2
	status=1
fi
[ $status -ne 0 ] || echo "lib/: $(wc -l <<<"$arrows") calls between files, $(grep -c . <<<"$ups" || true) up a layer, all listed"
exit $status
