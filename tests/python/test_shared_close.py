"""SharedBlock.close() while arrays still use the block.

np.ndarray(buffer=block) -- exactly how multiprocessing's receiver rebuilds
a shared array -- keeps no buffer export, only base=block.  On main, close()
then unmapped memory the array still used: a segmentation fault at the next
access, in the process that closed it (a worker that closed the block it
rebuilt).  Now close() only stops new uses (no new buffer, no sending); the
block is unmapped when the last array or view on it goes.  Each program
runs in a process of its own: the failure is a crash."""

import gc
import multiprocessing as mp
import os

import pytest

import hpalloc.numpy as hn
from conftest import run_python

N = 1 << 20  # 8 MiB of float64


CLOSE_UNDER_ARRAY = r"""
import gc
import numpy as np
import hpalloc
import hpalloc.numpy as hn
from hpalloc._shared import SharedBlock
from multiprocessing.reduction import ForkingPickler
hn._register_reducers()  # as shared_empty() does: send by descriptor

def mapped(address):
    with open("/proc/self/maps") as f:
        for line in f:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return True
    return False

hpalloc.set("mode", "thp")
live = hpalloc.stats()["shared_live_blocks"]
block = SharedBlock(%(n)d * 8)
address = block.address
a = np.ndarray((%(n)d,), dtype=np.float64, buffer=block)  # base=block, no export
assert a.base is block
a[:] = 1.0
block.close()
block.close()                                              # again: nothing more
del block
gc.collect()
print("sum", a.sum(), flush=True)                          # main: SIGSEGV here
try:
    memoryview(a.base)
except ValueError as e:
    print("new buffer:", e)
try:
    ForkingPickler.dumps(a)
except ValueError as e:
    print("send:", e)
print("info fd", a.base.info()["fd"])
a[3] = 5.0
assert mapped(address)
del a
gc.collect()
assert not mapped(address), "the block outlived its last array"

# the same with a buffer export (np.frombuffer): closed, not refused
block = SharedBlock(%(n)d * 8)
address = block.address
v = np.frombuffer(block, dtype=np.float64)[::2]
v[:] = 2.0
block.close()
del block
gc.collect()
print("view sum", v.sum(), flush=True)
del v
gc.collect()
assert not mapped(address), "the block outlived its last view"
assert hpalloc.stats()["shared_live_blocks"] == live
print("unmapped")
"""


def test_close_under_a_live_array():
    proc = run_python(CLOSE_UNDER_ARRAY % {"n": N}, check=False)
    assert proc.returncode == 0, "exit %d\n%s%s" % (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines == ["sum %r" % float(N),
                     "new buffer: shared block is closed",
                     "send: shared block is closed",
                     "info fd -1",
                     "view sum %r" % float(N),
                     "unmapped"]


# ---- a multiprocessing round trip: the receiver closes the block it rebuilt


def close_then_sum(arr):
    """What a worker does: close the block under the array it received
    (base=block), drop it, then read the array."""
    block = hn._shared_block(arr)
    assert block is not None and arr.base is block
    block.close()
    del block
    gc.collect()
    return float(arr.sum()), os.getpid()


def receive_close_then_sum(inbox, outbox):
    outbox.put(close_then_sum(inbox.get()))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_closes_what_it_received(knobs, method):
    knobs(mode="thp")
    ctx = mp.get_context(method)
    a = hn.shared_zeros(N)
    a[:] = 2.0
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=receive_close_then_sum, args=(inbox, outbox))
    p.start()
    inbox.put(a)  # by descriptor: the worker rebuilds it on its own block
    p.join(60)
    assert p.exitcode == 0, "the worker died: exit code %s" % p.exitcode  # main: -11
    total, _ = outbox.get(timeout=10)
    assert total == 2.0 * N
    assert a.sum() == 2.0 * N  # the parent's block: untouched by the worker


def test_pool_worker_closes_what_it_received(knobs):
    knobs(mode="thp")
    a = hn.shared_zeros(N)
    a[:] = 3.0
    with mp.get_context("fork").Pool(1) as pool:
        # main: the worker dies of SIGSEGV, the Pool never answers
        total, pid = pool.apply_async(close_then_sum, (a,)).get(timeout=60)
        again, same_pid = pool.apply_async(close_then_sum, (a[::2],)).get(timeout=60)
    assert total == 3.0 * N and again == 3.0 * N // 2
    assert pid == same_pid  # the same worker lived on
