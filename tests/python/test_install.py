"""The package as `make install` lays it out (the DESTDIR stage that
tests/consumer builds before the tests run): extension, sources and .pth
in the directory the interpreter searches, HPALLOC_NUMPY=1 working from it."""

import glob
import os

import pytest

from conftest import python_env, run_python

BUILDDIR = os.environ.get("abs_top_builddir")


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


def test_installed_package_layout(staged):
    site_dir, _ = staged
    # Everything in one directory: a package split between pythondir and
    # pyexecdir would not import.
    assert site_dir.endswith(("dist-packages", "site-packages"))
    for name in ("__init__.py", "numpy.py", "_autoload.py", "_hpalloc.so"):
        assert os.path.exists(os.path.join(site_dir, "hpalloc", name)), name


def test_installed_package_activates_with_hpalloc_numpy(staged):
    site_dir, env = staged
    code = ("import site; site.addsitedir(%r); import numpy as np, hpalloc, "
            "hpalloc.numpy as h; print(h.get_handler_name(np.ones(10)), "
            "h.installed(), hpalloc.__file__.startswith(%r))" % (site_dir, site_dir))
    proc = run_python(code, env=dict(env, HPALLOC_NUMPY="1"))
    assert proc.stdout.split() == ["hpalloc", "True", "True"], proc.stderr
    proc = run_python(code, env=env)
    assert proc.stdout.split() == ["default_allocator", "False", "True"], proc.stderr
