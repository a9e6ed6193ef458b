"""Shared arrays (hpalloc.numpy.shared_empty/zeros) across processes: the
multiprocessing start methods, Pool.map arguments, Process arguments and a
Queue pass the descriptor, not the data; both sides see each other's
writes; every process's smaps shows the pages the pool gave; a short pool
falls back or raises MemoryError, never SIGBUS; nothing leaks."""

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hn
from conftest import MiB, data_address, hugetlb_pool  # noqa: F401
from hp_pools import pool_read
from hp_memory import hugetlb_of, smaps_entry
from hp_pytest_automake import need

N = 256 * MiB // 8  # a 256 MiB array of float64
PAGES = 256 * MiB // (2 * MiB)


def smaps_hugetlb(arr):
    e = smaps_entry(data_address(arr))
    return hugetlb_of(e), e.get("KernelPageSize")


def worker_sum_and_mark(args):
    arr, i = args
    assert hn.is_shared(arr), "received a copy, not the shared block"
    total = float(arr[i::2].sum())
    arr[i::2] += 1.0  # seen by the parent
    hugetlb, page = smaps_hugetlb(arr)  # pages this process touched
    return total, hugetlb, page, os.getpid()


def worker_process(arr, q):
    q.put(worker_sum_and_mark((arr, 0)))


def worker_queue(qin, qout):
    arr = qin.get()
    qout.put(worker_sum_and_mark((arr, 1)))


@pytest.fixture
def pool_2m(hugetlb_pool, knobs):
    """A pool that holds one 256 MiB array and the knobs to use it."""
    hugetlb_pool(2 * MiB, PAGES)
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    return pool_read(2 * MiB, "free_hugepages")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_workers_share_huge_pages(pool_2m, method):
    free_before = pool_2m
    a = hn.shared_zeros(N)
    a[:] = np.arange(N, dtype=float)
    expect = [float(a[0::2].sum()), float(a[1::2].sum())]
    from multiprocessing.reduction import ForkingPickler
    payload = ForkingPickler.dumps(a)
    assert len(payload) < 4096  # a descriptor, not 256 MiB
    same = pickle.loads(payload)  # fetch the descriptor (else it stays lent out)
    assert hn.is_shared(same) and same[12345] == 12345.0
    del same
    assert smaps_hugetlb(a) == (256 * MiB, 2 * MiB)
    ctx = mp.get_context(method)
    with ctx.Pool(2) as pool:
        results = pool.map(worker_sum_and_mark, [(a, 0), (a, 1)])
    assert [r[0] for r in results] == expect
    for _, hugetlb, page, _ in results:  # each worker's own smaps
        assert page == 2 * MiB and hugetlb > 0
    assert a[0] == 1.0 and a[1] == 2.0 and a[-1] == N  # the workers' writes
    del a, results
    import gc
    gc.collect()
    assert pool_read(2 * MiB, "free_hugepages") == free_before  # no leak


def test_process_args_and_queue(pool_2m):
    a = hn.shared_zeros(N)
    a[:] = 3.0
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=worker_process, args=(a, q))
    p.start()
    total, hugetlb, _, _ = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and total == 3.0 * (N // 2) and hugetlb > 0
    qin, qout = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker_queue, args=(qin, qout))
    p.start()
    qin.put(a[::1])  # a view travels as a view of the same block
    total, hugetlb, _, _ = qout.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and hugetlb > 0
    assert a[0] == 4.0 and a[1] == 4.0  # both workers' writes


def test_plain_pickle_copies(knobs):
    knobs(mode="thp")
    a = hn.shared_zeros((4, 5), dtype=np.int32)
    a[:] = 7
    b = pickle.loads(pickle.dumps(a))
    assert not hn.is_shared(b) and (b == 7).all() and b.shape == (4, 5)
    b[0, 0] = 1
    assert a[0, 0] == 7


def test_views_and_orders(knobs):
    knobs(mode="thp")
    f = hn.shared_empty((3, 4), dtype=np.float32, order="F")
    assert f.flags.f_contiguous and hn.is_shared(f) and hn.is_shared(f[1:, ::2])
    assert not hn.is_shared(np.ones(3)) and not hn.is_shared(f.copy())
    e = hn.shared_zeros(0)
    assert e.shape == (0,) and hn.is_shared(e)


def test_short_pool_falls_back_or_raises(hugetlb_pool, knobs):
    hugetlb_pool(2 * MiB, PAGES - 1, exact=True)  # one page short of 256 MiB
    free = pool_read(2 * MiB, "free_hugepages")
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    with pytest.raises(MemoryError):
        hn.shared_empty(N)
    assert pool_read(2 * MiB, "free_hugepages") == free
    fallbacks = hpalloc.stats()["shared_fallbacks"]
    knobs(fallback="small")
    a = hn.shared_zeros(N)
    a[:] = 1.0  # every page touched: no SIGBUS
    assert hpalloc.stats()["shared_fallbacks"] == fallbacks + 1
    assert smaps_hugetlb(a) == (0, 4096)
    assert hn.backing(a)["shared"]["backend"] == "small"


def test_backing_and_stats(knobs):
    knobs(mode="thp")
    import gc
    gc.collect()
    before = hpalloc.stats()["shared_live_bytes"]
    a = hn.shared_zeros(4 * MiB // 8)
    info = hn.backing(a)
    assert info["shared"]["size"] == 4 * MiB and info["backend"] == "thp"
    assert hpalloc.stats()["shared_live_bytes"] == before + 4 * MiB
    del a, info
    import gc
    gc.collect()
    assert hpalloc.stats()["shared_live_bytes"] == before


def test_torch_from_numpy_shares_the_block(knobs):
    torch = need("torch")
    knobs(mode="thp")
    a = hn.shared_zeros(1 << 20, dtype=np.float32)
    t = torch.from_numpy(a)
    assert t.data_ptr() == data_address(a)
    t += 2
    assert a[5] == 2.0
