#!/bin/bash
# The sdist builds with a C compiler, make and pkg-config only (issue 33
# item 1): in a mount namespace where autoconf, automake and libtool, a C++
# compiler, and liburing's, libnuma's and cmocka's headers and libraries are
# hidden, `pip wheel` of the unpacked sdist (its generated configure; the
# tree configured in place first, as README's non-root recipe leaves it:
# issue 47) builds a wheel without them, and configure's summary says what it left out; that
# wheel installs and works (no grafted libraries, hpctl says io_uring is not
# built in, hpalloc.torch and hpalloc.arrow say why they are missing).
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "hiding the optional libraries needs a mount namespace (root)"
venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
py=$venv/bin/python
tar xzf "$SDIST" -C "$tmp" || fail "cannot unpack $SDIST"
src=$(echo "$tmp"/hpalloc-*/)
[ -x "$src/configure" ] || fail "the sdist has no configure"
# configured in place first, as README's non-root recipe leaves a tree
# (issue 47: automake refused pip's out-of-tree build of it)
(cd "$src" && ./configure --without-liburing --without-libnuma --without-cmocka --without-python \
	--disable-fuzzing) >"$tmp/inplace.log" 2>&1 || fail "configure in place: $(tail -n 20 "$tmp/inplace.log")"
[ -f "$src/config.status" ] || fail "configure in place made no config.status"

cat >"$tmp/hidden.h" <<'H'
#error "hidden by tests/wheel/sdist-minimal.sh"
H
cat >"$tmp/build.sh" <<SH
set -eu
hide() { # hide PATH...: what exists of them, out of sight
	for p in "\$@"; do
		[ -e "\$p" ] || continue
		if [ -d "\$p" ]; then mount -t tmpfs hidden "\$p"
		elif [ "\${p%.h}" != "\$p" ]; then mount --bind "$tmp/hidden.h" "\$p"
		else mount --bind /dev/null "\$p"; fi
	done
}
# the development files of the optional libraries (Debian's -dev packages:
# headers, .so links, static libraries, .pc files)
for f in \$(dpkg -L liburing-dev libnuma-dev libcmocka-dev 2>/dev/null); do
	case \$f in /usr/share/*) continue ;; esac
	[ -f "\$f" ] && hide "\$f"
done
for prog in autoconf autoheader autom4te automake aclocal autoreconf libtoolize libtool; do
	hide /usr/bin/\$prog
done
hide \$(ls /usr/bin/*g++* /usr/bin/c++ /usr/bin/clang* /usr/lib/gcc/*/*/cc1plus 2>/dev/null)
cd "$tmp"
"$py" -m pip --disable-pip-version-check wheel -v --no-deps --no-build-isolation -w "$tmp/wheels" "$src"
SH
unshare --mount --propagation private -- bash "$tmp/build.sh" >"$tmp/build.log" 2>&1
rc=$?
log=$(tr -d '\0' <"$tmp/build.log")
[ "$rc" = 0 ] || fail "the sdist did not build without the optional parts ($rc): $(tail -n 40 <<<"$log")"
grep -q "^ *hpalloc: this tree was configured in place: building a copy of its sources (make distdir)$" <<<"$log" ||
	fail "the build does not say it built a copy of the tree configured in place: $(grep '^ *hpalloc:' <<<"$log")"
ok
for line in "liburing: *no (auto: not found; Debian: liburing-dev)" \
	"libnuma: *no (auto: not found; Debian: libnuma-dev)" \
	"cmocka (C tests): *no (auto: not found; Debian: libcmocka-dev)" \
	"PyTorch adapter: *no (auto: no working C++ compiler; Debian: g++)" \
	"pyarrow adapter: *no (auto: no working C++ compiler; Debian: g++)"; do
	grep -q "^ *$line" <<<"$log" || fail "configure's summary does not say '$line': $(grep -A 20 'configured$' <<<"$log")"
done
ok
whl=$(ls "$tmp"/wheels/hpalloc-*.whl 2>/dev/null)
[ -f "$whl" ] || fail "no wheel made"
case ${whl##*/} in *manylinux_2_*) ;; *) fail "${whl##*/} is not tagged manylinux" ;; esac
"$py" -c 'import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
bad = [n for n in names if n.startswith("hpalloc.libs/") or n.endswith(("_torch.so", "_arrow.so"))]
sys.exit("unexpected: %s" % bad if bad else 0)' "$whl" || fail "the minimal wheel holds what it was built without"
ok

"$py" -m pip --disable-pip-version-check install -q --no-deps --target "$tmp/site" "$whl" ||
	fail "cannot install the minimal wheel"
run env -u LD_LIBRARY_PATH "$tmp/site/hpalloc/bin/hpctl" status
[ "$rc" = 0 ] || fail "the minimal wheel's hpctl status: $rc $err"
contains "$out" "hpalloc built without liburing" "hpctl status of a build without liburing"
run env -u LD_LIBRARY_PATH PYTHONPATH="$tmp/site" "$py" -c '
import numpy as np, hpalloc, hpalloc.numpy as h
h.install(); a = np.ones(8 << 20); print(h.get_handler_name(a), hpalloc.__file__)
for name in ("torch", "arrow"):
    try:
        __import__("hpalloc." + name)
    except ImportError as exc:
        print(exc)'
[ "$rc" = 0 ] || fail "the minimal wheel's package: $rc $err"
contains "$out" "hpalloc $tmp/site/hpalloc/__init__.py" "NumPy on the minimal wheel"
contains "$out" "hpalloc.torch is not available: hpalloc was built without its PyTorch adapter" "hpalloc.torch"
contains "$out" "hpalloc.arrow is not available: hpalloc was built without its pyarrow adapter" "hpalloc.arrow"
ok
done_ok
