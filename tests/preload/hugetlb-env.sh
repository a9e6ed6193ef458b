#!/bin/bash
# HUGETLB_* variables mean nothing to a program using hpalloc: libhugetlbfs,
# whose constructor honours them in every program it is loaded into, is not
# loaded -- not into a program under hpctl run --preload, nor into one
# linked against libhpalloc, nor into hpctl.  (A setuid program:
# tests/cli/hugetlb-env-setuid.sh.)
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

export HUGETLB_VERBOSE=99 HUGETLB_DEBUG=1
LIB=${HPALLOC_TEST_PRELOAD:?make check sets HPALLOC_TEST_PRELOAD}

# quiet WHAT: nothing of libhugetlbfs on stderr or stdout
quiet() {
	case "$out$err" in
	*libhugetlbfs*|*HUGETLB*) fail "$1 printed libhugetlbfs's messages: $err$out" ;;
	esac
	ok
}

if [ -z "${SANITIZER_FLAGS:-}" ]; then
	HPALLOC_PRELOAD_PATH=$LIB expect 0 "$HPCTL" run --preload -- /bin/true
	quiet "hpctl run --preload -- /bin/true"
	[ -z "$err" ] || fail "hpctl run --preload -- /bin/true printed: $err"
	HPALLOC_PRELOAD_PATH=$LIB expect 0 "$HPCTL" run --preload -- cat /proc/self/maps
	contains "$out" "${LIB##*/}" "the preload library in cat's maps"
	quiet "a preloaded cat"
	case $out in *libhugetlbfs*) fail "libhugetlbfs is mapped into a preloaded program" ;; esac
	ok
else
	note_skip other "the preloaded program (AddressSanitizer cannot be combined with a malloc interposer)"
fi

# linked against libhpalloc (a libtool wrapper runs the real binary)
expect 0 "$KNOBWATCH" -t 0.1 threshold
quiet "knobwatch"
expect 0 "$HPCTL" status
quiet "hpctl status"
done_ok
