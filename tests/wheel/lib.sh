# Shared helpers of the tests of hpalloc's sdist and wheel (sourced, not
# run).  make check-venv runs these tests after tests/python/venv.sh made
# the sdist and the wheel with `python -m build` into $abs_top_builddir/wheelhouse.
#
# On top of tests/cli/lib.sh (fail, ok, skip_test, run, contains, nobody):
#   WHEEL, SDIST             the files under test
#   user_home                a fresh home directory of nobody's (made by
#                            fresh_user_home, removed at exit)
#   as_fresh_user CMD...     CMD as nobody, in a mount namespace where no
#                            other copy of hpalloc and no compiler is visible
#                            (isolate.sh), in an empty environment: HOME,
#                            PATH=$HOME/venv/bin and /usr/bin's programs
#                            but compilers, no XDG_RUNTIME_DIR, no HPALLOC_*.
#   as_fresh_user_with_compilers CMD...   the same, with the compilers
. "${abs_top_srcdir:?}/tests/cli/lib.sh"

wheelhouse=${abs_top_builddir:?}/wheelhouse
WHEEL=$(ls "$wheelhouse"/hpalloc-*.whl 2>/dev/null)
SDIST=$(ls "$wheelhouse"/hpalloc-*.tar.gz 2>/dev/null)
[ -f "$WHEEL" ] && [ -f "$SDIST" ] ||
	fail "no wheel and sdist in $wheelhouse: make check-venv makes them (tests/python/venv.sh)"

user_home=
wheel_cleanup() {
	[ -z "$user_home" ] || rm -rf "$user_home"
	cleanup
}
trap wheel_cleanup EXIT

# fresh_user_home: $user_home, nobody's and empty but for the wheel, the
# tests' smaps reader (hp_memory.py) and isolate.sh, all copied (the build
# and source trees are hidden from the fresh user).
fresh_user_home() {
	[ "$(id -u)" = 0 ] || skip_test root "a mount namespace and another user need root"
	can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"
	# (no "hpalloc" in its name: the tests look for that word in paths)
	user_home=$(mktemp -d /tmp/fresh-user.XXXXXX) || fail "mktemp"
	mkdir "$user_home/testlib"
	cp "$WHEEL" "$SDIST" "$user_home/" &&
		cp "$abs_top_srcdir/tests/python/hp_memory.py" "$user_home/testlib/" &&
		cp "$abs_top_srcdir/tests/wheel/isolate.sh" "$user_home/.isolate.sh" ||
		fail "cannot stage the wheel for the fresh user"
	chown -R nobody:nogroup "$user_home" && chmod 0700 "$user_home" || fail "chown"
}

as_fresh_user() {
	unshare --mount --propagation private -- \
		bash "$user_home/.isolate.sh" "$user_home" "$abs_top_builddir" "$abs_top_srcdir" -- "$@"
}
# as_fresh_user_with_pyenv CMD...: as_fresh_user, pyenv's Pythons visible
# (tests/wheel/pythons.sh makes its venvs with them).
as_fresh_user_with_pyenv() {
	unshare --mount --propagation private -- bash "$user_home/.isolate.sh" --pyenv \
		"$user_home" "$abs_top_builddir" "$abs_top_srcdir" -- "$@"
}
# as_fresh_user_with_compilers CMD...: the same, compilers left in place
# (the from-source route).
as_fresh_user_with_compilers() {
	unshare --mount --propagation private -- bash "$user_home/.isolate.sh" --keep-compilers \
		"$user_home" "$abs_top_builddir" "$abs_top_srcdir" -- "$@"
}

# declared_releases FILE: the release(s) python/hpalloc/abi/FILE declares
# (c10.h: "2.13 2.14 2.15"; arrow.h: "26").
declared_releases() {
	sed -n 's/^constexpr const char \*releases\{0,1\} = "\(.*\)";/\1/p' \
		"$abs_top_srcdir/python/hpalloc/abi/$1"
}

# check_declarations PYTHON: tests/wheel/abi_check.cpp compiled with the
# real headers of the PyTorch and pyarrow PYTHON imports (which must be
# releases abi/c10.h and abi/arrow.h declare) and run: every layout and
# vtable slot the adapters use compared; fails on a difference.  Needs a
# compiler (outside as_fresh_user).  Prints the releases compared.
check_declarations() {
	local py=$1 where torch_ver torch_dir arrow_ver arrow_dir rel ok_torch=
	where=$("$py" -c 'import os, torch, pyarrow
print(torch.__version__, os.path.dirname(torch.__file__), pyarrow.__version__,
      os.path.dirname(pyarrow.__file__))') || fail "$py imports no torch and pyarrow"
	read -r torch_ver torch_dir arrow_ver arrow_dir <<<"$where"
	for rel in $(declared_releases c10.h); do
		case $torch_ver in "$rel".*) ok_torch=$rel ;; esac
	done
	[ -n "$ok_torch" ] || fail "$py has PyTorch $torch_ver; abi/c10.h declares $(declared_releases c10.h): cannot compare"
	case $arrow_ver in "$(declared_releases arrow.h)".*) ;; *)
		fail "$py has pyarrow $arrow_ver; abi/arrow.h declares $(declared_releases arrow.h): cannot compare" ;;
	esac
	local exe=$tmp/abi_check.$$.$RANDOM arel
	arel=$(declared_releases arrow.h)
	run "${CXX:-g++}" -std=c++17 -Wall -Wextra -isystem "$torch_dir/include" -isystem "$arrow_dir/include" \
		-I"$abs_top_srcdir/python/hpalloc" "$abs_top_srcdir/tests/wheel/abi_check.cpp" -o "$exe" \
		-L"$arrow_dir" -l:"libarrow.so.${arel}00" -L"$torch_dir/lib" -lc10 \
		-Wl,-rpath,"$arrow_dir:$torch_dir/lib"
	[ "$rc" = 0 ] || fail "abi_check.cpp does not compile against PyTorch $torch_ver and pyarrow $arrow_ver: $err"
	run "$exe"
	[ "$rc" = 0 ] || fail "the declarations differ from PyTorch $torch_ver / pyarrow $arrow_ver: $(printf '%s\n' "$out" | grep DIFFERENT)"
	contains "$out" "0 difference(s)" "abi_check"
	echo "abi_check: PyTorch $torch_ver and pyarrow $arrow_ver: $(printf '%s\n' "$out" | grep -c '^ok ') layouts and slots the same"
}

# pyenv_pythons: the CPython 3.10-3.13 interpreters pyenv has (one per
# minor version, the newest), one per line.
pyenv_pythons() {
	local minor p
	for minor in 10 11 12 13; do
		p=$(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3."$minor".*/bin/python3 2>/dev/null | sort -V | tail -n1)
		[ -n "$p" ] && echo "$p"
	done
}
