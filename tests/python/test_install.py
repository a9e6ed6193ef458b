"""The package as `make install` lays it out (the DESTDIR stage that
tests/consumer builds before the tests run), tested in isolation from any
copy installed on this machine: the interpreters here start with -S and add
only NumPy's directory and the stage, so an hpalloc under /usr/local or
/usr/lib/python3 (README's system route, the Debian package) cannot be the one
imported."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import python_env

BUILDDIR = os.environ.get("abs_top_builddir")

if os.environ.get("HPALLOC_TEST_VENV"):
    pytest.skip("make install lays the package out for configure's Python (make check "
                "tests that); in make check-venv's venv test_pip.py tests pip's layout",
                allow_module_level=True)


def numpy_dir():
    import numpy
    return os.path.dirname(os.path.dirname(numpy.__file__))


@pytest.fixture
def staged():
    if not BUILDDIR:
        pytest.skip("needs the build tree (run through make check)")
    stage = os.path.join(BUILDDIR, "tests", "consumer", "stage")
    pths = glob.glob(os.path.join(stage, "**", "hpalloc-numpy.pth"), recursive=True)
    if not pths:
        pytest.fail("no hpalloc-numpy.pth under the install stage %s" % stage)
    site_dir = os.path.dirname(pths[0])
    libs = glob.glob(os.path.join(stage, "**", "libhpalloc.so.1"), recursive=True)
    assert libs, "libhpalloc.so.1 not installed under %s" % stage
    env = python_env(LD_LIBRARY_PATH=os.path.dirname(libs[0]))
    env.pop("PYTHONPATH", None)
    return site_dir, env


def isolated(code, site_dir, env):
    """Python without its site directories; then NumPy's and the stage's
    (whose .pth runs, as in a real site directory)."""
    prologue = ("import site; site.addsitedir(%r); site.addsitedir(%r); "
                % (numpy_dir(), site_dir))
    return subprocess.run([sys.executable, "-S", "-c", prologue + code], env=env,
                          capture_output=True, text=True, timeout=120)


def test_installed_package_layout(staged):
    site_dir, _ = staged
    # Everything in one directory: a package split between pythondir and
    # pyexecdir would not import.
    assert site_dir.endswith(("dist-packages", "site-packages"))
    for name in ("hpalloc/__init__.py", "hpalloc/numpy.py", "hpalloc/_hpalloc.so",
                 "hpalloc/_boot/sitecustomize.py", "hpalloc_activate.py"):
        assert os.path.exists(os.path.join(site_dir, name)), name


def test_installed_package_activates_with_hpalloc_numpy(staged):
    site_dir, env = staged
    code = ("import numpy as np, hpalloc, hpalloc.numpy as h; "
            "print(h.get_handler_name(np.ones(10)), h.installed(), "
            "hpalloc.__file__.startswith(%r))" % site_dir)
    proc = isolated(code, site_dir, dict(env, HPALLOC_NUMPY="1"))
    assert proc.stdout.split() == ["hpalloc", "True", "True"], proc.stderr
    proc = isolated(code, site_dir, env)
    assert proc.stdout.split() == ["default_allocator", "False", "True"], proc.stderr
