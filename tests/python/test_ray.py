"""hpalloc on Ray workers (issue 37): hpalloc.ray.runtime_env() in
ray.init() of a local cluster (num_cpus=2, no dashboard) puts a 64 MiB NumPy
array and a 64 MiB PyTorch tensor made inside two tasks and one actor on
huge pages, per each worker's own /proc/self/smaps and hpalloc's block; the
same tasks on a cluster without it do not use hpalloc.  hpalloc.ray.stats()
reads every hpalloc worker back.  What Ray's object store does with large
arrays (a read-only view into the store's shared memory, not hpalloc's) is
checked as docs/ray.md says it.  preload=True puts the whole worker under
libhpalloc-preload.so.

Each case runs a driver in a fresh interpreter (Ray keeps one cluster per
driver), with a deadline; the driver prints one JSON line.  Ray comes from
PyPI in make check-ray-venv's venv (required there in CI).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from hp_pytest_automake import need, skip

ray = need("ray")
need("torch", "hpalloc.torch")

import hpalloc  # noqa: E402
import hpalloc.ray  # noqa: E402
import hp_memory  # noqa: E402
from conftest import MiB, python_env  # noqa: E402

SIZE = 64 * MiB
DEADLINE = 300  # one driver: a cluster start (~10 s here), a few tasks

DRIVER = hp_memory.CHILD + r'''
import json, os, sys, threading
import hp_memory
import ray
import hpalloc.ray
case = json.loads(sys.argv[1])
MiB = 1 << 20
SIZE = 64 * MiB

def where(address, nbytes):
    """What the worker's own smaps and hpalloc say of [address, +nbytes)."""
    sys.path.insert(0, os.environ["HP_TEST_PYDIR"])
    import hp_memory
    from hpalloc import _hpalloc
    entries = hp_memory.overlapping(address, nbytes)
    return {"hpalloc": _hpalloc.backing(address)["backend"],
            "huge": hp_memory.settled_huge_bytes(address, nbytes),
            "paths": sorted({e["path"] for e in entries})}

def report():
    """Inside a task or an actor: a new 64 MiB array and tensor."""
    import numpy as np, torch, pyarrow
    import hpalloc, hpalloc.numpy as hpnp
    from hpalloc import _engines
    a = np.ones(SIZE // 8)
    t = torch.ones(SIZE // 8, dtype=torch.float64)
    return {"pid": os.getpid(), "thread": threading.current_thread().name,
            "ld_preload": os.environ.get("LD_PRELOAD"),
            "arrow_pool": pyarrow.default_memory_pool().backend_name,
            "malloc": _engines.malloc_owner(),
            "handler": hpnp.get_handler_name(a), "preloaded": hpalloc.preloaded(),
            "array": where(a.__array_interface__["data"][0], a.nbytes),
            "tensor": where(t.data_ptr(), t.numel() * 8),
            "stats": hpalloc.stats()}

def received(a):
    """An array received from the object store, and a copy of it."""
    import numpy as np
    b = a.copy()
    return {"array": dict(where(a.__array_interface__["data"][0], a.nbytes),
                          writeable=bool(a.flags.writeable), owndata=bool(a.flags.owndata)),
            "copy": where(b.__array_interface__["data"][0], b.nbytes)}

def received_tensor(t):
    return where(t.data_ptr(), t.numel() * 8)

env = {"env_vars": dict(case.get("base_env") or {}, HP_TEST_PYDIR=case["pydir"])}
if case["runtime_env"] is not None:
    env = hpalloc.ray.runtime_env(base=env, **case["runtime_env"])
ray.init(num_cpus=2, include_dashboard=False, runtime_env=env,
         _temp_dir=case["temp_dir"], log_to_driver=False)
out = {}
task = ray.remote(report)

@ray.remote
class Holder:
    def report(self):
        r = report()
        import numpy as np
        self.kept = np.ones(SIZE // 8)   # held for stats()
        return r

# two tasks at once (two CPUs: two workers), then an actor
out["tasks"] = ray.get([task.remote(), task.remote()], timeout=120)
actor = Holder.remote()
out["actor"] = ray.get(actor.report.remote(), timeout=120)
if case.get("store"):
    import numpy as np
    put = ray.put(np.ones(SIZE // 8))
    out["put"] = ray.get(ray.remote(received).remote(put), timeout=120)
    made = ray.remote(lambda: np.ones(SIZE // 8)).remote()
    out["result"] = ray.get(ray.remote(received).remote(made), timeout=120)
    got = ray.get(made, timeout=120)
    out["driver_get"] = {"writeable": bool(got.flags.writeable),
                         "paths": sorted({e["path"] for e in hp_memory.overlapping(
                             got.__array_interface__["data"][0], got.nbytes)})}
    import torch
    tensor = ray.remote(lambda: torch.ones(SIZE // 8, dtype=torch.float64)).remote()
    out["tensor_received"] = ray.get(ray.remote(received_tensor).remote(tensor), timeout=120)
if case.get("stats"):
    import time
    deadline = time.monotonic() + 20
    while True:   # the actor's entry: published by its janitor (~250 ms)
        table = hpalloc.ray.stats()
        rows = table.reset_index().to_dict("records")
        if any(r["pid"] == out["actor"]["pid"] and r["published"] and
               r.get("numpy_huge_bytes", 0) >= SIZE for r in rows) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    out["stats"] = [{k: (None if v != v else v) for k, v in r.items()
                     if k in ("node", "pid", "comm", "preloaded", "published",
                              "numpy_huge_bytes", "torch_huge_bytes",
                              "preload_huge_bytes", "threshold", "mode")}
                    for r in rows]
if case.get("logs"):   # what the workers said on stderr
    import glob
    out["worker_stderr"] = "".join(open(p, errors="replace").read() for p in glob.glob(
        os.path.join(case["temp_dir"], "session_latest", "logs", "worker-*.err")))
ray.shutdown()
print(json.dumps(out))
'''


def drive(runtime_env, driver_env=None, **case):
    temp_dir = tempfile.mkdtemp(prefix="hpray.", dir="/tmp")  # Ray's sockets: short paths
    case.update(runtime_env=runtime_env, temp_dir=temp_dir,
                pydir=os.path.dirname(hp_memory.__file__))
    env = python_env(RAY_DISABLE_USAGE_STATS="1", HP_TEST_PYDIR=case["pydir"],
                     **(driver_env or {}))
    env.pop("HPALLOC_PRELOAD_PATH", None)
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(case)], env=env,
                              capture_output=True, text=True, timeout=DEADLINE)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def on_hpalloc(where, what):
    assert where["hpalloc"] in ("thp", "hugetlb"), (what, where)
    assert where["huge"] >= SIZE * 3 // 4, (what, where)


def reports(out):
    return [("task %d" % i, r) for i, r in enumerate(out["tasks"])] + [("actor", out["actor"])]


def test_runtime_env_puts_tasks_and_actors_on_huge_pages():
    out = drive({"threshold": "4M"}, stats=True)
    for who, r in reports(out):
        assert r["handler"] == "hpalloc", (who, r)
        on_hpalloc(r["array"], "%s: NumPy array" % who)
        on_hpalloc(r["tensor"], "%s: torch tensor" % who)
        assert r["stats"]["numpy_huge_bytes"] >= SIZE and r["stats"]["torch_huge_bytes"] >= SIZE
        assert not r["preloaded"], who
        assert r["thread"] == "MainThread", (who, r["thread"])
    # two workers ran the two tasks; stats() finds every hpalloc worker
    assert len({r["pid"] for _, r in reports(out)}) == 3
    rows = {r["pid"]: r for r in out["stats"]}
    assert {r["pid"] for _, r in reports(out)} <= set(rows), rows
    actor = rows[out["actor"]["pid"]]
    assert actor["published"] and actor["numpy_huge_bytes"] >= SIZE, actor
    assert actor["comm"].startswith("ray::"), actor
    assert actor["threshold"] == "4M", actor   # the knob reached the worker (env)
    assert not actor["preloaded"]


def test_without_runtime_env_the_same_tasks_do_not_use_hpalloc():
    out = drive(None)
    for who, r in reports(out):
        assert r["handler"] == "default_allocator", (who, r)
        assert r["array"]["hpalloc"] == "small" and r["tensor"]["hpalloc"] == "small", (who, r)
        assert r["stats"]["numpy_huge_bytes"] == 0 and r["stats"]["torch_huge_bytes"] == 0


def test_object_store_buffers_are_not_hpalloc():
    """What docs/ray.md says of the object store: an array from ray.put()
    or a task's result is, in the worker that gets it (and in the driver),
    a read-only view into the store's shared memory (/dev/shm/plasma*), not
    an hpalloc block; a copy of it is hpalloc's.  A tensor received goes
    through torch's unpickler, not hpalloc.torch's allocator."""
    out = drive({}, store=True)
    for case in ("put", "result"):
        array, copy = out[case]["array"], out[case]["copy"]
        assert array["hpalloc"] == "small" and not array["writeable"], (case, array)
        assert not array["owndata"], (case, array)
        assert all(p.startswith("/dev/shm/plasma") for p in array["paths"]), (case, array)
        on_hpalloc(copy, "%s: copy" % case)
    assert not out["driver_get"]["writeable"]
    assert all(p.startswith("/dev/shm/plasma") for p in out["driver_get"]["paths"])
    assert out["tensor_received"]["hpalloc"] == "small", out["tensor_received"]


def test_preload_runtime_env_serves_every_malloc():
    """preload=True: the worker runs under libhpalloc-preload.so; its
    arrays and tensors are the preload's (origin preload), a tensor
    received from another task too."""
    out = drive({"preload": True}, store=True)
    for who, r in reports(out):
        assert r["preloaded"], who
        assert os.path.basename(r["malloc"]) == "libhpalloc-preload.so", (who, r["malloc"])
        on_hpalloc(r["array"], "%s: NumPy array" % who)
        on_hpalloc(r["tensor"], "%s: torch tensor" % who)
        assert r["stats"]["preload_huge_bytes"] >= 2 * SIZE, (who, r["stats"])
        assert r["handler"] == "default_allocator", who   # NumPy's handler, on malloc
    on_hpalloc(out["tensor_received"], "tensor received under the preload")


def test_bad_knobs_and_adapters_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="threshold.*'4Q'.*accepted"):
        hpalloc.ray.runtime_env(threshold="4Q")
    with pytest.raises(ValueError, match="refused adapters 'numpy,bogus'"):
        hpalloc.ray.runtime_env(adapters="numpy,bogus")
    with pytest.raises(ValueError, match="worker_process_setup_hook"):
        hpalloc.ray.runtime_env(base={"worker_process_setup_hook": "mine.setup"})
    env = hpalloc.ray.runtime_env(base={"env_vars": {"A": "1"}, "pip": ["x"]},
                                  threshold="4096K", adapters=["numpy", "torch"])
    assert env == {"pip": ["x"], "worker_process_setup_hook": "hpalloc.ray.setup_worker",
                   "env_vars": {"A": "1", "HPALLOC_THRESHOLD": "4M",
                                "HPALLOC_ADAPTERS": "numpy,torch", "HPALLOC_RAY": "1"}}
    pre = hpalloc.ray.runtime_env(preload=True)["env_vars"]
    # appended to the LD_PRELOAD the node starts the worker with (Ray expands it)
    assert pre["LD_PRELOAD"] == "${LD_PRELOAD} " + hpalloc.preload_library()
    assert os.path.basename(hpalloc.preload_library()) == "libhpalloc-preload.so"
    assert pre["ARROW_DEFAULT_MEMORY_POOL"] == "system"


def test_stats_needs_pandas_and_says_so(monkeypatch):
    """Issue 46: stats() returns one type, a pandas DataFrame (docs/ray.md);
    without pandas it says so before asking the cluster anything (it
    returned a list of dicts then)."""
    monkeypatch.setitem(sys.modules, "pandas", None)  # import fails
    with pytest.raises(ImportError, match=r"hpalloc\.ray\.stats\(\) returns a pandas "
                       r"DataFrame: install pandas"):
        hpalloc.ray.stats()


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def test_runtime_env_merges_with_the_users_settings():
    """Issue 46: base's LD_PRELOAD (jemalloc) kept first with hpalloc's
    library appended, its Arrow pool and adapters kept, a knob of its that
    one given replaces said in a warning naming both (the merge is
    hpalloc._engines.worker_environ, hpalloc.dask's too).  Before, the base
    came back with hpalloc's preload alone and the pool "system"."""
    base = {"env_vars": {"LD_PRELOAD": "libjemalloc.so.2", "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
                         "HPALLOC_ADAPTERS": "numpy", "HPALLOC_THRESHOLD": "8M", "A": "1"}}
    with pytest.warns(UserWarning, match="replaced your HPALLOC_THRESHOLD=8M with 4M"):
        env = hpalloc.ray.runtime_env(preload=True, base=base, threshold="4M")
    assert env["env_vars"] == {
        "LD_PRELOAD": "libjemalloc.so.2 " + hpalloc.preload_library(),
        "ARROW_DEFAULT_MEMORY_POOL": "jemalloc", "HPALLOC_ADAPTERS": "numpy",
        "HPALLOC_THRESHOLD": "4M", "HPALLOC_RAY": "preload", "A": "1"}, env
    assert base["env_vars"]["HPALLOC_THRESHOLD"] == "8M"   # the caller's dict unchanged
    # given adapters win (said), hpalloc's library listed once
    again = dict(base["env_vars"], LD_PRELOAD=env["env_vars"]["LD_PRELOAD"])
    with pytest.warns(UserWarning, match="HPALLOC_ADAPTERS=numpy with numpy,torch"):
        env = hpalloc.ray.runtime_env(preload=True, base={"env_vars": again},
                                      adapters="numpy,torch", threshold="8M")
    assert env["env_vars"]["LD_PRELOAD"] == "libjemalloc.so.2 " + hpalloc.preload_library()
    with pytest.raises(ValueError, match="refused adapters 'numpy,bogus'"):
        hpalloc.ray.runtime_env(base={"env_vars": {"HPALLOC_ADAPTERS": "numpy,bogus"}})
    # a pool of the user's and the arrow adapter asked for: it replaces the pool, said
    with pytest.warns(UserWarning, match="arrow adapter replaces your ARROW_DEFAULT_MEMORY_POOL"):
        env = hpalloc.ray.runtime_env(adapters="numpy,arrow", base={"env_vars": {
            "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}})
    assert env["env_vars"]["HPALLOC_ADAPTERS"] == "numpy,arrow"
    assert env["env_vars"]["ARROW_DEFAULT_MEMORY_POOL"] == "mimalloc"


def test_preload_beside_the_users_jemalloc():
    """Issue 46, on a cluster: the node runs with LD_PRELOAD=jemalloc (the
    driver's environment, which the local cluster's workers inherit) and
    the base asks Arrow for jemalloc's pool; runtime_env(preload=True)
    keeps both: the worker starts with jemalloc and then hpalloc's library
    in LD_PRELOAD, and Arrow's pool is jemalloc (the arrow adapter, which
    would replace it, left off and said so).  jemalloc, first, serves
    malloc there (the worker's dynamic linker says so), so setup_worker
    says that on the worker's stderr and switches the adapters on instead:
    the arrays and tensors are hpalloc's all the same."""
    if not os.path.exists(JEMALLOC):
        skip("jemalloc", "%s is not installed (Debian: libjemalloc2)" % JEMALLOC)
    with pytest.warns(UserWarning, match="ARROW_DEFAULT_MEMORY_POOL=jemalloc is kept: the arrow "
                      "adapter is left off"):
        env = hpalloc.ray.runtime_env(preload=True, base={"env_vars": {
            "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}})
    assert env["env_vars"]["HPALLOC_ADAPTERS"] == "numpy,numba,torch", env
    out = drive({"preload": True}, driver_env={"LD_PRELOAD": JEMALLOC},
                base_env={"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}, logs=True)
    for who, r in reports(out):
        assert [os.path.basename(p) for p in r["ld_preload"].split()] == [
            "libjemalloc.so.2", "libhpalloc-preload.so"], (who, r["ld_preload"])
        assert r["ld_preload"].split()[0] == JEMALLOC, (who, r["ld_preload"])
        assert r["arrow_pool"] == "jemalloc", (who, r["arrow_pool"])
        assert r["preloaded"] and os.path.realpath(r["malloc"]) == os.path.realpath(JEMALLOC), \
            (who, r["malloc"])
        assert r["handler"] == "hpalloc", (who, r)
        on_hpalloc(r["array"], "%s: NumPy array" % who)
        on_hpalloc(r["tensor"], "%s: torch tensor" % who)
    assert "serves malloc in this worker (it comes before libhpalloc-preload.so in " \
        "LD_PRELOAD): the adapters numpy,numba,torch are switched on instead" \
        in out["worker_stderr"], out["worker_stderr"][-3000:]
