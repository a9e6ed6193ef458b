"""hpalloc.processes(): the entries processes using hpalloc publish, read by
the library (the same reader as hpctl stats), and hpalloc.parse_knob()."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hpnp
from conftest import MiB, python_env


def control_dir():
    path = os.environ.get("HPALLOC_CONTROL_DIR")
    if not path or not os.path.isdir(path):
        pytest.skip("no control directory (run through make check)")
    return path


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    return predicate()


def entry(pid):
    return next((p for p in hpalloc.processes() if p["pid"] == pid), None)


def test_own_entry():
    control_dir()
    with hpnp.enabled():
        arr = np.ones(16 * MiB // 8)
    me = wait_for(lambda: (e := entry(os.getpid())) and
                  e["stats"]["numpy_huge_bytes"] >= arr.nbytes and e)
    assert me, hpalloc.processes()
    assert me["alive"] is True and me["comm"] and me["start_time"] > 0
    assert set(me["stats"]) == set(hpalloc.stats())
    assert me["knobs"]["threshold"]["source"] in ("default", "control", "env")
    del arr


def test_killed_process_is_pruned():
    ctl = control_dir()
    child = subprocess.Popen(
        # a huge block: the library's janitor, which publishes, starts with it
        [sys.executable, "-c", "import hpalloc, hpalloc.numpy as hpnp, numpy as np, time\n"
         "hpalloc.set('threshold', '1M')\n"
         "with hpnp.enabled():\n    a = np.ones(1 << 20)\n"
         "print('ready', flush=True)\ntime.sleep(60)"],
        env=python_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert wait_for(lambda: entry(child.pid)), "child never published"
        os.makedirs(os.path.join(ctl, "proc", str(child.pid), "override"), exist_ok=True)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert entry(child.pid) is None
    assert not os.path.exists(os.path.join(ctl, "proc", str(child.pid)))


def test_parse_knob_validates_only():
    before = hpalloc.config()["threshold"]
    assert hpalloc.parse_knob("threshold", "4096K") == "4M"
    assert hpalloc.parse_knob("threshold", 4194304) == "4M"
    with pytest.raises(ValueError, match="threshold.*'4Q'.*accepted"):
        hpalloc.parse_knob("threshold", "4Q")
    with pytest.raises(ValueError, match="bogus"):
        hpalloc.parse_knob("bogus", "1")
    with pytest.raises(TypeError):
        hpalloc.parse_knob("threshold", True)
    assert hpalloc.config()["threshold"] == before
