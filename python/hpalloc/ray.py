"""hpalloc on every Ray worker.

One line puts the NumPy arrays, PyTorch CPU tensors and Arrow buffers of
every Ray worker of a job on huge pages:

    import ray, hpalloc.ray
    ray.init(runtime_env=hpalloc.ray.runtime_env(threshold="4M", mode="thp"))
    hpalloc.ray.stats()        # one row per hpalloc worker, every node

runtime_env() returns a Ray runtime environment (a dict): its env_vars carry
the knobs (HPALLOC_<KNOB>, checked by the library's parser before anything
is sent, exactly as HpallocPlugin checks them), the adapters
(HPALLOC_ADAPTERS: same names and default as `hpctl run`) and a marker
(HPALLOC_RAY) that stats() finds the workers by; its
worker_process_setup_hook, hpalloc.ray.setup_worker, switches the adapters
on in each worker process before it runs a task, through the same
activation code `hpctl run` uses (hpalloc_activate).  The same dict works as
a job's runtime_env (`ray job submit --runtime-env-json`, or
`.options(runtime_env=...)` of a task or actor); base= merges it into one
you already have.

runtime_env(preload=True) puts the whole worker process under
libhpalloc-preload.so instead (LD_PRELOAD, hpalloc.preload_library(): the
one that goes with this package): every large malloc of the worker, whatever
library makes it, and Arrow's default pool switched to the system allocator
(ARROW_DEFAULT_MEMORY_POOL=system) so Arrow's buffers reach it too.  The
path must be the same on every node.

What hpalloc cannot serve: Ray's object store.  ray.put() and large task
results are copied into the store's shared memory (plasma, a file in
/dev/shm mapped by the raylet and by every worker), and ray.get() of a NumPy
array on the same node is a read-only view into that mapping (zero copy).
Those pages are the store's: docs/ray.md says what smaps shows for each case.
"""

import os

import hpalloc_activate as _activation

from . import _engines, preload_library, processes as _processes

__all__ = ["runtime_env", "setup_worker", "stats", "MARKER"]

MARKER = "HPALLOC_RAY"
SETUP_HOOK = "hpalloc.ray.setup_worker"


def environ(adapters=None, preload=False, **knobs):
    """The environment variables runtime_env() sets (checked the same way)."""
    env = _engines.knob_environ(knobs)
    env["HPALLOC_ADAPTERS"] = ",".join(_engines.checked_adapters(adapters))
    env[MARKER] = "preload" if preload else "1"
    if preload:
        env["LD_PRELOAD"] = preload_library()
        env["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    return env


def runtime_env(adapters=None, preload=False, base=None, **knobs):
    """A Ray runtime_env putting every worker's large buffers on hpalloc.

    knobs: hpalloc's knobs (threshold="4M", mode="thp", ...), for the
    workers alone; adapters: as HPALLOC_ADAPTERS (default
    numpy,numba,torch,arrow); preload: the whole worker under
    libhpalloc-preload.so.  base: a runtime_env to merge into (its
    env_vars are kept, ours win; a different worker_process_setup_hook is
    refused).  ValueError, with the library's message, for a bad knob or
    adapter list: nothing is sent anywhere."""
    env = dict(base or {})
    hook = env.get("worker_process_setup_hook")
    if hook not in (None, SETUP_HOOK):
        raise ValueError("runtime_env already has worker_process_setup_hook %r; "
                         "call hpalloc.ray.setup_worker() from it and pass "
                         "base without it" % (hook,))
    env["env_vars"] = dict(env.get("env_vars") or {},
                           **environ(adapters=adapters, preload=preload, **knobs))
    env["worker_process_setup_hook"] = SETUP_HOOK
    return env


def setup_worker():
    """Ray's worker_process_setup_hook: the adapters HPALLOC_ADAPTERS names,
    switched on in this worker (NumPy's at once if NumPy is imported, else
    when it is; Numba's, PyTorch's and Arrow's when a task imports them).
    Under the preload library the allocations are already hpalloc's:
    nothing to switch on (Arrow's pool is the system's, see runtime_env)."""
    if os.environ.get(MARKER) == "preload":
        return
    numpy_module = __import__("sys").modules.get("hpalloc.numpy")
    if numpy_module is not None and numpy_module.installed():
        return  # activated at start-up already (HPALLOC_NUMPY=1)
    _activation.activate(_activation.chosen())


# ---- reading the workers back ------------------------------------------------------

def _marked(pid):
    """The value of MARKER in process pid's environment (as it started), or
    None (not an hpalloc worker, gone, or not ours to read)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    prefix = (MARKER + "=").encode()
    for var in env:
        if var.startswith(prefix):
            return var[len(prefix):].decode(errors="replace")
    return None


def _comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def node_rows(node=None):
    """This machine's Ray workers started with hpalloc's runtime_env: one
    row each with what the process last published (hpctl stats' entries,
    read by the library), or published False and no counters for a worker
    that never had a huge block (nothing to publish yet)."""
    entries = {e["pid"]: e for e in _processes()}
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        mark = _marked(pid)
        if mark is None:
            continue
        entry = entries.get(pid)
        row = {"node": node, "pid": pid, "comm": _comm(pid),
               "preloaded": mark == "preload", "published": entry is not None}
        if entry is not None:
            row.update(entry["stats"])
            row.update({k: v["value"] for k, v in entry["knobs"].items()})
        rows.append(row)
    return rows


def _on_node():
    import ray
    return node_rows(ray.util.get_node_ip_address())


def stats(timeout=60):
    """Every hpalloc Ray worker of the cluster (ray.init() first): a task
    pinned to each alive node (no CPU asked, so busy nodes answer too)
    reads that node's workers.  A pandas DataFrame indexed by (node, pid)
    when pandas is installed, else a list of dicts.  Columns: comm (Ray's
    process title, ray::...), preloaded, published, every counter of
    hpalloc.stats() and every knob's effective value as each worker last
    published them (about every 250 ms while it changes)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    remote = ray.remote(num_cpus=0)(_on_node)
    refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote() for node in ray.nodes() if node["Alive"]]
    rows = [row for node_rows_ in ray.get(refs, timeout=timeout) for row in node_rows_]
    rows.sort(key=lambda r: (r["node"] or "", r["pid"]))
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows).set_index(["node", "pid"])
