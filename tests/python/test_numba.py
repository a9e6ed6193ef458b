"""hpalloc.numba: arrays made in @njit code on huge pages (checked in
/proc/self/smaps), freed once by hpalloc from any thread and after
uninstall(), NRT's own allocation counters balanced; the stand-in replaces
the function this Numba's code calls (NRT_MemInfo_alloc_aligned since 0.57,
the "safe" one with debug markers before and under NUMBA_DEBUG_NRT), with
the alignment asked and no markers the replaced function lacks; the
external allocator for extension authors."""

import ctypes
import sys
import textwrap
import threading

import numpy as np
import pytest

from hp_pytest_automake import need  # noqa: E402

numba = need("numba", "hpalloc.numba")

import hpalloc  # noqa: E402
import hpalloc.numba as hnb  # noqa: E402
import hpalloc.numpy as hpnp  # noqa: E402
from conftest import MiB, data_address, python_env, run_python  # noqa: E402
from hp_memory import (SIZE, assert_huge, assert_not_huge, mapping_range,  # noqa: E402
                       smaps_entry)
from numba import njit, prange  # noqa: E402
from numba.core.runtime import _nrt_python, rtsys  # noqa: E402

N = SIZE // 8  # float64 elements in 64 MiB


@njit
def make_filled(n):
    a = np.empty(n)
    a[:] = 1.5
    return a


@njit
def expression(a, b):
    return a * 2.0 + b   # a temporary and a result, both NRT arrays


@njit
def make_empty(n):
    return np.empty(n)


@njit(parallel=True)
def parallel_sums(count, n):
    out = np.empty(count)
    for i in prange(count):
        t = np.ones(n)   # allocated in NRT's worker threads
        out[i] = t.sum()
    return out


@pytest.fixture(autouse=True)
def nrt_stats():
    """NRT's allocation counters on for each test (Numba >= 0.57 keeps them
    off unless NUMBA_NRT_STATS=1; older ones always count)."""
    enabled = getattr(_nrt_python, "memsys_stats_enabled", None)
    if enabled is None or enabled():
        yield
        return
    _nrt_python.memsys_enable_stats()
    try:
        yield
    finally:
        _nrt_python.memsys_disable_stats()


@pytest.fixture
def nrt():
    """hpalloc.numba installed for one test; NRT's counters must balance
    over it: every MemInfo and every allocation freed."""
    hnb.install()
    before = rtsys.get_allocation_stats()
    try:
        yield
    finally:
        hnb.uninstall()
    after = rtsys.get_allocation_stats()
    assert after.alloc - before.alloc == after.free - before.free, (before, after)
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free


def numba_bytes():
    return hpalloc.stats()["numba_huge_bytes"]


def test_njit_array_on_huge_pages(nrt):
    before = numba_bytes()
    a = make_filled(N)
    assert isinstance(a.base, _nrt_python._MemInfo)  # NRT owns the data
    assert_huge(data_address(a), SIZE)
    assert numba_bytes() >= before + SIZE
    info = hpnp.backing(a)
    assert info["backend"] in ("thp", "hugetlb") and info["handler"] is None
    assert (a == 1.5).all()
    del a
    assert numba_bytes() == before


def test_array_expression_results_on_huge_pages(nrt):
    a, b = np.ones(N), np.arange(N, dtype=np.float64)
    c = expression(a, b)
    assert_huge(data_address(c), SIZE)
    assert c[12345] == 2.0 + 12345


def test_mode_off_keeps_nrt_allocator(nrt, knobs):
    knobs(mode="off")
    before = numba_bytes()
    a = make_filled(N)
    assert_not_huge(data_address(a))
    assert numba_bytes() == before
    assert hpnp.backing(a)["backend"] is None


def test_freed_once_mapping_gone(nrt, knobs):
    knobs(cache_max="0")
    a = make_filled(N)
    addr = data_address(a)
    block = mapping_range(addr)
    assert block is not None and block[0] % (2 * MiB) == 0
    del a
    hpalloc.cache_flush()
    assert mapping_range(addr) != block  # hpalloc's mapping is gone


def test_freed_in_another_thread_and_after_uninstall(nrt):
    before = numba_bytes()
    arrays = [make_filled(N // 4) for _ in range(4)]
    assert numba_bytes() >= before + SIZE
    t = threading.Thread(target=lambda: arrays.pop(0))
    t.start()
    t.join()
    hnb.uninstall()
    assert not hnb.installed()
    del arrays[:]   # made under hpalloc, freed after uninstall
    assert numba_bytes() == before
    a = make_filled(N)  # compiled while installed, called after: NRT's own
    assert numba_bytes() == before
    assert hpnp.backing(a)["backend"] is None


def test_parallel_workers_allocate_through_hpalloc(nrt):
    out = parallel_sums(16, 2 * MiB // 8)   # 16 x 2 MiB temporaries
    assert (out == 2 * MiB // 8).all()
    assert numba_bytes() == 0


def test_function_compiled_before_install_needs_the_raw_domain():
    """Code compiled before install() calls NRT directly, which allocates
    with PyMem_RawMalloc: hpalloc.python covers it (a fresh interpreter:
    the raw domain wrapper is for the life of a process)."""
    proc = run_python(textwrap.dedent("""
        import numpy as np, hpalloc, hpalloc.numba, hpalloc.python, hpalloc.numpy
        from numba import njit
        @njit
        def make(n):
            return np.ones(n)
        make(10)                            # compiled now
        hpalloc.numba.install()
        a = make(8 << 20)
        print(hpalloc.numpy.backing(a)["backend"])
        hpalloc.python.install()
        b = make(8 << 20)
        s = hpalloc.stats()
        print(hpalloc.numpy.backing(b)["backend"] in ("thp", "hugetlb"),
              s["python_huge_bytes"] >= 64 << 20, s["numba_huge_bytes"])
    """), env=python_env())
    assert proc.stdout.split() == ["None", "True", "True", "0"], proc.stderr


def test_external_allocator_for_extension_authors(knobs):
    """external_allocator() with NRT_MemInfo_alloc_safe_aligned_external:
    data on huge pages, freed by hpalloc when the MemInfo is released."""
    knobs(cache_max="0")
    helpers = _nrt_python.c_helpers
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint,
                             ctypes.c_void_p)(helpers["MemInfo_alloc_safe_aligned_external"])
    data_of = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(helpers["MemInfo_data"])
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(helpers["MemInfo_release"])
    before = numba_bytes()
    stats0 = rtsys.get_allocation_stats()
    mi = alloc(SIZE, 64, hnb.external_allocator())
    assert mi
    data = data_of(mi)
    assert data % 64 == 0
    ctypes.memset(data, 7, SIZE)
    assert_huge(data, SIZE)
    block = mapping_range(data)
    assert numba_bytes() >= before + SIZE
    release(mi)
    hpalloc.cache_flush()
    assert mapping_range(data) != block
    assert numba_bytes() == before
    stats1 = rtsys.get_allocation_stats()
    assert stats1.alloc - stats0.alloc == stats1.free - stats0.free == 1


def test_external_allocator_small_requests_stay_small():
    helpers = _nrt_python.c_helpers
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint,
                             ctypes.c_void_p)(helpers["MemInfo_alloc_safe_aligned_external"])
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(helpers["MemInfo_release"])
    before = numba_bytes()
    mis = [alloc(n, 32, hnb.external_allocator()) for n in (0, 1, 100, 4096)]
    assert all(mis)
    assert numba_bytes() == before
    for mi in mis:
        release(mi)


def test_fallback_fail_raises_memory_error(knobs, hugetlb_pool):
    hugetlb_pool(2 * MiB, 0, exact=True)   # whatever the machine had free
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    before = numba_bytes()
    stats0 = rtsys.get_allocation_stats()
    hnb.install()
    try:
        with pytest.raises(MemoryError):
            make_filled(N)
        assert numba_bytes() == before
        assert make_filled(10).sum() == 15.0   # below the threshold: fine
    finally:
        hnb.uninstall()
    stats1 = rtsys.get_allocation_stats()
    # NRT counts the failed attempt as an allocation (NRT_Allocate_External
    # counts before looking at the result), with or without hpalloc.
    assert stats1.alloc - stats0.alloc == stats1.free - stats0.free + 1
    assert stats1.mi_alloc - stats0.mi_alloc == stats1.mi_free - stats0.mi_free


def test_tracemalloc_sees_njit_arrays(nrt):
    """NRT allocates with PyMem_RawMalloc, which tracemalloc traces, and
    Numba's own tests (test_nrt.TestTracemalloc) expect it: arrays made
    through hpalloc's allocator are traced too, at the Python line that
    called the @njit function, also from prange workers."""
    import tracemalloc
    make_filled(10)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        a = make_filled(N)  # the line traced
        line = sys._getframe().f_lineno - 1
        after = tracemalloc.take_snapshot()
        out = parallel_sums(8, MiB // 8)
    finally:
        tracemalloc.stop()
    top = after.compare_to(before, "lineno")[0]
    assert SIZE <= top.size < SIZE * 1.015
    assert top.traceback[0].lineno == line
    assert (out == MiB // 8).all()
    del a


# ---- the stand-in: which function, which alignment, which markers -------------

SAFE = "NRT_MemInfo_alloc_safe_aligned"


def test_stands_in_for_the_function_compiled_code_calls(nrt):
    """The symbol install() routes is the one in the code Numba generates
    for np.empty (a different one would leave every array on NRT's)."""
    make_empty(1)
    ir = "\n".join(make_empty.inspect_llvm().values())
    assert "@%s(" % hnb.symbol() in ir
    others = {"NRT_MemInfo_alloc_aligned", SAFE} - {hnb.symbol()}
    assert not any("@%s(" % o in ir for o in others)


def test_no_debug_markers_numba_does_not_write(nrt, knobs):
    """Where Numba's code calls the plain function, np.empty's data is not
    written (no 0xCB fill faulting in every page, no 0xDE fill at free):
    its fresh mapping has (almost) nothing resident.  With the safe
    function the markers are Numba's own behaviour and stay."""
    knobs(cache_max="0")     # a fresh mapping, not a cached (resident) one
    hpalloc.cache_flush()
    a = make_empty(N)
    try:
        assert hpnp.backing(a)["backend"] in ("thp", "hugetlb")
        if hnb.symbol() == SAFE:   # (Numba < 0.57 marks the first 256 bytes)
            assert (a[:32].view(np.uint8) == 0xCB).all()
        else:
            rss = smaps_entry(data_address(a))["Rss"]
            assert rss <= 4 * MiB, "np.empty's pages were written: Rss %d" % rss
    finally:
        del a   # before the fixture counts NRT's frees


def test_debug_nrt_keeps_the_markers():
    """NUMBA_DEBUG_NRT=1: Numba's code calls the safe function, and arrays
    made through hpalloc are filled with its markers, on huge pages."""
    proc = run_python(textwrap.dedent("""
        import numpy as np, hpalloc.numba, hpalloc.numpy
        from numba import njit
        hpalloc.numba.install()
        @njit
        def make(n):
            return np.empty(n)
        a = make(8 << 20)
        print(hpalloc.numba.symbol(), hpalloc.numpy.backing(a)["backend"],
              hex(a.view(np.uint8)[100]), a.ctypes.data % 32)
    """), env=python_env(NUMBA_DEBUG_NRT="1"))
    # (NRT's debug mode prints its own lines to stdout first)
    symbol, backend, byte, misalign = proc.stdout.splitlines()[-1].split()
    assert symbol == SAFE and backend in ("thp", "hugetlb"), proc.stdout
    assert byte == "0xcb" and misalign == "0"


def call_standin(size, align):
    standin = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_uint)(hnb._nrt.standin_address())
    return standin(size, align)


@pytest.mark.parametrize("size", [0, 1, 100, 4096, SIZE])
@pytest.mark.parametrize("align", [1, 8, 24, 32, 64, 4096])
def test_standin_alignment(nrt, size, align):
    """The data of every MemInfo the stand-in makes is aligned as asked
    (NRT's rule: a multiple of align, also not a power of two), writable
    over its whole size, freed by hpalloc when released."""
    helpers = _nrt_python.c_helpers
    data_of = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(helpers["MemInfo_data"])
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(helpers["MemInfo_release"])
    before = numba_bytes()
    mi = call_standin(size, align)
    assert mi
    data = data_of(mi)
    assert data % align == 0
    if size:
        ctypes.memset(data, 0x5A, size)
    if size >= SIZE:
        assert_huge(data, size)
    release(mi)
    assert numba_bytes() == before


def test_standin_refuses_an_impossible_size():
    """A size that wraps NRT's header arithmetic (NRT adds it unchecked) is
    a failed allocation (NULL: MemoryError in compiled code), not a small
    block; nothing allocated, NRT not even asked."""
    before, stats0 = numba_bytes(), rtsys.get_allocation_stats()
    hnb.install()
    try:
        assert not call_standin((1 << 64) - 16, 32)
        assert not call_standin((1 << 64) - 1, 4096)
        assert not call_standin((1 << 64) - 4096, 1)
    finally:
        hnb.uninstall()
    assert numba_bytes() == before
    assert rtsys.get_allocation_stats() == stats0


def test_install_leaves_numba_runtime_lazy():
    """install() compiles nothing: Numba >= 0.57 initialises its runtime at
    the first compilation (Numba's own test_nrt.TestNRTIssue checks it),
    and the stand-in is registered after that initialisation, which
    registers NRT's symbols over any earlier one.  (Numba < 0.57
    initialises it with the CPU target's context.)"""
    proc = run_python(textwrap.dedent("""
        import numpy as np, numba, hpalloc.numba, hpalloc.numpy
        from numba.core.runtime import rtsys
        hpalloc.numba.install()
        lazy = not rtsys._init
        @numba.njit
        def make(n):
            return np.ones(n)
        a = make(8 << 20)
        print(lazy, rtsys._init, hpalloc.numpy.backing(a)["backend"],
              a[-1], hpalloc.stats()["numba_huge_bytes"] >= 64 << 20)
    """), env=python_env())
    lazy, init, backend, last, counted = proc.stdout.split()
    old = tuple(int(x) for x in numba.__version__.split(".")[:2]) < (0, 57)
    assert lazy == str(old is False) and init == "True", proc.stdout
    assert backend in ("thp", "hugetlb") and last == "1.0" and counted == "True"
