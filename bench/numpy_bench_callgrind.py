"""The instructions of the allocation path, counted under valgrind's
callgrind (issue 35) for bench/numpy_bench.py: per contender, the
instructions of `np.empty` + free, small and a cached 64 MiB."""

import glob
import os
import re
import shutil
import tempfile

from numpy_bench_cast import PYTHON, WORKER, say
from numpy_bench_run import outcome


# `np.empty` + free, 16 elements and 64 MiB (a cache hit for a caching
# allocator), in a process of its own under `valgrind --tool=callgrind`,
# for NumPy's default, each peer and hpalloc: the instructions of
# opts.callgrind_pairs pairs after a warm-up, less those of the warm-up
# alone (numpy_workloads.py allocir), per pair.  A count, not a time: the
# same on a loaded machine.  The main thread's only, what the program
# waits for: other threads also do work driven by the clock (OpenBLAS's
# spinning workers in PyPI's NumPy, hpalloc's janitor polling its control
# directory), so a count over all threads swings by thousands per pair
# from run to run.  User-space instructions only: what a system call does
# in the kernel (NumPy's default maps and unmaps every 64 MiB array) is in
# the times and faults, not here.

CALLGRIND_CONTENDERS = ("numpy", "tcmalloc", "jemalloc", "mimalloc", "glibc-thp", "libhugetlbfs",
                        "hp-run", "hp-preload")


def callgrind_totals(directory):
    """{thread: instructions} of the one process callgrind wrote to
    directory (--separate-threads=yes: one file per thread, "-NN")."""
    totals = {}
    for path in glob.glob(os.path.join(directory, "cg.*")):
        m = re.search(r"-(\d+)$", path)
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):
                    totals[int(m.group(1)) if m else 1] = int(line.split()[1])
                    break
    return totals


def callgrind_run(opts, c, which, base_env, valgrind):
    """{"main": instructions of the main thread} of one allocir process of
    contender c, or {"error": why}."""
    scratch = tempfile.mkdtemp(prefix="hpalloc-bench-cg.")
    try:
        argv = (c.command(opts, "allocir")
                + [valgrind, "--tool=callgrind", "--separate-threads=yes",
                   "--callgrind-out-file=" + os.path.join(scratch, "cg.%p")]
                + [PYTHON, WORKER, "allocir", "--which", which,
                   "--count", str(opts.callgrind_pairs)])
        env = c.environment(base_env, "allocir")
        env["PYTHONHASHSEED"] = "0"  # the interpreter's own work alike in every run
        r = outcome(opts, argv, env)
        if "error" in r:
            return r
        totals = callgrind_totals(scratch)
        if 1 not in totals:
            return {"error": "callgrind wrote no counts"}
        return {"main": totals[1]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def callgrind_counts(opts, contenders, base_env):
    """{contender: {"small_ir", "large_ir", "pairs"} or {"error"}}, or
    {"_error": why} when valgrind is missing."""
    valgrind = shutil.which("valgrind")
    if not valgrind:
        return {"_error": "valgrind is not installed: apt-get install valgrind"}
    out = {}
    for c in contenders:
        if c.name not in CALLGRIND_CONTENDERS or c.skip_reason:
            continue
        runs = {which: callgrind_run(opts, c, which, base_env, valgrind)
                for which in ("none", "small", "large")}
        errors = [r["error"] for r in runs.values() if "error" in r]
        if errors:
            out[c.name] = {"error": errors[0]}
        else:
            n = opts.callgrind_pairs
            out[c.name] = {"pairs": n}
            for which in ("small", "large"):
                out[c.name][which + "_ir"] = (runs[which]["main"] - runs["none"]["main"]) / n
        say("callgrind %-13s %s" % (c.name, out[c.name].get("error") or
                                   "np.empty(16)+free %.0f, np.empty(64 MiB)+free %.0f instructions"
                                   % (out[c.name]["small_ir"], out[c.name]["large_ir"])))
    return out
