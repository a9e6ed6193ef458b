"""hpalloc's wheel as pip installs it (docs/python.md, "From a virtual
environment or conda"), in make check-venv's venv, where tests/python/venv.sh
installed the wheel `python -m build` made from this tree: the files pip put
there, the commands on the venv's PATH running the wheel's own hpctl and
library, activation from the venv's own site directory, one build serving
NumPy 1.x and 2.x, install and uninstall into a fresh venv leaving nothing
behind, and the one-line stop of a build that fails."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

import hpalloc
from conftest import MiB, VENV, python_env

SRCDIR = os.environ.get("abs_top_srcdir")
BUILDDIR = os.environ.get("abs_top_builddir")

if not VENV:
    pytest.skip("pip's install of the wheel is tested in make check-venv's venv (README "
                "command 2); this run tests make install's layout (test_install.py)",
                allow_module_level=True)

SITE = sysconfig.get_paths()["platlib"]
BIN = os.path.dirname(sys.executable)


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


def wheel():
    found = glob.glob(os.path.join(BUILDDIR or "", "wheelhouse", "hpalloc-*.whl"))
    if not BUILDDIR or len(found) != 1:
        pytest.fail("make check-venv's wheel: expected one wheel in %s/wheelhouse, found %s"
                    % (BUILDDIR, found))
    return found[0]


def test_pip_installed_every_part():
    files = set(pip(sys.executable, "show", "-f", "hpalloc").stdout.split())
    for name in ("hpalloc/__init__.py", "hpalloc/__main__.py", "hpalloc/numpy.py",
                 "hpalloc_activate.py", "hpalloc-numpy.pth", "hpalloc/_boot/sitecustomize.py",
                 "hpalloc/bin/hpctl", "hpalloc/lib/libhpalloc.so.1",
                 "hpalloc/lib/libhpalloc-preload.so", "hpalloc/lib/libhpalloc.so",
                 "hpalloc/lib/pkgconfig/hpalloc.pc", "hpalloc/include/hpalloc.h"):
        assert name in files, name
    # every adapter, whatever this venv has: torch and pyarrow may come later
    for module in ("_hpalloc", "_shared", "_rawdomain", "_nrt", "_torch", "_arrow"):
        assert "hpalloc/%s.so" % module in files, module
    for lib in ("liburing", "libnuma"):  # grafted by auditwheel
        assert any(f.startswith("hpalloc.libs/%s-" % lib) for f in files), (lib, files)
    for command in ("hpctl", "hpalloc-config"):
        assert any(f.endswith("bin/" + command) for f in files), command


def test_commands_run_the_wheels_own_hpctl():
    """hpctl on the venv's PATH and python -m hpalloc run hpalloc/bin/hpctl
    of this venv (hpctl run --check reports the preload library it found,
    which it finds relative to itself)."""
    own = os.path.join(SITE, "hpalloc")
    for command in ([os.path.join(BIN, "hpctl")], [sys.executable, "-m", "hpalloc"]):
        proc = subprocess.run(command + ["run", "--preload", "--", "cat", "/proc/self/maps"],
                              env=python_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        preloads = {line.split()[-1] for line in proc.stdout.splitlines()
                    if line.endswith("libhpalloc-preload.so")}
        assert preloads == {os.path.join(own, "lib", "libhpalloc-preload.so")}, preloads
        version = subprocess.run(command + ["--version"], capture_output=True, text=True,
                                 timeout=60)
        assert version.returncode == 0 and hpalloc.__version__ in version.stdout, \
            version.stdout + version.stderr


def test_hpalloc_config_points_into_the_package():
    proc = subprocess.run([os.path.join(BIN, "hpalloc-config"), "--pkgconfigdir",
                           "--includedir", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    pcdir, incdir, version = proc.stdout.split()
    own = os.path.join(SITE, "hpalloc")
    assert pcdir == os.path.join(own, "lib", "pkgconfig") == hpalloc.get_pkgconfig_dir()
    assert incdir == os.path.join(own, "include") == hpalloc.get_include()
    assert version == hpalloc.__version__
    bad = subprocess.run([os.path.join(BIN, "hpalloc-config"), "--bogus"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --bogus" in bad.stderr


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
    """The wheel's extension, built against NumPy 2 headers, loads into
    Debian's NumPy 1.24 (same CPython ABI) and allocates arrays there."""
    debian = "/usr/bin/python3"
    probe = subprocess.run([debian, "-c", "import sys, numpy; print(numpy.__version__, "
                            "sys.implementation.cache_tag)"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no NumPy for %s (Debian: python3-numpy)" % debian)
    version, tag = probe.stdout.split()
    if not version.startswith("1.") or tag != sys.implementation.cache_tag:
        pytest.skip("%s has NumPy %s, %s: not a NumPy 1.x of this Python ABI"
                    % (debian, version, tag))
    for name in ("hpalloc", "hpalloc.libs"):  # the package and what it links
        shutil.copytree(os.path.join(SITE, name), tmp_path / name)
    code = ("import numpy as np, hpalloc.numpy as h; h.install(); a = np.ones(%d); "
            "print(np.__version__, h.get_handler_name(a), h.backing(a)['backend'], "
            "h.__file__)" % (8 * MiB))
    env = python_env(PYTHONPATH=str(tmp_path), HPALLOC_MODE="thp")
    proc = subprocess.run([debian, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split()
    assert out[:3] == [version, "hpalloc", "thp"], proc.stdout + proc.stderr
    assert out[3].startswith(str(tmp_path)), out


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """An empty venv of the same base interpreter (no NumPy: hpalloc needs none
    to install)."""
    where = tmp_path_factory.mktemp("fresh") / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(where)], check=True, timeout=300)
    return str(where / "bin" / "python")


def snapshot(python):
    """Every file and directory of the venv but pip's own bookkeeping."""
    top = os.path.dirname(os.path.dirname(python))
    return {os.path.relpath(p, top) for p in glob.glob(os.path.join(top, "**"),
                                                       recursive=True)}


def test_install_then_uninstall_leaves_nothing(fresh_venv):
    before = snapshot(fresh_venv)
    pip(fresh_venv, "install", wheel())
    after = snapshot(fresh_venv)
    top = os.path.relpath(site_packages(fresh_venv), os.path.dirname(os.path.dirname(fresh_venv)))
    for name in ("hpalloc-numpy.pth", "hpalloc_activate.py", "hpalloc/bin/hpctl"):
        assert os.path.join(top, name) in after, name
    assert "bin/hpctl" in after and "bin/hpalloc-config" in after
    # used once, as a user would, before pip removes it
    env = python_env()
    env.pop("PYTHONPATH", None)
    run = subprocess.run([os.path.join(os.path.dirname(fresh_venv), "hpctl"), "run", "--",
                          fresh_venv, "-c", "import hpalloc, hpalloc_activate; "
                          "print(hpalloc.__version__)"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == hpalloc.__version__, run.stderr
    pip(fresh_venv, "uninstall", "-y", "hpalloc")
    assert snapshot(fresh_venv) == before


def test_a_failed_build_stops_in_one_line(tmp_path):
    """A build that cannot go on (here: no working C compiler) stops with one
    line saying which step failed, after that step's own output."""
    env = python_env(CC="/nonexistent/cc")
    env.pop("PYTHONPATH", None)
    proc = pip(sys.executable, "wheel", "--no-deps", "--no-build-isolation", "-w",
               str(tmp_path), SRCDIR, env=env, check=False)
    assert proc.returncode != 0, proc.stdout
    out = proc.stdout + proc.stderr
    # pip indents the build's output
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("hpalloc: ")]
    assert lines and lines[-1] == ("hpalloc: configure failed (exit status 77); its output "
                                   "is above"), out
    assert "C compiler cannot create executables" in out
    assert not glob.glob(str(tmp_path / "*.whl"))
