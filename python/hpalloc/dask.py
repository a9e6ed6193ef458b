"""hpalloc on every Dask worker.

A worker plugin, for clusters you start from Python:

    from dask.distributed import Client
    import hpalloc.dask
    client = Client(cluster)
    client.register_worker_plugin(hpalloc.dask.HpallocPlugin(threshold="4M"))
    hpalloc.dask.stats(client)      # every worker's counters and knobs

and the same as a preload module, for workers started from the command line:

    dask worker tcp://scheduler:8786 --preload hpalloc.dask --hpalloc threshold=4M

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
import logging
import os

import click
from distributed import WorkerPlugin, get_worker

from . import _hpalloc, config as _config, parse_knob, reset, set as _set, \
    stats as _stats
from . import numpy as _numpy

__all__ = ["HpallocPlugin", "dask_setup", "stats", "PLUGIN_NAME"]

PLUGIN_NAME = "hpalloc"
logger = logging.getLogger("hpalloc.dask")


def _canonical(knobs):
    """{knob: canonical value}, every value checked by the library; one
    ValueError naming every refused knob, before anything changes."""
    canon, errors = {}, []
    for name, value in knobs.items():
        try:
            canon[name] = parse_knob(name, value)
        except (ValueError, TypeError) as exc:
            errors.append(str(exc))
    if errors:
        raise ValueError("hpalloc: refused knob value%s: %s"
                         % ("s" if len(errors) > 1 else "", "; ".join(errors)))
    return canon


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


class _Activation:
    """What a plugin changed in its worker process, so teardown can put it
    back: knob overrides, the handler of tasks, the loop's task factory."""

    def __init__(self):
        self.knobs = []
        self.loop = None
        self.previous_factory = None

    def apply(self, worker, knobs):
        global _task_handler
        for name, value in knobs.items():
            _set(name, value)
            self.knobs.append(name)
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

        def task_factory(loop, coro, context=None):
            if context is None:
                context = contextvars.copy_context()
            context.run(_select_hpalloc)
            if previous is None:
                return asyncio.Task(coro, loop=loop, context=context)
            # a task created inside context.run copies that context
            return context.run(previous, loop, coro)

        loop.set_task_factory(task_factory)
        self.loop, self.previous_factory = loop, previous

    def undo(self):
        global _task_handler
        if self.loop is not None:
            self.loop.set_task_factory(self.previous_factory)
            self.loop = None
        _numpy.uninstall()
        _task_handler = _numpy_default_handler()
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
    """Installs hpalloc for NumPy in every worker (current and future) and
    applies the given knob values to each worker process only.

        client.register_worker_plugin(HpallocPlugin(threshold="4M", mode="thp"))

    Values are checked by the library here, before anything is sent to a
    worker (ValueError with the library's message), and again on each
    worker before it changes anything."""

    name = PLUGIN_NAME

    def __init__(self, **knobs):
        self.knobs = _canonical(knobs)
        self._activation = None

    # Checked again each time the plugin is sent (knobs changed after
    # __init__ fail the client's register_worker_plugin, nothing is sent)
    # and when a worker receives it (that worker's library decides, before
    # distributed replaces a previous hpalloc plugin or stores this one).
    def __getstate__(self):
        return {"knobs": _canonical(self.knobs)}

    def __setstate__(self, state):
        self.knobs = _canonical(state["knobs"])
        self._activation = None

    def setup(self, worker):
        self._activation = _Activation()
        self._activation.apply(worker, self.knobs)
        logger.info("hpalloc installed for NumPy in worker %s (knobs %s)",
                    getattr(worker, "address", "?"), self.knobs or "unchanged")

    def teardown(self, worker):
        if self._activation is not None:
            self._activation.undo()
            self._activation = None


# ---- `dask worker --preload hpalloc.dask --hpalloc KNOB=VALUE` ---------------

def _click_knobs(ctx, param, values):
    """KNOB=VALUE words into {knob: canonical}; a usage error otherwise, so
    `dask worker` refuses to start before any worker exists."""
    knobs = {}
    for word in values:
        name, eq, value = word.partition("=")
        if not eq or not name:
            raise click.BadParameter("expected KNOB=VALUE, got %r (knobs: %s)"
                                     % (word, " ".join(_config())))
        knobs[name] = value
    try:
        return _canonical(knobs)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option("--hpalloc", "knobs", multiple=True, metavar="KNOB=VALUE",
              callback=_click_knobs,
              help="hpalloc knob for this worker process (repeatable)")
def dask_setup(worker, knobs):
    """Preload entry point: hpalloc for NumPy in this worker, with knobs."""
    from distributed import Worker
    if not isinstance(worker, Worker):
        raise RuntimeError("hpalloc.dask is a worker preload (dask worker "
                           "--preload hpalloc.dask), not for %s"
                           % type(worker).__name__)
    plugin = HpallocPlugin(**knobs)
    plugin.setup(worker)
    # visible like a registered plugin (stats(), teardown at close)
    worker.plugins[PLUGIN_NAME] = plugin


# ---- the client side --------------------------------------------------------

def _worker_row():
    """One worker's row: who it is, whether hpalloc serves its NumPy tasks,
    every counter (hp_stat_name) and every effective knob value."""
    row = {"pid": os.getpid()}
    try:
        worker = get_worker()
        row["name"] = worker.name
        row["plugin"] = PLUGIN_NAME in worker.plugins
    except ValueError:
        row["name"], row["plugin"] = None, False
    row["numpy_installed"] = _numpy.installed()
    row.update(_stats())
    for knob, info in _config().items():
        row[knob] = info["value"]
    return row


def stats(client):
    """Every worker's hpalloc counters and knobs, gathered with the client:
    a pandas DataFrame indexed by worker address when pandas is installed,
    else a list of dicts (each with a "worker" key).  Columns: pid, name,
    plugin (the hpalloc plugin is set up there), numpy_installed, every
    counter of hpalloc.stats() and every knob's effective value."""
    rows = client.run(_worker_row)
    table = [dict(worker=address, **rows[address]) for address in sorted(rows)]
    try:
        import pandas
    except ImportError:
        return table
    return pandas.DataFrame(table).set_index("worker")

