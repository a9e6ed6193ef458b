"""examples/demo.py, the README's main job, started the two ways it documents."""

import os
import subprocess
import sys

import pytest

from conftest import python_env

SRCDIR = os.environ.get("abs_top_srcdir",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.environ.get("abs_top_builddir", SRCDIR)
DEMO = os.path.join(SRCDIR, "examples", "demo.py")


def run_demo(prefix, env):
    proc = subprocess.run(prefix + [sys.executable, DEMO, "--size", "64M"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check_output(out):
    assert "NumPy handler: hpalloc, active for this process" in out, out
    # label in the first 40 columns, then handler, backend, page, ...
    rows = {line[:40].strip(): line[40:].split() for line in out.splitlines()
            if line.startswith(("np.", "hpalloc.numpy."))}
    assert rows["np.ones(1000)"][:2] == ["hpalloc", "small"], out
    big = rows["np.zeros(64M) ; a += 1"]
    assert big[0] == "hpalloc" and big[1] in ("thp", "hugetlb"), out
    assert "hpalloc.stats(): small_live_bytes=" in out


def test_demo_with_hpalloc_numpy_env(user_site):
    check_output(run_demo([], dict(user_site, HPALLOC_NUMPY="1")))


def test_demo_under_hpctl_run(user_site):
    hpctl = os.path.join(BUILDDIR, "tools", "hpctl")
    if not os.access(hpctl, os.X_OK):
        pytest.skip("tools/hpctl is not built")
    check_output(run_demo([hpctl, "run", "--"], user_site))


def test_demo_started_plainly_installs_hpalloc_itself():
    out = run_demo([], python_env())
    assert "installed by the demo" in out
