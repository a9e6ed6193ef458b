"""hpalloc.torch checks the running libc10's layout, whatever its version
says (issue 47): a stand-in libc10 (tests/python/fake_libc10.cpp, built
here) under a stand-in `torch` package whose version is one the adapter
serves is
  - refused when its c10::Allocator has one virtual function more (both
    exported vtables one entry longer than the declaration's);
  - refused when its vtables are right but c10's CPU allocator is an object
    of another class;
and each refusal is one ImportError line naming the difference and
`hpctl run --preload`, in a process that goes on (no crash), with c10's
allocator slot never set.  The same library with the declared layout is
accepted and install() takes the slot: the control showing the refusals
come from the layout alone.

Only the declared-ABI adapter (the wheel's: make check-venv) binds to a
libc10 it finds at run time; a build linked with libc10 (configure
--with-torch) checks the libc10 it was linked with, which the stand-in
cannot replace."""

import os
import shutil
import subprocess

import pytest

from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "fake_libc10.cpp")

PROBE = """
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
import torch
try:
    import hpalloc.torch as t
except ImportError as exc:
    print("refused:", exc)
else:
    t.install()
    print("installed:", t.installed())
print("set_calls:", torch.c10.fake_c10_calls())
print("alive")
"""

FAKE_TORCH = """
import ctypes, os
__version__ = %r
c10 = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10.so"),
                  mode=ctypes.RTLD_GLOBAL)
"""


def declared_abi():
    proc = run_python("from hpalloc import _torch; print(_torch.declared_abi, _torch.built_for)",
                      check=False)
    if proc.returncode != 0:
        pytest.skip("hpalloc._torch does not load here: %s" % proc.stderr.strip()[-200:])
    declared, served = proc.stdout.split(None, 1)
    return declared in ("1", "True"), served.split()


@pytest.fixture(scope="module")
def served():
    declared, releases = declared_abi()
    if not declared:
        pytest.skip("this build links libc10 (configure --with-torch): it checks the "
                    "libc10 it was linked with; the declared-ABI build (the wheel's) runs "
                    "this in make check-venv")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler to build the stand-in libc10")
    return releases


def stage(tmp_path, version, variant):
    """A `torch` package of version whose lib/libc10.so is the stand-in
    built with variant (None, HP_EXTRA, HP_OTHER); its parent directory."""
    top = tmp_path / (variant or "same")
    lib = top / "torch" / "lib"
    lib.mkdir(parents=True)
    (top / "torch" / "__init__.py").write_text(FAKE_TORCH % version)
    cmd = [os.environ.get("CXX", "g++"), "-std=c++17", "-shared", "-fPIC",
           "-Wl,-soname,libc10.so", "-o", str(lib / "libc10.so"), SOURCE]
    if variant:
        cmd.insert(1, "-D" + variant)
    subprocess.run(cmd, check=True)
    return top


def probe(top):
    proc = run_python(PROBE.replace("sys.argv[1]", repr(str(top))), check=False)
    assert proc.returncode == 0, "the process did not survive: %d %s" % (
        proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[-1] == "alive", proc.stdout
    return lines


def test_declared_layout_is_accepted(served, tmp_path):
    lines = probe(stage(tmp_path, served[-1] + ".0", None))
    assert lines[:2] == ["installed: True", "set_calls: 1"], lines


@pytest.mark.parametrize("variant, says", [
    ("HP_EXTRA", "the vtable of c10::DefaultCPUAllocator in %s has 9 entries, the "
                 "c10::Allocator hpalloc was built for 8: another layout"),
    ("HP_OTHER", "c10's CPU allocator is not c10's DefaultCPUAllocator (its vtable "
                 "pointer 0x"),
])
def test_other_layout_is_refused_whatever_the_version(served, tmp_path, variant, says):
    for release in (served[0] + ".0a0", served[-1] + ".1"):  # a nightly, a patch
        top = stage(tmp_path / release, release, variant)
        lines = probe(top)
        libc10 = str(top / "torch" / "lib" / "libc10.so")
        assert len(lines) == 3, lines
        line = lines[0]
        assert line.startswith("refused: hpalloc.torch cannot use PyTorch %s: " % release), line
        assert (says % libc10 if "%s" in says else says) in line, line
        assert line.endswith("; `hpctl run --preload -- COMMAND` puts tensors on huge pages "
                             "under any PyTorch release (docs/python.md, \"PyTorch\")"), line
        assert lines[1] == "set_calls: 0", lines
