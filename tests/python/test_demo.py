"""examples/demo.py, the README's main job, started the ways it documents.

The demo's point is its two "huge pages (smaps)" columns: what the kernel
says backs each row's memory with hpalloc, and -- in a child process
running the same code -- without it.  The with-hpalloc column must name the
kind of huge page its backend column promises and cover most of the
memory; the without-hpalloc column must say what smaps says for the same
code in a plain process, read here independently (hp_memory, not the
library, not its counters)."""

import json
import os
import re
import subprocess
import sys

import pytest

import hpalloc
from conftest import hpctl_path, preload_env, python_env
from hp_memory import CHILD

MiB = 1 << 20
DEMO_SIZE = 64 * MiB
OTHER_SIZE = 16 * MiB  # the demo's other rows: a quarter of --size, at least 8 MiB

SRCDIR = os.environ.get("abs_top_srcdir",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.environ.get("abs_top_builddir", SRCDIR)
DEMO = os.path.join(SRCDIR, "examples", "demo.py")
# what .ci/run greps in README command 1's output (there with 1G)
CI_LINE = re.compile(r"^np\.zeros\(64M\).* hpalloc +(thp|hugetlb) .*(AnonHugePages|hugetlb)",
                     re.M)


def run_demo(prefix, env):
    proc = subprocess.run(prefix + [sys.executable, DEMO, "--size", str(DEMO_SIZE)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def parse(out):
    """{row label: (with-hpalloc cells, without-hpalloc cells)}, each a list
    of words: allocator, [backend,] huge pages ("0" or size and kind),
    time, faults; a row that did not run: its reason in parentheses."""
    rows = {}
    for line in out.splitlines():
        if " | " not in line or line.startswith((" ", "row ")):
            continue
        left, right = line.split(" | ", 1)
        rows[left[:34].strip()] = (left[34:].split(), right.split())
    return rows


def huge(words, with_backend):
    """(bytes, kind) of a row's smaps column: kind None for "0"."""
    cells = words[2 if with_backend else 1:-2]
    if cells == ["0"]:
        return 0, None
    size, kind = cells
    return hpalloc.parse_size(size), kind


def faults(words):
    return int(words[-1].replace(",", ""))


PROBE = CHILD + """
import json, sys
import numpy as np
import hp_memory
n, other = %d, %d
out = {}
a = np.zeros(n // 8); a += 1
out["zeros"] = hp_memory.settled_huge_bytes(a.ctypes.data, a.nbytes)
try:
    import torch
except ImportError:
    pass
else:
    t = torch.ones(other // 8, dtype=torch.float64)
    out["torch"] = hp_memory.settled_huge_bytes(t.data_ptr(), other)
try:
    from numba import njit
except ImportError:
    pass
else:
    ones = njit(lambda k: np.ones(k))
    b = ones(other // 8)
    out["numba"] = hp_memory.settled_huge_bytes(b.ctypes.data, other)
try:
    import pyarrow as pa
except ImportError:
    pass
else:
    buf = pa.allocate_buffer(other)
    np.frombuffer(buf, dtype=np.uint8)[:] = 1
    out["arrow"] = hp_memory.settled_huge_bytes(buf.address, other)
print(json.dumps(out))
""" % (DEMO_SIZE, OTHER_SIZE)


@pytest.fixture(scope="module")
def plain():
    """Huge bytes smaps shows, in a process without hpalloc, for the
    memory of the demo's rows made by the same code."""
    proc = subprocess.run([sys.executable, "-c", PROBE], env=python_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mostly(nbytes, size):
    return nbytes >= size // 2


def check_with(words, size, allocator="hpalloc"):
    """The with-hpalloc column of a row hpalloc serves: its backend's kind
    of huge page, over most of the memory."""
    assert words[0] == allocator and words[1] in ("thp", "hugetlb"), words
    got, kind = huge(words, True)
    assert kind == {"thp": "AnonHugePages", "hugetlb": "hugetlb"}[words[1]], words
    # every page touched: THP faults it in 2 MiB at a time; a few may
    # have been refused (fragmentation), most not
    assert size * 3 // 4 <= got <= size + 2 * MiB, words


def check_without(words, allocator, plain_huge, size):
    """The without-hpalloc column: the library's own allocator, and the
    huge pages smaps shows for the same code in a plain process."""
    assert words[0] == allocator, words
    got, _ = huge(words, False)
    assert mostly(got, size) == mostly(plain_huge, size), (
        "demo without hpalloc: %d huge bytes; a plain process: %d" % (got, plain_huge))


def check_output(out, plain, preload=False):
    """preload: under `hpctl run --preload`, where NumPy keeps its own
    handler and hpalloc serves its mallocs."""
    numpy_rows = "default_allocator" if preload else "hpalloc"
    if preload:
        assert "NumPy handler: default_allocator, NumPy's own, its memory from hpalloc's " \
            "preload library" in out, out
    else:
        assert "NumPy handler: hpalloc, active for this process" in out, out
        assert CI_LINE.search(out), out
    assert "the child failed" not in out, out  # the column without hpalloc is there
    rows = parse(out)
    small_with, small_without = rows["np.ones(1000)"]
    if not preload:
        assert small_with[:3] == ["hpalloc", "small", "0"], out
    assert small_without[:2] == ["default_allocator", "0"], out

    big_with, big_without = rows["np.zeros(64M) ; a += 1"]
    check_with(big_with, DEMO_SIZE, numpy_rows)
    check_without(big_without, "default_allocator", plain["zeros"], DEMO_SIZE)

    again_with, again_without = rows["again, after del a (reuse)"]
    check_with(again_with, DEMO_SIZE, numpy_rows)
    check_without(again_without, "default_allocator", plain["zeros"], DEMO_SIZE)
    # hpalloc's cache hands the freed block back with its pages; NumPy's
    # default faults a fresh mapping in.  (Under ASan every write also
    # faults in shadow memory, 2,048 faults for the 64 MiB here: not counted.)
    if not os.environ.get("SANITIZER_FLAGS"):
        assert faults(again_with) <= 64 and faults(again_with) < faults(again_without), out

    for key, label, allocator in (("torch", "torch.ones(16M)", "c10"),
                                  ("numba", "@njit np.ones(16M)", "NRT")):
        if key in plain:
            with_, without = rows[label]
            check_with(with_, OTHER_SIZE)
            check_without(without, allocator, plain[key], OTHER_SIZE)
    if "arrow" in plain:
        with_, without = rows["pyarrow.allocate_buffer(16M)"]
        check_with(with_, OTHER_SIZE)
        # pyarrow's own pool (the mimalloc or jemalloc in its wheel); whether
        # a 16 MiB buffer of it lands on huge pages depends on what the
        # process allocated before (seen: 0 and 18 MiB for the same code),
        # so its column is not compared with the plain process's
        assert without[0] in ("mimalloc", "jemalloc", "system"), out
        huge(without, False)
    else:
        assert rows["pyarrow.allocate_buffer"][0] == ["(pyarrow", "is", "not", "installed)"]

    # a plain malloc is hpalloc's under the preload library only
    malloc_with, malloc_without = rows["malloc(16M) ; memset"]
    if preload:
        check_with(malloc_with, OTHER_SIZE)
    else:
        assert malloc_with[:2] == ["libc", "-"], out
    assert malloc_without[0] == "libc", out

    for label in ("hpalloc.numpy.zeros(pagesize=2M)", "hpalloc.numpy.zeros(pagesize=1G)"):
        with_, without = rows[label]
        assert " ".join(without) == "(NumPy alone cannot ask for hugetlb pages)", out
        if with_[0] != "(no":  # the pool had free pages
            assert with_[:2] == ["hpalloc", "hugetlb"] and huge(with_, True)[1] == "hugetlb", out
    assert "hpalloc.stats(): small_live_bytes=" in out


def test_demo_with_hpalloc_numpy_env(user_site, plain):
    check_output(run_demo([], dict(user_site, HPALLOC_NUMPY="1")), plain)


def test_demo_under_hpctl_run(user_site, plain):
    check_output(run_demo([hpctl_path(), "run", "--"], user_site), plain)


def test_demo_under_hpctl_run_preload(user_site, plain):
    """Under the preload library the child must still run without hpalloc
    (the demo takes the library out of its LD_PRELOAD), and the plain
    malloc row is hpalloc's."""
    check_output(run_demo([hpctl_path(), "run", "--preload", "--"], preload_env(user_site)), plain,
                 preload=True)


def test_demo_started_plainly_installs_hpalloc_itself(plain):
    out = run_demo([], python_env())
    assert "installed by the demo" in out
    rows = parse(out)
    check_with(rows["np.zeros(64M) ; a += 1"][0], DEMO_SIZE)
    if "torch" in plain:  # the demo installed the adapter itself
        check_with(rows["torch.ones(16M)"][0], OTHER_SIZE)
