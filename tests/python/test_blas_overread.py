"""Issue 32: SciPy's BLAS and LAPACK calls run under hpalloc as under NumPy's
default allocator, on whatever OpenBLAS the interpreter loads (Debian's
libopenblas0 behind libblas.so.3, or SciPy's own from PyPI).

OpenBLAS's complex kernels read up to a column past the end of a matrix; with
hpalloc's old guard (one PROT_NONE page after each block) complex svd and
lstsq died of SIGSEGV (here: n = 512 and 700, and the issue's snippet).  The scan
(tests/python/blas_scan.py: svd, lstsq, eig, qr, solve, matvec; float64 and
complex128; n = 256, 300, 512, 700, across the 1 MiB threshold; and the
issue's own snippet, svdvals of a complex hilbert(300)) runs once
under NumPy's default, then under `hpctl run` (the NumPy handler) and `hpctl
run --preload`, with OpenBLAS's own choice of kernels and with each core type
of the scan this CPU can run forced (OPENBLAS_CORETYPE): every case must end
and agree with the default run.  A case that crashes is recorded and the
rest go on in a new process, so one failure names every case it hits."""

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import python_env
from hp_pytest_automake import skip

pytest.importorskip("scipy", reason="SciPy is not installed (Debian: python3-scipy)")
pytest.importorskip("numpy")

import blas_scan  # noqa: E402  (tests/python is on sys.path, as conftest)

BUILDDIR = os.environ.get("abs_top_builddir")
PRELOAD = os.environ.get("HPALLOC_TEST_PRELOAD")
SANITIZED = bool(os.environ.get("SANITIZER_FLAGS"))
if not BUILDDIR:
    pytest.skip("needs the build tree (run through make check)", allow_module_level=True)
HPCTL = os.path.join(BUILDDIR, "tools", "hpctl")
SCAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blas_scan.py")


def scan(prefix, env):
    """blas_scan.py's cases under prefix: (core, {case: (guards, result)},
    {case: how it ended}) -- a case a crash cut short is recorded and the
    rest run in a new process."""
    core, results, crashed = None, {}, {}
    todo = list(blas_scan.CASES)
    while todo:
        proc = subprocess.run(prefix + [sys.executable, SCAN] + todo, env=env,
                              capture_output=True, text=True, timeout=900)
        for line in proc.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "CORE":
                core = rest
            elif kind == "CASE":
                name, guards, result = rest.split(" ", 2)
                results[name] = (int(guards), json.loads(result))
        left = [c for c in todo if c not in results]
        if proc.returncode != 0:
            sig = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
            how = (signal.Signals(sig).name if 0 < sig < 65 and proc.returncode != 1
                   else "exit %d" % proc.returncode)
            if not left:
                pytest.fail("the scan ended with %s after its last case: %s"
                            % (how, proc.stderr[-2000:]), pytrace=False)
            crashed[left[0]] = "%s: %s" % (how, proc.stderr.strip().splitlines()[-1:] or "")
            left = left[1:]
        elif left:
            pytest.fail("the scan exited 0 without cases %s" % left, pytrace=False)
        todo = left
    return core, results, crashed


@pytest.fixture(scope="module")
def baseline():
    """NumPy's default allocator, OpenBLAS's own choice of kernels.

    The reference is glibc's malloc, so under the sanitizers it runs without
    their preload: ASan's allocator maps each large block on its own, flush
    against unmapped memory, and OpenBLAS's over-read of a complex matrix
    dies there (AMD's Zen zgemv kernel on lstsq-complex128-700, CI on an
    EPYC) -- the very thing hpalloc's slack is for, not a fault of the
    reference."""
    env = python_env()
    if SANITIZED:
        ours = set(os.environ.get("SANITIZER_PRELOAD", "").split())
        rest = [p for p in env.pop("LD_PRELOAD", "").split() if p not in ours]
        if rest:
            env["LD_PRELOAD"] = " ".join(rest)
    core, results, crashed = scan([], env)
    if core == "-":
        skip("openblas", "the BLAS SciPy loads is not OpenBLAS (Debian: libopenblas0 "
             "behind libblas.so.3; PyPI SciPy brings its own)")
    assert not crashed, "NumPy's default allocator crashed: %s" % crashed
    assert not any(g for g, _ in results.values()), "guards without hpalloc?"
    return results


def activations():
    yield "handler", [HPCTL, "run", "--"], python_env()
    if not SANITIZED and PRELOAD:  # ASan cannot sit beside an interposer of malloc
        env = python_env(HPALLOC_PRELOAD_PATH=PRELOAD)
        for var in ("PYTHONPATH", "HPALLOC_PYTHON_DIR"):
            env.pop(var, None)  # the preload alone, no code change
        yield "preload", [HPCTL, "run", "--preload", "--"], env


def coretypes():
    # under ASan the default kernels only: the scan runs once per activation
    return [None] + ([] if SANITIZED else blas_scan.supported_coretypes())


@pytest.mark.parametrize("coretype", coretypes(), ids=lambda c: c or "default")
def test_scan_matches_default(baseline, coretype):
    import numpy as np
    for name, prefix, env in activations():
        env = dict(env)
        env.pop("OPENBLAS_CORETYPE", None)
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
        core, results, crashed = scan(prefix, env)
        what = "%s, %s kernels" % (name, core)
        assert not crashed, "%s: %d of %d cases did not end: %s" % (
            what, len(crashed), len(blas_scan.CASES), crashed)
        # a forced type an OpenBLAS build lacks runs its nearest kernels
        # (PyPI's: Zen -> Haswell, Cooperlake -> SkylakeX); "what" says which
        assert core and core != "-", "%s: forced %s" % (what, coretype)
        # the scan went through hpalloc: its guards were there to read
        assert max(g for g, _ in results.values()) > 0, "%s: hpalloc served no block" % what
        for case, (_, got) in results.items():
            want = baseline[case][1]
            assert np.allclose(got, want, rtol=1e-6, atol=1e-9), "%s: %s differs" % (what, case)
