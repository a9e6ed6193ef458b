#!/bin/bash
# The declared ABIs the wheel's PyTorch and pyarrow adapters are built
# against (python/hpalloc/abi/c10.h, arrow.h: no PyTorch or Arrow at build
# time) are those of the releases they name: tests/wheel/abi_check.cpp,
# compiled with the real headers of the venv's PyTorch and pyarrow (which
# must be those releases), compares every layout and vtable slot the
# adapters use.  When a new release is to be served, this is the test that
# says what changed.
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
py=$venv/bin/python
declared() { sed -n 's/^constexpr const char \*release = "\(.*\)";/\1/p' "$abs_top_srcdir/python/hpalloc/abi/$1"; }
torch_rel=$(declared c10.h)
arrow_rel=$(declared arrow.h)
[ -n "$torch_rel" ] && [ -n "$arrow_rel" ] || fail "no release in python/hpalloc/abi/*.h"

where=$("$py" - <<'PY'
try:
    import torch
except Exception as exc:
    print("torch-missing %s" % exc)
    raise SystemExit
import os, pyarrow
print(torch.__version__, os.path.dirname(torch.__file__), pyarrow.__version__,
      os.path.dirname(pyarrow.__file__))
PY
) || fail "cannot ask $py about torch and pyarrow"
case $where in torch-missing*) skip_test torch "no PyTorch in $venv: $where" ;; esac
read -r torch_ver torch_dir arrow_ver arrow_dir <<<"$where"
case $torch_ver in "$torch_rel".*) ;; *) fail "$venv has PyTorch $torch_ver; abi/c10.h declares $torch_rel: cannot compare (venv-requirements.txt pins the release served)" ;; esac
case $arrow_ver in "$arrow_rel".*) ;; *) fail "$venv has pyarrow $arrow_ver; abi/arrow.h declares $arrow_rel: cannot compare (venv-requirements.txt pins the release served)" ;; esac
ok

CXX=${CXX:-g++}
run "$CXX" -std=c++17 -Wall -Wextra -isystem "$torch_dir/include" -isystem "$arrow_dir/include" \
	-I"$abs_top_srcdir/python/hpalloc" "$abs_top_srcdir/tests/wheel/abi_check.cpp" -o "$tmp/abi_check" \
	-L"$arrow_dir" -l:"libarrow.so.${arrow_rel}00" -L"$torch_dir/lib" -lc10 \
	-Wl,-rpath,"$arrow_dir:$torch_dir/lib"
[ "$rc" = 0 ] || fail "abi_check.cpp does not compile against PyTorch $torch_ver and pyarrow $arrow_ver: $err"
ok
run "$tmp/abi_check"
printf '%s\n' "$out"
[ "$rc" = 0 ] || fail "the declarations differ from PyTorch $torch_ver / pyarrow $arrow_ver: $(printf '%s\n' "$out" | grep DIFFERENT)"
contains "$out" "0 difference(s)" "abi_check"
ok
done_ok
