"""How bench/numpy_bench.py runs its processes: one workload of one
contender in a process of its own (numpy_workloads.py; in a memory cgroup
of its own for the rows under a limit), and the rounds that interleave
them -- contenders in turn, reversed every other round, cold rows after
their gap, the hugetlb contenders on pools reserved around them only."""

import json
import os
import re
import signal
import statistics
import subprocess
import time

from numpy_bench_cast import (CGROUP_WORKLOADS, CGROUP_LIMIT, CGROUP_PREFIX, COLD_WORKLOADS,
                              APPS, WORKLOADS, GiB, PYTHON, WORKER, hp_memcg, runs_for, say)
from numpy_bench_machine import pool_plan
from numpy_bench_summary import fmt_bytes
from bench_proc import run_process


# ---- running ----------------------------------------------------------------------------

def base_environment(opts, empty_control_dir):
    """The caller's environment without HPALLOC_* (the contenders set their
    own knobs) and with the uninstalled package and library when given
    (also for `hpctl run`, which finds them through HPALLOC_PYTHON_DIR and
    HPALLOC_PRELOAD_PATH)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HPALLOC_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["HPALLOC_CONTROL_DIR"] = empty_control_dir  # no machine-wide knobs
    if opts.pythonpath:
        env["PYTHONPATH"] = opts.pythonpath
        env["HPALLOC_PYTHON_DIR"] = opts.pythonpath
    if opts.libdir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [opts.libdir] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
        preload = os.path.join(opts.libdir, "libhpalloc-preload.so")
        if os.path.exists(preload):
            env["HPALLOC_PRELOAD_PATH"] = preload
    return env


def worker_args(opts, workload):
    app = workload in APPS
    return [PYTHON, WORKER, workload,
            "--reps", str(opts.app_reps if app else opts.reps),
            "--warmup", str(opts.app_warmup if app else opts.warmup),
            "--gather-bytes", str(opts.gather_bytes), "--scale", str(opts.scale),
            "--sparse-bytes", str(8 * GiB)]


def run_one(opts, contender, workload, base_env):
    """One process: its JSON result, or {"error": why}."""
    if workload in CGROUP_WORKLOADS:
        return run_in_cgroup(opts, contender, workload, base_env)
    return outcome(opts, contender.command(opts, workload) + worker_args(opts, workload),
                   contender.environment(base_env, workload), says=contender.says)


def outcome(opts, argv, env, preexec_fn=None, says=None):
    """(the process's JSON result or {"error": why}) of running argv; with
    says, the lines of its stderr matching that expression in "says"."""
    try:
        stdout, stderr, returncode = run_process(argv, env, opts.timeout, preexec_fn)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % opts.timeout}
    if returncode != 0:
        tail = (stderr.strip().splitlines() or ["exit %d" % returncode])[-1]
        return {"error": "exit %d: %s" % (returncode, tail[:200]), "exit": returncode}
    try:
        r = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "no result: %r" % stdout[-200:]}
    if says:
        r["says"] = sorted({line.strip() for line in stderr.splitlines()
                            if re.search(says, line)})
    return r


def run_in_cgroup(opts, contender, workload, base_env):
    """One process in a fresh memory cgroup (limited to CGROUP_LIMIT for the
    pressure rows): its result plus the cgroup's peak and OOM kills.  The
    cgroup is removed whatever happens (its watchdog removes it if this
    harness is killed outright)."""
    limited = CGROUP_WORKLOADS[workload]
    try:
        cg = hp_memcg.MemCgroup(CGROUP_PREFIX, limit=CGROUP_LIMIT if limited else None,
                                watchdog=True)
    except (hp_memcg.Unavailable, OSError) as e:
        return {"error": "no memory cgroup: %s" % e}
    try:
        env = contender.environment(base_env, workload)
        env["HPALLOC_BENCH_LIMIT"] = str(CGROUP_LIMIT)
        env["HPALLOC_BENCH_CGROUP_USAGE"] = cg.file("memory.usage_in_bytes", "memory.current")
        r = outcome(opts, contender.command(opts, workload) + worker_args(opts, workload), env,
                    preexec_fn=cg.join, says=contender.says)
        facts = {"version": cg.version, "limit": CGROUP_LIMIT if limited else None,
                 "peak": cg.peak(), "oom_kills": cg.oom_kills(), "limit_hits": cg.limit_hits()}
    finally:
        cg.remove()
    if facts["oom_kills"] or r.get("exit") in (-signal.SIGKILL, 128 + signal.SIGKILL):
        r = {"error": "OOM-killed (exit %s, %d OOM kills in its cgroup)"
             % (r.get("exit", "?"), facts["oom_kills"]), "killed": True}
    r["cgroup"] = facts
    return r


# ---- the run ------------------------------------------------------------------------------

def run_all(opts, contenders, workloads, base_env, machine, runner=None):
    """results[workload][contender] = list of per-process results.  Each
    result records gap_s, how long after the last process ended (or the
    pools were given back: memory freed) it started; a cold workload's
    process waits until that is opts.cold_gap.  The hugetlb contenders of a
    workload run side by side, on pools reserved just before the first of
    them and given back right after the last (pool_given: what the kernel
    gave), so that no other contender ever meets a pool.  In a cold
    workload each of them reserves its own, after the gap: pages a pool
    holds are never reported to the host, so pages a process freed into
    the pool, or a pool reserved before the gap took while they were still
    warm, would be warm.  runner runs one process (default: run_one)."""
    runner = runner or run_one
    results = {w: {c.name: [] for c in contenders} for w, *_ in workloads}
    total = opts.rounds * sum(len(runs_for(w, contenders)) for w, *_ in workloads)
    done, t0 = 0, time.monotonic()
    last_free = time.monotonic()  # the harness's own probes have just ended
    for rnd in range(opts.rounds):
        for w, *_ in workloads:
            order = runs_for(w, contenders)
            order = [c for c in order if not c.pools] + [c for c in order if c.pools]
            if rnd % 2:
                order.reverse()
            pooled = [c for c in order if c.pools]
            given = None
            cold = w in COLD_WORKLOADS
            for c in order:
                if cold:
                    time.sleep(max(0.0, opts.cold_gap - (time.monotonic() - last_free)))
                if c.pools and given is None:
                    sizes = c.pools if cold else {z for p in pooled for z in p.pools}
                    given = machine.reserve_plan(pool_plan(opts, sizes))
                if c.pools and not any(given.get(z) for z in c.pools):
                    r = {"error": "the kernel gave no %s pages this time"
                         % " or ".join(fmt_pagesize(z) for z in c.pools)}
                else:
                    start = time.monotonic()
                    r = runner(opts, c, w, base_env)
                    r["gap_s"], r["wall_s"] = start - last_free, time.monotonic() - start
                    last_free = time.monotonic()
                if c.pools:
                    r["pool_given"] = {fmt_pagesize(z): given.get(z, 0) for z in c.pools}
                    if cold or c is pooled[-1]:
                        machine.release_pools()
                        last_free, given = time.monotonic(), None
                results[w][c.name].append(r)
                done += 1
                say("[%d/%d %4.0fs] round %d %-9s %-13s %s"
                    % (done, total, time.monotonic() - t0, rnd + 1, w, c.name, brief(r, w)))
    return results


def fmt_pagesize(size):
    return "1G" if size == GiB else "2M"


def brief(result, workload):
    cg = result.get("cgroup")
    where = (" (cgroup peak %s, limit hit %d times)" % (fmt_bytes(cg["peak"]), cg["limit_hits"])
             if cg else "")
    if "error" in result:
        return ("KILLED " if result.get("killed") else "ERROR ") + result["error"] + where
    metric = next(m for w, _, m, _ in WORKLOADS if w == workload)
    return "%s=%.4g%s" % (metric, statistics.median(result["metrics"][metric]), where)
