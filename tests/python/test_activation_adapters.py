"""`hpctl run` activates the Numba, PyTorch and raw-domain adapters as it
does NumPy's (hpalloc_activate.ADAPTERS): an unchanged program importing
torch or numba gets a 64 MiB tensor / @njit array on huge pages, read by
the program itself from /proc/self/smaps; HPALLOC_ADAPTERS chooses which
(the raw domain, "python", only when asked); an adapter that cannot
activate is said in one stderr line and the program runs on."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import hpalloc
from conftest import VENV, python_env
from hp_memory import CHILD
from hp_pytest_automake import need

BUILDDIR = os.environ.get("abs_top_builddir")
INPLACE = os.environ.get("HPALLOC_TEST_PYTHON_INPLACE")
MIB64 = 64 << 20

# The program under test: it never mentions hpalloc.  It prints, as JSON,
# the huge bytes smaps reports for the mapping holding its buffer, and
# which adapters the library counted bytes for (hpalloc imported only at
# the end, and only to read stats: it is already loaded when active).
SMAPS = CHILD + """
import json, sys
from hp_memory import settled_huge_bytes, smaps_entry
def huge_bytes(addr):
    e = smaps_entry(addr)   # once settled: a block faulted at 4 KiB first is collapsed behind
    size = e["end"] - e["start"]
    return {"huge": settled_huge_bytes(e["start"], size), "mapping": size}
def report(addr):
    out = huge_bytes(addr)
    mod = sys.modules.get("hpalloc")
    out["stats"] = {k: v for k, v in mod.stats().items() if k.endswith("_huge_bytes")} if mod else None
    print(json.dumps(out))
"""

PROGRAMS = {
    "numpy": SMAPS + """
import numpy as np
try:
    from numpy._core.multiarray import get_handler_name   # NumPy 2.x
except ImportError:
    from numpy.core.multiarray import get_handler_name    # NumPy 1.x
a = np.ones(8 << 20)                             # 64 MiB
z = np.zeros(8 << 20)
z += 1                                           # touched after calloc
out = {"handler": [get_handler_name(a), get_handler_name(z)],
       "zeros": huge_bytes(z.ctypes.data)["huge"]}
print(json.dumps(out))
report(a.ctypes.data)
""",
    "torch": SMAPS + """
import torch
t = torch.empty(8 << 20, dtype=torch.float64)   # 64 MiB
t.fill_(1.0)
report(t.data_ptr())
""",
    "numba": SMAPS + """
import numpy as np
from numba import njit
@njit
def make(n):
    a = np.empty(n)
    a[:] = 1.5
    return a
a = make(8 << 20)                                # 64 MiB, made by NRT
report(a.ctypes.data)
""",
    "python": SMAPS + """
import ctypes
b = bytearray(64 << 20)                          # the raw domain
ctypes.memset((ctypes.c_char * len(b)).from_buffer(b), 1, len(b))
report(ctypes.addressof((ctypes.c_char * 1).from_buffer(b)))
""",
}

NEEDS = {"torch": "torch", "numba": "numba", "python": None, "numpy": None}


@pytest.fixture
def hpctl():
    if not BUILDDIR or not (INPLACE or VENV):
        pytest.skip("needs the build tree's hpctl and package (run through make check)")
    return os.path.join(BUILDDIR, "tools", "hpctl")


def package_dir():
    """The directory holding the package under test and its start-up files:
    python/inplace, or the venv's site directory pip installed into."""
    return INPLACE or os.path.dirname(os.path.dirname(hpalloc.__file__))


def needs(adapter):
    module = NEEDS[adapter]
    if module:
        need(module)


def run(hpctl, adapter, tmp_path, env_extra=None, check=False):
    prog = tmp_path / ("%s_prog.py" % adapter)
    prog.write_text(PROGRAMS[adapter])
    env = python_env()
    env.pop("PYTHONPATH", None)  # hpctl run alone must bring the package
    env.pop("HPALLOC_ADAPTERS", None)
    env.update(env_extra or {})
    args = [hpctl, "run"] + (["--check"] if check else []) + \
        ["--", sys.executable, str(prog)]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def result(proc):
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def hpalloc_lines(proc):
    return [l for l in proc.stderr.splitlines() if l.startswith("hpalloc:")]


def test_hpctl_run_puts_numpy_arrays_on_huge_pages(hpctl, tmp_path):
    """np.ones and np.zeros-then-touched, 64 MiB each: handler hpalloc, huge
    pages per smaps (NumPy 1.x on Debian's python3, 2.x in the venv)."""
    proc = run(hpctl, "numpy", tmp_path, check=True)
    assert proc.returncode == 0, proc.stderr
    first, last = (json.loads(l) for l in proc.stdout.strip().splitlines()[-2:])
    assert first["handler"] == ["hpalloc", "hpalloc"], first
    assert first["zeros"] >= MIB64 // 2, first
    assert last["huge"] >= MIB64 // 2, last
    assert last["stats"]["numpy_huge_bytes"] >= 2 * MIB64, last


@pytest.mark.parametrize("adapter", ["torch", "numba"])
def test_hpctl_run_puts_imported_library_on_huge_pages(hpctl, adapter, tmp_path):
    needs(adapter)
    out = result(run(hpctl, adapter, tmp_path, check=True))
    assert out["huge"] >= MIB64 // 2, out  # smaps (THP may split a few extents)
    assert out["stats"]["%s_huge_bytes" % adapter] >= MIB64, out


def test_raw_domain_is_opt_in(hpctl, tmp_path):
    proc = run(hpctl, "python", tmp_path)
    out = result(proc)
    assert out["huge"] == 0, out  # THP is madvise here: glibc's mmap stays small
    assert not out["stats"] or out["stats"]["python_huge_bytes"] == 0, out
    if "[always]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read():
        pytest.skip("THP is 'always': smaps cannot tell the raw domain's bytearray apart")
    out = result(run(hpctl, "python", tmp_path, {"HPALLOC_ADAPTERS": "python"}))
    assert out["huge"] >= MIB64 // 2, out
    assert out["stats"]["python_huge_bytes"] >= MIB64, out


@pytest.mark.parametrize("adapter", ["torch", "numba"])
def test_adapter_left_out_stays_on_small_pages(hpctl, adapter, tmp_path):
    needs(adapter)
    if "[always]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read():
        pytest.skip("THP is 'always': every large mapping is huge without hpalloc")
    out = result(run(hpctl, adapter, tmp_path, {"HPALLOC_ADAPTERS": "numpy"}))
    assert out["huge"] == 0, out
    assert out["stats"] is None or out["stats"]["%s_huge_bytes" % adapter] == 0, out


@pytest.mark.parametrize("adapter,module", [("torch", "_torch.*"), ("numba", "_nrt.*")])
def test_adapter_that_cannot_load_is_said(hpctl, adapter, module, tmp_path):
    """A package without the adapter's extension (a build --without-torch,
    a broken install): one line says so, the program runs on, unchanged."""
    needs(adapter)
    partial = tmp_path / "site"
    partial.mkdir()
    # (the wheel's package also needs hpalloc.libs/, the libraries
    # auditwheel put beside it)
    for name in ("hpalloc", "hpalloc_activate.py", "hpalloc-numpy.pth", "hpalloc.libs"):
        src = os.path.join(package_dir(), name)
        if name == "hpalloc.libs" and not os.path.exists(src):
            continue
        if os.path.isdir(src):
            shutil.copytree(src, partial / name, ignore=shutil.ignore_patterns(module))
        else:
            shutil.copy(src, partial / name)
    proc = run(hpctl, adapter, tmp_path, {"HPALLOC_PYTHON_DIR": str(partial)})
    out = result(proc)
    lines = hpalloc_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert "not active for %s" % adapter in lines[0], lines[0]
    assert "ImportError" in lines[0] and sys.executable in lines[0], lines[0]
    assert out["stats"]["%s_huge_bytes" % adapter] == 0, out


def test_raw_domain_under_tracemalloc_is_said(hpctl, tmp_path):
    proc = run(hpctl, "python", tmp_path,
               {"HPALLOC_ADAPTERS": "python", "PYTHONTRACEMALLOC": "1"})
    out = result(proc)
    lines = hpalloc_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert "not active for python" in lines[0] and "tracemalloc" in lines[0], lines[0]
    assert not out["stats"] or out["stats"]["python_huge_bytes"] == 0, out


def test_bad_adapters_value_is_said_and_ignored(hpctl, tmp_path):
    needs("torch")
    proc = run(hpctl, "torch", tmp_path, {"HPALLOC_ADAPTERS": "torch,bogus"})
    out = result(proc)
    lines = hpalloc_lines(proc)
    assert len(lines) == 1 and "ignoring HPALLOC_ADAPTERS='torch,bogus'" in lines[0], \
        proc.stderr
    assert out["stats"]["torch_huge_bytes"] >= MIB64, out  # the defaults apply
