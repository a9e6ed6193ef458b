#!/bin/bash
# One library per process (issue 33 item 3): a process that meets both a
# system libhpalloc (here: this build's `make install` stage, laid out as
# README's system route installs it) and the wheel's ends up with one copy,
# in whichever order they come:
#   - the system preload library first (a Dask worker started with
#     `hpctl run --preload` by the system's hpctl, or LD_PRELOAD by hand),
#     then the wheel's package imported: the package runs on the preloaded
#     library (the dynamic linker matches libhpalloc.so.1 by its SONAME), and
#     sees the preload library's blocks in its stats (one state);
#   - the system library loaded first by hand, then the wheel's package;
#   - the wheel's package first, then a system object linked against the
#     library (the system package's extension, RUNPATH /usr/local/lib).
# Counted from /proc/self/maps: the distinct libhpalloc.so.1 files mapped
# (make install's is libhpalloc.so.1.0.0, its SONAME a link to it).
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
py=$venv/bin/python
stage=$abs_top_builddir/tests/consumer/stage
syslib=$(find "$stage" -name libhpalloc.so.1 | head -n1)
syspreload=$(find "$stage" -name libhpalloc-preload.so | head -n1)
sysext=$(find "$stage" -path '*/hpalloc/_shared.so' | head -n1)
[ -n "$syslib" ] && [ -n "$syspreload" ] && [ -n "$sysext" ] ||
	fail "no system install stage under $stage (make check makes it: tests/consumer/stage.stamp)"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
wheellib=$site/hpalloc/lib/libhpalloc.so.1

cat >"$tmp/probe.py" <<'PY'
import ctypes, os, re, sys
first, then = sys.argv[1], sys.argv[2:]
def load_system(path):
    ctypes.CDLL(path)
if first == "system":
    load_system(then[0])
import numpy as np
import hpalloc, hpalloc.numpy as h
if first == "wheel":
    load_system(then[0])
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
before = hpalloc.stats()["preload_huge_bytes"]
p = libc.malloc(64 << 20)   # through the preload library, when there is one
ctypes.memset(p, 1, 64 << 20)
grew = hpalloc.stats()["preload_huge_bytes"] - before
h.install()
a = np.ones(8 << 20)
libs = sorted({os.path.realpath(l.split()[-1]) for l in open("/proc/self/maps")
               if re.search(r"/libhpalloc\.so\.1(\.[0-9]+)*$", l.rstrip())})
print("package", hpalloc.__file__)
print("handler", h.get_handler_name(a), h.backing(a)["backend"])
print("preload_grew", grew)
print("libs", " ".join(libs))
PY

probe() { # probe ENV... -- ARGS...: run the probe in the venv's Python
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	run env -u LD_LIBRARY_PATH -u PYTHONPATH "${envs[@]}" HPALLOC_MODE=thp "$py" "$tmp/probe.py" "$@"
	[ "$rc" = 0 ] || fail "probe $*: $rc $err"
	libs=$(printf '%s\n' "$out" | sed -n 's/^libs //p')
	[ "$(printf '%s\n' "$out" | sed -n 's/^package //p')" = "$site/hpalloc/__init__.py" ] ||
		fail "the probe did not import the wheel's package: $out"
	contains "$out" "handler hpalloc thp" "NumPy on hpalloc"
}
one_copy() { # one_copy EXPECTED
	[ "$(wc -w <<<"$libs")" = 1 ] || fail "$(wc -w <<<"$libs") copies of libhpalloc.so.1 in one process: $libs"
	[ "$libs" = "$(readlink -f "$1")" ] || fail "the process's libhpalloc.so.1 is $libs, expected $1"
}

# the system's preload library first: a preloaded worker importing the wheel
probe LD_PRELOAD="$syspreload" -- none
one_copy "$syslib"
[ "$(printf '%s\n' "$out" | sed -n 's/^preload_grew //p')" -ge $((64 << 20)) ] ||
	fail "the wheel's package does not see the preload library's block (two states?): $out"
ok
# the system library loaded first, then the wheel's package
probe -- system "$syslib"
one_copy "$syslib"
ok
# the wheel's package first, then a system object linked against libhpalloc
readelf -d "$sysext" | grep -q 'NEEDED.*libhpalloc\.so\.1' || fail "$sysext does not link libhpalloc.so.1"
probe -- wheel "$sysext"
one_copy "$wheellib"
ok
# control: the wheel's package alone maps the wheel's library
probe -- none
one_copy "$wheellib"
ok
done_ok
