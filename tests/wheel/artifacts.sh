#!/bin/bash
# What `python -m build` made (make check-venv: tests/python/venv.sh):
#   - the wheel is tagged cp310-abi3 (one file for CPython 3.10 and later)
#     and manylinux (glibc 2.34 or older), `auditwheel show`
#     agrees, `twine check` passes the wheel and the sdist;
#   - the wheel holds libhpalloc, the preload library, hpctl, hpalloc.h,
#     a relocatable hpalloc.pc, every extension (the PyTorch and pyarrow
#     adapters too, built without either), liburing and libnuma grafted;
#   - every ELF file finds what it needs through $ORIGIN: no run path out of
#     the wheel, nothing of PyTorch, Arrow or CPython's library needed;
#   - the sdist carries a generated configure, PKG-INFO and the backend.
# It prints the wheel's size, tag and contents.
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
py=$venv/bin/python
name=${WHEEL##*/}
echo "wheel: $name, $(stat -c %s "$WHEEL") bytes; sdist: ${SDIST##*/}, $(stat -c %s "$SDIST") bytes"

# ---- tag, auditwheel, twine -----------------------------------------------------------
# one wheel for CPython 3.10 and later (issue 47): the stable ABI
case $name in hpalloc-*-cp310-abi3-manylinux_*) ;; *) fail "$name is not tagged cp310-abi3" ;; esac
glibc=$(printf '%s\n' "$name" | sed -n 's/.*-manylinux_2_\([0-9]*\)_x86_64\.whl$/\1/p')
[ -n "$glibc" ] || fail "$name is not tagged manylinux_2_N_x86_64"
[ "$glibc" -le 34 ] || fail "$name needs glibc 2.$glibc: newer than manylinux_2_34"
ok
run "$venv/bin/auditwheel" show "$WHEEL"
[ "$rc" = 0 ] || fail "auditwheel show: $rc $err"
contains "$(tr -s ' \n' '  ' <<<"$out")" \
	"consistent with the following platform tag: \"manylinux_2_${glibc}_x86_64\"" "auditwheel show"
run "$venv/bin/twine" check --strict "$WHEEL" "$SDIST"
[ "$rc" = 0 ] || fail "twine check: $rc $out $err"
[ "$(printf '%s\n' "$out" | grep -c PASSED)" = 2 ] || fail "twine check: $out"
ok

# ---- contents -------------------------------------------------------------------------------
unpacked=$tmp/wheel
"$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$WHEEL" "$unpacked" ||
	fail "cannot unpack $WHEEL"
echo "contents:"
(cd "$unpacked" && find . -type f | sort | sed 's/^\.\//  /')
for f in hpalloc/bin/hpctl hpalloc/lib/libhpalloc.so.1 hpalloc/lib/libhpalloc-preload.so \
	hpalloc/lib/libhpalloc.so hpalloc/lib/pkgconfig/hpalloc.pc hpalloc/include/hpalloc.h \
	hpalloc/__main__.py hpalloc_activate.py hpalloc-numpy.pth hpalloc/_boot/sitecustomize.py \
	hpalloc/_hpalloc.so hpalloc/_shared.so hpalloc/_rawdomain.so hpalloc/_nrt.so \
	hpalloc/_torch.so hpalloc/_arrow.so; do
	[ -f "$unpacked/$f" ] || fail "the wheel lacks $f"
done
ls "$unpacked"/hpalloc.libs/liburing-*.so* >/dev/null 2>&1 || fail "liburing not grafted"
ls "$unpacked"/hpalloc.libs/libnuma-*.so* >/dev/null 2>&1 || fail "libnuma not grafted"
grep -qx 'prefix=${pcfiledir}/../..' "$unpacked/hpalloc/lib/pkgconfig/hpalloc.pc" ||
	fail "hpalloc.pc is not relocatable: $(cat "$unpacked/hpalloc/lib/pkgconfig/hpalloc.pc")"
! grep -rq hpalloc-wheel-build "$unpacked/hpalloc/lib/pkgconfig" || fail "hpalloc.pc names the build's prefix"
grep -q '^hpctl = hpalloc.__main__:main$' "$unpacked"/hpalloc-*.dist-info/entry_points.txt ||
	fail "no hpctl command in entry_points.txt"
ok

# ---- how each ELF file finds its libraries ---------------------------------------------------
elves=0
while IFS= read -r -d '' f; do
	head -c 4 "$f" | grep -q $'^\x7fELF' || continue
	elves=$((elves + 1))
	dyn=$(readelf -d "$f") || fail "readelf $f"
	paths=$(printf '%s\n' "$dyn" | sed -n 's/.*(R\(UN\)\?PATH).*\[\(.*\)\]/\2/p' | tr ':' ' ')
	for p in $paths; do
		case $p in '$ORIGIN'*) ;; *) fail "${f#"$unpacked"/} has run path $p, outside the wheel" ;; esac
	done
	needed=$(printf '%s\n' "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
	for n in $needed; do
		case $n in
		libc10*|libtorch*|libarrow*|libparquet*|libpython*)
			fail "${f#"$unpacked"/} needs $n: it must load without it (installed later, or not at all)" ;;
		esac
	done
done < <(find "$unpacked" -type f -print0)
[ "$elves" -ge 11 ] || fail "only $elves ELF files in the wheel"
ok

# ---- the sdist ----------------------------------------------------------------------------------------
base=${SDIST##*/}
base=${base%.tar.gz}
listing=$(tar tzf "$SDIST") || fail "tar tzf $SDIST"
for f in configure PKG-INFO pyproject.toml python/wheel/hpalloc_build.py Makefile.in \
	python/hpalloc/abi/c10.h python/hpalloc/abi/arrow.h python/hpalloc/abi/cpython.h \
	python/hpalloc/abi/vtable.h include/hpalloc.h; do
	printf '%s\n' "$listing" | grep -qx "$base/$f" || fail "the sdist lacks $base/$f"
done
ok
done_ok
