"""hpalloc.arrow: pyarrow's default memory pool on hpalloc.  Buffers of at
least the threshold (Arrow compute results, pandas' Arrow-backed columns,
grown streams) on huge pages per /proc/self/smaps, smaller ones in the pool
it replaced; each buffer freed by the allocator it came from, also after
uninstall() and when it grew from one to the other; a failed allocation is
pyarrow's ArrowMemoryError with nothing left behind; the adapter refuses, in
one line, an Arrow release other than the one it was built for."""

import gc
import threading

import numpy as np
import pytest

from hp_pytest_automake import need  # noqa: E402

pa = need("pyarrow", "hpalloc.arrow")
import pyarrow.compute as pc  # noqa: E402

import hpalloc  # noqa: E402
from conftest import MiB, first_wrong, pattern, run_python  # noqa: E402
from hp_memory import (CHILD, SIZE, assert_huge, hugetlb_of, mapping_range,  # noqa: E402
                       settled_huge_bytes, smaps_entry)
from hpalloc import _hpalloc  # noqa: E402

import hpalloc.arrow as harrow  # noqa: E402

N = SIZE // 8  # int64 elements in 64 MiB


@pytest.fixture
def adapter():
    harrow.install()
    try:
        yield
    finally:
        harrow.uninstall()
    assert not harrow.installed()


@pytest.fixture
def uncached(knobs):
    knobs(cache_max="0")


def api_bytes():
    return hpalloc.stats()["api_huge_bytes"]


HUGE = ("thp", "hugetlb")


def backend(buf):
    """hpalloc's backend of the block holding buf ("small": not a huge
    block of hpalloc's)."""
    return _hpalloc.backing(buf.address)["backend"]


def data_buffer(array):
    """The values buffer of a (chunked) Arrow array."""
    if isinstance(array, pa.ChunkedArray):
        (array,) = array.chunks
    return array.buffers()[-1]


def gone(block):
    gc.collect()
    hpalloc.cache_flush()
    return mapping_range(block[0]) != block


def test_install_makes_the_default_pool_hpallocs():
    before = pa.default_memory_pool().backend_name
    assert before != "hpalloc" and not harrow.installed()
    harrow.install()
    harrow.install()  # idempotent
    try:
        assert harrow.installed()
        assert pa.default_memory_pool().backend_name == "hpalloc"
    finally:
        harrow.uninstall()
    assert pa.default_memory_pool().backend_name == before
    harrow.uninstall()  # idempotent
    assert not harrow.installed()


def test_compute_result_on_huge_pages(adapter, uncached):
    src = pa.array(np.arange(N, dtype=np.int64))
    before = api_bytes()
    doubled = pc.multiply(src, 2)             # 64 MiB from the default pool
    buf = data_buffer(doubled)
    assert buf.address % (2 * MiB) == 0 and backend(buf) in HUGE
    assert_huge(buf.address, SIZE)
    assert api_bytes() >= before + SIZE
    assert doubled[N - 1].as_py() == 2 * (N - 1)
    block = mapping_range(buf.address)
    del doubled, buf
    assert gone(block)
    assert api_bytes() == before


def test_pandas_arrow_columns_on_huge_pages(adapter):
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    col = pd.Series(np.arange(N), dtype="int64[pyarrow]") + 1
    buf = data_buffer(col.array._pa_array)
    assert_huge(buf.address, SIZE)
    assert col.iloc[-1] == N
    strings = pd.Series(["x" * 30] * (2 * MiB), dtype="string[pyarrow]")
    buf = data_buffer(strings.array._pa_array)
    assert buf.size == 60 * MiB
    assert_huge(buf.address, buf.size)


def test_small_buffers_stay_in_the_replaced_pool(adapter):
    before = api_bytes()
    small = pc.multiply(pa.array(np.arange(1000, dtype=np.int64)), 3)
    buf = data_buffer(small)
    assert backend(buf) not in HUGE and buf.address % 64 == 0
    assert api_bytes() == before
    assert pa.default_memory_pool().bytes_allocated() >= buf.size


def test_mode_off_sends_everything_to_the_replaced_pool(adapter, knobs):
    knobs(mode="off")
    before = api_bytes()
    big = pc.multiply(pa.array(np.arange(N, dtype=np.int64)), 2)
    assert backend(data_buffer(big)) not in HUGE
    assert api_bytes() == before


def grown_stream():
    """A 64 MiB buffer grown by Reallocate, 1 MiB written at a time, each
    MiB a pattern of its own; checked on every byte."""
    stream = pa.BufferOutputStream()
    for i in range(SIZE // MiB):
        stream.write(memoryview(pattern(MiB, 100 + i)))
    buf = stream.getvalue()
    assert buf.size == SIZE
    for i in range(SIZE // MiB):
        bad = first_wrong(memoryview(buf)[i * MiB:], MiB, 100 + i)
        assert bad is None, "MiB %d of the grown buffer: wrong from its byte %d" % (i, bad)
    return stream, buf


def test_stream_grown_past_the_threshold_moves_to_huge_pages(adapter, uncached):
    """A resizable buffer grows by Reallocate: from the small pool to
    hpalloc once past the threshold (copy), then within hpalloc."""
    stream, buf = grown_stream()
    assert backend(buf) in HUGE
    assert_huge(buf.address, SIZE)
    block = mapping_range(buf.address)
    del buf, stream
    assert gone(block)


def test_stream_grown_on_hugetlb_pages_is_copied_whole(adapter, uncached, knobs,
                                                       hugetlb_pool):
    """On hugetlb pages a block cannot grow in place (mremap cannot): each
    Reallocate within hpalloc is hp_huge_realloc's copy, and keeps every
    byte."""
    hugetlb_pool(2 * MiB, SIZE // MiB)
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    copies = hpalloc.stats()["realloc_copies"]
    stream, buf = grown_stream()
    assert backend(buf) == "hugetlb"
    assert hpalloc.stats()["realloc_copies"] > copies, "no copy: the case tests nothing"
    del buf, stream


def test_buffers_freed_by_their_allocator_after_uninstall(uncached):
    """Made by the replaced pool before install(), freed while hpalloc's is
    the default; made by hpalloc, freed after uninstall(): each goes back
    where it came from (a wrong free would crash the process)."""
    src = pa.array(np.arange(N, dtype=np.int64))
    theirs = pc.multiply(src, 2)
    harrow.install()
    ours = pc.multiply(src, 3)
    block = mapping_range(data_buffer(ours).address)
    del theirs
    gc.collect()
    harrow.uninstall()
    later = pc.multiply(src, 4)
    assert backend(data_buffer(later)) not in HUGE
    del ours
    assert gone(block)
    assert later[1].as_py() == 4


def test_out_of_memory_is_arrow_memory_error(adapter, knobs, hugetlb_pool):
    hugetlb_pool(2 * MiB, 0, exact=True)   # whatever the machine had free
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    src = pa.array(np.arange(N, dtype=np.int64))
    pool = pa.default_memory_pool()
    before, failures, held = api_bytes(), hpalloc.stats()["failures"], pool.bytes_allocated()
    with pytest.raises(pa.ArrowMemoryError, match="hpalloc: not enough memory"):
        pc.multiply(src, 2)
    assert api_bytes() == before and pool.bytes_allocated() == held
    assert hpalloc.stats()["failures"] > failures
    assert pc.sum(pa.array([1, 2, 3])).as_py() == 6   # small buffers still fine


def test_explicit_pool_argument(uncached):
    """pool(): hpalloc's pool for memory_pool= arguments, without install()."""
    src = pa.array(np.arange(N, dtype=np.int64))
    out = pc.multiply(src, 2, memory_pool=harrow.pool())
    assert not harrow.installed()
    assert_huge(data_buffer(out).address, SIZE)


def test_concurrent_threads_balance(adapter):
    """Threads allocating and freeing large and small buffers at once: the
    pool's live bytes come back to where they were."""
    pool = pa.default_memory_pool()
    src = pa.array(np.arange(N // 4, dtype=np.int64))
    small = pa.array(np.arange(100, dtype=np.int64))
    gc.collect()
    held = pool.bytes_allocated()
    errors = []

    def work():
        try:
            for i in range(20):
                big = pc.multiply(src, i)
                tiny = pc.add(small, i)
                assert big[3].as_py() == 3 * i and tiny[0].as_py() == i
                del big, tiny
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    gc.collect()
    assert pool.bytes_allocated() == held


def test_default_pool_changed_after_install_is_refused():
    harrow.install()
    harrow.uninstall()
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        with pytest.raises(RuntimeError, match="default memory pool was changed"):
            harrow.install()
        assert not harrow.installed()
    finally:
        pa.set_memory_pool(previous)


# ---- built for one release ------------------------------------------------------

def import_error(prelude):
    proc = run_python(prelude + """
try:
    import hpalloc.arrow
except ImportError as exc:
    print(exc)
else:
    print("imported")
""")
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return lines[0]


def test_refuses_another_release():
    major = harrow._release(harrow.built_for)
    line = import_error("import pyarrow; pyarrow.__version__ = '1.0.0'")
    assert line == ("hpalloc.arrow serves pyarrow %s, this is 1.0.0: install "
                    "pyarrow==%s.* in this environment; or `hpctl run --preload -- "
                    "COMMAND` puts Arrow buffers on huge pages under any pyarrow "
                    "release (docs/python.md, \"pandas and pyarrow\")" % (major, major))
    assert import_error("import pyarrow; pyarrow.__version__ = '%s.9.9'" % major) \
        == "imported"


def test_not_built_says_how_to_get_it():
    line = import_error("import sys; sys.modules['hpalloc._arrow'] = None")
    assert line.startswith("hpalloc.arrow is not available: hpalloc was built "
                           "without its pyarrow adapter")
    assert "no C++ compiler" in line and "--without-arrow" in line


def test_binds_only_to_the_loaded_libarrow():
    """The adapter links nothing of Arrow: until hpalloc.arrow binds it to
    the libraries pyarrow loaded, it refuses to touch Arrow, and it binds to
    nothing else."""
    proc = run_python("""
import pyarrow
from hpalloc import _arrow
try:
    _arrow.install()
except RuntimeError as exc:
    print("install:", exc)
for paths in (("/nonexistent/libarrow.so.1", "x"), ("libc.so.6", "libc.so.6")):
    try:
        _arrow.bind(*paths)
    except ImportError as exc:
        print("bind:", exc)
import hpalloc.arrow
_arrow.install(); print("installed:", _arrow.installed()); _arrow.uninstall()
""")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("install: hpalloc._arrow is not bound to pyarrow's "
                               "libraries"), lines
    assert lines[1].startswith("bind: /nonexistent/libarrow.so.1 is not loaded (import "
                               "pyarrow first)"), lines
    assert lines[2].startswith("bind: libc.so.6 has no _ZN5arrow6StatusC1E"), lines
    assert lines[2].endswith("not Arrow %s's" % harrow._release(harrow.built_for)), lines
    assert lines[3] == "installed: True", lines


def test_smaps_of_a_64_mib_buffer_per_pool(uncached):
    """The figures docs/python.md quotes: where a 64 MiB compute result
    lives with each of pyarrow's pools and with hpalloc's (printed with
    -s; asserted for hpalloc's only)."""
    src = pa.array(np.arange(N, dtype=np.int64))
    rows = {}
    for name in ["hpalloc"] + [b for b in pa.supported_memory_backends()]:
        pool = harrow.pool() if name == "hpalloc" else \
            getattr(pa, name + "_memory_pool")()
        out = pc.multiply(src, 2, memory_pool=pool)
        if name == "hpalloc":   # settled: a block faulted at 4 KiB first is collapsed behind
            settled_huge_bytes(data_buffer(out).address, SIZE)
        e = smaps_entry(data_buffer(out).address)
        rows[name] = (e["end"] - e["start"], e["Rss"], e.get("AnonHugePages", 0),
                      hugetlb_of(e))
        print("%-9s mapping %4d MiB  Rss %4d MiB  AnonHugePages %4d MiB  Hugetlb %4d MiB"
              % ((name,) + tuple(v // MiB for v in rows[name])))
        del out
    mapping, rss, thp, hugetlb = rows["hpalloc"]
    assert thp + hugetlb >= SIZE // 2 and mapping < SIZE + 4 * MiB


ARROW_PROG = CHILD + """
import json, pyarrow as pa, pyarrow.compute as pc
from hp_memory import settled_huge_bytes, smaps_entry
a = pc.multiply(pa.array(range(%d), type=pa.int64()), 2)   # 64 MiB result
e = smaps_entry(a.buffers()[1].address)
huge = settled_huge_bytes(e["start"], a.buffers()[1].size)
print(json.dumps({"pool": pa.default_memory_pool().backend_name, "huge": huge}))
""" % N


@pytest.mark.parametrize("preload", [False, True], ids=["hpctl-run", "hpctl-run-preload"])
def test_hpctl_run_puts_arrow_buffers_on_huge_pages(preload, tmp_path):
    """An unchanged pyarrow program: a 64 MiB compute result on huge pages
    per smaps, under hpctl run (the adapter, installed when pyarrow is
    imported) and under hpctl run --preload (pyarrow's system pool, which
    the preload library serves)."""
    import json
    import os
    import subprocess
    import sys
    from conftest import hpctl_path, preload_env, python_env
    hpctl = hpctl_path()
    env = preload_env(python_env()) if preload else python_env()
    prog = tmp_path / "prog.py"
    prog.write_text(ARROW_PROG)
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    args = [hpctl, "run", "--check"] + \
        (["--preload"] if preload else []) + ["--", sys.executable, str(prog)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pool"] == ("system" if preload else "hpalloc"), out
    assert out["huge"] >= SIZE // 2, out
