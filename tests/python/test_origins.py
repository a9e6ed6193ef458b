"""Stats say where huge bytes came from: python (raw domain), numba (NRT),
torch (c10), numpy (the handler) -- in hpalloc.stats() and in what
`hpctl stats PID` prints for a running process."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from hp_pytest_automake import need

import hpalloc
from conftest import MiB, python_env

ORIGINS = ("numpy", "python", "numba", "torch")
BUILDDIR = os.environ.get("abs_top_builddir")


def have(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_stats_have_every_origin():
    stats = hpalloc.stats()
    for origin in ORIGINS:
        assert "%s_huge_bytes" % origin in stats


CHILD = textwrap.dedent("""
    import sys
    import numpy as np, hpalloc.numpy, hpalloc.python
    hpalloc.python.install()
    keep = [bytearray(64 << 20)]              # python
    with hpalloc.numpy.enabled():
        keep.append(np.ones(4 << 20))         # numpy: 32 MiB
    if "numba" in sys.argv:
        import hpalloc.numba
        from numba import njit
        hpalloc.numba.install()
        keep.append(njit(lambda n: np.ones(n))(2 << 20))    # numba: 16 MiB
    if "torch" in sys.argv:
        import torch, hpalloc.torch
        hpalloc.torch.install()
        keep.append(torch.ones(1 << 20, dtype=torch.float64))  # torch: 8 MiB
    print("ready", flush=True)
    sys.stdin.read()                           # until the parent closes it
""")


def hpctl(*args):
    return subprocess.run([os.path.join(BUILDDIR, "tools", "hpctl")] + list(args),
                          capture_output=True, text=True, env=python_env())


def published(pid, expected, deadline=10.0):
    """The stats of `hpctl --json stats PID` once every counter of expected
    reaches its value (the janitor publishes every 250 ms; an earlier
    snapshot may predate the child's last allocations), or the last
    snapshot at the deadline."""
    end = time.monotonic() + deadline
    while True:
        proc = hpctl("--json", "stats", str(pid))
        entries = json.loads(proc.stdout) if proc.returncode == 0 else []
        counters = entries[0]["stats"] if entries else {}
        if all(counters.get(k, 0) >= v for k, v in expected.items()) or \
                time.monotonic() > end:
            return counters
        time.sleep(0.1)


def text_stats(pid):
    """What a person reads: every counter is in `hpctl stats --long PID`
    (plain `hpctl stats PID` where hpctl has no --long and prints them all)."""
    long_form = "--long" in hpctl("--help").stdout
    out = hpctl("stats", *(["--long"] if long_form else []), str(pid)).stdout
    counters = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            counters[words[0]] = int(words[1])
    return counters, out


def test_hpctl_stats_shows_each_origin():
    if not BUILDDIR:
        pytest.skip("needs the build tree's hpctl (run through make check)")
    extra = [m for m in ("numba", "torch") if have(m)]
    if "torch" in extra:
        need("torch", "hpalloc.torch")  # torch here without its adapter: a missing capability
    expected = {"python_huge_bytes": 64 * MiB, "numpy_huge_bytes": 32 * MiB}
    if "numba" in extra:
        expected["numba_huge_bytes"] = 16 * MiB
    if "torch" in extra:
        expected["torch_huge_bytes"] = 8 * MiB
    child = subprocess.Popen([sys.executable, "-c", CHILD] + extra, env=python_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        counters = published(child.pid, expected)
        text, out = text_stats(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    for counter, least in expected.items():
        assert counters.get(counter, 0) >= least, counters
        assert text.get(counter, 0) >= least, out
