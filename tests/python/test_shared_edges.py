"""Shared arrays at their edges: shapes NumPy takes or refuses, and the views
multiprocessing sends (negative strides, transposed, zero-size, read-only)
through a Queue and a Pipe under every start method, with no descriptor of
a shared block left behind on either side (/proc/self/fd).

test_shapes_like_numpy failed on main: shared_empty((-1,), dtype=uint8)
returned a 2 MiB array (a negative size reached frombuffer as count=-1,
"the whole block"), and shared_empty(np.int64(4)) raised TypeError."""

import gc
import multiprocessing as mp
import os

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hn


def shared_fds():
    """This process's descriptors of hpalloc shared blocks (memfds)."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "hpalloc-shared" in os.readlink("/proc/self/fd/" + fd):
                fds.append(fd)
        except OSError:  # the directory's own descriptor, gone
            pass
    return fds


def test_shapes_like_numpy(knobs):
    knobs(mode="thp")
    gc.collect()
    live = hpalloc.stats()["shared_live_bytes"]
    for shape in [(-1,), (-1, 1), (3, -2)]:
        with pytest.raises(ValueError, match="negative dimensions"):
            hn.shared_empty(shape, dtype=np.uint8)
    with pytest.raises(TypeError):
        hn.shared_empty((2.5,))
    assert hpalloc.stats()["shared_live_bytes"] == live  # nothing made
    assert hn.shared_zeros(np.int64(4)).shape == (4,)
    assert hn.shared_zeros((np.int32(2), 3)).shape == (2, 3)
    assert hn.shared_zeros(()).shape == ()


VIEWS = {
    "reversed": lambda a: a[::-1],
    "strided_back": lambda a: a.reshape(6, 4)[::-2, ::-1],
    "transposed": lambda a: a.reshape(6, 4).T,
    "empty_at_end": lambda a: a[24:],
    "empty_2d": lambda a: a.reshape(6, 4)[:, 2:2],
}


def receive(conn, queue, out):
    before = len(shared_fds())
    report, writable = {}, []
    for _ in range(2 * len(VIEWS)):
        name, via, view = (conn.recv() if len(report) % 2 else queue.get())
        readonly = name.startswith("ro_")
        ok = (hn.is_shared(view) and view.flags.writeable != readonly and
              (view == VIEWS[name[3:] if readonly else name](np.arange(24.0))).all())
        if ok and view.size and not readonly:
            writable.append(view)
        report[name + "/" + via] = bool(ok)
        del view
    for view in writable:  # after every check: seen by the parent
        view[(0,) * view.ndim] += 100
    del writable, view
    gc.collect()
    out.put((report, before, len(shared_fds())))


def send_views(a, queue, conn):
    """Each view through the Queue, its read-only twin through the Pipe
    (the child alternates); their labels."""
    sent = []
    for name, make in VIEWS.items():
        ro = make(a)
        ro.flags.writeable = False
        queue.put((name, "q", make(a)))
        conn.send(("ro_" + name, "p", ro))
        sent += [name, "ro_" + name]
    return sent


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_views_travel_by_descriptor(knobs, method):
    knobs(mode="thp")
    ctx = mp.get_context(method)
    gc.collect()
    fds_before = shared_fds()
    a = hn.shared_zeros(24)
    a[:] = np.arange(24.0)
    queue, out = ctx.Queue(), ctx.Queue()
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=receive, args=(theirs, queue, out))
    p.start()
    sent = send_views(a, queue, mine)
    report, child_before, child_after = out.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert all(report.values()) and len(report) == len(sent), report
    assert child_after == child_before, "the child kept descriptors of received blocks"
    # first elements: reversed and strided_back are a[23], transposed a[0]
    assert a[23] == 223.0 and a[0] == 100.0 and a[1:23].sum() == sum(range(1, 23))
    del a, queue, out, mine, theirs, p
    gc.collect()
    assert shared_fds() == fds_before, "the parent kept descriptors"
