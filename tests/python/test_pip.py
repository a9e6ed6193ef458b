"""hpalloc's package as `pip install ./python` installs it (docs/python.md,
"From a virtual environment or conda"), in make check-venv's venv: the
files pip put there, activation from the venv's own site directory, one
build serving NumPy 1.x and 2.x, install and uninstall into a fresh venv
leaving nothing behind, and the one-line stops of the build."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import MiB, VENV, python_env

SRCDIR = os.environ.get("abs_top_srcdir")
BUILDDIR = os.environ.get("abs_top_builddir")

if not VENV:
    pytest.skip("pip's install is tested in make check-venv's venv (README command 2); "
                "this run tests make install's layout (test_install.py)",
                allow_module_level=True)


def pip(python, *args, env=None, check=True):
    proc = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args],
                          env=env or python_env(), capture_output=True, text=True,
                          timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def site_packages(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['platlib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_pip_installed_every_part():
    files = pip(sys.executable, "show", "-f", "hpalloc").stdout.split()
    for name in ("hpalloc/__init__.py", "hpalloc/numpy.py", "hpalloc_activate.py",
                 "hpalloc-numpy.pth", "hpalloc/_boot/sitecustomize.py"):
        assert name in files, name
    for module in ("_hpalloc", "_shared", "_rawdomain", "_nrt"):
        assert any(f.startswith("hpalloc/%s." % module) and f.endswith(".so")
                   for f in files), module
    for module, library in (("_torch", "torch"), ("_arrow", "pyarrow")):
        built = any(f.startswith("hpalloc/%s." % module) for f in files)
        there = subprocess.run([sys.executable, "-c", "import " + library]).returncode == 0
        assert built == there, "hpalloc.%s built: %s, %s here: %s" % (
            module, built, library, there)


def test_hpalloc_numpy_activates_from_the_venv_site():
    code = ("import numpy as np, hpalloc; from numpy._core.multiarray import "
            "get_handler_name as g; a = np.ones(%d); print(g(a), hpalloc.__file__)" % (8 * MiB))
    env = python_env(HPALLOC_NUMPY="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    handler, path = proc.stdout.split()
    assert handler == "hpalloc", proc.stderr
    assert path.startswith(site_packages(sys.executable)), path


def test_one_build_serves_numpy_1_too(tmp_path):
    """The extension pip built against NumPy 2 headers loads into Debian's
    NumPy 1.24 (same CPython ABI) and allocates arrays there."""
    debian = "/usr/bin/python3"
    probe = subprocess.run([debian, "-c", "import sys, numpy; print(numpy.__version__, "
                            "sys.implementation.cache_tag)"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no NumPy for %s (Debian: python3-numpy)" % debian)
    version, tag = probe.stdout.split()
    if not version.startswith("1.") or tag != sys.implementation.cache_tag:
        pytest.skip("%s has NumPy %s, %s: not a NumPy 1.x of this Python ABI"
                    % (debian, version, tag))
    import hpalloc
    shutil.copytree(os.path.dirname(hpalloc.__file__), tmp_path / "hpalloc")
    code = ("import numpy as np, hpalloc.numpy as h; h.install(); a = np.ones(%d); "
            "print(np.__version__, h.get_handler_name(a), h.backing(a)['backend'])" % (8 * MiB))
    env = python_env(PYTHONPATH=str(tmp_path))
    proc = subprocess.run([debian, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [version, "hpalloc", "thp"], proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """An empty venv of the same base interpreter (no NumPy: hpalloc needs none
    to install)."""
    if not SRCDIR or not BUILDDIR:
        pytest.skip("needs the build tree (run through make check-venv)")
    where = tmp_path_factory.mktemp("fresh") / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(where)], check=True, timeout=300)
    return str(where / "bin" / "python")


def build_env(pkg_config_path):
    env = python_env()
    env.pop("PYTHONPATH", None)
    env["PKG_CONFIG_PATH"] = pkg_config_path
    return env


def snapshot(python):
    top = site_packages(python)
    return {os.path.relpath(p, top) for p in glob.glob(os.path.join(top, "**"),
                                                       recursive=True)}


def test_install_then_uninstall_leaves_nothing(fresh_venv):
    before = snapshot(fresh_venv)
    pip(fresh_venv, "install", os.path.join(SRCDIR, "python"),
        env=build_env(os.path.join(BUILDDIR, "pkgconfig")))
    after = snapshot(fresh_venv)
    assert "hpalloc-numpy.pth" in after and "hpalloc_activate.py" in after
    # imported once, so __pycache__ files exist too when pip removes it
    run = subprocess.run([fresh_venv, "-c", "import hpalloc, hpalloc_activate; "
                          "print(hpalloc.__version__)"], env=build_env(""),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    pip(fresh_venv, "uninstall", "-y", "hpalloc")
    assert snapshot(fresh_venv) == before


def one_line_stop(proc, *words):
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in (proc.stdout + proc.stderr).splitlines()
             if "hpalloc: " in line and "pkg-config" in line]
    assert lines, proc.stdout + proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_without_the_library_pip_stops_in_one_line(fresh_venv, tmp_path):
    env = build_env(str(tmp_path))
    env["PKG_CONFIG_LIBDIR"] = str(tmp_path)  # not even the system's .pc files
    proc = pip(fresh_venv, "install", os.path.join(SRCDIR, "python"), env=env, check=False)
    one_line_stop(proc, "finds no libhpalloc", "README command 1")
    assert pip(fresh_venv, "show", "hpalloc", check=False).returncode != 0


def test_a_library_of_another_version_stops_in_one_line(fresh_venv, tmp_path):
    with open(os.path.join(BUILDDIR, "pkgconfig", "hpalloc-uninstalled.pc")) as f:
        pc = f.read()
    (tmp_path / "hpalloc.pc").write_text("\n".join(
        "Version: 0.0.1" if line.startswith("Version:") else line
        for line in pc.splitlines()) + "\n")
    env = build_env(str(tmp_path))
    env["PKG_CONFIG_LIBDIR"] = str(tmp_path)
    proc = pip(fresh_venv, "install", os.path.join(SRCDIR, "python"), env=env, check=False)
    one_line_stop(proc, "libhpalloc 0.0.1", "this package is")
