"""Python programs under `hpctl run --preload` (libhpalloc-preload.so), with no
code change and without importing hpalloc: PyTorch CPU tensors and NumPy
arrays of 64 MiB land on huge pages (per the child's own /proc/self/smaps,
where without the preload they do not), the process shows in `hpctl stats`
with preload_huge_bytes, SciPy runs correctly, and an installed tree's hpctl
finds its own preload library wherever it was installed."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import python_env
from hp_memory import CHILD
from hp_pytest_automake import need

BUILDDIR = os.environ.get("abs_top_builddir")
PRELOAD = os.environ.get("HPALLOC_TEST_PRELOAD")
MiB = 1 << 20

if os.environ.get("SANITIZER_FLAGS"):
    pytest.skip("AddressSanitizer cannot be combined with an interposer of malloc "
                "(make check-preload-valgrind runs the preload tests under memcheck)",
                allow_module_level=True)
if not BUILDDIR or not PRELOAD:
    pytest.skip("needs the build tree (run through make check)", allow_module_level=True)

HPCTL = os.path.join(BUILDDIR, "tools", "hpctl")

# Reads its own smaps (hp_memory, which imports nothing of hpalloc): bytes on
# huge pages in the mappings holding [address, address + size).
SMAPS = CHILD + textwrap.dedent("""
    import json, sys
    from hp_memory import settled_huge_bytes as huge_bytes  # a block at 4 KiB first: collapsed behind
""")

TENSORS = SMAPS + textwrap.dedent("""
    import numpy as np
    out = {}
    z = np.zeros(64 * 2**20 // 8)    # calloc: NumPy's own madvise misses it
    z += 1
    out["numpy_zeros"] = huge_bytes(z.ctypes.data, z.nbytes)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        t = torch.ones(64 * 2**20 // 4)  # float32: posix_memalign in c10
        t.mul_(2)
        out["torch"] = huge_bytes(t.data_ptr(), t.numel() * 4)
        out["torch_ok"] = bool((t == 2).all())
    print(json.dumps(out))
""")


def thp_mode():
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        return f.read().split("[")[1].split("]")[0]


def env_for_hpctl(**extra):
    env = python_env(HPALLOC_PRELOAD_PATH=PRELOAD, **extra)
    for var in ("PYTHONPATH", "HPALLOC_PYTHON_DIR", "LD_PRELOAD"):
        env.pop(var, None)  # nothing of hpalloc's Python side: no code change
    return env


def run(args, env, stdin=None):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300,
                          input=stdin)


def test_numpy_and_torch_on_huge_pages_unmodified():
    need("torch")
    preloaded = run([HPCTL, "run", "--preload", "mode=thp", "--", sys.executable, "-c", TENSORS],
                    env_for_hpctl())
    assert preloaded.returncode == 0, preloaded.stderr
    got = json.loads(preloaded.stdout)
    assert got["torch_ok"]
    assert got["torch"] >= 64 * MiB, got
    assert got["numpy_zeros"] >= 64 * MiB, got
    if thp_mode() != "always":  # the preload made the difference
        plain = run([sys.executable, "-c", TENSORS], env_for_hpctl())
        assert plain.returncode == 0, plain.stderr
        base = json.loads(plain.stdout)
        assert base["torch"] < 64 * MiB and base["numpy_zeros"] < 64 * MiB, base


def test_preloaded_python_in_hpctl_stats():
    code = SMAPS + textwrap.dedent("""
        import os, sys, numpy as np
        a = np.ones(3 * 64 * 2**20 // 8)
        print(os.getpid(), huge_bytes(a.ctypes.data, a.nbytes), flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([HPCTL, "run", "--preload", "--", sys.executable, "-c", code],
                            env=env_for_hpctl(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        pid, huge = (int(x) for x in proc.stdout.readline().split())
        assert huge >= 192 * MiB
        stats = {}
        for _ in range(100):  # the janitor publishes within a tick
            out = run([HPCTL, "--json", "stats", str(pid)], env_for_hpctl())
            if out.returncode == 0 and json.loads(out.stdout):
                stats = json.loads(out.stdout)[0]["stats"]
                if stats.get("preload_huge_bytes", 0) >= 192 * MiB:
                    break
            subprocess.run(["sleep", "0.05"])
        assert stats.get("preload_huge_bytes", 0) >= 192 * MiB, stats
        assert stats.get("numpy_huge_bytes", 0) == 0  # NumPy's handler was not involved
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_scipy_runs_correctly():
    pytest.importorskip("scipy", reason="SciPy is not installed (Debian: python3-scipy)")
    code = textwrap.dedent("""
        import numpy as np, scipy.fft, scipy.linalg
        rng = np.random.default_rng(1)
        x = rng.standard_normal(2**22)               # 32 MiB, plus work buffers
        y = scipy.fft.irfft(scipy.fft.rfft(x), n=x.size)
        assert np.allclose(x, y), abs(x - y).max()
        m = rng.standard_normal((1500, 1500))
        q, r = scipy.linalg.qr(m)
        assert np.allclose(q @ r, m)
        print("ok")
    """)
    proc = run([HPCTL, "run", "--check", "--preload", "--", sys.executable, "-c", code],
               env_for_hpctl())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_installed_hpctl_finds_its_preload_library(tmp_path):
    """The DESTDIR stage tests/consumer installs: its hpctl finds the stage's
    libhpalloc-preload.so (relative to itself), which finds the stage's
    libhpalloc.so.1 (RUNPATH $ORIGIN) -- no LD_LIBRARY_PATH, no override."""
    root = os.path.join(BUILDDIR, "tests", "consumer", "stage")
    hpctl = glob.glob(os.path.join(root, "**", "bin", "hpctl"), recursive=True)
    libs = glob.glob(os.path.join(root, "**", "libhpalloc-preload.so"), recursive=True)
    assert hpctl and libs, "incomplete install stage %s" % root
    env = env_for_hpctl()
    for var in ("HPALLOC_PRELOAD_PATH", "LD_LIBRARY_PATH"):
        env.pop(var, None)
    code = SMAPS + textwrap.dedent("""
        import ctypes, numpy as np
        z = np.zeros(64 * 2**20 // 8); z += 1
        maps = open("/proc/self/maps").read()
        print(huge_bytes(z.ctypes.data, z.nbytes), "libhpalloc-preload.so" in maps)
    """)
    proc = run([hpctl[0], "run", "--check", "--preload", "mode=thp", "--", sys.executable,
                "-c", code], env)
    assert proc.returncode == 0, proc.stderr
    huge, loaded = proc.stdout.split()
    assert loaded == "True" and int(huge) >= 64 * MiB, proc.stdout
    maps_lib = run(["sh", "-c", "grep -o '/[^ ]*libhpalloc.so.1' /proc/self/maps | head -n1"],
                   dict(env, LD_PRELOAD=libs[0]))
    assert os.path.realpath(maps_lib.stdout.strip()).startswith(os.path.realpath(root)), \
        maps_lib.stdout
