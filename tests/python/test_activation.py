"""`hpctl run` and HPALLOC_NUMPY=1 as a user meets them: hpalloc installed
to a prefix that is not one of the interpreter's site directories (the
DESTDIR stage that tests/consumer installs before the tests run: its .pth
never runs), programs started directly and by a shell script, and every way
activation can fail -- each said in one stderr line while the program runs
on, and `hpctl run --check` exiting non-zero."""

import glob
import os
import subprocess
import sys
import textwrap

import pytest

import hpalloc
from conftest import VENV, python_env

BUILDDIR = os.environ.get("abs_top_builddir")
# configure's Python, for which the stage's package is built (make
# check-venv runs these tests with the venv's)
SYSTEM_PYTHON = os.environ.get("HPALLOC_TEST_SYSTEM_PYTHON") or sys.executable

PROG = textwrap.dedent("""
    import numpy as np, hpalloc, hpalloc.numpy as h
    print(h.get_handler_name(np.ones(1 << 20)), hpalloc.__file__)
""")


def system_python(tmp_path):
    """Debian's python3, for which the stage's package is built, seeing its
    NumPy but no hpalloc installed on this machine (README's system route puts one
    in /usr/local, and an interpreter's own hpalloc comes before the one
    hpctl brings): a venv of it without pip whose one .pth adds NumPy's
    directory."""
    found = subprocess.run([SYSTEM_PYTHON, "-c", "import numpy, os; print(os.path.dirname("
                            "os.path.dirname(numpy.__file__)))"], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.fail("%s has no NumPy (Debian: python3-numpy): %s" % (SYSTEM_PYTHON, found.stderr))
    venv = tmp_path / "system-python"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    site_dir = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))[0]
    with open(os.path.join(site_dir, "numpy-dir.pth"), "w") as f:
        f.write(found.stdout)
    return str(venv / "bin" / "python3"), found.stdout.strip()


@pytest.fixture
def stage(tmp_path):
    """(hpctl of the stage, its environment, the stage's site directory, the
    program, the interpreter to run it with)."""
    if not BUILDDIR:
        pytest.skip("needs the build tree (run through make check)")
    root = os.path.join(BUILDDIR, "tests", "consumer", "stage")
    hpctl = glob.glob(os.path.join(root, "**", "bin", "hpctl"), recursive=True)
    site_dir = glob.glob(os.path.join(root, "**", "hpalloc_activate.py"), recursive=True)
    libs = glob.glob(os.path.join(root, "**", "libhpalloc.so.1"), recursive=True)
    assert hpctl and site_dir and libs, "incomplete install stage %s" % root
    env = python_env(LD_LIBRARY_PATH=os.path.dirname(libs[0]))
    for var in ("PYTHONPATH", "HPALLOC_PYTHON_DIR", "HPALLOC_NUMPY"):
        env.pop(var, None)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    python, _ = system_python(tmp_path)
    return hpctl[0], env, os.path.dirname(site_dir[0]), str(prog), python


def run(args, env):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_hpctl_run_activates_from_a_non_site_prefix(stage):
    hpctl, env, site_dir, prog, python = stage
    proc = run([hpctl, "run", "--", python, prog], env)
    assert proc.returncode == 0, proc.stderr
    handler, where = proc.stdout.split()
    assert handler == "hpalloc", proc.stderr
    assert where.startswith(site_dir), where  # the stage's copy, found by hpctl
    assert proc.stderr == ""


def test_hpctl_run_reaches_a_program_started_by_a_script(stage, tmp_path):
    hpctl, env, site_dir, prog, python = stage
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ncd /\nexec %s %s\n" % (python, prog))
    script.chmod(0o755)
    proc = run([hpctl, "run", "--check", "--", str(script)], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "hpalloc", proc.stdout + proc.stderr


def test_check_fails_when_nothing_activated(stage):
    hpctl, env, _, _, python = stage
    proc = run([hpctl, "run", "--check", "--", python, "-c", "print(42)"], env)
    assert proc.stdout.strip() == "42"  # the program ran
    assert proc.returncode == 1
    assert "no process of %s activated hpalloc" % python in proc.stderr
    proc = run([hpctl, "run", "--check", "--", "sh", "-c", "exit 3"], env)
    assert proc.returncode == 3  # the command's own failure comes first


def test_verbose_says_it_took(stage):
    hpctl, env, _, prog, python = stage
    proc = run([hpctl, "run", "verbose=1", "--", python, prog], env)
    assert proc.returncode == 0, proc.stderr
    assert "active for numpy in %s" % python in proc.stderr


def assert_one_line(proc, *parts):
    lines = [l for l in proc.stderr.splitlines() if l.startswith("hpalloc:")]
    assert len(lines) == 1, proc.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_numpy_missing_is_said(stage, tmp_path):
    """An interpreter without NumPy: a venv without the system's packages."""
    hpctl, env, _, _, _ = stage
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env)
    if made.returncode != 0:
        pytest.fail("cannot make a venv to hide NumPy: %s" % made.stderr)
    python = str(venv / "bin" / "python3")
    proc = run([hpctl, "run", "--check", "--", python, "-c", "print('ran')"], env)
    assert proc.stdout.strip() == "ran"
    assert proc.returncode == 1
    assert_one_line(proc, "not active for numpy", python, "NumPy is not installed")


def test_numpy_too_old_is_said(stage, tmp_path):
    hpctl, env, _, _, python = stage
    fake = tmp_path / "old" / "numpy"
    (fake / "core").mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '1.20.3'\n")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "core" / "multiarray.py").write_text("")
    env = dict(env, PYTHONPATH=str(tmp_path / "old"))
    proc = run([hpctl, "run", "--", python, "-c",
                "import numpy; print('ran', numpy.__version__)"], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran", "1.20.3"]
    assert_one_line(proc, "not active for numpy", "NumPy 1.20.3 is too old", ">= 1.22")


def test_package_that_cannot_load_is_said(stage, tmp_path):
    """The package is found but its extension does not load (here: a copy
    whose _hpalloc.so is not a shared object): reported, not a traceback."""
    import shutil
    hpctl, env, site_dir, _, python = stage
    broken = tmp_path / "site"
    shutil.copytree(site_dir, broken, symlinks=False)
    (broken / "hpalloc" / "_hpalloc.so").write_bytes(b"not an ELF file")
    proc = run([hpctl, "run", "--", python, "-c", "print('ran')"],
               dict(env, HPALLOC_PYTHON_DIR=str(broken)))
    assert proc.returncode == 0
    assert proc.stdout.strip() == "ran"
    assert_one_line(proc, "cannot import hpalloc", "_hpalloc")
    assert "Traceback" not in proc.stderr
    # --check learns why too: the library (reached with ctypes, the
    # package's extension being what fails) wrote the report's line
    proc = run([hpctl, "run", "--check", "--", python, "-c", "print('ran')"],
               dict(env, HPALLOC_PYTHON_DIR=str(broken)))
    assert proc.returncode == 1 and proc.stdout.strip() == "ran", proc.stderr
    assert "hpalloc was not activated in %s (1 process(es) tried; " % python in proc.stderr \
        and "cannot import hpalloc" in proc.stderr.splitlines()[-1], proc.stderr


def test_hpalloc_numpy_env_in_a_site_directory(stage, tmp_path):
    """HPALLOC_NUMPY=1 without hpctl: the .pth of a site directory."""
    _, env, site_dir, prog, _ = stage
    _, numpy_dir = system_python(tmp_path / "again")
    code = ("import site; site.addsitedir(%r); site.addsitedir(%r); exec(open(%r).read())"
            % (numpy_dir, site_dir, prog))
    proc = run([SYSTEM_PYTHON, "-S", "-c", code], dict(env, HPALLOC_NUMPY="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "hpalloc", proc.stderr


def test_hpctl_run_prefers_the_interpreters_own_package(stage, tmp_path):
    """A venv with its own hpalloc (hpalloc's wheel, for its NumPy 2 and
    PyTorch 2) runs on that one, started directly or by a script,
    with no PYTHONPATH set by hand; hpctl's package is only the fallback."""
    if not VENV:
        pytest.skip("needs make check-venv's venv (README command 2)")
    hpctl, env, site_dir, prog, _ = stage
    own = os.path.dirname(os.path.dirname(hpalloc.__file__))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ncd /\nexec %s %s\n" % (sys.executable, prog))
    script.chmod(0o755)
    for command in ([sys.executable, prog], [str(script)]):
        proc = run([hpctl, "run", "--check", "--"] + command, env)
        assert proc.returncode == 0, proc.stderr
        handler, where = proc.stdout.split()
        assert handler == "hpalloc", proc.stderr
        assert where.startswith(own) and not where.startswith(site_dir), where


def test_package_built_for_numpy_1_under_numpy_2_is_said(stage):
    """The stage's package is built against configure's NumPy (Debian's
    1.24): put first for the venv's NumPy 2.x, it cannot load, and one line
    says which package to install instead of a traceback."""
    if not VENV:
        pytest.skip("needs make check-venv's venv (NumPy 2.x)")
    hpctl, env, site_dir, prog, _ = stage
    import numpy
    built = subprocess.run([SYSTEM_PYTHON, "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True).stdout.strip()
    if not built.startswith("1.") or not numpy.__version__.startswith("2."):
        pytest.skip("stage built for NumPy %s, venv has %s: no 1.x/2.x pair here"
                    % (built, numpy.__version__))
    proc = run([hpctl, "run", "--", sys.executable, "-c", "import numpy; print('ran')"],
               dict(env, HPALLOC_PYTHON_DIR=site_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ran"
    assert_one_line(proc, "not active for numpy", "built for NumPy 1.x",
                    "NumPy %s" % numpy.__version__, "pip install hpalloc")
    assert "Traceback" not in proc.stderr


REPORT = r"""
import os, sys
import hpalloc_activate  # HPALLOC_NUMPY unset: activates nothing
hpalloc_activate._report_line("numpy", False, "first\nsecond " + "x" * 4000)
hpalloc_activate._report_line("numpy", True, "")
try:
    from hpalloc import _hpalloc
    _hpalloc.report_activation("two words", True, "")
except ValueError as exc:
    print("refused:", exc)
"""


def test_the_activation_report_line_is_the_librarys(tmp_path):
    """hpalloc_activate's lines for `hpctl run --check` are written by the
    library (lib/control/report.c): one line each, cut to the length hpctl reads
    (REPORT_LINE_MAX, 1024), and an adapter name that is not one word is
    refused rather than written."""
    private = tmp_path / "rep"
    private.mkdir(mode=0o700)
    report = private / "report"
    report.write_bytes(b"")
    proc = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True,
                          env=python_env(HPALLOC_REPORT=str(report)), timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = report.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3, lines
    failed, ok = lines[0].decode(), lines[1].decode()
    assert len(failed) + 1 <= 1024, "a line of %d bytes: hpctl reads 1024" % len(failed)
    pid = failed.split()[0]
    assert failed.startswith(pid + " numpy failed first second xxx"), failed
    assert ok == pid + " numpy ok", ok
    assert "refused: report_activation: adapter 'two words' is not one word" in proc.stdout, \
        proc.stdout + proc.stderr


def test_without_the_library_no_report_line_is_written(tmp_path):
    """The library is the report's one writer: an interpreter that can load
    neither the package nor libhpalloc says why on stderr and leaves
    HPALLOC_REPORT's file alone (hpctl then says no process activated
    hpalloc) -- the activation module writes no line of its own."""
    alone = tmp_path / "alone"
    alone.mkdir()
    import hpalloc_activate  # HPALLOC_NUMPY unset here: activates nothing
    src = hpalloc_activate.__file__
    (alone / "hpalloc_activate.py").write_bytes(open(src, "rb").read())
    private = tmp_path / "rep"
    private.mkdir(mode=0o700)
    report = private / "report"
    report.write_bytes(b"")
    env = dict(os.environ, HPALLOC_NUMPY="1", HPALLOC_REPORT=str(report))
    for var in ("LD_LIBRARY_PATH", "PYTHONPATH", "HPALLOC_PYTHON_DIR"):
        env.pop(var, None)
    probe = subprocess.run([sys.executable, "-S", "-c", "import ctypes; "
                            "ctypes.CDLL('libhpalloc.so.1')"], env=env, capture_output=True)
    if probe.returncode == 0:
        pytest.skip("a libhpalloc.so.1 is installed on this machine: the library is reachable")
    code = "import sys; sys.path.insert(0, %r); import hpalloc_activate; print('ran')" % str(alone)
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr
    assert_one_line(proc, "not active for numpy", "cannot import hpalloc")
    assert report.read_bytes() == b"", "a line written without the library: %r" \
        % report.read_bytes()
