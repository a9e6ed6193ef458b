"""Dask workers under libhpalloc-preload.so, started so by their nanny
(issue 37): a LocalCluster (processes, nannies) with the preload path --
the nanny preload (preload_nanny=["hpalloc.dask"]), the configuration
(hpalloc.dask.preload_config), or the HpallocPreload nanny plugin on a
running cluster -- shows a pandas merge's large buffers on huge pages
inside a worker, served by the preload (origin preload) and not by NumPy's
handler; hpalloc.dask.stats(client) shows those workers as preloaded, the
nannies are not; `dask worker --preload-nanny hpalloc.dask` likewise, and
refuses bad knobs before any worker starts.

Runs with Debian's distributed 2022.12 (make check) and the venv's current
one (make check-venv).  Every blocking call has a timeout; a watchdog dumps
the stacks and exits if a test hangs anyway.
"""

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from hp_pytest_automake import need, skip

if os.environ.get("SANITIZER_FLAGS"):
    pytest.skip("AddressSanitizer cannot be combined with an interposer of malloc "
                "(make check-preload-valgrind runs the preload tests under memcheck)",
                allow_module_level=True)

distributed = need("distributed")
from distributed import Client, LocalCluster  # noqa: E402

import cloudpickle  # noqa: E402

import hpalloc  # noqa: E402
import hpalloc.dask  # noqa: E402
import hp_memory  # noqa: E402
from conftest import MiB, python_env  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(hp_memory)

ROWS = 4 << 20          # 32 MiB per float64 column of the merge's result
TIMEOUT = 60
WATCHDOG = 240


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ---- inside the workers -----------------------------------------------------------

def merge_report(rows=ROWS):
    """A pandas merge in a task; where its result's columns live."""
    import numpy as np
    import pandas as pd
    import hpalloc.numpy as hpnp
    from hpalloc import _hpalloc
    before = hpalloc.stats()["preload_huge_bytes"]
    left = pd.DataFrame({"k": np.arange(rows), "a": np.ones(rows)})
    right = pd.DataFrame({"k": np.arange(rows)[::-1].copy(), "b": np.full(rows, 2.0)})
    merged = left.merge(right, on="k")
    columns = {}
    for name in ("k", "a", "b"):
        col = merged[name].to_numpy()
        address = col.__array_interface__["data"][0]
        columns[name] = {"backend": _hpalloc.backing(address)["backend"],
                         "smaps_huge": hp_memory.settled_huge_bytes(address, col.nbytes),
                         "nbytes": col.nbytes}
    assert float(merged["b"].sum()) == 2.0 * rows
    return {"pid": os.getpid(), "preloaded": hpalloc.preloaded(),
            # the handler NumPy gives a task's arrays: its own, not hpalloc's
            "handler": hpnp.get_handler_name(np.ones(1)),
            "columns": columns,
            "preload_huge_delta": hpalloc.stats()["preload_huge_bytes"] - before,
            "knobs": {k: (v["value"], v["source"]) for k, v in hpalloc.config().items()}}


def is_preloaded(dask_worker=None):
    return hpalloc.preloaded()


# ---- checks ---------------------------------------------------------------------------

def check_preloaded_merge(client, knobs=()):
    (address,) = client.scheduler_info()["workers"]
    got = client.submit(merge_report, pure=False).result(timeout=TIMEOUT)
    assert got["preloaded"], got
    assert got["handler"] == "default_allocator", got
    for name, col in got["columns"].items():
        assert col["backend"] in ("thp", "hugetlb"), (name, col)
        assert col["smaps_huge"] >= col["nbytes"] * 3 // 4, (name, col)
    assert got["preload_huge_delta"] > 0, got
    for knob, value in knobs:
        assert got["knobs"][knob] == (value, "env"), got["knobs"][knob]
    table = hpalloc.dask.stats(client)
    assert list(table.index) == [address]
    assert table["preloaded"].all() and not table["plugin"].any()
    assert (table["pid"] == got["pid"]).all()
    # the nanny itself runs without it: only the worker process asked
    assert not any(client.run(is_preloaded, nanny=True).values())
    return got


def kill_the_worker(client):
    """SIGKILL the cluster's one worker and wait until its nanny has
    restarted it; the killed worker's pid."""
    ((old, pid),) = client.run(os.getpid).items()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + TIMEOUT
    while set(client.scheduler_info()["workers"]) in (set(), {old}):
        assert time.monotonic() < deadline, "the worker was not restarted"
        time.sleep(0.2)
    client.wait_for_workers(1, timeout=TIMEOUT)
    return pid


def cluster(**kwargs):
    return LocalCluster(processes=True, n_workers=1, threads_per_worker=1,
                        dashboard_address=None, silence_logs=50, **kwargs)


def test_nanny_preload_on_local_cluster():
    with cluster(preload_nanny=["hpalloc.dask"],
                 preload_nanny_argv=["--hpalloc", "threshold=4M"]) as c, \
            Client(c, timeout=TIMEOUT) as client:
        client.wait_for_workers(1, timeout=TIMEOUT)
        check_preloaded_merge(client, [("threshold", "4M")])
        # the nannies run in this process: their spawn left nothing here
        assert not_preloading(os.environ), {k: os.environ.get(k) for k in (
            "LD_PRELOAD", "HPALLOC_THRESHOLD")}
        # a worker that dies is restarted preloaded, and still leaves nothing
        pid = kill_the_worker(client)
        assert list(client.run(os.getpid).values()) != [pid]
        assert all(client.run(is_preloaded).values())
        # put back when the nanny's instantiate returns, a moment after the
        # scheduler sees the new worker
        deadline = time.monotonic() + TIMEOUT
        while not not_preloading(os.environ):
            assert time.monotonic() < deadline, os.environ.get("LD_PRELOAD")
            time.sleep(0.1)


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def jemalloc():
    """The path of jemalloc's library (Debian: libjemalloc2), or skip."""
    if not os.path.exists(JEMALLOC):
        skip("jemalloc", "%s is not installed (Debian: libjemalloc2)" % JEMALLOC)
    return JEMALLOC


def worker_environ(dask_worker=None):
    """What a worker's process started with, and who serves its malloc."""
    from hpalloc import _engines
    with open("/proc/self/environ", "rb") as f:
        start = dict(v.decode().partition("=")[::2] for v in f.read().split(b"\0") if v)
    return {"LD_PRELOAD": start.get("LD_PRELOAD"),
            "ARROW_DEFAULT_MEMORY_POOL": start.get("ARROW_DEFAULT_MEMORY_POOL"),
            "HPALLOC_THRESHOLD": start.get("HPALLOC_THRESHOLD"),
            "preloaded": hpalloc.preloaded(),
            "malloc": getattr(_engines, "malloc_owner", lambda: None)()}  # None before issue 46


class EnvironWatch(threading.Thread):
    """While a cluster starts: reads this process's environment, and that
    of a subprocess it starts, over and over (as another thread of a user's
    program would), and changes ARROW_DEFAULT_MEMORY_POOL once: as soon as
    it sees a variable of hpalloc's here (inside the nanny's spawn), or
    when told (change.set())."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.change, self.changed = threading.Event(), threading.Event(), \
            threading.Event()
        self.seen, self.children = set(), set()
        self.looks = self.spawns = 0

    def run(self):
        changed = False
        while not self.stop.is_set():
            for name in ("LD_PRELOAD", "HPALLOC_THRESHOLD"):
                value = os.environ.get(name)
                if value is not None:
                    self.seen.add("%s=%s" % (name, value))
            self.looks += 1
            if not changed and (self.seen or self.change.is_set()):
                os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "mimalloc"   # the user's change
                changed = True
                self.changed.set()
            out = subprocess.run(["/usr/bin/env"], capture_output=True, text=True).stdout
            self.spawns += 1
            for line in out.splitlines():
                if line.startswith(("LD_PRELOAD=", "HPALLOC_THRESHOLD=")):
                    self.children.add(line)


def test_nanny_spawn_leaves_this_process_environment_alone(monkeypatch):
    """Issue 46: a LocalCluster's nannies run in this process, and spawn
    their workers from its environment.  While they do, another thread
    reading os.environ and starting subprocesses sees neither LD_PRELOAD
    nor a knob of hpalloc's, and a change it makes to a variable the
    preload sets (ARROW_DEFAULT_MEMORY_POOL) stays (before: the variables
    sat in os.environ for the whole spawn -- seen by the thread and
    inherited by its subprocesses -- and the change was overwritten when
    they were put back).  The worker still starts preloaded, with the pool
    the user set when it was spawned."""
    for name in ("LD_PRELOAD", "ARROW_DEFAULT_MEMORY_POOL"):
        monkeypatch.setenv(name, "")   # as it was, after the test
        monkeypatch.delenv(name)
    watch = EnvironWatch()
    watch.start()
    try:
        with cluster(preload_nanny=["hpalloc.dask"],
                     preload_nanny_argv=["--hpalloc", "threshold=4M"]) as c, \
                Client(c, timeout=TIMEOUT) as client:
            client.wait_for_workers(1, timeout=TIMEOUT)
            (got,) = client.run(worker_environ).values()
            watch.change.set()
            assert watch.changed.wait(TIMEOUT)
            assert os.environ.get("ARROW_DEFAULT_MEMORY_POOL") == "mimalloc", \
                "the user's change was overwritten (%r); this process's environment held %s" \
                % (os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), sorted(watch.seen))
            # a worker killed: its restart is a spawn too (after the change)
            kill_the_worker(client)
            (again,) = client.run(worker_environ).values()
    finally:
        watch.stop.set()
        watch.join(30)
    assert watch.looks > 10 and watch.spawns > 10, (watch.looks, watch.spawns)
    assert not watch.seen, "this process's environment held %s" % sorted(watch.seen)
    assert not watch.children, "subprocesses inherited %s" % sorted(watch.children)
    assert os.environ.get("ARROW_DEFAULT_MEMORY_POOL") == "mimalloc", \
        "the user's change was overwritten: %r" % os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
    for w in (got, again):
        assert w["preloaded"] and w["LD_PRELOAD"] == hpalloc.preload_library(), w
        assert w["HPALLOC_THRESHOLD"] == "4M", w
    assert got["ARROW_DEFAULT_MEMORY_POOL"] == "system", got
    assert again["ARROW_DEFAULT_MEMORY_POOL"] == "mimalloc", again   # the user's, kept


def test_users_preload_and_arrow_pool_kept(monkeypatch):
    """Issue 46: with jemalloc in this process's LD_PRELOAD and its pool
    for Arrow, a preloaded worker starts with jemalloc first and hpalloc's
    library after it (a tool there stays first, as for `hpctl run
    --preload`), and the user's pool: nothing of the user's is dropped.
    jemalloc, first, then serves the worker's malloc (what the worker's
    dynamic linker says); preload_environ() and preload_config() merge the
    same way (one function, hpalloc._engines.worker_environ)."""
    lib = jemalloc()
    monkeypatch.setenv("LD_PRELOAD", lib)
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    want = "%s %s" % (lib, hpalloc.preload_library())
    env = hpalloc.dask.preload_environ(threshold="4M")
    assert env == {"LD_PRELOAD": want, "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
                   "HPALLOC_THRESHOLD": "4M"}, env
    assert hpalloc.dask.preload_config()[hpalloc.dask.PRE_SPAWN]["LD_PRELOAD"] == want
    # a knob of the user's that one given replaces: said, naming both
    monkeypatch.setenv("HPALLOC_THRESHOLD", "8M")
    with pytest.warns(UserWarning, match="replaced your HPALLOC_THRESHOLD=8M with 4M"):
        assert hpalloc.dask.preload_environ(threshold="4M")["HPALLOC_THRESHOLD"] == "4M"
    monkeypatch.delenv("HPALLOC_THRESHOLD")
    with cluster(preload_nanny=["hpalloc.dask"],
                 preload_nanny_argv=["--hpalloc", "threshold=4M"]) as c, \
            Client(c, timeout=TIMEOUT) as client:
        client.wait_for_workers(1, timeout=TIMEOUT)
        (got,) = client.run(worker_environ).values()
    assert got["LD_PRELOAD"] == want, got
    assert got["ARROW_DEFAULT_MEMORY_POOL"] == "jemalloc", got
    assert got["preloaded"] and os.path.realpath(got["malloc"]) == os.path.realpath(lib), got
    assert os.environ["LD_PRELOAD"] == lib   # this process's, as it was


def not_preloading(environ):
    return "hpalloc" not in environ.get("LD_PRELOAD", "") and \
        "HPALLOC_THRESHOLD" not in environ


CONFIG_DRIVER = hp_memory.CHILD + r'''
import json, sys
import dask, hpalloc.dask
from distributed import Client, LocalCluster
sys.path.insert(0, sys.argv[1])
import test_dask_preload as t
config = hpalloc.dask.preload_config(mode="thp")
with dask.config.set(config), t.cluster() as c, Client(c, timeout=60) as client:
    client.wait_for_workers(1, timeout=60)
    got = t.check_preloaded_merge(client, [("mode", "thp")])
print(json.dumps({"config": config, "got": got}))
'''


def test_preload_config_on_local_cluster():
    """The configuration route, in a process of its own: distributed's
    nanny leaves pre-spawn-environ in the environment of the process it
    runs in (docs/dask.md), which for a LocalCluster is the caller's."""
    import dask
    import json
    proc = subprocess.run([sys.executable, "-c", CONFIG_DRIVER, os.path.dirname(__file__)],
                          env=python_env(), capture_output=True, text=True, timeout=WATCHDOG)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    env = out["config"][hpalloc.dask.PRE_SPAWN]
    # distributed's own setting is kept (MALLOC_TRIM_THRESHOLD_ ...)
    for name, value in (dask.config.get(hpalloc.dask.PRE_SPAWN) or {}).items():
        assert env[name] == value, name
    assert env["LD_PRELOAD"].split()[-1] == hpalloc.preload_library()
    assert env["HPALLOC_MODE"] == "thp" and env["ARROW_DEFAULT_MEMORY_POOL"] == "system"


def test_nanny_plugin_restarts_a_running_cluster_preloaded():
    with cluster() as c, Client(c, timeout=TIMEOUT) as client:
        client.wait_for_workers(1, timeout=TIMEOUT)
        assert not any(client.run(is_preloaded).values())
        (before,) = client.run(os.getpid).values()
        hpalloc.dask.register(client, hpalloc.dask.HpallocPreload(threshold="8M"))
        client.wait_for_workers(1, timeout=TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while not any(client.run(is_preloaded).values()):
            assert time.monotonic() < deadline, "workers never restarted preloaded"
            time.sleep(0.2)
        (after,) = client.run(os.getpid).values()
        assert after != before   # a new worker process
        check_preloaded_merge(client, [("threshold", "8M")])
        # off: the next worker start is plain again
        hpalloc.dask.unregister(client, hpalloc.dask.HpallocPreload)
        client.restart(timeout=TIMEOUT)
        client.wait_for_workers(1, timeout=TIMEOUT)
        assert not any(client.run(is_preloaded).values())
        assert all(client.run(lambda: not_preloading(os.environ), nanny=True).values())
    assert not_preloading(os.environ)


def test_bad_knobs_refused_before_anything_starts():
    for make in (lambda: hpalloc.dask.preload_environ(threshold="4Q"),
                 lambda: hpalloc.dask.preload_config(threshold="4Q"),
                 lambda: hpalloc.dask.HpallocPreload(threshold="4Q")):
        with pytest.raises(ValueError, match="threshold.*'4Q'.*accepted"):
            make()


# ---- dask worker --preload-nanny ---------------------------------------------------------

def dask_cli(*args, env=None):
    """`dask ARGS...` (dask-scheduler / dask-worker where there is no dask)."""
    exe = os.path.join(os.path.dirname(sys.executable), "dask")
    if os.path.exists(exe):
        return [exe, *args]
    return [sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]]


def test_dask_worker_preload_nanny(tmp_path):
    sched_file = tmp_path / "sched.json"
    env = python_env()
    # the scheduler and workers unpickle this module's functions
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    procs = []
    try:
        procs.append(subprocess.Popen(
            dask_cli("scheduler", "--scheduler-file", str(sched_file), "--port", "0",
                     "--dashboard-address", ":0"),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + TIMEOUT
        while not sched_file.exists():
            assert time.monotonic() < deadline, "no scheduler"
            time.sleep(0.1)
        # a refused knob in the environment: hpalloc changes nothing and
        # says why.  distributed 2022.12 stops the nanny then; later ones log
        # a failed preload and start the worker without it (not preloaded).
        log = tmp_path / "bad.log"
        with open(log, "w") as f:
            bad = subprocess.Popen(dask_cli("worker", "--scheduler-file", str(sched_file),
                                            "--nanny", "--preload-nanny", "hpalloc.dask",
                                            "--nthreads", "1", "--death-timeout", "20"),
                                   env=dict(env, HPALLOC_MODE="fast"), stdout=f, stderr=f)
        procs.append(bad)
        deadline = time.monotonic() + TIMEOUT
        while bad.poll() is None and "Registered to" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        said = log.read_text()
        assert "refused knob value in the environment: HPALLOC_MODE=fast: mode: " \
            "invalid value 'fast' (accepted" in said, said[-3000:]
        if bad.poll() is None:
            with Client(scheduler_file=str(sched_file), timeout=TIMEOUT) as client:
                client.wait_for_workers(1, timeout=TIMEOUT)
                assert not any(client.run(is_preloaded).values())
            bad.send_signal(signal.SIGINT)
            bad.wait(timeout=30)
        else:
            assert bad.returncode != 0, said[-3000:]
        procs.append(subprocess.Popen(
            dask_cli("worker", "--scheduler-file", str(sched_file), "--nanny",
                     "--preload-nanny", "hpalloc.dask", "--nthreads", "1"),
            env=dict(env, HPALLOC_THRESHOLD="4M"), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        with Client(scheduler_file=str(sched_file), timeout=TIMEOUT) as client:
            client.wait_for_workers(1, timeout=TIMEOUT)
            check_preloaded_merge(client, [("threshold", "4M")])
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGINT)
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
