#!/bin/bash
# A C program built in the venv against the wheel's C library, with what
# the wheel says and nothing else (issue 33 item 4): `hpalloc-config
# --pkgconfigdir` names the directory of its hpalloc.pc, which pkg-config
# reads (no other .pc visible); tests/consumer/consumer.c builds with its
# flags and runs without LD_LIBRARY_PATH, on the wheel's libhpalloc.so.1.
# The same with `hpalloc-config --cflags --libs`, and with `-lhpalloc` (the
# wheel's libhpalloc.so linker script).
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

venv=${HPALLOC_TEST_VENV:?make check-venv sets HPALLOC_TEST_VENV}
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
run "$venv/bin/hpalloc-config" --pkgconfigdir
[ "$rc" = 0 ] || fail "hpalloc-config --pkgconfigdir: $rc $err"
pcdir=$out
[ "$pcdir" = "$site/hpalloc/lib/pkgconfig" ] || fail "hpalloc-config --pkgconfigdir says $pcdir"
ok

consumer() { # consumer NAME FLAGS...: build and run; its loaded libhpalloc
	local exe=$tmp/$1
	shift
	# shellcheck disable=SC2068
	run "${CC:-cc}" -o "$exe" "$abs_top_srcdir/tests/consumer/consumer.c" $@
	[ "$rc" = 0 ] || fail "the consumer does not build with $*: $err"
	run env -u LD_LIBRARY_PATH "$exe"
	[ "$rc" = 0 ] && [ "$out" = "hpalloc $PACKAGE_VERSION" ] || fail "the consumer printed '$out' ($rc): $err"
	# which library the dynamic linker gave it
	loaded=$(env -u LD_LIBRARY_PATH LD_TRACE_LOADED_OBJECTS=1 "$exe" | sed -n 's/.*libhpalloc\.so\.1 => \([^ ]*\) .*/\1/p')
	[ "$(readlink -f "$loaded")" = "$(readlink -f "$site/hpalloc/lib/libhpalloc.so.1")" ] ||
		fail "the consumer built with $* runs on $loaded, not the wheel's library"
}

flags=$(PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_PATH= pkg-config --cflags --libs hpalloc) ||
	fail "pkg-config finds no hpalloc in $pcdir"
echo "pkg-config --cflags --libs hpalloc: $flags"
[ "$(PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_PATH= pkg-config --modversion hpalloc)" = "$PACKAGE_VERSION" ] ||
	fail "the wheel's hpalloc.pc is not version $PACKAGE_VERSION"
consumer pc $flags
ok
consumer config $("$venv/bin/hpalloc-config" --cflags --libs)
ok
inc=$("$venv/bin/hpalloc-config" --includedir) lib=$("$venv/bin/hpalloc-config" --libdir)
consumer plain -I"$inc" -L"$lib" -Wl,-rpath,"$lib" -lhpalloc
ok
done_ok
