"""NumPy benchmark: hpalloc against NumPy's default and the allocators a user
would pick instead (issues 6, 17 and 25), side by side in one run, on the
machine as users have it.

    numpy_bench.py [--quick] [--out DIR] [--pythonpath DIR] [--libdir DIR]
                   [--hpctl PATH] [--contenders a,b] [--workloads x,y]
                   [--rounds N] [--no-pools] [--hold-page-reporting]
                   [--cold-gap S] [--no-callgrind | --callgrind-only]

Each workload runs in its own process per contender (numpy_workloads.py),
contenders interleaved (A B C ... then reversed, round after round) so drift
of this shared machine hits everyone alike.  Two kinds of workload: NumPy
microbenchmarks (temporaries, zeros, gather, threads, resize) and whole
applications (pandas, scikit-learn, SciPy, NumPy pipelines, Numba, PyTorch,
Dask); and rows under a memory limit (issue 25: each process in a memory
cgroup of its own, tests/python/hp_memcg.py, its OOM kills and peak
reported).  hpalloc runs as a user would switch it on: `hpctl run` with its
default knobs, `hpctl run --preload`, and the best knobs found for a
workload (named in the report).  Writes DIR/results.json (every sample),
DIR/results.md (tables + machine) and DIR/results.png (chart), and prints
the headline table.

The machine is left as users have it: the VM's free page reporting left
on, and no hugetlb pool reserved while NumPy, the peers and hpalloc's
default knobs run.  Run as root, the hugetlb contenders (hpalloc on 2 MiB
and 1 GiB pages, glibc's hugetlb=2, libhugetlbfs on a private hugetlbfs
mount) run too, each workload's group of them on pools reserved just
before it and given back right after (pages added to what is there and
exactly those taken back; --no-pools leaves them out);
--hold-page-reporting holds free page reporting off for the run (memory
freed seconds ago is then not cold again).  All is put back afterwards,
also on Ctrl-C, SIGTERM or a failure.

The first touch has two rows: warm (zeros1G's first call, its process
started right after the previous one ended: it meets memory freed a moment
ago) and cold (zeros1G-cold, every process started --cold-gap seconds, at
least 3, after the last one ended: memory the VM has given back to its
host, as a user's script meets it).  Each row's verdict against NumPy's
default and the best peer comes from a 95 % bootstrap interval of the ratio
of medians over the processes (10 per contender in a full run): "ahead" or
"behind" only when it excludes 1, "not slower" only when its upper end is
at most 1.02.  Beside the times: minor faults, and (valgrind's callgrind)
the instructions of `np.empty` + free, small and a cached 64 MiB.

The bench is split by concern, this file being its command line:
numpy_bench_cast.py (contenders, workloads, who runs which, what is
missing), numpy_bench_machine.py (pools, hugetlbfs, page reporting, the
machine's description), numpy_bench_run.py (processes and interleaved
rounds), numpy_bench_callgrind.py (instruction counts),
numpy_bench_summary.py (medians, verdicts through bench_stats.py,
targets) and numpy_bench_report.py (results.md, results.png, the printed
tables).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Also the names tests/python/test_bench_verdicts.py and
# test_bench_restore.py read (and replace: run_one) here, as before the split.
from numpy_bench_cast import (COLD_GAP_MIN, GiB, HERE, LIBDIR_SYS, MiB, WORKER,  # noqa: F401
                              WORKLOADS, Contender, all_contenders, check_peers,
                              control_contenders, hpalloc_importable, missing_cgroup,
                              missing_libraries, populate_contenders, say)
from numpy_bench_machine import Machine, machine_description, prepare
import numpy_bench_run
from numpy_bench_run import base_environment, run_one
from numpy_bench_callgrind import callgrind_counts
from numpy_bench_report import callgrind_table, report
from bench_proc import raise_interrupt
from bench_stats import NOT_SLOWER, VERDICT_MIN_N, bootstrap_ratio, fmt_verdict, verdict  # noqa: F401


def run_all(opts, contenders, workloads, base_env, machine):
    """numpy_bench_run.run_all, each process run by this module's run_one
    as it is at the call (the tests replace it)."""
    return numpy_bench_run.run_all(opts, contenders, workloads, base_env, machine,
                                   runner=lambda *args: run_one(*args))


# ---- main -------------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 round, 1 GiB gather, application data / 8, every "
                        "contender; numbers not representative")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--pythonpath", help="directory holding the hpalloc package (build tree)")
    p.add_argument("--libdir", help="directory holding libhpalloc.so.1 (build tree)")
    p.add_argument("--hpctl", default=shutil.which("hpctl"),
                   help="the hpctl whose `run` switches hpalloc on (default: the one on PATH)")
    p.add_argument("--contenders", help="comma-separated names (default: all)")
    p.add_argument("--workloads", help="comma-separated names (default: all)")
    p.add_argument("--rounds", type=int,
                   help="processes per workload and contender (default 10, quick 1)")
    p.add_argument("--pools", action="store_true",
                   help="(the default as root) the hugetlb contenders, on pools reserved "
                        "around their processes")
    p.add_argument("--no-pools", action="store_true",
                   help="leave the hugetlb contenders out (no pool is reserved)")
    p.add_argument("--cold-gap", type=float, default=COLD_GAP_MIN, metavar="S",
                   help="seconds between the last process's end and the start of a cold "
                        "first-touch process (default %g)" % COLD_GAP_MIN)
    p.add_argument("--no-callgrind", action="store_true",
                   help="do not count the allocation path's instructions under callgrind")
    p.add_argument("--callgrind-only", action="store_true",
                   help="only count the allocation path's instructions (make bench-callgrind)")
    p.add_argument("--hold-page-reporting", action="store_true",
                   help="hold the VM's free page reporting off for the run (not as users have it)")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--report-from", metavar="JSON",
                   help="write the report again from a run's results.json, running nothing")
    opts = p.parse_args()
    full = not opts.quick
    opts.rounds = opts.rounds or (VERDICT_MIN_N if full else 1)
    opts.reps = 3 if full else 1
    opts.warmup = 2 if full else 1
    opts.app_reps = 3 if full else 1
    opts.app_warmup = 1
    opts.scale = 1.0 if full else 0.125
    opts.gather_bytes = 4 * GiB if full else GiB
    opts.pretouch_bytes = 14 * GiB if full else 4 * GiB
    opts.callgrind_pairs = 20000 if full else 2000
    # as root the hugetlb contenders run (pools reserved around them)
    opts.pools = os.geteuid() == 0 and not opts.no_pools
    if opts.cold_gap < COLD_GAP_MIN:
        say("--cold-gap %g: below %g s the zeros1G-cold row may meet warm memory"
            % (opts.cold_gap, COLD_GAP_MIN))
    return opts


def select(items, wanted, key):
    if not wanted:
        return items
    names = wanted.split(",")
    unknown = set(names) - {key(i) for i in items}
    if unknown:
        sys.exit("bench: unknown %s (known: %s)" % (", ".join(sorted(unknown)),
                                                   ", ".join(key(i) for i in items)))
    return [i for i in items if key(i) in names]


def callgrind_only(opts, contenders, base_env):
    """make bench-callgrind: the counts alone, printed and in callgrind.md."""
    counts = callgrind_counts(opts, contenders, base_env)
    table = callgrind_table(counts, {}, contenders)
    os.makedirs(opts.out, exist_ok=True)
    path = os.path.join(opts.out, "callgrind.md")
    with open(path, "w") as f:
        f.write("# Instructions of the allocation path (`valgrind --tool=callgrind`)\n\n"
                "Written by `make bench-callgrind` (bench/numpy_bench.py --callgrind-only); "
                "%s.\n\n" % machine_description()["stack"] + "\n".join(table) + "\n")
    print("\n".join(table))
    say("wrote " + path)
    return 1 if "_error" in counts or any("error" in n for n in counts.values()) else 0


def report_again(opts, contenders):
    """The report of an earlier run, from its results.json (rounds and
    repetitions as that run recorded them)."""
    with open(opts.report_from) as f:
        run = json.load(f)
    for k, v in run.get("opts", {}).items():
        setattr(opts, k, v)
    ran = {n for rows in run["results"].values() for n, r in rows.items() if r}
    for c in contenders:
        if c.name not in ran:
            c.skip_reason = c.skip_reason or "not in this run"
    report(opts, run["machine"], run["notes"], run["results"], contenders, run.get("elapsed", 0),
           run.get("callgrind"))


def main():
    opts = parse_args()
    workloads = select(WORKLOADS, opts.workloads, lambda w: w[0])
    scratch = tempfile.mkdtemp(prefix="hpalloc-bench.")
    empty_ctl, live_ctl = os.path.join(scratch, "ctl-empty"), os.path.join(scratch, "ctl-live")
    os.mkdir(empty_ctl, 0o755)
    os.mkdir(live_ctl, 0o755)
    with open(os.path.join(live_ctl, "verbose"), "w") as f:
        f.write("0\n")  # the default: behaviour unchanged, but a file to check
    contenders = select(all_contenders() + populate_contenders() + control_contenders(live_ctl),
                        opts.contenders,
                        lambda c: c.name)
    base_env = base_environment(opts, empty_ctl)
    check_peers(contenders, opts)
    if opts.report_from:
        subprocess.run(["rm", "-rf", scratch])
        return report_again(opts, contenders)
    if opts.callgrind_only:
        try:
            if not hpalloc_importable(base_env):
                for c in contenders:
                    if c.hpalloc:
                        c.skip_reason = "`import hpalloc.numpy` fails"
            return callgrind_only(opts, contenders, base_env)
        finally:
            subprocess.run(["rm", "-rf", scratch])
    missing = missing_libraries(workloads)
    missing.update(missing_cgroup(workloads))
    for w, why in missing.items():
        say("skipping the %s workload: %s" % (w, why))
    workloads = [x for x in workloads if x[0] not in missing]
    if not hpalloc_importable(base_env):
        for c in contenders:
            if c.hpalloc:
                c.skip_reason = "`import hpalloc.numpy` fails (build it, or give --pythonpath/--libdir)"
    machine = Machine()
    info = machine_description()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupt)
    t0 = time.monotonic()
    try:
        prepare(opts, machine, contenders)
        for n in machine.notes:
            say(n)
        for c in contenders:
            if c.skip_reason:
                say("skipping %s: %s" % (c.name, c.skip_reason))
        results = run_all(opts, contenders, workloads, base_env, machine)
        # beside the allocation path's times, when that row runs
        callgrind = (callgrind_counts(opts, contenders, base_env)
                     if "allocpath" in results and not opts.no_callgrind else None)
    except KeyboardInterrupt:
        say("interrupted: restoring the machine")
        raise SystemExit(130)
    finally:
        machine.restore()
        subprocess.run(["rm", "-rf", scratch])
    elapsed = time.monotonic() - t0
    os.makedirs(opts.out, exist_ok=True)
    pools = machine.pools_note()
    if pools:
        machine.notes.append(pools)
    recorded = {k: getattr(opts, k) for k in ("quick", "rounds", "reps", "warmup", "app_reps",
                                              "app_warmup", "scale", "gather_bytes", "cold_gap")}
    with open(os.path.join(opts.out, "results.json"), "w") as f:
        json.dump({"machine": info, "notes": machine.notes, "results": results,
                   "opts": recorded, "elapsed": elapsed, "callgrind": callgrind}, f)
    report(opts, info, machine.notes, results, contenders, elapsed, callgrind)


if __name__ == "__main__":
    sys.exit(main())
