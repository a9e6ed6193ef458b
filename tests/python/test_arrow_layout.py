"""hpalloc.arrow checks the running libarrow's arrow::MemoryPool layout,
whatever pyarrow's version says (issue 47): stand-in libarrow.so.2600 and
libarrow_python.so.2600 (tests/python/fake_libarrow.cpp, built here) under
a stand-in `pyarrow` package of the release the adapter serves are
  - refused when two of MemoryPool's virtual functions swapped slots;
  - refused when MemoryPool has one virtual function more after the last
    one the adapter declares;
each refusal one ImportError line naming the difference and `hpctl run
--preload`, in a process that goes on, with pyarrow's default pool never
set.  The stand-in with Arrow 26's layout passes the check (the control:
its import then stops at the next step, pyarrow.lib's C API, which the
stand-in lacks).  A release other than the one served is refused by its
version first (test_arrow.py)."""

import os
import shutil
import subprocess

import pytest

from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "fake_libarrow.cpp")

PROBE = """
import sys
sys.path.insert(0, %r)
import pyarrow
try:
    import hpalloc.arrow
except ImportError as exc:
    print("refused:", exc)
else:
    print("imported")
print("sets:", pyarrow.python.fake_arrow_sets())
print("alive")
"""

FAKE_PYARROW = """
import ctypes, os
__version__ = %r
here = os.path.dirname(__file__)
arrow = ctypes.CDLL(os.path.join(here, "libarrow.so.2600"), mode=ctypes.RTLD_GLOBAL)
python = ctypes.CDLL(os.path.join(here, "libarrow_python.so.2600"), mode=ctypes.RTLD_GLOBAL)
def get_library_dirs():
    return [here]
"""


@pytest.fixture(scope="module")
def release():
    proc = run_python("from hpalloc import _arrow; print(_arrow.built_for)", check=False)
    if proc.returncode != 0:
        pytest.skip("hpalloc._arrow does not load here: %s" % proc.stderr.strip()[-200:])
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler to build the stand-in libarrow")
    return proc.stdout.strip()


def stage(tmp_path, version, variant):
    """A `pyarrow` package of version with the stand-in libraries (libarrow
    built with variant: None, HP_SWAP, HP_EXTRA); its parent directory."""
    top = tmp_path / (variant or "same")
    pkg = top / "pyarrow"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_PYARROW % version)
    cxx = [os.environ.get("CXX", "g++"), "-std=c++17", "-shared", "-fPIC", SOURCE]
    subprocess.run(cxx + ["-DHP_LIBARROW", "-o", str(pkg / "libarrow.so.2600")]
                   + (["-D" + variant] if variant else []), check=True)
    subprocess.run(cxx + ["-DHP_LIBARROW_PYTHON", "-o", str(pkg / "libarrow_python.so.2600")],
                   check=True)
    return top


def probe(top):
    proc = run_python(PROBE % str(top), check=False)
    assert proc.returncode == 0, "the process did not survive: %d %s" % (
        proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "alive", proc.stdout
    assert lines[1] == "sets: 0", lines
    return lines[0]


def test_declared_layout_passes_the_check(release, tmp_path):
    line = probe(stage(tmp_path, release + ".0.1", None))
    assert "pyarrow.lib exports no box_memory_pool" in line, line
    assert "layout" not in line, line


@pytest.mark.parametrize("variant, says", [
    ("HP_SWAP", "arrow::MemoryPool's slot 3 in %s is not "
                "_ZN5arrow17LoggingMemoryPool10ReallocateElllPPh (another function is "
                "there): another layout"),
    ("HP_EXTRA", "arrow::MemoryPool in %s has a virtual function after slot 11, which the "
                 "one hpalloc was built for has not: another layout"),
])
def test_other_layout_is_refused(release, tmp_path, variant, says):
    version = release + ".0.1"
    top = stage(tmp_path, version, variant)
    line = probe(top)
    libarrow = str(top / "pyarrow" / "libarrow.so.2600")
    assert line == ("refused: hpalloc.arrow cannot use pyarrow %s: %s; `hpctl run --preload "
                    "-- COMMAND` puts Arrow buffers on huge pages under any pyarrow release "
                    "(docs/python.md, \"pandas and pyarrow\")" % (version, says % libarrow)), line
