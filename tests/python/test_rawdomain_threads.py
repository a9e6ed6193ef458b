"""The raw domain under hpalloc from many threads at once, with and without
the GIL: C threads with no Python thread state (_hp_rawhammer), Python
threads calling PyMem_Raw* through ctypes (which drops the GIL), Python
threads making bytearrays, blocks released by other threads than the ones
that made them -- while the main thread switches hpalloc on and off.

Nothing may be lost or corrupted: contents are checked, and afterwards the
huge mappings in /proc/self/smaps are back to what they were (no leak)."""

import ctypes
import os
import random
import sys
import threading
import time

import pytest

import hpalloc
import hpalloc.python as hpy
from conftest import MiB, first_wrong, pattern
from hp_memory import hg_bytes

HAMMER_DIR = os.environ.get("HPALLOC_TEST_RAWHAMMER_DIR")


@pytest.fixture(scope="module")
def hammer():
    if not HAMMER_DIR:
        pytest.skip("needs the build tree's _hp_rawhammer (run through make check)")
    sys.path.insert(0, HAMMER_DIR)
    try:
        import _hp_rawhammer
    finally:
        sys.path.remove(HAMMER_DIR)
    return _hp_rawhammer


@pytest.fixture
def no_leak(knobs):
    """THP only (hugetlb pools are shared with other tests), and every huge
    mapping made during the test given back at its end."""
    knobs(mode="thp")
    hpalloc.cache_flush()
    before = hg_bytes()
    yield
    hpy.uninstall()
    hpalloc.cache_flush()
    assert hg_bytes() == before, "huge mappings left behind"
    assert hpalloc.stats()["python_huge_bytes"] == 0


def run_threads(targets, toggle=True):
    """Run targets in threads; meanwhile (toggle) this thread switches
    hpalloc on and off every 2 ms.  Re-raises what a thread raised."""
    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: B902 - reported below
                errors.append(exc)
        return run

    threads = [threading.Thread(target=guard(t)) for t in targets]
    for t in threads:
        t.start()
    while toggle and any(t.is_alive() for t in threads):
        hpy.install()
        time.sleep(0.002)
        hpy.uninstall()
        time.sleep(0.002)
    for t in threads:
        t.join()
    assert not errors, errors


def test_c_threads_without_gil_or_thread_state(hammer, no_leak):
    """8 C threads: malloc/calloc, fill, realloc across the threshold,
    check, free -- while hpalloc is switched on and off."""
    hpy.install()
    result = []
    run_threads([lambda: result.append(hammer.hammer(8, 150, 64 * 1024, 6 * MiB,
                                                     random.getrandbits(32)))])
    assert result == [0]


def test_ctypes_threads_call_the_raw_domain_without_the_gil(no_leak):
    api = ctypes.CDLL(None)  # CDLL calls release the GIL
    api.PyMem_RawMalloc.restype = ctypes.c_void_p
    api.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]
    api.PyMem_RawRealloc.restype = ctypes.c_void_p
    api.PyMem_RawRealloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    api.PyMem_RawFree.restype = None
    api.PyMem_RawFree.argtypes = [ctypes.c_void_p]

    def worker(seed):
        rng = random.Random(seed)
        for i in range(60):
            a, b = rng.randrange(1, 5 * MiB), rng.randrange(1, 5 * MiB)
            p = api.PyMem_RawMalloc(a)
            assert p
            # a pattern of this round's own: a reused block still holding
            # an older round's cannot pass for the copy
            want = pattern(a, seed * 1000 + i)
            ctypes.memmove(p, want.ctypes.data, a)
            q = api.PyMem_RawRealloc(p, b)
            assert q
            kept = min(a, b)
            bad = first_wrong(ctypes.string_at(q, kept), kept, seed * 1000 + i)
            assert bad is None, "realloc %d -> %d bytes: wrong from byte %d" % (a, b, bad)
            api.PyMem_RawFree(q)

    hpy.install()
    run_threads([lambda s=s: worker(s) for s in range(1, 7)])


def test_python_threads_make_and_drop_bytearrays(no_leak):
    def worker(seed):
        rng = random.Random(seed)
        keep = []
        for _ in range(80):
            b = bytearray(rng.randrange(1, 6 * MiB))
            b[-1:] = bytes([seed])
            keep.append(b)
            if len(keep) > 4:
                old = keep.pop(rng.randrange(len(keep)))
                assert old[-1] == seed
        del keep[:]

    hpy.install()
    run_threads([lambda s=s: worker(s) for s in range(1, 7)])


def test_blocks_released_by_other_threads(hammer, no_leak):
    """Made in this (Python) thread, freed by C threads; made in Python
    threads, freed here; made while installed, freed after uninstall."""
    hpy.install()
    addrs = hammer.alloc(48, 3 * MiB) + hammer.alloc(16, 4096)
    assert hpalloc.stats()["python_huge_bytes"] >= 48 * 3 * MiB
    hpy.uninstall()
    hammer.free_in_threads(addrs, 8)
    assert hpalloc.stats()["python_huge_bytes"] == 0

    made = []
    hpy.install()
    threads = [threading.Thread(target=lambda: made.extend(
        bytearray(b"m" * (3 * MiB)) for _ in range(8))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hpy.uninstall()
    assert all(b.count(b"m") == 3 * MiB for b in made)
    del made[:]
