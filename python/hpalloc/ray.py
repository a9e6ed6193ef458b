"""hpalloc on every Ray worker.

One line puts the NumPy arrays, PyTorch CPU tensors and Arrow buffers of
every Ray worker of a job on huge pages:

    import ray, hpalloc.ray
    ray.init(runtime_env=hpalloc.ray.runtime_env(threshold="4M", mode="thp"))
    hpalloc.ray.stats()        # a DataFrame (pandas): a row per hpalloc worker

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
one that goes with this package, appended to the LD_PRELOAD you have):
every large malloc of the worker, whatever library makes it, and Arrow's
default pool switched to the system allocator (ARROW_DEFAULT_MEMORY_POOL=
system, unless you chose one) so Arrow's buffers reach it too.  The path
must be the same on every node.  The merge with what you already set is
hpalloc._engines.worker_environ(), the same as hpalloc.dask's.

What hpalloc cannot serve: Ray's object store.  ray.put() and large task
results are copied into the store's shared memory (plasma, a file in
/dev/shm mapped by the raylet and by every worker), and ray.get() of a NumPy
array on the same node is a read-only view into that mapping (zero copy).
Those pages are the store's: docs/ray.md says what smaps shows for each case.
"""

import os
import sys
import warnings

import hpalloc_activate as _activation

from . import PRELOAD_NAME, _engines, _hpalloc, preload_library, processes as _processes

__all__ = ["runtime_env", "setup_worker", "stats", "MARKER"]

MARKER = "HPALLOC_RAY"
SETUP_HOOK = "hpalloc.ray.setup_worker"


def environ(adapters=None, preload=False, current=None, **knobs):
    """The environment variables runtime_env() sets (checked the same way),
    merged with current (the env_vars you already have: _engines.
    worker_environ): your LD_PRELOAD kept first, your Arrow pool and (with
    adapters=None) your HPALLOC_ADAPTERS kept, a value of yours replaced
    said in a warning.  With preload and no LD_PRELOAD in current, the one
    the node starts the worker with (${LD_PRELOAD}, which Ray expands there)
    is kept first."""
    current = current or {}
    given = adapters is not None or "HPALLOC_ADAPTERS" not in current
    chosen = _engines.checked_adapters(adapters if given else current["HPALLOC_ADAPTERS"])
    chosen = _arrow_or_pool(chosen, current.get(_engines.ARROW_POOL),
                            adapters is None and given)
    extra = {"HPALLOC_ADAPTERS": ",".join(chosen), MARKER: "preload" if preload else "1"}
    library = preload_library() if preload else None
    env = _engines.worker_environ(current, knobs, library, extra,
                                  keep=() if given else ("HPALLOC_ADAPTERS",))
    if preload and _engines.PRELOAD not in current:
        env[_engines.PRELOAD] = "${%s} %s" % (_engines.PRELOAD, library)
    return env


def _arrow_or_pool(chosen, pool, by_default):
    """The adapters, when the user's env_vars name an Arrow pool: Arrow's
    adapter replaces Arrow's default pool in the worker, so a pool you chose
    stays (the adapter left off, said) unless you asked for the adapter
    (then it replaces your pool, said)."""
    if "arrow" not in chosen or not pool or pool == "system":
        return chosen
    if by_default:
        warnings.warn("hpalloc: your %s=%s is kept: the arrow adapter is left off in the "
                      "workers (Arrow's buffers stay in that pool; adapters=... with arrow "
                      "puts them on hpalloc instead)" % (_engines.ARROW_POOL, pool),
                      UserWarning, stacklevel=_engines.caller_level())
        return tuple(a for a in chosen if a != "arrow")
    warnings.warn("hpalloc: the arrow adapter replaces your %s=%s in the workers"
                  % (_engines.ARROW_POOL, pool), UserWarning,
                  stacklevel=_engines.caller_level())
    return chosen


def runtime_env(adapters=None, preload=False, base=None, **knobs):
    """A Ray runtime_env putting every worker's large buffers on hpalloc.

    knobs: hpalloc's knobs (threshold="4M", mode="thp", ...), for the
    workers alone; adapters: as HPALLOC_ADAPTERS (default
    numpy,numba,torch,arrow); preload: the whole worker under
    libhpalloc-preload.so.  base: a runtime_env to merge into: its
    env_vars are kept, hpalloc's library is appended to its LD_PRELOAD
    (or the node's), its ARROW_DEFAULT_MEMORY_POOL and HPALLOC_ADAPTERS
    stay (a pool named there leaves the arrow adapter off unless adapters
    names it), a HPALLOC_<KNOB> of its that a knob given replaces is said
    in a UserWarning; a different worker_process_setup_hook is refused.
    ValueError, with the library's message, for a bad knob or adapter
    list: nothing is sent anywhere."""
    env = dict(base or {})
    hook = env.get("worker_process_setup_hook")
    if hook not in (None, SETUP_HOOK):
        raise ValueError("runtime_env already has worker_process_setup_hook %r; "
                         "call hpalloc.ray.setup_worker() from it and pass "
                         "base without it" % (hook,))
    mine = dict(env.get("env_vars") or {})
    mine.update(environ(adapters=adapters, preload=preload, current=mine, **knobs))
    env["env_vars"] = mine
    env["worker_process_setup_hook"] = SETUP_HOOK
    return env


def setup_worker():
    """Ray's worker_process_setup_hook: the adapters HPALLOC_ADAPTERS names,
    switched on in this worker (NumPy's at once if NumPy is imported, else
    when it is; Numba's, PyTorch's and Arrow's when a task imports them).
    Under the preload library the allocations are already hpalloc's:
    nothing to switch on -- unless another allocator preloaded before it
    (jemalloc, tcmalloc) serves malloc, which this says on stderr in one
    line before switching the adapters on instead."""
    if os.environ.get(MARKER) == "preload":
        owner = _engines.malloc_owner()
        if owner is None or os.path.basename(owner) == PRELOAD_NAME:
            return
        sys.stderr.write("hpalloc: %s serves malloc in this worker (it comes before %s in "
                         "LD_PRELOAD): the adapters %s are switched on instead\n"
                         % (owner, PRELOAD_NAME, ",".join(_activation.chosen())))
    numpy_module = sys.modules.get("hpalloc.numpy")
    if numpy_module is not None and numpy_module.installed():
        return  # activated at start-up already (HPALLOC_NUMPY=1)
    _activation.activate(_activation.chosen())


# ---- reading the workers back ------------------------------------------------------

def node_rows(node=None):
    """This machine's Ray workers started with hpalloc's runtime_env: one
    row each with what the process last published (hpctl stats' entries,
    read by the library), or published False and no counters for a worker
    that never had a huge block (nothing to publish yet).  The library
    finds the workers by MARKER in the environment they started with
    (hp_proc_marked: those ours to read)."""
    entries = {e["pid"]: e for e in _processes()}
    rows = []
    for mark in _hpalloc.marked(MARKER):
        pid = mark["pid"]
        entry = entries.get(pid)
        row = {"node": node, "pid": pid, "comm": mark["comm"] or None,
               "preloaded": mark["value"] == "preload", "published": entry is not None}
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
    (ImportError naming pandas where it is not installed); columns: comm
    (Ray's process title, ray::...), preloaded, published, every counter of
    hpalloc.stats() and every knob's effective value as each worker last
    published them (about every 250 ms while it changes)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    _engines.need_pandas("hpalloc.ray.stats()")  # before any task
    remote = ray.remote(num_cpus=0)(_on_node)
    refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote() for node in ray.nodes() if node["Alive"]]
    rows = [row for node_rows_ in ray.get(refs, timeout=timeout) for row in node_rows_]
    rows.sort(key=lambda r: (r["node"] or "", r["pid"]))
    return _engines.table(rows, ("node", "pid"), "hpalloc.ray.stats()")
