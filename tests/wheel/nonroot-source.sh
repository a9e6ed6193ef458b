#!/bin/bash
# The from-source route without root (issue 33 item 5): README's recipe
# (the block after "<!-- test: nonroot recipe -->", run verbatim) builds the
# release sdist as nobody with a prefix in its home directory, in a mount
# namespace where no other copy of hpalloc is visible; then, as that user:
# hpctl from ~/.local/bin runs; `hpctl run` and HPALLOC_NUMPY=1 put a NumPy
# array of Debian's python3 on hpalloc from the user's own site directory
# (no PYTHONPATH); a C program builds with `pkg-config --cflags --libs
# hpalloc` and runs on the library in ~/.local/lib.
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

recipe=$(awk -v marker="<!-- test: nonroot recipe -->" '$0 == marker { found = 1; next }
	found && /^```/ { if (inside) exit; inside = 1; next }
	inside' "$abs_top_srcdir/README.md")
[ -n "$recipe" ] || fail "README.md has no block after '<!-- test: nonroot recipe -->'"
printf 'the recipe:\n%s\n' "$recipe"
/usr/bin/python3 -c 'import numpy' 2>/dev/null ||
	skip_test other "Debian's python3 has no NumPy (python3-numpy): the recipe's Python package needs one"

fresh_user_home
cp "$abs_top_srcdir/tests/consumer/consumer.c" "$user_home/" && chown nobody:nogroup "$user_home/consumer.c"
{
	echo 'set -eu'
	echo 'cd "$HOME"'
	printf '%s\n' "$recipe"
	cat <<'EOF2'
cd "$HOME"
echo "hpctl: $(command -v hpctl)"
hpctl --version
code='import numpy as np, hpalloc, hpalloc.numpy as h; a = np.ones(32 << 20); print("numpy", h.get_handler_name(a), h.backing(a)["backend"], hpalloc.__file__)'
hpctl run -- /usr/bin/python3 -c "$code"
HPALLOC_NUMPY=1 /usr/bin/python3 -c "$code"
cc -o consumer consumer.c $(pkg-config --cflags --libs hpalloc) -Wl,-rpath,"$HOME/.local/lib"
./consumer
LD_TRACE_LOADED_OBJECTS=1 ./consumer | sed -n 's/.*libhpalloc\.so\.1 => \([^ ]*\) .*/consumer-lib \1/p'
EOF2
} >"$user_home/job.sh"
chown nobody:nogroup "$user_home/job.sh"

start=$SECONDS
run as_fresh_user_with_compilers bash "$user_home/job.sh"
echo "the recipe and the checks took $((SECONDS - start)) s"
grep -A 18 '^hpalloc .* configured$' <<<"$out"
grep -v '^  \|^checking\|^config\|^make\|^libtool\|^ /usr/bin\|^/usr/bin\|^ *CC\|^ *CXX\|^ *GEN\|^ *CCLD\|^ *CXXLD' <<<"$out" | tail -n 12
[ "$rc" = 0 ] || fail "the non-root recipe failed ($rc): $(tail -n 30 <<<"$out") $(tail -n 30 <<<"$err")"
home=$user_home
contains "$out" "hpctl: $home/.local/bin/hpctl" "hpctl from the user's prefix"
contains "$out" "hpctl (hpalloc) $PACKAGE_VERSION, library $PACKAGE_VERSION" "hpctl --version"
[ "$(grep -c "^numpy hpalloc [a-z]* $home/.local/lib/python3[.0-9]*/site-packages/hpalloc/__init__.py$" <<<"$out")" = 2 ] ||
	fail "NumPy is not on the user's hpalloc under hpctl run and HPALLOC_NUMPY=1: $(grep '^numpy' <<<"$out") $err"
ok
contains "$out" "hpalloc $PACKAGE_VERSION" "the consumer"
contains "$out" "consumer-lib $home/.local/lib/libhpalloc.so.1" "the consumer's library"
ok
# nothing of the user's build landed outside the home directory: the
# namespace hid the shared prefixes, and the user could not write elsewhere
[ ! -e /usr/local/lib/libhpalloc.so.1 ] || [ /usr/local/lib/libhpalloc.so.1 -ot "$user_home" ] ||
	fail "/usr/local/lib/libhpalloc.so.1 changed during the test"
ok
done_ok
