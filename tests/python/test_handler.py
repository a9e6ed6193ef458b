"""The 'hpalloc' NEP 49 handler: install/uninstall, enabled(), threads,
asyncio, HPALLOC_NUMPY=1."""

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hpnp
from conftest import run_python

name_of = hpnp.get_handler_name
version_of = hpnp.get_handler_version


def test_importing_hpalloc_numpy_changes_nothing():
    proc = run_python("import numpy as np, hpalloc.numpy as h; "
                      "print(h.get_handler_name(), h.get_handler_name(np.ones(1 << 20)))")
    assert proc.stdout.split() == ["default_allocator", "default_allocator"]


def test_arrays_made_under_hpalloc_carry_its_name_and_version():
    with hpnp.enabled():
        assert name_of() == "hpalloc"
        arr = np.ones(1000)
    assert name_of(arr) == "hpalloc"
    assert version_of(arr) == 1
    assert version_of() == 1  # the default handler is version 1 as well
    assert name_of(np.ones(1000)) == "default_allocator"


def test_install_then_uninstall_restores_the_previous_handler():
    hpnp.install()
    assert hpnp.installed()
    assert name_of() == "hpalloc"
    kept = np.arange(1 << 20, dtype=np.float64)
    small = np.arange(10)
    hpnp.install()  # idempotent
    hpnp.uninstall()
    assert not hpnp.installed()
    assert name_of() == "default_allocator"
    assert name_of(np.ones(10)) == "default_allocator"
    # Arrays made before stay valid and are freed by hpalloc afterwards.
    assert name_of(kept) == "hpalloc" and name_of(small) == "hpalloc"
    kept += 1
    assert kept[-1] == (1 << 20) and small.sum() == 45
    del kept, small
    hpnp.uninstall()  # not installed: nothing to do


def test_enabled_is_restored_on_exceptions():
    with pytest.raises(RuntimeError):
        with hpnp.enabled():
            assert name_of() == "hpalloc"
            raise RuntimeError("boom")
    assert name_of() == "default_allocator"


def test_enabled_nests_and_restores_the_outer_handler():
    with hpnp.enabled():
        with hpnp.enabled(pagesize="2M"):
            assert name_of() == "hpalloc"
        assert name_of() == "hpalloc"
    assert name_of() == "default_allocator"


def _handler_in_new_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(
        (name_of(), name_of(np.ones(1 << 16)))))
    thread.start()
    thread.join()
    return seen[0]


def test_threads_started_after_install_use_hpalloc():
    hpnp.install()
    assert _handler_in_new_thread() == ("hpalloc", "hpalloc")
    hpnp.uninstall()
    assert _handler_in_new_thread() == ("default_allocator", "default_allocator")


def test_enabled_is_not_inherited_by_new_threads():
    # NumPy's ContextVar semantics: a new thread starts with the default.
    with hpnp.enabled():
        assert _handler_in_new_thread() == ("default_allocator", "default_allocator")


def test_thread_pools_started_after_install_use_hpalloc():
    hpnp.install()
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        names = list(pool.map(lambda n: name_of(np.zeros(n)), [10, 1 << 18] * 6))
    assert names == ["hpalloc"] * 12
    hpnp.uninstall()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        assert pool.submit(lambda: name_of(np.zeros(10))).result() == "default_allocator"


def test_asyncio_tasks_are_context_local():
    async def inside(started, release):
        with hpnp.enabled():
            started.set()
            await release.wait()
            return name_of(np.ones(100))

    async def outside(started, release):
        await started.wait()
        name = name_of(np.ones(100))  # runs while the other task is inside
        release.set()
        return name

    async def main():
        started, release = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(inside(started, release),
                                    outside(started, release))

    assert asyncio.run(main()) == ["hpalloc", "default_allocator"]
    assert name_of() == "default_allocator"


def test_install_covers_new_asyncio_tasks_and_executor_threads():
    hpnp.install()

    async def main():
        loop = asyncio.get_running_loop()
        in_task = await asyncio.create_task(_async_name())
        in_executor = await loop.run_in_executor(None, lambda: name_of(np.ones(9)))
        return in_task, in_executor

    assert asyncio.run(main()) == ("hpalloc", "hpalloc")


async def _async_name():
    return name_of(np.ones(100))


def test_bad_handler_arguments_are_refused():
    with pytest.raises(TypeError):
        hpalloc._hpalloc.set_handler(object())
    with pytest.raises(ValueError):
        hpalloc._hpalloc.pagesize_handler("junk")
    with pytest.raises(ValueError):
        hpnp.empty(10, pagesize="3M")  # no such huge page size
    assert name_of() == "default_allocator"


# ---- HPALLOC_NUMPY=1 ---------------------------------------------------------

PROBE = """
import sys, threading
import numpy as np
import hpalloc.numpy as h
seen = []
t = threading.Thread(target=lambda: seen.append(h.get_handler_name(np.ones(10))))
t.start(); t.join()
print(h.get_handler_name(), h.get_handler_name(np.ones(10)), seen[0])
"""


def test_hpalloc_numpy_env_activates_at_interpreter_start(user_site):
    env = dict(user_site, HPALLOC_NUMPY="1")
    proc = run_python(PROBE, env=env)
    assert proc.stdout.split() == ["hpalloc"] * 3, proc.stderr
    assert proc.stderr == ""


def test_without_the_env_var_the_pth_imports_nothing(user_site):
    proc = run_python("import sys; print(sorted(m for m in ('numpy', 'hpalloc') "
                      "if m in sys.modules))", env=user_site)
    assert proc.stdout.strip() == "[]"
    proc = run_python(PROBE, env=dict(user_site, HPALLOC_NUMPY="0"))
    assert proc.stdout.split() == ["default_allocator"] * 3


def test_hpalloc_numpy_env_with_a_bad_value_warns_and_changes_nothing(user_site):
    proc = run_python(PROBE, env=dict(user_site, HPALLOC_NUMPY="maybe"))
    assert proc.stdout.split() == ["default_allocator"] * 3
    assert "HPALLOC_NUMPY" in proc.stderr


def _wait_or_kill(pid, seconds):
    import os
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


@pytest.mark.parametrize("with_threads", [False, True])
def test_forked_child_allocates_and_frees(with_threads):
    # The handler stays selected in the child (fork copies the context) and
    # the library must work there: NumPy's own suite forks mid-run.
    import os
    hpnp.install()
    parent_arrays = [np.ones(1 << 20), np.ones(10)]
    workers = []
    if with_threads:  # other threads allocating while we fork
        stop = threading.Event()

        def churn():
            while not stop.is_set():
                np.ones(1 << 19).sum()
        workers = [threading.Thread(target=churn) for _ in range(2)]
        for w in workers:
            w.start()
    try:
        pid = os.fork()
        if pid == 0:  # child: no pytest machinery, exit code is the verdict
            code = 1
            try:
                arrays = [np.full(n, 2.0) for n in (10, 1 << 20, 1 << 23)]
                ok = (name_of(arrays[1]) == "hpalloc" and
                      sum(a.sum() for a in arrays) == 2.0 * (10 + (1 << 20) + (1 << 23)))
                del arrays, parent_arrays[:]
                code = 0 if ok else 2
            finally:
                os._exit(code)
        assert _wait_or_kill(pid, 60) == 0
    finally:
        if workers:
            stop.set()
            for w in workers:
                w.join()
    assert parent_arrays[0].sum() == 1 << 20
