#!/usr/bin/env python3
"""make bench-growth: an array growing by doubling, hpalloc's default knobs
against NumPy's default and tcmalloc, jemalloc, mimalloc preloaded (issue 17).

    growth_bench.py --pythonpath DIR --libdir DIR [--rounds N] [--out FILE]

The workload is issue 17's: `a.resize(n, refcheck=False); a[-1] = 1` with n
doubling from 1 KiB to 1 GiB of float64 (NumPy zero-fills each new half).
Each contender runs in its own process: one untimed warm-up growth, then 4
timed ones (the array dropped after each); the process reports the median
and the slowest of the four and the minor faults of the median one.
Contenders run interleaved, their order rotating each round; the table
gives, per contender, the median over rounds of the per-process medians,
the worst max/median of any process (bimodality), and the ratio to the
best peer.  The machine as it is: free page reporting, other jobs.
hpalloc's extra rows name their knobs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from numpy_bench_cast import all_contenders  # noqa: E402  (the peers' libraries: one list)

PEERS = {c.name: c.preload for c in all_contenders() if c.name in ("tcmalloc", "jemalloc", "mimalloc")}
HPALLOC = {
    "hpalloc (default knobs)": {},
    "hpalloc cache_max=0": {"HPALLOC_CACHE_MAX": "0"},
    "hpalloc uring=off": {"HPALLOC_URING": "off"},
}

CHILD = r"""
import json, os, resource, statistics, time
import numpy as np
if os.environ.get("HPALLOC_NUMPY") == "1":
    import hpalloc.numpy
    if not hpalloc.numpy.installed():
        hpalloc.numpy.install()
    assert hpalloc.numpy.get_handler_name() == "hpalloc"
def once():
    a = np.ones(128)
    n = a.size
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    while n * 8 < (1 << 30):
        n *= 2
        a.resize(n, refcheck=False)
        a[-1] = 1
    dt = time.perf_counter() - t
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    assert a[0] == 1 and a[-1] == 1 and a[n // 2] == 0
    del a
    return dt, faults
once()
runs = sorted(once() for _ in range(4))
print(json.dumps({"median": statistics.median(r[0] for r in runs),
                  "max": runs[-1][0], "faults": runs[len(runs) // 2][1]}))
"""


def env_for(name, args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if name in PEERS:
        env["LD_PRELOAD"] = PEERS[name]
    elif name in HPALLOC:
        env["HPALLOC_NUMPY"] = "1"
        env["PYTHONPATH"] = args.pythonpath
        env["LD_LIBRARY_PATH"] = args.libdir
        env.update(HPALLOC[name])
    return env


def run(name, args):
    out = subprocess.run([sys.executable, "-c", CHILD], env=env_for(name, args),
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit("growth_bench: %s failed:\n%s" % (name, out.stderr))
    return json.loads(out.stdout.splitlines()[-1])


def table(samples):
    peers = ["NumPy default"] + list(PEERS)
    best = min(statistics.median(s["median"] for s in samples[p]) for p in PEERS)
    rows = ["| contender | median s | worst max/median | faults | vs best peer |",
            "|---|---:|---:|---:|---:|"]
    for name in peers + list(HPALLOC):
        med = statistics.median(s["median"] for s in samples[name])
        worst = max(s["max"] / s["median"] for s in samples[name])
        faults = statistics.median(s["faults"] for s in samples[name])
        rows.append("| %s | %.3f | %.2f | %d | %.2fx |" % (name, med, worst, faults, med / best))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythonpath", required=True, help="where hpalloc's Python package is")
    ap.add_argument("--libdir", required=True, help="where libhpalloc.so.1 is")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="write the Markdown table here too")
    args = ap.parse_args()
    names = ["NumPy default"] + list(PEERS) + list(HPALLOC)
    samples = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            samples[name].append(run(name, args))
        print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr)
    text = table(samples)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
