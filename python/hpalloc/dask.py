"""hpalloc on every Dask worker.

A worker plugin, for clusters you start from Python:

    from dask.distributed import Client
    import hpalloc.dask
    client = Client(cluster)
    client.register_plugin(hpalloc.dask.HpallocPlugin(threshold="4M"))
    hpalloc.dask.stats(client)      # every worker's counters and knobs (pandas)

(client.register_worker_plugin on distributed < 2023.9, which has no
register_plugin; hpalloc.dask.register(client, plugin) calls whichever the
installed distributed has), and the same as a preload module, for workers
started from the command line:

    dask worker tcp://scheduler:8786 --preload hpalloc.dask --hpalloc threshold=4M

The whole worker process under libhpalloc-preload.so (every large malloc,
whatever library makes it), started so by its nanny, which is what sets a
worker's environment before the process exists:

    LocalCluster(preload_nanny=["hpalloc.dask"], preload_nanny_argv=["--hpalloc", "threshold=4M"])
    HPALLOC_THRESHOLD=4M dask worker tcp://scheduler:8786 --preload-nanny hpalloc.dask
    hpalloc.dask.register(client, hpalloc.dask.HpallocPreload(threshold="4M"))  # restarts them
    dask.config.set(hpalloc.dask.preload_config(threshold="4M"))  # pre-spawn-environ

Adapters.  HpallocPlugin(adapters=...) / --hpalloc-adapters choose, as
HPALLOC_ADAPTERS does for `hpctl run` (same names, same "all", same
default: numpy,numba,torch,arrow; the raw domain "python" is opt-in), which
adapters the workers switch on: NumPy's at once, Numba's and PyTorch's
when a task first imports numba or torch (at once if the worker already
has), through the same activation code `hpctl run` uses (hpalloc_activate),
so an adapter that does not take is said on the worker's stderr in one
line and the worker runs on.  Teardown uninstalls what the plugin
installed (the raw domain stays: its wrapper is for the life of the
process).

Memory limits.  On a worker with a memory limit the plugin also sets the
knob cache_rss_max (unless given) to that limit times the lowest fraction at
which Dask's memory manager acts (distributed.worker.memory.target, else
spill, pause, terminate): Dask judges a worker by its process memory, which
counts the blocks hpalloc keeps for reuse, so above that bound hpalloc gives
them back (and maps nothing new on top of them) before the worker would
spill, pause or be restarted where it would not under NumPy's default.

On each worker: NumPy's data-memory handler becomes hpalloc's for the tasks
(in every executor thread, also threads already running), and for the
worker's event loop, where Dask receives data from other workers (see
"Transfers" below); the given knobs become that worker process's own
overrides (hpalloc.set), nothing else changes.  Knob values are validated by
the library before anything is sent or changed: an invalid one raises
ValueError (the plugin) or is a usage error (the preload), with the
library's message.

Transfers.  distributed reads every incoming message into one buffer from
distributed.comm.utils.host_array(), which is numpy.empty(n, "u1"), in the
worker's event loop; an array received from another worker is a view into
that buffer (protocol/numpy.py: np.ndarray(buffer=frame), no copy), or, when
the frame was compressed (lz4), a NumPy copy of the decompressed bytes made
during deserialisation, in the same asyncio context or in the offload
thread with a copy of it.  Both are NumPy allocations under the handler of
the asyncio task doing the read, and an asyncio task starts with a copy of
the context that created it.  So the plugin also installs an asyncio task
factory on the worker's loop that selects hpalloc in the context of every
task created from then on: transfers that start after the plugin is set up
land on hpalloc.  Connections and tasks that were already running keep
their handler.
"""

import asyncio
import contextvars
import importlib
import logging
import os
import sys
import threading

import click
import hpalloc_activate as _activation
from distributed import WorkerPlugin
from distributed.diagnostics.plugin import NannyPlugin

from . import _engines, _hpalloc, config as _config, parse_knob, preload_library, preloaded, \
    reset, set as _set, stats as _stats
from . import numpy as _numpy

__all__ = ["HpallocPlugin", "HpallocPreload", "dask_setup", "stats", "register",
           "unregister", "preload_environ", "preload_config", "PLUGIN_NAME",
           "PRELOAD_PLUGIN_NAME"]

PLUGIN_NAME = "hpalloc"
PRELOAD_PLUGIN_NAME = "hpalloc-preload"
PRE_SPAWN = "distributed.nanny.pre-spawn-environ"
logger = logging.getLogger("hpalloc.dask")


_canonical = _engines.canonical_knobs
_adapters = _engines.checked_adapters


# ---- the worker side ----------------------------------------------------

def _select_hpalloc():
    if _numpy.installed():
        _hpalloc.set_handler(_hpalloc.handler())


# The handler every task of this worker process starts with: hpalloc's while
# a plugin is set up, NumPy's default after its teardown; None until a
# plugin was ever set up here.
_task_handler = None


def _run_task(fn, /, *args, **kwargs):
    """Executor threads keep NumPy's handler in their own context, and may
    have started before the plugin (or have been started while it was set up
    and outlive it): select the current choice before each task (one
    ContextVar set)."""
    if _task_handler is not None:
        _hpalloc.set_handler(_task_handler)
    return fn(*args, **kwargs)


def _numpy_default_handler():
    """NumPy's own handler: the value of its ContextVar in an empty context."""
    return contextvars.Context().run(_hpalloc.get_handler)


def _adapter_installed(adapter):
    """Whether hpalloc.<adapter> is imported and installed (never imports
    it: that would import numba or torch)."""
    module = sys.modules.get("hpalloc." + adapter)
    return module is not None and module.installed()


# Where Dask's memory manager starts acting on a worker, as fractions of its
# memory limit: managed memory spilled to disk (target), process memory
# spilled (spill), the worker paused (pause), the nanny restarting it
# (terminate).  Each may be switched off (False).
_MEMORY_FRACTIONS = ("target", "spill", "pause", "terminate")


def _rss_bound(worker):
    """cache_rss_max for this worker: its memory limit times the lowest
    fraction at which Dask acts, so that memory hpalloc keeps for reuse is
    given back before the worker spills, pauses or restarts where it
    would not under NumPy's default; None without a memory limit (or with
    every fraction off)."""
    import dask
    manager = getattr(worker, "memory_manager", None)
    limit = getattr(manager, "memory_limit", None) or getattr(worker, "memory_limit", None)
    if not limit:
        return None
    fractions = []
    for name in _MEMORY_FRACTIONS:
        value = getattr(manager, "memory_%s_fraction" % name, None)
        if value is None:
            value = dask.config.get("distributed.worker.memory." + name, False)
        if value:
            fractions.append(float(value))
    return int(limit * min(fractions)) if fractions else None


class _Activation:
    """What a plugin changed in its worker process, so teardown can put it
    back: knob overrides, the handler of tasks, the loop's task factory,
    the other adapters and their import hook."""

    def __init__(self):
        self.knobs = []
        self.loop = None
        self.previous_factory = None
        self.adapters = ()
        self.had = set()
        self.trigger = None
        self.numpy = False

    def apply(self, worker, knobs, adapters):
        bound = _rss_bound(worker)
        if bound is not None and "cache_rss_max" not in knobs:
            knobs = dict(knobs, cache_rss_max=str(bound))
        for name, value in knobs.items():
            _set(name, value)
            self.knobs.append(name)
        if "numpy" in adapters:
            self._numpy(worker)
        # the others as `hpctl run` does (numpy's is the plugin's own, above)
        self.adapters = tuple(a for a in adapters if a != "numpy")
        self.had = {a for a in self.adapters if _adapter_installed(a)}
        self.trigger = _activation.activate(self.adapters)

    def _numpy(self, worker):
        global _task_handler
        self.numpy = True
        _numpy.install()
        _task_handler = _hpalloc.handler()
        for executor in getattr(worker, "executors", {}).values():
            _wrap_executor(executor)
        self._hook_loop()

    def _hook_loop(self):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        previous = loop.get_task_factory()

        def task_factory(loop, coro, context=None, **kwargs):
            if context is None:
                context = contextvars.copy_context()
            context.run(_select_hpalloc)
            if previous is None:
                return asyncio.Task(coro, loop=loop, context=context, **kwargs)
            # a task created inside context.run copies that context
            return context.run(previous, loop, coro, **kwargs)

        loop.set_task_factory(task_factory)
        self.loop, self.previous_factory = loop, previous

    def undo(self):
        global _task_handler
        if self.trigger is not None and self.trigger in sys.meta_path:
            sys.meta_path.remove(self.trigger)
        self.trigger = None
        for adapter in self.adapters:
            # the raw domain cannot go (hpalloc.python: life of the process)
            if adapter != "python" and adapter not in self.had and \
                    _adapter_installed(adapter):
                importlib.import_module("hpalloc." + adapter).uninstall()
        self.adapters = ()
        if self.loop is not None:
            self.loop.set_task_factory(self.previous_factory)
            self.loop = None
        if self.numpy:
            _numpy.uninstall()
            _task_handler = _numpy_default_handler()
            self.numpy = False
        for name in self.knobs:
            reset(name)
        self.knobs = []


def _wrap_executor(executor):
    """Every task submitted to executor runs through _run_task (the wrapper
    stays after teardown, to give tasks NumPy's default back)."""
    submit = executor.submit
    if getattr(submit, "_hpalloc_wrapper", False):
        return

    def submit_with_handler(fn, /, *args, **kwargs):
        return submit(_run_task, fn, *args, **kwargs)

    submit_with_handler._hpalloc_wrapper = True
    executor.submit = submit_with_handler


class HpallocPlugin(WorkerPlugin):
    """Installs hpalloc in every worker (current and future): NumPy's
    handler and the other adapters chosen, and applies the given knob
    values to each worker process only.

        client.register_plugin(HpallocPlugin(threshold="4M", mode="thp"))
        client.register_plugin(HpallocPlugin(adapters="numpy,torch"))

    adapters: as HPALLOC_ADAPTERS (a string, or a list of names; default
    numpy,numba,torch,arrow).  Values are checked here, before anything is sent
    to a worker (ValueError with the library's message), and again on each
    worker before it changes anything."""

    name = PLUGIN_NAME

    def __init__(self, adapters=None, **knobs):
        self.adapters = _adapters(adapters)
        self.knobs = _canonical(knobs)
        self._activation = None

    # Checked again each time the plugin is sent (knobs changed after
    # __init__ fail the client's register_plugin, nothing is sent) and when
    # a worker receives it (that worker's library decides, before
    # distributed replaces a previous hpalloc plugin or stores this one).
    def __getstate__(self):
        return {"knobs": _canonical(self.knobs), "adapters": _adapters(self.adapters)}

    def __setstate__(self, state):
        self.knobs = _canonical(state["knobs"])
        self.adapters = _adapters(state.get("adapters"))
        self._activation = None

    def setup(self, worker):
        self._activation = _Activation()
        self._activation.apply(worker, self.knobs, self.adapters)
        logger.info("hpalloc installed in worker %s (adapters %s, knobs %s)",
                    getattr(worker, "address", "?"), ",".join(self.adapters),
                    self.knobs or "unchanged")

    def teardown(self, worker):
        if self._activation is not None:
            self._activation.undo()
            self._activation = None


# ---- the whole worker process under libhpalloc-preload.so --------------------
#
# A WorkerPlugin runs in a worker process that already runs: too late for
# LD_PRELOAD, which the dynamic linker reads when a process starts.  The
# nanny starts the worker process (multiprocessing's spawn: a new
# interpreter whose environment is the nanny process's at that moment;
# distributed.nanny.environ is applied inside the new process, too late,
# distributed#5279).  So the preload goes with the spawn: through the
# configuration distributed.nanny.pre-spawn-environ, which the nanny puts
# into its own process's environment before it spawns (preload_config, for
# `dask worker`'s own configuration), or, for a nanny preload (`dask worker
# --preload-nanny hpalloc.dask`, LocalCluster(preload_nanny=[...])) and a
# NannyPlugin that restarts the workers of a running cluster
# (HpallocPreload), into the spawn alone: see _spawn_hook below.

_env_name = _engines.env_name


def preload_environ(**knobs):
    """The environment that puts a worker process under the preload library
    with these knobs (each checked by the library: ValueError naming every
    refused one), merged with this process's (_engines.worker_environ, as
    hpalloc.ray does): LD_PRELOAD (hpalloc.preload_library() appended to
    what LD_PRELOAD holds), HPALLOC_<KNOB> for each knob, and
    ARROW_DEFAULT_MEMORY_POOL=system, unless one is set, so that Arrow's
    buffers, which its own pool (jemalloc, mimalloc) would keep from malloc,
    reach it too."""
    return _engines.worker_environ(os.environ, knobs, preload_library())


def preload_config(**knobs):
    """{"distributed.nanny.pre-spawn-environ": ...}: the current value of
    that setting (MALLOC_TRIM_THRESHOLD_ ...) with the preload's variables
    merged in (as preload_environ, over this process's environment and that
    setting), for a `dask worker`'s configuration:

        with dask.config.set(hpalloc.dask.preload_config(threshold="4M")):
            ...

    The nanny puts pre-spawn-environ into the environment of the process it
    runs in and leaves it there: around a LocalCluster, whose nannies run
    in your process, use preload_nanny=["hpalloc.dask"] instead."""
    import dask
    current = dict(dask.config.get(PRE_SPAWN, default={}) or {})
    env = _engines.worker_environ(dict(os.environ, **current), knobs, preload_library())
    return {PRE_SPAWN: dict(current, **env)}


def _env_knobs_checked(environ):
    """HPALLOC_<KNOB> values of environ that the library refuses, said as
    one ValueError (the nanny would start workers that ignore them)."""
    errors = []
    for knob in _config():
        value = environ.get(_env_name(knob))
        if value is None:
            continue
        try:
            parse_knob(knob, value)
        except ValueError as exc:
            errors.append("%s=%s: %s" % (_env_name(knob), value, exc))
    if errors:
        raise ValueError("hpalloc: refused knob value%s in the environment: %s"
                         % ("s" if len(errors) > 1 else "", "; ".join(errors)))


# ---- the spawn of a preloaded worker --------------------------------------------
#
# The nanny's worker process is spawned by multiprocessing (spawn: a new
# interpreter, fork+exec in multiprocessing.util.spawnv_passfds) with the
# environment of the nanny's process, which for a LocalCluster is the
# user's.  Setting LD_PRELOAD and HPALLOC_* there for the spawn (what the
# nanny does with pre-spawn-environ) puts them, for as long as it takes, in
# the environment of every other thread of that process too: a subprocess
# one of them starts meanwhile inherits them, and putting the old values
# back overwrites a change made meanwhile.  So the environment is never
# changed: the spawn of a worker whose nanny hpalloc set up runs the
# interpreter through env(1) with the preload's variables as its arguments
# (`env LD_PRELOAD=... HPALLOC_...=... python -c ...`), in that spawn alone.
# The spawn is known by a token in the nanny's env (distributed.nanny.
# environ, which reaches the worker's own environment, harmless), read from
# the multiprocessing Process being started (its target: distributed's
# partial of WorkerProcess._run, with env=); a thread-local hands the
# variables from there (SpawnProcess._Popen, the spawning thread) to
# spawnv_passfds in the same thread.  Any other process multiprocessing
# starts is started as it would be.

_SPAWN_TOKEN = "_HPALLOC_DASK_SPAWN"
_ENV_PROGRAM = "/usr/bin/env"
_spawn_lock = threading.Lock()
_spawn_knobs = {}              # token -> canonical knobs of that nanny's workers
_spawning = threading.local()  # .env: the variables of the spawn under way here
_hooked = False
_tokens = 0


def _spawn_token_of(process_obj):
    target = (getattr(process_obj, "_args", None) or (None,))[0]
    env = getattr(target, "keywords", {}).get("env")
    return env.get(_SPAWN_TOKEN) if isinstance(env, dict) else None


def _spawn_environ(knobs):
    """The preload's variables for a worker spawned now from this process
    (its environment, which distributed set pre-spawn-environ in)."""
    return _engines.worker_environ(os.environ, knobs, preload_library())


def _hook_spawn():
    """Install the two wrappers, once per process."""
    global _hooked
    import multiprocessing.context as mp_context
    import multiprocessing.util as mp_util
    with _spawn_lock:
        if _hooked:
            return
        popen, spawnv = mp_context.SpawnProcess._Popen, mp_util.spawnv_passfds

        def _Popen(process_obj):
            token = _spawn_token_of(process_obj)
            with _spawn_lock:
                knobs = _spawn_knobs.get(token) if token else None
            if knobs is None:
                return popen(process_obj)
            _spawning.env = _spawn_environ(knobs)
            try:
                return popen(process_obj)
            finally:
                _spawning.env = None

        def spawnv_passfds(path, args, passfds):
            env = getattr(_spawning, "env", None)
            if env:
                _spawning.env = None
                args = [_ENV_PROGRAM] + ["%s=%s" % kv for kv in env.items()] + \
                    [os.fsdecode(path)] + list(args[1:])
                # the same type as multiprocessing's (bytes from 3.11 on)
                path = os.fsencode(_ENV_PROGRAM) if isinstance(path, bytes) else _ENV_PROGRAM
            return spawnv(path, args, passfds)

        mp_context.SpawnProcess._Popen = staticmethod(_Popen)
        mp_util.spawnv_passfds = spawnv_passfds
        _hooked = True


def _nanny_env(nanny):
    """The nanny's env (distributed.nanny.environ, handed to its worker's
    spawn), where it spawns with multiprocessing's spawn method."""
    import dask
    env = getattr(nanny, "env", None)
    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    if not isinstance(env, dict) or method != "spawn":
        raise RuntimeError("hpalloc: cannot start this nanny's worker under the preload "
                           "library (distributed.worker.multiprocessing-method %r, nanny "
                           "env %s): use spawn, or hpalloc.dask.preload_config() in the "
                           "worker's configuration" % (method, type(env).__name__))
    return env


def _preload_nanny(nanny, knobs):
    """Make the nanny start its worker under the preload library with
    knobs (and, on a worker with a memory limit, cache_rss_max as the
    plugin sets it): checked, and merged with this process's environment
    (warning of what it replaces), now; applied to each spawn of this
    nanny's worker alone, until _unpreload_nanny(nanny, what this
    returns)."""
    knobs = dict(knobs)
    _env_knobs_checked(dict(os.environ, **_engines.knob_environ(knobs)))
    bound = _rss_bound(nanny)
    if bound is not None and "cache_rss_max" not in knobs and \
            _env_name("cache_rss_max") not in os.environ:
        knobs["cache_rss_max"] = str(bound)
    _spawn_environ(knobs)   # refused knobs, warnings: here, not in the spawn
    env = _nanny_env(nanny)
    _hook_spawn()
    global _tokens
    with _spawn_lock:
        _tokens += 1
        token = "%d.%d" % (os.getpid(), _tokens)
        _spawn_knobs[token] = knobs
    previous = env.get(_SPAWN_TOKEN)
    env[_SPAWN_TOKEN] = token
    return token, previous


def _unpreload_nanny(nanny, undo):
    """Back to what the nanny spawned with before _preload_nanny() (a
    nanny preload's setting, when a plugin's is taken off)."""
    token, previous = undo
    with _spawn_lock:
        _spawn_knobs.pop(token, None)
    env = getattr(nanny, "env", None)
    if isinstance(env, dict) and env.get(_SPAWN_TOKEN) == token:
        if previous is None:
            del env[_SPAWN_TOKEN]
        else:
            env[_SPAWN_TOKEN] = previous


class HpallocPreload(NannyPlugin):
    """A nanny plugin that restarts every worker under libhpalloc-preload.so
    (all its large mallocs on hpalloc, whatever library makes them) with
    these knobs, and starts later workers so:

        hpalloc.dask.register(client, hpalloc.dask.HpallocPreload(threshold="4M"))

    Registering restarts the workers (distributed restarts a nanny's worker
    for a plugin with restart = True): what they held is lost, as with
    client.restart().  Unregistering (hpalloc.dask.unregister(client,
    HpallocPreload)) makes later worker starts plain again; running workers
    stay preloaded until they restart."""

    name = PRELOAD_PLUGIN_NAME
    restart = True

    def __init__(self, **knobs):
        self.knobs = _canonical(knobs)
        self._previous = None

    def __getstate__(self):
        return {"knobs": _canonical(self.knobs)}

    def __setstate__(self, state):
        self.knobs = _canonical(state["knobs"])
        self._previous = None

    def setup(self, nanny):
        self._previous = _preload_nanny(nanny, self.knobs)
        logger.info("hpalloc: nanny %s starts its worker under %s (knobs %s)",
                    getattr(nanny, "address", "?"), preload_library(),
                    self.knobs or "unchanged")

    def teardown(self, nanny):
        if self._previous is not None:
            _unpreload_nanny(nanny, self._previous)
        self._previous = None


# ---- `dask worker --preload hpalloc.dask --hpalloc KNOB=VALUE` ---------------

def _click_knobs(ctx, param, values):
    """KNOB=VALUE words into {knob: canonical}; a usage error otherwise, so
    `dask worker` refuses to start before any worker exists."""
    knobs, errors = {}, []
    for word in values:
        try:
            name, canon = _hpalloc.parse_assignment(word)  # the library's parser
        except (ValueError, TypeError) as exc:
            errors.append(str(exc))
            continue
        knobs[name] = canon
    if errors:
        raise click.BadParameter("hpalloc: refused knob value%s: %s"
                                 % ("s" if len(errors) > 1 else "", "; ".join(errors)))
    return knobs


def _click_adapters(ctx, param, value):
    try:
        return _adapters(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option("--hpalloc", "knobs", multiple=True, metavar="KNOB=VALUE",
              callback=_click_knobs,
              help="hpalloc knob for this worker process (repeatable)")
@click.option("--hpalloc-adapters", "adapters", metavar="LIST",
              callback=_click_adapters,
              help="adapters to switch on, as HPALLOC_ADAPTERS "
                   "(default numpy,numba,torch,arrow; all)")
def dask_setup(worker, knobs, adapters):
    """Preload entry point: hpalloc in this worker, with knobs; as a nanny
    preload (--preload-nanny), the worker process started under
    libhpalloc-preload.so with knobs (and HPALLOC_<KNOB> of the
    environment, checked here)."""
    from distributed import Nanny, Worker
    if isinstance(worker, Nanny):
        _preload_nanny(worker, knobs)
        return
    if not isinstance(worker, Worker):
        raise RuntimeError("hpalloc.dask is a worker or nanny preload (dask worker "
                           "--preload hpalloc.dask, --preload-nanny hpalloc.dask), "
                           "not for %s" % type(worker).__name__)
    plugin = HpallocPlugin(adapters=adapters, **knobs)
    plugin.setup(worker)
    # visible like a registered plugin (stats(), teardown at close)
    worker.plugins[PLUGIN_NAME] = plugin


# ---- the client side --------------------------------------------------------

def register(client, plugin):
    """client.register_plugin(plugin), or register_worker_plugin on a
    distributed that has no register_plugin (< 2023.9; nanny=True for a
    NannyPlugin such as HpallocPreload)."""
    method = getattr(client, "register_plugin", None)
    if method is not None:
        return method(plugin)
    return client.register_worker_plugin(plugin, nanny=isinstance(plugin, NannyPlugin))


def unregister(client, plugin=HpallocPlugin):
    """An hpalloc plugin off every worker (HpallocPlugin's teardown puts the
    workers back) or nanny (plugin=HpallocPreload)."""
    if plugin is HpallocPreload or isinstance(plugin, HpallocPreload):
        return client.unregister_worker_plugin(PRELOAD_PLUGIN_NAME, nanny=True)
    return client.unregister_worker_plugin(PLUGIN_NAME)


def _worker_row(dask_worker=None):
    """One worker's row: who it is, whether hpalloc serves its tasks,
    every counter (hp_stat_name) and every effective knob value.
    (client.run passes the worker as dask_worker.)"""
    row = {"pid": os.getpid()}
    if dask_worker is not None:
        row["name"] = dask_worker.name
        row["plugin"] = PLUGIN_NAME in dask_worker.plugins
    else:
        row["name"], row["plugin"] = None, False
    row["preloaded"] = preloaded()
    row["numpy_installed"] = _numpy.installed()
    for adapter in ("numba", "torch", "python"):
        row[adapter + "_installed"] = _adapter_installed(adapter)
    row.update(_stats())
    for knob, info in _config().items():
        row[knob] = info["value"]
    return row


def stats(client):
    """Every worker's hpalloc counters and knobs, gathered with the client:
    a pandas DataFrame indexed by worker address (ImportError naming pandas
    where it is not installed, before anything is asked of the workers).
    Columns: pid, name, plugin (the hpalloc plugin is set up there),
    preloaded (the worker process runs under libhpalloc-preload.so),
    numpy_installed, numba_installed, torch_installed, python_installed,
    every counter of hpalloc.stats() and every knob's effective value."""
    _engines.need_pandas("hpalloc.dask.stats()")
    rows = client.run(_worker_row)
    table = [dict(worker=address, **rows[address]) for address in sorted(rows)]
    return _engines.table(table, ("worker",), "hpalloc.dask.stats()")
