#!/usr/bin/env python3
"""Numba and PyTorch temporaries: hpalloc's adapters against glibc (what
Numba and PyTorch use by default) and the allocators one would preload
(issue 12).

    python_bench.py [--rounds N] [--calls N] [--out FILE] [--pythonpath DIR]
                    [--libdir DIR] [--hpctl PATH] [--contenders a,b]
                    [--workloads x,y]

Workloads (float64, 128 MiB arrays):
  numba  an @njit function making ten 128 MiB temporaries per call
  torch  ten (a * 2 + b).sum() on 128 MiB CPU tensors per call
Each (workload, contender) runs in its own process: 2 warm-up calls, then
--calls timed calls; the process reports the median time per call and the
minor page faults per call (getrusage).  Contenders are interleaved, the
order reversed every round, so drift of this shared machine hits everyone
alike; the table gives the median over rounds.  The machine is left as it
is (no pools, page reporting untouched): hpalloc runs with its default
knobs, i.e. THP when the hugetlb pool is empty.

hpalloc is activated as a user would do it, from outside the unmodified
program: `hpctl run --check` with HPALLOC_ADAPTERS=all (the raw domain,
NumPy, Numba and PyTorch, each installed when the program imports it); the
worker only checks that the adapters its workload needs are installed.
--hpctl names the hpctl to use (default: the one on PATH); --pythonpath is
given to it as HPALLOC_PYTHON_DIR.  This file is also the worker (--worker).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

LIBDIR_SYS = "/usr/lib/x86_64-linux-gnu"
N = (128 << 20) // 8   # float64 elements in 128 MiB


class Contender:
    def __init__(self, name, label, preload=None, env=None, hpalloc=False):
        self.name, self.label = name, label
        self.preload, self.env, self.hpalloc = preload, dict(env or {}), hpalloc


def contenders():
    lib = lambda so: os.path.join(LIBDIR_SYS, so)  # noqa: E731
    return [
        Contender("default", "default (glibc)"),
        Contender("tcmalloc", "tcmalloc", preload=lib("libtcmalloc_minimal.so.4")),
        Contender("jemalloc", "jemalloc", preload=lib("libjemalloc.so.2")),
        Contender("mimalloc", "mimalloc, large OS pages", preload=lib("libmimalloc.so.2"),
                  env={"MIMALLOC_ALLOW_LARGE_OS_PAGES": "1"}),
        Contender("hpalloc", "hpalloc (hpctl run)", hpalloc=True),
    ]


WORKLOADS = {
    "numba": "@njit: ten 128 MiB temporaries per call",
    "torch": "torch: ten (a * 2 + b).sum(), 128 MiB tensors",
}


# ---- the worker ------------------------------------------------------------------

def require_activated(*adapters):
    """hpctl run activated these adapters in this process, or it is no
    hpalloc row."""
    import importlib
    for name in adapters:
        if not importlib.import_module("hpalloc." + name).installed():
            raise SystemExit("hpalloc.%s is not installed: hpctl run did not "
                             "activate it" % name)


def numba_workload(use_hpalloc):
    import numpy as np
    from numba import njit
    if use_hpalloc:
        require_activated("python", "numpy", "numba")

    @njit
    def ten_temporaries(a):
        s = 0.0
        for i in range(10):
            t = a * 2.0          # a new 128 MiB array each time
            s += t[i * 1000]
        return s

    a = np.ones(N)
    return lambda: ten_temporaries(a)


def torch_workload(use_hpalloc):
    import torch
    torch.set_num_threads(1)
    if use_hpalloc:
        require_activated("python", "torch")
    a = torch.ones(N, dtype=torch.float64)
    b = torch.ones(N, dtype=torch.float64)

    def ten_sums():
        s = 0.0
        for _ in range(10):
            s += (a * 2 + b).sum().item()
        return s
    return ten_sums


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def worker(workload, calls, use_hpalloc):
    call = {"numba": numba_workload, "torch": torch_workload}[workload](use_hpalloc)
    for _ in range(2):
        call()
    times, faults = [], []
    for _ in range(calls):
        f0, t0 = minor_faults(), time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        faults.append(minor_faults() - f0)
    result = {"s": statistics.median(times), "faults": statistics.median(faults)}
    if use_hpalloc:
        import hpalloc
        stats = hpalloc.stats()
        result["huge_blocks"] = stats["cache_hits"] + stats["cache_misses"]
    print(json.dumps(result))
    return 0


# ---- the driver ------------------------------------------------------------------

def run_one(workload, contender, args, base_env):
    env = dict(base_env, **contender.env)
    if contender.preload:
        env["LD_PRELOAD"] = contender.preload
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload,
           str(args.calls), "1" if contender.hpalloc else "0"]
    if contender.hpalloc:
        cmd = [args.hpctl, "run", "--check", "--"] + cmd
        env["HPALLOC_ADAPTERS"] = "all"
        if args.pythonpath:
            env["HPALLOC_PYTHON_DIR"] = args.pythonpath
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("%s/%s failed: %s" % (workload, contender.name, proc.stderr[-2000:]))
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if contender.hpalloc and not result.get("huge_blocks"):
        raise RuntimeError("%s/hpalloc: hpalloc served no huge block" % workload)
    return result


def available(workload):
    try:
        __import__(workload)
    except ImportError:
        return False
    return True


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", help="write the markdown table here too")
    parser.add_argument("--pythonpath", help="the build tree's python/inplace")
    parser.add_argument("--libdir", help="the build tree's lib/.libs")
    parser.add_argument("--hpctl", default="hpctl", help="the hpctl that activates hpalloc")
    parser.add_argument("--contenders", help="comma-separated subset")
    parser.add_argument("--workloads", help="comma-separated subset of numba,torch")
    args = parser.parse_args()

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("HPALLOC_")}
    base_env.pop("LD_PRELOAD", None)
    if args.pythonpath:
        base_env["PYTHONPATH"] = args.pythonpath
    if args.libdir:
        base_env["LD_LIBRARY_PATH"] = args.libdir
    chosen = contenders()
    if args.contenders:
        names = args.contenders.split(",")
        chosen = [c for c in chosen if c.name in names]
    for c in list(chosen):
        if c.preload and not os.path.exists(c.preload):
            print("bench: skipping %s: %s is not installed" % (c.name, c.preload),
                  file=sys.stderr)
            chosen.remove(c)
    workloads = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    for w in list(workloads):
        if not available(w):
            print("bench: skipping %s: not installed (Debian: python3-%s)" % (w, w),
                  file=sys.stderr)
            workloads.remove(w)

    samples = {(w, c.name): [] for w in workloads for c in chosen}
    for r in range(args.rounds):
        order = chosen if r % 2 == 0 else chosen[::-1]
        for w in workloads:
            for c in order:
                res = run_one(w, c, args, base_env)
                samples[(w, c.name)].append(res)
                print("bench: round %d %s %-9s %.3f s/call, %d faults/call" % (
                    r + 1, w, c.name, res["s"], res["faults"]), file=sys.stderr, flush=True)

    lines = ["| workload | contender | s per call (median of %d rounds) | ÷ tcmalloc | minor faults per call |"
             % args.rounds, "|---|---|---|---|---|"]
    for w in workloads:
        ref = statistics.median(x["s"] for x in samples[(w, "tcmalloc")]) \
            if (w, "tcmalloc") in samples else None
        for c in chosen:
            s = statistics.median(x["s"] for x in samples[(w, c.name)])
            faults = statistics.median(x["faults"] for x in samples[(w, c.name)])
            lines.append("| %s | %s | %.3f | %s | %s |" % (
                WORKLOADS[w], c.label, s, "%.2f" % (s / ref) if ref else "n/a",
                format(int(faults), ",")))
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
