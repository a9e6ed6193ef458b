#!/bin/bash
# A setuid program linked against libhpalloc ignores HUGETLB_* as it ignores
# HPALLOC_*: libhugetlbfs, whose constructor honours those variables even in
# secure execution, is not loaded.  knobwatch linked against a copy of the
# build's libhpalloc.so.1 in a directory the user nobody can enter (an
# absolute RUNPATH: a setuid program ignores LD_LIBRARY_PATH), setuid root,
# run by nobody with HUGETLB_VERBOSE=99 HUGETLB_DEBUG=1: no word of
# libhugetlbfs, and the default threshold (secure execution); the same
# binary without the setuid bit sees HPALLOC_THRESHOLD (so the test can
# fail).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "making a setuid-root program needs root (CI runs the tests as root)"
can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"

src=${abs_top_srcdir:-${srcdir:-.}}
libdir=${abs_top_builddir:-$builddir}/lib/.libs
# nobody must load the library: a copy beside the program, outside the build
# tree (which may sit where nobody cannot enter: tests/cli/lib.sh)
nobody_setuid_dir
dir=$nobody_dir
nobody_stage "$libdir/libhpalloc.so.1"
# shellcheck disable=SC2086
${CC:-cc} ${SANITIZER_FLAGS:-} -I"$src/include" -o "$dir/kw" "$src/tests/cli/knobwatch.c" \
	"$staged" -Wl,-rpath,"$dir" 2>"$tmp/cc.err" ||
	fail "cannot link knobwatch against $staged: $(cat "$tmp/cc.err")"
chmod 0755 "$dir/kw"

as_nobody_kw() {
	env -u LD_PRELOAD HUGETLB_VERBOSE=99 HUGETLB_DEBUG=1 HPALLOC_THRESHOLD=8M \
		setpriv --reuid=nobody --regid=nogroup --clear-groups "$dir/kw" -t 0.1 threshold
}

run as_nobody_kw
[ "$rc" = 0 ] || fail "plain run as nobody: $rc $err"
contains "$out" "threshold=8M env" "without setuid the environment counts"

chmod 4755 "$dir/kw"
run as_nobody_kw
[ "$rc" = 0 ] || fail "setuid run: $rc $err"
contains "$out" "threshold=1M default" "a setuid program ignores HPALLOC_THRESHOLD"
case "$out$err" in
*libhugetlbfs*|*HUGETLB*) fail "a setuid program printed libhugetlbfs's messages: $err" ;;
esac
ok
done_ok
