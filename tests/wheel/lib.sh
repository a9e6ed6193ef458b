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
# as_fresh_user_with_compilers CMD...: the same, compilers left in place
# (the from-source route).
as_fresh_user_with_compilers() {
	unshare --mount --propagation private -- bash "$user_home/.isolate.sh" --keep-compilers \
		"$user_home" "$abs_top_builddir" "$abs_top_srcdir" -- "$@"
}
