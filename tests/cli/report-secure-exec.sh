#!/bin/bash
# HPALLOC_REPORT is ignored in secure execution (setuid, setgid: AT_SECURE),
# as every HPALLOC_* variable is: a setuid-root program run by nobody never
# appends to the file it names, though it is root's own; and a setuid
# interpreter given HPALLOC_NUMPY=1 does not activate hpalloc (the Python
# activation asks the library, hp_secure_execution).  Both writers: a
# Python interpreter activating hpalloc (python/hpalloc_activate.py) and a
# program with libhpalloc-preload.so (lib/preload/preload.c; LD_PRELOAD cannot reach
# a setuid program, so this one is linked against it).  The same copies
# without the setuid bit, run by root, do append (so the test can fail).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/report-lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "making a setuid-root program needs root (CI runs the tests as root)"
can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"

# A directory nobody can traverse, on a file system that honours setuid
# (tests/cli/lib.sh).  The programs in it run setuid root when nobody runs
# them: what they load (the build's library, the Python package) they read
# as root.
nobody_setuid_dir
dir=$nobody_dir
# root's private report directory, as `hpctl run --check` run by root makes it
rep=$(mktemp -d "$tmp/rep.XXXXXX") && chmod 0700 "$rep" || fail "mktemp"
: >"$rep/report"

# with_report PROGRAM ARGS...: PROGRAM with HPALLOC_REPORT (as the caller:
# root), no preload
with_report() { env -u LD_PRELOAD HPALLOC_REPORT="$rep/report" "$@"; }

# ---- Python ------------------------------------------------------------------------------
# The package's extensions load libhpalloc.so.1, the report's one writer
# (hpalloc_activate.py writes no line of its own); an ASan build's cannot be
# loaded without the ASan runtime first, which a setuid program does not
# preload: no Python process of an ASan build can report here.
pypath=$PYDIR/hpalloc/_boot:$PYDIR
if [ -n "${SANITIZER_FLAGS:-}" ]; then
	note_skip other "the Python case (AddressSanitizer build: a setuid interpreter cannot load the instrumented libhpalloc, the report's only writer)"
elif can_python; then
	cp "$(readlink -f "$PY")" "$dir/python3" && chmod 0755 "$dir/python3" || fail "cp $PY"
	# uid, euid, whether hpalloc's NumPy handler was installed
	ids='import os, sys, numpy; h = sys.modules.get("hpalloc.numpy")
print(os.getuid(), os.geteuid(), int(bool(h and h.installed())))'
	run env -u LD_PRELOAD HPALLOC_REPORT="$rep/report" HPALLOC_NUMPY=1 PYTHONPATH="$pypath" \
		"$dir/python3" -c "$ids"
	[ "$rc" = 0 ] || fail "python copy as root: $rc $err"
	grep -q " numpy " "$rep/report" || fail "the copy without setuid reported nothing: $(cat "$rep/report")"
	[ "$out" = "0 0 1" ] || fail "the copy without setuid did not activate hpalloc: uid euid activated = $out; $err"
	ok
	: >"$rep/report"
	chmod 4755 "$dir/python3"
	run as_nobody env -u LD_PRELOAD HPALLOC_REPORT="$rep/report" HPALLOC_NUMPY=1 \
		PYTHONPATH="$pypath" "$dir/python3" -c "$ids"
	[ "$rc" = 0 ] || fail "setuid python as nobody: $rc $err"
	[ "${out% *}" = "$(id -u nobody) 0" ] || fail "setuid python is not in secure execution: uid euid = $out"
	[ ! -s "$rep/report" ] || fail "setuid python appended to HPALLOC_REPORT: $(cat "$rep/report")"
	ok
	[ "${out##* }" = 0 ] || fail "setuid python honoured HPALLOC_NUMPY=1: hpalloc activated in secure execution"
	ok
else
	note_skip other "the Python case (no Python package in $PYDIR)"
fi

# ---- a program linked against libhpalloc-preload.so -----------------------------------------
libdir=$(dirname "$PRELOAD_LIB")
printf 'int main(void) { return 0; }\n' >"$tmp/prog.c"
# no sanitizer runtime in a setuid program: the preload library is never
# instrumented against it anyway (ASan builds skip the preload tests)
if can_preload && ${CC:-cc} -o "$dir/prog" "$tmp/prog.c" -Wl,--no-as-needed \
	"$PRELOAD_LIB" "$libdir/libhpalloc.so.1" -Wl,-rpath,"$libdir" 2>"$tmp/cc.err"; then
	chmod 0755 "$dir/prog"
	: >"$rep/report"
	run with_report "$dir/prog"
	[ "$rc" = 0 ] || fail "prog as root: $rc $err"
	grep -q " preload ok " "$rep/report" || fail "prog without setuid reported nothing"
	ok
	: >"$rep/report"
	chmod 4755 "$dir/prog"
	run as_nobody env -u LD_PRELOAD HPALLOC_REPORT="$rep/report" "$dir/prog"
	[ "$rc" = 0 ] || fail "setuid prog as nobody: $rc $err"
	[ ! -s "$rep/report" ] || fail "setuid prog appended to HPALLOC_REPORT: $(cat "$rep/report")"
	ok
else
	note_skip other "the preload case (AddressSanitizer build, or cannot link: $(head -n1 "$tmp/cc.err" 2>/dev/null))"
fi
done_ok
