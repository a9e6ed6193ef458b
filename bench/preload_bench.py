#!/usr/bin/env python3
"""make bench-preload: libhpalloc-preload.so against preloaded tcmalloc,
jemalloc, mimalloc and glibc's default malloc (issue 13).

    preload_bench.py --preload LIB [--rounds N] [--out FILE]

Workloads whose large buffers come from malloc outside NumPy's handler (or
from NumPy with its default handler): a scipy.fft round trip on 2^25
doubles, a pandas 4M x 4M merge, a PyTorch CPU workload (elementwise ops
on 2^25 floats, fresh result tensors), and NumPy temporaries (`a + b` on
256 MiB arrays).  Each (workload, contender) runs in its own process: one
untimed warm-up call, then 3 timed calls; the process reports the median
seconds and minor faults (getrusage) of those calls.  Contenders run
interleaved, their order rotating each round; the table gives the median
over rounds.  hpalloc runs with mode=thp.  Shared, noisy machine: read ratios, not
absolute times.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

LIBDIR = "/usr/lib/x86_64-linux-gnu"
PEERS = {
    "tcmalloc": LIBDIR + "/libtcmalloc_minimal.so.4",
    "jemalloc": LIBDIR + "/libjemalloc.so.2",
    "mimalloc": LIBDIR + "/libmimalloc.so.2",
}

# Runs in the child: WORKLOAD names one of these; prints {"s": .., "faults": ..}.
CHILD = r"""
import json, os, resource, statistics, sys, time
import numpy as np
name = os.environ["HP_BENCH_WORKLOAD"]
if name == "fft":
    import scipy.fft
    x = np.random.default_rng(1).standard_normal(2**25)
    def once():
        y = scipy.fft.irfft(scipy.fft.rfft(x), n=x.size)
        assert abs(y[123] - x[123]) < 1e-9
elif name == "merge":
    import pandas as pd
    rng = np.random.default_rng(1)
    n = 4_000_000
    left = pd.DataFrame({"k": rng.permutation(n), "a": rng.standard_normal(n)})
    right = pd.DataFrame({"k": rng.permutation(n), "b": rng.standard_normal(n)})
    def once():
        m = left.merge(right, on="k")
        assert len(m) == n
elif name == "torch":
    import torch
    torch.set_num_threads(1)
    x = torch.randn(2**25)
    def once():
        for _ in range(4):
            y = x * 2.0 + 1.0
            z = torch.sqrt(y.abs())
            del y, z
elif name == "numpy_temp":
    a = np.ones(2**25); b = np.ones(2**25)
    def once():
        for _ in range(4):
            d = a + b
            del d
else:
    sys.exit("unknown workload " + name)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
once()
secs, flts = [], []
for _ in range(3):
    f0, t0 = faults(), time.perf_counter()
    once()
    secs.append(time.perf_counter() - t0)
    flts.append(faults() - f0)
print(json.dumps({"s": statistics.median(secs), "faults": statistics.median(flts)}))
"""

WORKLOADS = ["fft", "merge", "torch", "numpy_temp"]


def contender_env(name, preload, libdir):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for var in list(env):
        if var.startswith("HPALLOC_") or var == "LD_PRELOAD":
            env.pop(var)
    if name == "hpalloc":
        # THP, like the peers: never the machine-wide hugetlb pools, which
        # tests (under tests/run-test's lock) may be sizing meanwhile.
        env["HPALLOC_MODE"] = "thp"
        env["LD_PRELOAD"] = preload
        env["LD_LIBRARY_PATH"] = libdir + ((":" + env["LD_LIBRARY_PATH"])
                                           if env.get("LD_LIBRARY_PATH") else "")
    elif name in PEERS:
        env["LD_PRELOAD"] = PEERS[name]
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preload", required=True, help="libhpalloc-preload.so")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", help="write the JSON samples here too")
    args = ap.parse_args()
    libdir = os.path.dirname(os.path.abspath(args.preload))
    contenders = ["default", "hpalloc"] + [p for p in PEERS if os.path.exists(PEERS[p])]
    workloads = args.workloads.split(",")
    samples = {(w, c): [] for w in workloads for c in contenders}
    for r in range(args.rounds):
        for w in workloads:
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            for c in order:
                env = dict(contender_env(c, args.preload, libdir), HP_BENCH_WORKLOAD=w)
                p = subprocess.run([sys.executable, "-c", CHILD], env=env,
                                   capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    sys.exit("%s under %s failed: %s" % (w, c, p.stderr[-2000:]))
                samples[(w, c)].append(json.loads(p.stdout))
                print("round %d %-10s %-9s %s" % (r + 1, w, c, p.stdout.strip()),
                      file=sys.stderr, flush=True)
    print("| workload | contender | median s | median minor faults | s / tcmalloc |")
    print("|---|---|---|---|---|")
    for w in workloads:
        med = {c: statistics.median(x["s"] for x in samples[(w, c)]) for c in contenders}
        for c in contenders:
            flt = statistics.median(x["faults"] for x in samples[(w, c)])
            ratio = med[c] / med["tcmalloc"] if "tcmalloc" in med else float("nan")
            print("| %s | %s | %.3f | %d | %.2f |" % (w, c, med[c], flt, ratio))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"%s/%s" % k: v for k, v in samples.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
