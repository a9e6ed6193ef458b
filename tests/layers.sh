#!/bin/bash
# lib/'s layers call one way: door/ < core/ < control/ < threads/ (lib/
# Makemodule.am, docs/architecture.md "The layers").  A file may call the
# files of its own layer and of the layers below it, never one above: what
# the core must start, wake or tell the layers above, they gave it when
# they joined (lib/core/internal.h, "the layers above join the core").
# This test fails on any call up a layer, naming it.
#
# Calls are read from the objects of the library's convenience archive:
# every undefined symbol of one member that another member defines is one
# arrow, file -> file.  Inline functions and macros of a header are no
# calls; a function pointer is no call either.
#   layers.sh ARCHIVE   (make check: lib/.libs/libhpalloc-core.a)
set -euo pipefail

src=${abs_top_srcdir:-${top_srcdir:-.}}
archive=${1:-lib/.libs/libhpalloc-core.a}
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

if [ -n "$ups" ]; then
	echo "calls up a layer (call down, or through the interface the layer above gave the core):" >&2
	sed 's/^/  /' <<<"$ups" >&2
	exit 1
fi
echo "lib/: $(wc -l <<<"$arrows") calls between files, none up a layer"

