"""hpalloc on Dask workers: hpalloc.dask.HpallocPlugin on a
LocalCluster(processes=True, n_workers=2), and the same as a preload of
`dask worker` processes started from the command line against a `dask
scheduler`.  What the workers report is checked inside them against their own
/proc/self/smaps, and from outside with `hpctl stats` (the published
entries).

The plugin also switches on the adapters HPALLOC_ADAPTERS names (Numba's
and PyTorch's when a task imports them), and teardown switches them off.
hpalloc's modules must not warn (deprecated distributed APIs): their
DeprecationWarnings and FutureWarnings are errors, here and in the workers.

One cluster per module (start-up costs seconds); every blocking call has a
timeout, and a watchdog dumps the stacks and exits if a test hangs anyway.
"""

import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from hp_pytest_automake import need

distributed = need("distributed")
from distributed import Client, LocalCluster  # noqa: E402

import cloudpickle

import hpalloc
import hpalloc.dask
import hp_memory
from conftest import MiB, python_env
from hp_memory import settled_huge_bytes

# The functions below run inside the workers: ship them by value, the
# workers cannot import this test module (nor hp_memory, which they use).
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(hp_memory)

# A warning of hpalloc's own code (the client side here, the plugin in the
# workers through PYTHONWARNINGS, which they inherit) fails the test.
HPALLOC_MODULES = ("hpalloc", "hpalloc.dask", "hpalloc.numpy", "hpalloc.numba",
                   "hpalloc.torch", "hpalloc.python", "hpalloc_activate")
WARNINGS_AS_ERRORS = ",".join("error::%s:%s" % (category, module)
                              for module in HPALLOC_MODULES
                              for category in ("DeprecationWarning", "FutureWarning"))
pytestmark = [pytest.mark.filterwarnings("error::DeprecationWarning:hpalloc"),
              pytest.mark.filterwarnings("error::FutureWarning:hpalloc")]

ARRAY = 64 * MiB
TIMEOUT = 60            # any one blocking Dask call
WATCHDOG = 240          # any one test, then stacks are dumped and we exit


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ---- run inside the workers ------------------------------------------------

def report(arr):
    """Where arr's bytes live, as seen in the worker holding it."""
    import hpalloc.numpy as hpnp
    from hpalloc import _hpalloc
    address = arr.__array_interface__["data"][0]
    return {
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "handler": hpnp.get_handler_name(arr) if arr.flags.owndata else None,
        # the hpalloc block holding the data (interior pointers work)
        "backend": _hpalloc.backing(address)["backend"],
        # the worker's own smaps: the test's reading, and the library's
        # (settled: a block faulted at 4 KiB first is collapsed behind the task)
        "smaps_huge": settled_huge_bytes(address, arr.nbytes),
        "backing_huge": hpnp.backing(arr)["huge_bytes"],
        "nbytes": arr.nbytes,
    }


def new_array(nbytes):
    import numpy as np
    return np.ones(nbytes // 8)  # writes every page


def make_and_report(nbytes):
    return report(new_array(nbytes))


def make_payload(nbytes, kind):
    """Random bytes do not compress (Dask sends them as they are); ones do
    (lz4 on this machine): the two ways a received array is built."""
    import numpy as np
    if kind == "random":
        return np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8)
    return np.ones(nbytes, dtype=np.uint8)


def worker_state(dask_worker):
    """Everything the plugin could change in a worker (client.run passes
    the worker as dask_worker)."""
    import numpy as np
    import hpalloc.numpy as hpnp
    knobs = {k: (v["value"], v["source"]) for k, v in hpalloc.config().items()}
    adapters = {a: sys.modules["hpalloc." + a].installed()
                for a in ("numba", "torch") if "hpalloc." + a in sys.modules}
    return {"plugins": sorted(dask_worker.plugins),
            "installed": hpnp.installed(),
            "adapters": adapters,
            "hooks": sorted(type(f).__name__ for f in sys.meta_path
                            if type(f).__module__ == "hpalloc_activate"),
            "loop_handler": hpnp.get_handler_name(np.ones(1)),
            "knobs": knobs}


def torch_tensor_report(nbytes):
    """A task importing torch (first import in this worker: the plugin's
    hook installs hpalloc.torch then) and making a tensor."""
    import torch
    import hpalloc.numpy as hpnp
    t = torch.ones(nbytes // 8, dtype=torch.float64)
    return {"backend": hpnp.backing(t)["backend"], "smaps_huge": settled_huge_bytes(t.data_ptr(), nbytes),
            "backing_huge": hpnp.backing(t)["huge_bytes"], "nbytes": nbytes,
            "installed": sys.modules["hpalloc.torch"].installed()
            if "hpalloc.torch" in sys.modules else False}


def numba_array_report(nbytes):
    """A task compiling @njit code that makes an array."""
    import numpy as np
    from numba import njit

    @njit
    def make(n):
        a = np.empty(n)
        a[:] = 1.0
        return a

    info = report(make(nbytes // 8))
    info["installed"] = sys.modules["hpalloc.numba"].installed() \
        if "hpalloc.numba" in sys.modules else False
    return info


def handler_in_task(hold=0.0):
    """NumPy's handler in the executor thread running this task; hold keeps
    the thread busy so that concurrent tasks take the other threads."""
    import numpy as np
    import hpalloc.numpy as hpnp
    time.sleep(hold)
    return threading.get_ident(), hpnp.get_handler_name(np.ones(1))


def handlers_in_every_thread(client):
    """{address: {thread: handler}}: two tasks at once per worker (two
    threads each), so both executor threads of every worker answer."""
    workers = sorted(client.scheduler_info()["workers"])
    futures = [(w, client.submit(handler_in_task, 0.5, workers=[w], pure=False,
                                 allow_other_workers=False))
               for w in workers for _ in range(2)]
    seen = {w: {} for w in workers}
    for w, f in futures:
        ident, handler = f.result(timeout=TIMEOUT)
        seen[w][ident] = handler
    return seen


# ---- helpers on the client side --------------------------------------------------

def hpctl():
    builddir = os.environ.get("abs_top_builddir")
    path = os.path.join(builddir, "tools", "hpctl") if builddir else shutil.which("hpctl")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("hpctl not found (run through make check)")
    return path


def hpctl_stats_rows(*args):
    """{pid: fields} of the rows of `hpctl stats`."""
    out = subprocess.run([hpctl(), "stats", *args], capture_output=True,
                         text=True, timeout=TIMEOUT, check=True).stdout
    rows = {}
    for line in out.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] != "total":
            rows[int(fields[0])] = fields
    return rows


def published_huge(pid):
    """Live huge bytes process pid published (hpctl --json stats)."""
    proc = subprocess.run([hpctl(), "--json", "stats", str(pid)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        return -1
    (entry,) = json.loads(proc.stdout)
    return entry["stats"]["thp_live_bytes"] + entry["stats"]["hugetlb_live_bytes"]


def wait_published(pids, at_least, seconds=10):
    """The entries are rewritten by each process's janitor (~250 ms)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(published_huge(p) >= at_least for p in pids):
            return
        time.sleep(0.1)
    pytest.fail("not published: %s" % {p: published_huge(p) for p in pids})


def by_worker(client, fn, *args):
    """fn(*args) as a task on each worker: {address: result}."""
    workers = sorted(client.scheduler_info()["workers"])
    futures = {w: client.submit(fn, *args, workers=[w], pure=False,
                                allow_other_workers=False) for w in workers}
    return {w: f.result(timeout=TIMEOUT) for w, f in futures.items()}


def check_on_hpalloc(info, what):
    assert info["backend"] in ("thp", "hugetlb"), (what, info)
    assert info["smaps_huge"] >= info["nbytes"] * 3 // 4, (what, info)
    assert info["backing_huge"] >= info["nbytes"] * 3 // 4, (what, info)


def check_cluster(client, expect_knobs):
    """What must hold on any cluster running the plugin: new and received
    arrays on hpalloc and on huge pages per smaps, one stats() row per
    worker, both workers in `hpctl stats`.  Returns the worker pids."""
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    made = by_worker(client, make_and_report, ARRAY)
    for w, info in made.items():
        assert info["handler"] == "hpalloc", (w, info)
        check_on_hpalloc(info, "64 MiB array made in a task on %s" % w)
    pids = sorted(info["pid"] for info in made.values())
    assert len(set(pids)) == 2

    # Arrays sent from worker 0 to a task on worker 1 (Dask's transfer path).
    for kind in ("random", "ones"):
        sent = client.submit(make_payload, ARRAY, kind, workers=[workers[0]],
                             pure=False, allow_other_workers=False)
        got = client.submit(report, sent, workers=[workers[1]], pure=False,
                            allow_other_workers=False).result(timeout=TIMEOUT)
        assert got["pid"] == made[workers[1]]["pid"]
        check_on_hpalloc(got, "%s array received by %s" % (kind, workers[1]))
        del sent

    # Data the client scatters to a worker.
    payload = make_payload(ARRAY, "random")
    scattered = client.scatter(payload, workers=[workers[0]])
    got = client.submit(report, scattered, workers=[workers[0]], pure=False,
                        allow_other_workers=False).result(timeout=TIMEOUT)
    check_on_hpalloc(got, "array scattered to %s" % workers[0])
    del scattered, payload

    # Arrays kept alive on each worker for the counters.
    held = {w: client.submit(new_array, ARRAY, workers=[w], pure=False,
                             allow_other_workers=False) for w in workers}
    for f in held.values():
        f.result(timeout=TIMEOUT)
    table = hpalloc.dask.stats(client)
    assert list(table.index) == workers
    assert sorted(table["pid"]) == pids
    assert (table["numpy_huge_bytes"] >= ARRAY).all(), table["numpy_huge_bytes"]
    assert table["plugin"].all() and table["numpy_installed"].all()
    for knob, value in expect_knobs.items():
        assert (table[knob] == value).all(), table[knob]

    # From outside: hpctl (the library's reader of the published entries)
    wait_published(pids, ARRAY)
    rows = hpctl_stats_rows()
    assert set(pids) <= set(rows), rows
    out = subprocess.run([hpctl(), "--json", "stats", *map(str, pids)],
                         capture_output=True, text=True, timeout=TIMEOUT,
                         check=True).stdout
    for entry in json.loads(out):
        for knob, value in expect_knobs.items():
            assert entry["knobs"][knob] == {"value": value, "source": "process",
                                           "rejected": ""}, entry["knobs"]
    assert {p["pid"] for p in hpalloc.processes()} >= set(pids)
    del held
    return pids


# ---- a worker with a memory limit ------------------------------------------------

MEMORY_LIMIT = 1 << 30
BLOCK = 64 * MiB


def statm_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")


def fill_and_free(bound):
    """In a task: enough 64 MiB arrays that with what the worker already
    holds they come to 128 MiB over bound, written, then all freed (into
    hpalloc's cache).  Returns the resident memory at the peak."""
    import numpy as np
    count = max(2, (bound + 128 * MiB - statm_rss()) // BLOCK + 1)
    arrays = [np.ones(BLOCK // 8) for _ in range(count)]
    peak = statm_rss()
    del arrays
    return peak


def rss_and_cache(dask_worker=None):
    return {"rss": statm_rss(), "cached": hpalloc.stats()["cached_bytes"],
            "bound": hpalloc.config()["cache_rss_max"]["value"]}


def test_memory_limit_bounds_what_the_cache_keeps():
    """Issue 25: Dask spills, pauses and restarts a worker on its process
    memory, which counts hpalloc's cached blocks.  On a worker with a
    memory limit the plugin sets cache_rss_max to the limit times Dask's
    lowest fraction (target, 0.6): arrays freed on top of a worker near
    that bound are given back within a second (the worker's own statm) --
    with cache_rss_max=0 given, the same arrays stay cached above it."""
    fraction = 0.6
    with LocalCluster(processes=True, n_workers=1, threads_per_worker=1,
                      memory_limit=MEMORY_LIMIT, dashboard_address=None,
                      silence_logs=50) as cluster, \
            Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(1, timeout=TIMEOUT)
        bound = int(MEMORY_LIMIT * fraction)
        results = {}
        for label, knobs in (("cache_rss_max=0", {"cache_rss_max": "0"}),
                             ("the plugin's bound", {})):
            # populate_pages=2M: the arrays are resident when freed (at 4 KiB
            # first, freed before their collapse, the cache would drop their
            # pages and there would be nothing over the bound to show)
            hpalloc.dask.register(client, hpalloc.dask.HpallocPlugin(
                cache_decay_ms="600000", populate_pages="2M", adapters="numpy", **knobs))
            peak = client.submit(fill_and_free, bound, pure=False).result(timeout=TIMEOUT)
            time.sleep(1.0)
            (state,) = client.run(rss_and_cache).values()
            results[label] = dict(state, peak=peak)
            print("%s: peak %d MiB, then rss %d MiB with %d MiB cached (bound %s)"
                  % (label, peak // MiB, state["rss"] // MiB, state["cached"] // MiB,
                     state["bound"]))
            hpalloc.dask.unregister(client)
            client.run(hpalloc.cache_flush)
        control, bounded = results["cache_rss_max=0"], results["the plugin's bound"]
        assert control["bound"] == "0"
        assert control["peak"] > bound and control["rss"] > bound + 64 * MiB, control
        assert control["cached"] >= control["peak"] - bound, control
        assert hpalloc.parse_size(bounded["bound"]) == bound, bounded
        assert bounded["peak"] > bound, bounded
        assert bounded["rss"] <= bound + 16 * MiB, bounded
        assert bounded["cached"] < control["cached"], (control, bounded)


# ---- the plugin on a LocalCluster ----------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = WARNINGS_AS_ERRORS   # the workers' (inherited)
    try:
        with LocalCluster(processes=True, n_workers=2, threads_per_worker=2,
                          dashboard_address=None, silence_logs=50) as cluster, \
                Client(cluster, timeout=TIMEOUT) as client:
            client.wait_for_workers(2, timeout=TIMEOUT)
            yield cluster, client
    finally:
        if saved is None:
            os.environ.pop("PYTHONWARNINGS")
        else:
            os.environ["PYTHONWARNINGS"] = saved


def states(client):
    return client.run(worker_state)


def test_invalid_knob_refused_before_anything_is_sent(cluster):
    cluster, client = cluster
    before, registered = states(client), dict(cluster.scheduler.worker_plugins)
    with pytest.raises(ValueError) as e:
        hpalloc.dask.HpallocPlugin(threshold="4Q")
    assert "threshold" in str(e.value) and "'4Q'" in str(e.value)
    assert "accepted" in str(e.value)
    with pytest.raises(ValueError, match="bogus"):
        hpalloc.dask.HpallocPlugin(bogus="1")
    # changed after construction: refused when registering, nothing sent
    plugin = hpalloc.dask.HpallocPlugin(threshold="2M")
    plugin.knobs["mode"] = "fast"
    with pytest.raises(ValueError, match="mode.*'fast'"):
        hpalloc.dask.register(client, plugin)
    with pytest.raises(ValueError, match="refused adapters 'numpy,bogus': expected "
                       "a comma-separated list of python numpy numba torch arrow, or all"):
        hpalloc.dask.HpallocPlugin(adapters="numpy,bogus")
    with pytest.raises(ValueError, match="refused adapters"):
        hpalloc.dask.HpallocPlugin(adapters=[])
    assert dict(cluster.scheduler.worker_plugins) == registered
    assert states(client) == before


def test_invalid_knob_refused_by_each_worker(cluster, monkeypatch):
    """A plugin that reaches the workers unchecked (another client, another
    library version) is refused by each worker's library before distributed
    stores it or replaces anything."""
    cluster, client = cluster
    before, registered = states(client), dict(cluster.scheduler.worker_plugins)
    plugin = hpalloc.dask.HpallocPlugin()
    plugin.knobs["threshold"] = "4Q"
    monkeypatch.setattr(hpalloc.dask.HpallocPlugin, "__getstate__",
                        lambda self: {"knobs": self.knobs})
    with pytest.raises(Exception, match="threshold: invalid value '4Q'"):
        hpalloc.dask.register(client, plugin)
    assert states(client) == before
    # distributed keeps what was sent for future workers: put it back
    cluster.scheduler.worker_plugins.clear()
    cluster.scheduler.worker_plugins.update(registered)


def test_plugin_on_local_cluster(cluster):
    cluster, client = cluster
    # tasks have run: the executor threads exist before the plugin
    before = handlers_in_every_thread(client)
    for w, threads in before.items():
        assert len(threads) == 2, before
        assert set(threads.values()) == {"default_allocator"}, before
    hpalloc.dask.register(client, hpalloc.dask.HpallocPlugin(threshold="2M"))
    for w, state in states(client).items():
        assert "hpalloc" in state["plugins"] and state["installed"], state
        assert state["knobs"]["threshold"] == ("2M", "process"), state
    after = handlers_in_every_thread(client)
    for w, threads in after.items():
        assert set(threads) == set(before[w]), (before, after)  # the same threads
        assert set(threads.values()) == {"hpalloc"}, after
    check_cluster(client, {"threshold": "2M"})


def test_stats_without_pandas(monkeypatch):
    """Issue 46: stats() returns one type, a pandas DataFrame; without
    pandas it says so, before asking the workers anything (it returned a
    list of dicts then, which docs/dask.md's stats(client)["preloaded"]
    failed on: TypeError: list indices must be integers or slices)."""
    class Unasked:
        def run(self, *args, **kwargs):
            raise AssertionError("stats() asked the workers")

    monkeypatch.setitem(sys.modules, "pandas", None)  # import fails
    with pytest.raises(ImportError, match=r"hpalloc\.dask\.stats\(\) returns a pandas "
                       r"DataFrame: install pandas"):
        hpalloc.dask.stats(Unasked())


def test_unregister_puts_workers_back(cluster):
    cluster, client = cluster
    hpalloc.dask.unregister(client)
    for w, state in states(client).items():
        assert "hpalloc" not in state["plugins"] and not state["installed"]
        assert state["knobs"]["threshold"][1] != "process", state
        assert state["hooks"] == [], state   # numba/torch never imported: hook gone
    for w, threads in handlers_in_every_thread(client).items():
        assert set(threads.values()) == {"default_allocator"}, threads


def test_plugin_switches_adapters_on_and_off(cluster):
    """HpallocPlugin(adapters=...): Numba's and PyTorch's adapters installed
    in each worker when a task first imports numba / torch, their arrays and
    tensors on huge pages per the worker's smaps; unregistering uninstalls
    them.  (No task of this module imported numba or torch before.)"""
    import importlib.util
    wanted = [m for m in ("numba", "torch") if importlib.util.find_spec(m)]
    if not wanted:
        pytest.skip("neither Numba nor PyTorch is installed for %s" % sys.executable)
    cluster, client = cluster
    hpalloc.dask.register(client, hpalloc.dask.HpallocPlugin(
        adapters="numpy," + ",".join(wanted), threshold="2M"))
    try:
        for w, state in states(client).items():
            assert state["installed"] and "hpalloc" in state["plugins"], state
        if "numba" in wanted:
            for w, info in by_worker(client, numba_array_report, ARRAY).items():
                assert info["installed"], info
                check_on_hpalloc(info, "@njit array on %s" % w)
        if "torch" in wanted:
            for w, info in by_worker(client, torch_tensor_report, ARRAY).items():
                assert info["installed"], info
                check_on_hpalloc(info, "tensor on %s" % w)
        table = hpalloc.dask.stats(client)
        for module in wanted:
            assert table[module + "_installed"].all(), table
    finally:
        hpalloc.dask.unregister(client)
    for w, state in states(client).items():
        assert not state["installed"] and state["hooks"] == [], state
        assert state["adapters"] == {m: False for m in wanted}, state


# ---- the preload: `dask scheduler` + `dask worker --preload hpalloc.dask` ---------

def cli_env():
    """The test's environment, with this directory importable (the
    scheduler unpickles the tasks' functions: distributed pickles them by
    reference, cloudpickle's by-value registration is not consulted) and
    hpalloc's warnings as errors."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = python_env(PYTHONWARNINGS=WARNINGS_AS_ERRORS)
    env["PYTHONPATH"] = os.pathsep.join([here] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def dask_cli(*args, log):
    return subprocess.Popen([sys.executable, "-m", "dask", *args],
                            env=cli_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def scheduler_address(scheduler_file, proc):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(scheduler_file) as f:
                return json.load(f)["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    pytest.fail("dask scheduler did not start")


def test_preload_of_dask_worker(tmp_path):
    scheduler_file = str(tmp_path / "scheduler.json")
    log = open(tmp_path / "cli.log", "w")
    # port 0 everywhere: other users of this machine may run Dask too
    procs = [dask_cli("scheduler", "--scheduler-file", scheduler_file,
                      "--host", "127.0.0.1", "--port", "0",
                      "--dashboard-address", "127.0.0.1:0", log=log)]
    try:
        address = scheduler_address(scheduler_file, procs[0])
        for _ in range(2):
            # the address first: `dask worker` takes the first word it does
            # not know (--hpalloc) for the scheduler otherwise
            procs.append(dask_cli("worker", address, "--nthreads", "2",
                                  "--dashboard-address", "127.0.0.1:0",
                                  "--preload", "hpalloc.dask",
                                  "--hpalloc", "threshold=2M",
                                  "--hpalloc", "cache_decay_ms=5000", log=log))
        with Client(address, timeout=TIMEOUT) as client:
            client.wait_for_workers(2, timeout=TIMEOUT)
            check_cluster(client, {"threshold": "2M", "cache_decay_ms": "5000"})
    except BaseException:
        log.flush()
        print(open(tmp_path / "cli.log").read()[-5000:])
        raise
    finally:
        for proc in reversed(procs):
            stop(proc)
        log.close()


@pytest.mark.parametrize("argv, message", [
    (["--hpalloc", "threshold=4Q"], "threshold: invalid value '4Q'"),
    (["--hpalloc", "threshold"], "expected KNOB=VALUE"),
    (["--hpalloc", "bogus=1"], "bogus"),
    (["--hpalloc-adapters", "numpy,bogus"], "expected a comma-separated list of "
     "python numpy numba torch arrow, or all"),
])
def test_preload_refuses_bad_knobs(argv, message):
    """A usage error before any worker starts (no scheduler needed)."""
    proc = subprocess.run([sys.executable, "-m", "dask", "worker",
                           "tcp://127.0.0.1:9", "--preload", "hpalloc.dask", *argv],
                          env=python_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Start worker" not in proc.stderr
