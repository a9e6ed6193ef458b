#!/bin/bash
# The declared ABIs the wheel's extensions are built against are those of
# the releases they name:
#   - python/hpalloc/abi/c10.h and arrow.h (the PyTorch and pyarrow
#     adapters, built with neither): tests/wheel/abi_check.cpp, compiled
#     with the real headers of the venv's PyTorch and pyarrow (which must be
#     releases they declare), compares every layout and vtable slot the
#     adapters use (the other PyTorch releases on the machine are compared
#     in tests/wheel/pythons.sh's venvs; 2.15's by hand, issue 47);
#   - python/hpalloc/abi/cpython.h (what the abi3 extensions use of
#     CPython's API beyond the limited API of 3.10):
#     tests/wheel/cpython_check.c, compiled with the full headers of every
#     CPython 3.10-3.13 the machine has (pyenv) and the venv's, compares
#     each layout and value.
# When a new release is to be served, this is the test that says what changed.
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
py=$venv/bin/python
[ -n "$(declared_releases c10.h)" ] && [ -n "$(declared_releases arrow.h)" ] ||
	fail "no release in python/hpalloc/abi/*.h"

# ---- CPython: every version the machine has -----------------------------------------------
pythons=$( (pyenv_pythons; echo "$py") | sort -u)
checked=
for p in $pythons; do
	inc=$("$p" -c 'import sysconfig; print(sysconfig.get_paths()["include"])') || fail "cannot ask $p"
	run "${CC:-cc}" -std=gnu11 -Wall -Wextra -Werror -isystem "$inc" -I"$abs_top_srcdir/python/hpalloc" \
		"$abs_top_srcdir/tests/wheel/cpython_check.c" -o "$tmp/cpython_check"
	[ "$rc" = 0 ] || fail "cpython_check.c does not compile with $p's headers: $err"
	run "$tmp/cpython_check"
	[ "$rc" = 0 ] || fail "abi/cpython.h differs from $p's headers: $(printf '%s\n' "$out" | grep DIFFERENT)"
	ver=$(sed -n 's/^CPython //p' <<<"$out")
	case " $checked " in *" ${ver%.*} "*) ;; *) checked="$checked ${ver%.*}" ;; esac
done
echo "abi/cpython.h matches the headers of CPython$checked"
for minor in 3.10 3.11 3.12 3.13; do
	case " $checked " in *" $minor "*) ;; *)
		note_skip pythons "no CPython $minor on this machine (pyenv) to check abi/cpython.h with" ;;
	esac
done
ok

# ---- PyTorch and pyarrow: the venv's ------------------------------------------------------
where=$("$py" -c 'import torch' 2>&1) || skip_test torch "no PyTorch in $venv: $where"
check_declarations "$py"
ok
done_ok
