#!/bin/bash
# tests/python/venv.sh DIR [REQUIREMENTS] — the virtual environment of
# `make check-venv` and of the NumPy 2.x runs of `make check-numpy` (and,
# with tests/python/ray-requirements.txt, of `make check-ray-venv`):
#   1. created with $VENV_PYTHON (configure finds it) if DIR has none;
#   2. the PyPI stack of REQUIREMENTS (default
#      tests/python/venv-requirements.txt), (re)installed when that file
#      changed;
#   3. hpalloc's Python package installed the way docs/python.md tells users
#      to (pip install ./python), built against this build tree's library:
#      pkgconfig/hpalloc-uninstalled.pc comes first on PKG_CONFIG_PATH.
# Needs abs_top_srcdir, abs_top_builddir and VENV_PYTHON in the environment.
set -euo pipefail

venv=${1:?usage: venv.sh DIR [REQUIREMENTS]}
: "${abs_top_srcdir:?}" "${abs_top_builddir:?}"
req=${2:-$abs_top_srcdir/tests/python/venv-requirements.txt}
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

if [ ! -x "$venv/bin/python" ]; then
	if [ -z "${VENV_PYTHON:-}" ]; then
		echo "venv.sh: configure found no Python with venv and ensurepip: install" \
			"python3-venv (Debian) or set VENV_PYTHON=/path/to/python3" >&2
		exit 1
	fi
	"$VENV_PYTHON" -m venv "$venv"
fi
if ! cmp -s "$req" "$venv/.requirements"; then
	"${pip[@]}" install -q -r "$req"
	cp "$req" "$venv/.requirements"
fi
PKG_CONFIG_PATH=$abs_top_builddir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
	"${pip[@]}" install -q --force-reinstall --no-deps "$abs_top_srcdir/python"
"$venv/bin/python" -c 'import sys, numpy, hpalloc
print("venv.sh: %s: Python %s, NumPy %s, hpalloc %s from %s" % (sys.prefix,
      sys.version.split()[0], numpy.__version__, hpalloc.__version__, hpalloc.__file__))'
