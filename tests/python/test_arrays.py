"""Arrays under hpalloc behave like any other NumPy array: resize (realloc),
0-size shapes (wrong free sizes), pickling, views, freeing in other threads,
tracemalloc."""

import gc
import pickle
import threading
import tracemalloc

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hpnp
from conftest import MiB

name_of = hpnp.get_handler_name


@pytest.fixture
def thp(knobs):
    """Big arrays on THP mappings whatever the machine's pools."""
    knobs(mode="thp", threshold="2M")


def test_resize_grows_and_shrinks_through_realloc(thp):
    before = hpalloc.stats()
    with hpnp.enabled():
        small = np.arange(100, dtype=np.int64)
        small.resize(200, refcheck=False)
        big = np.arange(4 * MiB // 8, dtype=np.int64)   # 4 MiB: THP block
        big.resize(64 * MiB // 8, refcheck=False)       # grows in place or moves
        big.resize(1 * MiB // 8, refcheck=False)        # shrinks below threshold
    assert name_of(small) == "hpalloc" and name_of(big) == "hpalloc"
    assert (small[:100] == np.arange(100)).all() and (small[100:] == 0).all()
    assert (big == np.arange(1 * MiB // 8)).all()
    after = hpalloc.stats()
    reallocs = lambda s: s["realloc_inplace"] + s["realloc_copies"]  # noqa: E731
    assert reallocs(after) > reallocs(before)


def test_resize_to_and_from_zero():
    with hpnp.enabled():
        arr = np.arange(10.0)
        arr.resize(0, refcheck=False)
        assert arr.size == 0
        arr.resize(1000, refcheck=False)
    assert (arr == 0).all()


@pytest.mark.parametrize("shape", [0, (0,), (0, 5), (5, 0), (3, 0, 1 << 20)])
def test_zero_size_arrays(shape, thp):
    # NumPy allocates a minimal block for these but hands free() a size
    # computed from the shape (0): the library routes by address.
    with hpnp.enabled():
        for make in (np.empty, np.zeros, np.ones):
            arr = make(shape)
            assert arr.size == 0 and name_of(arr) == "hpalloc"
            copy = arr.copy()
            del arr, copy
        big = np.zeros((4, 1 << 20))[:0]  # a view of size 0 on a THP block
        assert big.size == 0
    gc.collect()


def test_arrays_are_freed_correctly_in_other_threads(thp):
    live = lambda: hpalloc.stats()["thp_live_bytes"]  # noqa: E731
    baseline = live()
    with hpnp.enabled():
        arrays = [np.full(4 * MiB // 8, float(i)) for i in range(4)]
    assert live() >= baseline + 16 * MiB
    made_in_thread = []

    def worker():
        # Drop the main thread's arrays here; make one that main frees.
        assert sum(a[0] for a in arrays) == 6.0
        arrays.clear()
        with hpnp.enabled():
            made_in_thread.append(np.ones(4 * MiB // 8))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert name_of(made_in_thread[0]) == "hpalloc"
    made_in_thread.clear()
    assert live() == baseline


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickling_round_trips(thp, protocol):
    # NumPy rebuilds unpickled arrays on the pickle's own bytes (no handler
    # involved); what matters is that hpalloc arrays pickle, and that the
    # original and the copy live and die independently.
    with hpnp.enabled():
        arr = np.arange(3 * MiB // 8, dtype=np.float64).reshape(3, -1)
        arr[1] *= -1
        data = pickle.dumps(arr, protocol=protocol)
    assert hpnp.backing(arr)["handler"] == "hpalloc"  # arr is a view (reshape)
    copy = pickle.loads(data)
    np.testing.assert_array_equal(arr, copy)
    expected = copy.copy()
    del arr
    gc.collect()
    np.testing.assert_array_equal(copy, expected)
    with hpnp.enabled():
        rebuilt = pickle.loads(data).copy()  # an hpalloc array again
    assert name_of(rebuilt) == "hpalloc"
    np.testing.assert_array_equal(rebuilt, expected)


def test_views_and_slices_keep_the_block_alive(thp):
    with hpnp.enabled():
        owner = np.arange(8 * MiB // 8, dtype=np.int64)
    views = [owner[::3], owner[1000:2000], owner.reshape(8, -1)[2:4, 7:],
             owner.view(np.uint8), owner[::-1]]
    for view in views:
        assert hpnp.backing(view)["backend"] == "thp"
        assert hpnp.backing(view)["handler"] == "hpalloc"
    interior = owner[1000:2000]
    del owner, views
    gc.collect()
    interior[:] += 1  # the block is still there: the view holds the owner
    assert interior[0] == 1001 and interior[-1] == 2000
    assert hpnp.backing(interior)["backend"] == "thp"


def test_backing_of_memory_hpalloc_did_not_allocate():
    plain = np.ones(1000)
    info = hpnp.backing(plain)
    assert info["handler"] == "default_allocator" and info["backend"] is None
    assert info["kernel_page_size"] >= 4096
    foreign = np.frombuffer(bytearray(64), dtype=np.uint8)
    info = hpnp.backing(foreign)
    assert info["handler"] is None and info["backend"] is None


def test_small_arrays_are_small_blocks(knobs):
    knobs(threshold="4M")
    with hpnp.enabled():
        arr = np.ones(100)
    info = hpnp.backing(arr)
    assert info["backend"] == "small" and info["mapping_size"] == 0
    assert info["kernel_page_size"] == 4096
    assert hpnp.backing(arr[10:20])["backend"] == "small"


def test_tracemalloc_sees_allocations_in_numpy_domain(thp):
    domain = np.lib.tracemalloc_domain
    only_numpy = [tracemalloc.DomainFilter(True, domain)]

    def traced():
        snap = tracemalloc.take_snapshot().filter_traces(only_numpy)
        return sum(stat.size for stat in snap.statistics("filename"))

    tracemalloc.start()
    try:
        before = traced()
        with hpnp.enabled():
            arr = np.empty(4 * MiB // 8)
            small = np.empty(1000)
        assert name_of(arr) == "hpalloc"
        assert traced() >= before + arr.nbytes + small.nbytes
        del arr, small
        assert traced() <= before
    finally:
        tracemalloc.stop()
