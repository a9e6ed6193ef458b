#!/bin/bash
# ThreadSanitizer over the library: its sources and tests/c/tsan_stress.c
# (the thread-shared entry points from several threads) built with
# $CC -fsanitize=thread, linked with what libhpalloc.la links.  Any data
# race report fails the test.  The plain and ASan builds cannot see races;
# this one does (main before the fix: hp_ctx() writing the context every
# caller reads).  Skips, saying why, where the compiler or the kernel
# cannot run ThreadSanitizer.
set -u
srcdir=${abs_top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
builddir=${abs_top_builddir:-$(pwd)}
cc=${CC:-cc}
unset LD_PRELOAD # the sanitizer build preloads ASan into scripts' children
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsan.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

la=$builddir/lib/libhpalloc-core.la
[ -f "$la" ] || { echo "SKIP: $la not built"; exit 77; }
libs=$(. "$la" && echo "$dependency_libs")

echo 'int main(void){return 0;}' > "$tmp/probe.c"
if ! $cc -fsanitize=thread "$tmp/probe.c" -o "$tmp/probe" 2>"$tmp/probe.err"; then
	echo "SKIP: $cc cannot build with -fsanitize=thread: $(head -1 "$tmp/probe.err")"
	exit 77
fi
if ! "$tmp/probe" 2>"$tmp/probe.err"; then
	echo "SKIP: ThreadSanitizer does not run here: $(head -1 "$tmp/probe.err")"
	exit 77
fi

# The library's sources, not lib/preload/preload.c: that is libhpalloc-preload.so,
# which defines malloc & co and would take them from ThreadSanitizer.
lib_srcs=()
for f in "$srcdir"/lib/*/*.c; do
	[ "${f##*/}" = preload.c ] || lib_srcs+=("$f")
done
# shellcheck disable=SC2086 # $libs is a list of linker flags
if ! $cc -std=gnu11 -fsanitize=thread -g -O1 -include "$builddir/config.h" -I"$builddir" -I"$srcdir/include" \
	"${lib_srcs[@]}" "$srcdir/tests/c/tsan_stress.c" -o "$tmp/tsan_stress" $libs -lpthread \
	2>"$tmp/build.err"; then
	cat "$tmp/build.err"
	echo "FAIL: cannot build the library with -fsanitize=thread"
	exit 1
fi
HPALLOC_CONTROL_DIR=${HPALLOC_CONTROL_DIR:-$tmp} \
TSAN_OPTIONS="halt_on_error=0 exitcode=66 report_signal_unsafe=0 history_size=4" \
	"$tmp/tsan_stress" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
if grep -q "WARNING: ThreadSanitizer" "$tmp/out" || [ $rc -ne 0 ]; then
	echo "FAIL: ThreadSanitizer reports (exit status $rc)"
	exit 1
fi
echo "PASS: no data race reported"
