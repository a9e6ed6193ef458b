"""The fork-worker idiom on hugetlb pages, with the default knobs
(mode=auto): a multiprocessing Pool under fork -- the default start method
on Linux before Python 3.14 -- whose workers read an array of the parent's,
inherited, while the parent rewrites it.  Each worker must read the
fork-time contents.

Every write to a MAP_PRIVATE hugetlb page a child shares needs a free pool
page for the copy.  On main mode=auto put an 8 MiB array on the last 4
free pages of a 4-page pool: the parent's write took each page away from
the workers (the kernel does so when the owner cannot copy), the workers
died of SIGBUS at their next read, and the Pool never answered.  NumPy's
own memory runs the same program to the end.  Now mode=auto takes hugetlb
pages only while the pool keeps room for a copy of each (lib/core/os.c): on the
4-page pool the array is THP; on an 8-page pool it is hugetlb and the
copies come from the room."""

import gc
import multiprocessing as mp

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hn
from conftest import MiB
from hp_pools import pool_read

N = 8 * MiB // 8  # float64: 4 pages of 2 MiB

ARRAY = None  # the parent's, inherited by the forked workers
GO = None     # set once the parent has rewritten it


def sum_when_told(_):
    GO.wait(60)
    return float(ARRAY.sum())


@pytest.mark.parametrize("pages, backend", [(4, "thp"), (8, "hugetlb")],
                         ids=["pool-without-room", "pool-with-room"])
def test_pool_reads_parent_array_while_parent_writes(hugetlb_pool, pages, backend):
    global ARRAY, GO
    hugetlb_pool(2 * MiB, pages, exact=True)
    ctx = mp.get_context("fork")
    GO = ctx.Event()
    try:
        with hn.enabled():  # the knobs decide: mode=auto
            ARRAY = np.ones(N)
        with ctx.Pool(2) as pool:  # the workers share the array from here
            result = pool.map_async(sum_when_told, range(4), chunksize=1)
            ARRAY[:] = 2.0  # copy-on-write, while the workers live
            GO.set()
            # main: the workers died of SIGBUS, the Pool never answers
            sums = result.get(timeout=60)
        assert sums == [float(N)] * 4  # the fork-time contents
        assert ARRAY.sum() == 2.0 * N
        assert hn.backing(ARRAY)["backend"] == backend
    finally:
        ARRAY = GO = None
        gc.collect()
        hpalloc.cache_flush()
    assert pool_read(2 * MiB, "free_hugepages") == pages  # nothing held
