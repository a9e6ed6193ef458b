#!/bin/bash
# tests/python/venv.sh DIR [REQUIREMENTS] — the virtual environment of
# `make check-venv` and of the NumPy 2.x runs of `make check-numpy` (and,
# with tests/python/ray-requirements.txt, of `make check-ray-venv`):
#   1. created with $VENV_PYTHON (configure finds it) if DIR has none;
#   2. the PyPI stack of REQUIREMENTS (default
#      tests/python/venv-requirements.txt), (re)installed when that file
#      changed;
#   3. hpalloc's sdist and wheel made from this tree's sources as users make
#      them (python -m build: the sdist, then the wheel built from it, in
#      build's isolated environment) into $abs_top_builddir/wheelhouse, and
#      that wheel installed (the tests of tests/wheel use it too).  With
#      REQUIREMENTS given (another venv, e.g. Ray's), a wheel already in the
#      wheelhouse is installed as it is: it was built from these sources.
# Needs abs_top_srcdir, abs_top_builddir and VENV_PYTHON in the environment.
set -euo pipefail

venv=${1:?usage: venv.sh DIR [REQUIREMENTS]}
: "${abs_top_srcdir:?}" "${abs_top_builddir:?}"
req=${2:-$abs_top_srcdir/tests/python/venv-requirements.txt}
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
wheelhouse=$abs_top_builddir/wheelhouse

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
if [ $# -lt 2 ] || ! ls "$wheelhouse"/hpalloc-*.whl >/dev/null 2>&1; then
	rm -rf "$wheelhouse" "$wheelhouse.log"
	start=$SECONDS
	if ! "$venv/bin/python" -m build --outdir "$wheelhouse" "$abs_top_srcdir" >"$wheelhouse.log" 2>&1; then
		tail -n 40 "$wheelhouse.log"
		echo "venv.sh: python -m build failed (the whole log: $wheelhouse.log)" >&2
		exit 1
	fi
	echo "venv.sh: python -m build: $(cd "$wheelhouse" && echo *) in $((SECONDS - start)) s"
fi
"${pip[@]}" install -q --force-reinstall --no-deps "$wheelhouse"/hpalloc-*.whl
"$venv/bin/python" -c 'import sys, numpy, hpalloc
print("venv.sh: %s: Python %s, NumPy %s, hpalloc %s from %s" % (sys.prefix,
      sys.version.split()[0], numpy.__version__, hpalloc.__version__, hpalloc.__file__))'
