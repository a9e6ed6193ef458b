"""bench-dask: a Dask array workload with and without hpalloc on the workers.

    (x + x.T).sum() on a 4 GiB float64 array in 256 MiB chunks,
    LocalCluster(processes=True, n_workers=2, threads_per_worker=1)

x is random (da.random.random, not persisted), so every compute makes the
chunks, sends half of them to the other worker for the transpose, adds and
reduces.  Contenders: NumPy's default; hpalloc.dask's plugin (NumPy's
handler); the worker processes under libhpalloc-preload.so, started so by
their nanny (LocalCluster(preload_nanny=["hpalloc.dask"]): every large malloc).
They are interleaved: each round starts a fresh cluster per contender (order
rotating), computes once to warm up, then times
--computes computes.  Per compute: wall time, minor page faults of both
workers (getrusage inside them), and at the end the workers' huge bytes per
smaps.  Prints a markdown table (medians over every timed compute) and the
ratio; --json FILE writes the raw numbers.

    python3 bench/dask_bench.py [--size 4G] [--chunk 256M] [--rounds 3]
                                [--computes 2] [--quick] [--json FILE]

`make bench-dask` runs it through tests/run-test (one at a time on the
machine).  This machine is shared: read ratios, not absolute times.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4G", help="array bytes (4G)")
    ap.add_argument("--chunk", default="256M", help="chunk bytes (256M)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--computes", type=int, default=2,
                    help="timed computes per cluster, after one warm-up")
    ap.add_argument("--quick", action="store_true",
                    help="1G array, 64M chunks, 1 round: a smoke run")
    ap.add_argument("--json", help="write the raw numbers here")
    args = ap.parse_args()
    if args.quick:
        args.size, args.chunk, args.rounds = "1G", "64M", 1
    return args


# ---- inside the workers ------------------------------------------------------

def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# The tests' one reader of smaps, found through this script's path (the
# workers are other processes: they import it when they run the function).
TESTS_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")


def smaps_huge_total():
    """Bytes of the worker on huge pages, THP or hugetlb (hp_memory.huge_of)."""
    if TESTS_PYTHON not in sys.path:
        sys.path.append(TESTS_PYTHON)
    import hp_memory
    return hp_memory.process_huge_bytes()


# ---- the driver ----------------------------------------------------------------

def side(nbytes, chunk_bytes):
    """Square float64 array of about nbytes in square chunks of about
    chunk_bytes: (n, c) with n a multiple of c."""
    c = int(math.sqrt(chunk_bytes / 8))
    per_side = max(1, round(math.sqrt(nbytes / 8) / c))
    return per_side * c, c


CONTENDERS = ("default", "hpalloc", "preload")
LABELS = {"default": "NumPy default", "hpalloc": "hpalloc.dask plugin",
          "preload": "preload through the nanny"}


def one_cluster(contender, n, c, computes):
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster
    import hpalloc.dask

    # no spilling or pausing: the workers hold what the workload needs
    extra = {"preload_nanny": ["hpalloc.dask"]} if contender == "preload" else {}
    with dask.config.set({"distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False,
                          "distributed.worker.memory.pause": False}), \
            LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                         memory_limit=0, dashboard_address=None,
                         silence_logs=50, **extra) as cluster, \
            Client(cluster, timeout=60) as client:
        if contender == "hpalloc":
            hpalloc.dask.register(client, hpalloc.dask.HpallocPlugin())
        if contender == "preload":
            assert all(client.run(hpalloc.preloaded).values()), "workers not preloaded"
        x = da.random.random((n, n), chunks=(c, c))
        expr = (x + x.T).sum()
        expr.compute()  # warm-up: first touch of the VM's memory, imports
        out = []
        for _ in range(computes):
            f0 = client.run(minor_faults)
            t0 = time.perf_counter()
            expr.compute()
            seconds = time.perf_counter() - t0
            f1 = client.run(minor_faults)
            out.append({"seconds": seconds,
                        "faults": sum(f1[w] - f0[w] for w in f1)})
        huge = sum(client.run(smaps_huge_total).values())
        return [dict(r, huge_bytes_at_end=huge, contender=contender) for r in out]


def table(results, n, c):
    gib = n * n * 8 / (1 << 30)
    lines = ["bench-dask: (x + x.T).sum(), x %dx%d float64 (%.2f GiB) in %dx%d "
             "chunks (%.0f MiB), 2 workers x 1 thread; %d CPUs, load %s "
             "(shared machine)" % (n, n, gib, c, c, c * c * 8 / (1 << 20),
                                    os.cpu_count(),
                                    open("/proc/loadavg").read().split()[0]),
             "",
             "| contender | median s | min s | max s | minor faults / compute "
             "(median) | workers' huge bytes (smaps, end) |",
             "|---|---|---|---|---|---|"]
    medians = {}
    for name in CONTENDERS:
        rows = [r for r in results if r["contender"] == name]
        if not rows:
            continue
        secs = [r["seconds"] for r in rows]
        faults = statistics.median(r["faults"] for r in rows)
        huge = statistics.median(r["huge_bytes_at_end"] for r in rows)
        medians[name] = statistics.median(secs)
        lines.append("| %s | %.2f | %.2f | %.2f | %d | %.0f MiB |"
                     % (LABELS[name], medians[name], min(secs), max(secs), faults,
                        huge / (1 << 20)))
    lines.append("")
    for name in CONTENDERS[1:]:
        if name in medians:
            lines.append("%s / default (median time): %.2f"
                         % (LABELS[name], medians[name] / medians["default"]))
    return "\n".join(lines)


def main():
    args = parse_args()
    from hpalloc import parse_size
    n, c = side(parse_size(args.size), parse_size(args.chunk))
    results = []
    for r in range(args.rounds):
        k = r % len(CONTENDERS)
        for contender in CONTENDERS[k:] + CONTENDERS[:k]:
            rows = one_cluster(contender, n, c, args.computes)
            for row in rows:
                print("round %d %-8s %.2f s, %d faults" % (
                    r + 1, row["contender"], row["seconds"], row["faults"]),
                    file=sys.stderr, flush=True)
            results.extend(rows)
    print(table(results, n, c))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": n, "chunk": c, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
