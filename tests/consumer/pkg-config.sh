#!/bin/bash
# Build tests/consumer/consumer.c against the *installed* hpalloc using only
# what pkg-config says, run it, check it printed the installed version.
# The staged install (make install DESTDIR=tests/consumer/stage) is made by
# tests/Makemodule.am before the tests run.
set -euo pipefail

stage=$abs_top_builddir/tests/consumer/stage
pc=$(find "$stage" -name hpalloc.pc -path '*/pkgconfig/*' | head -n1)
if [ -z "$pc" ]; then
	echo "no hpalloc.pc under $stage: was make install staged?" >&2
	exit 1
fi
# Only the staged install is visible to pkg-config; the sysroot prefixes the
# paths of the .pc file (written for the real prefix) with the stage.
export PKG_CONFIG_LIBDIR=$(dirname "$pc")
export PKG_CONFIG_PATH=
export PKG_CONFIG_SYSROOT_DIR=$stage
flags=$(pkg-config --cflags --libs hpalloc)
echo "pkg-config --cflags --libs hpalloc: $flags"

out=$abs_top_builddir/tests/consumer/consumer
# SANITIZER_FLAGS is empty except in an ASan+UBSan build, whose library
# needs the sanitizer runtimes linked into the program first.
# shellcheck disable=SC2086
$CC $SANITIZER_FLAGS -o "$out" "$abs_top_srcdir/tests/consumer/consumer.c" $flags

libdirs=$(pkg-config --libs-only-L hpalloc | sed 's/-L//g; s/^ *//; s/ *$//; s/  */:/g')
printed=$(LD_LIBRARY_PATH=$libdirs "$out")
echo "consumer printed: $printed"
want="hpalloc $(pkg-config --modversion hpalloc)"
if [ "$printed" != "$want" ]; then
	echo "expected \"$want\"" >&2
	exit 1
fi
if [ "$want" != "hpalloc $PACKAGE_VERSION" ]; then
	echo "installed hpalloc.pc says $want, the build is $PACKAGE_VERSION" >&2
	exit 1
fi
