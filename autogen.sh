#!/bin/sh
# Regenerate configure and the Makefile.in files from configure.ac and the
# Makefile.am fragments.  Run once after a fresh clone, and again whenever a
# *.ac or *.am file changes.  Build out of tree afterwards:
#   mkdir -p /tmp/build && cd /tmp/build && /path/to/hpalloc/configure && make -j2
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --force --install --warnings=all
echo "Now run ./configure (or configure from a build directory), then make."
