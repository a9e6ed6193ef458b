"""examples/demo.py, the README's main job, started the two ways it documents.

The point of the demo is its "huge pages (smaps)" column: what the kernel
says backs the big array.  It must name the kind of huge page the backend
column promises and cover most of the array."""

import os
import subprocess
import sys

import pytest

import hpalloc
from conftest import python_env

DEMO_SIZE = 64 << 20

SRCDIR = os.environ.get("abs_top_srcdir",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.environ.get("abs_top_builddir", SRCDIR)
DEMO = os.path.join(SRCDIR, "examples", "demo.py")


def run_demo(prefix, env):
    proc = subprocess.run(prefix + [sys.executable, DEMO, "--size", str(DEMO_SIZE)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check_output(out):
    assert "NumPy handler: hpalloc, active for this process" in out, out
    # label in the first 40 columns, then handler, backend, page, ...
    rows = {line[:40].strip(): line[40:].split() for line in out.splitlines()
            if line.startswith(("np.", "hpalloc.numpy."))}
    assert rows["np.ones(1000)"][:2] == ["hpalloc", "small"], out
    # handler, backend, page, then the smaps column: "0" or "<size> <kind>"
    assert rows["np.ones(1000)"][3] == "0", out
    big = rows["np.zeros(64M) ; a += 1"]
    assert big[0] == "hpalloc" and big[1] in ("thp", "hugetlb"), out
    kind = {"thp": "AnonHugePages", "hugetlb": "hugetlb"}[big[1]]
    assert big[4] == kind, "smaps column of the big array: %s\n%s" % (big[3:5], out)
    huge = hpalloc.parse_size(big[3])
    # every page touched: THP faults it in 2 MiB at a time; a few may
    # have been refused (fragmentation), most not
    assert huge >= DEMO_SIZE * 3 // 4 and huge <= DEMO_SIZE + (2 << 20), out
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
