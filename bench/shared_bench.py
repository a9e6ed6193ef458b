"""Sending a 1 GiB array to 2 worker processes that sum it (issue 14):
pickle copy (Pool.map with the array itself), multiprocessing.shared_memory
(SharedMemory + np.ndarray(buffer=...), the name sent), hpalloc shared
(hpalloc.numpy.shared_zeros, the array sent: its descriptor travels).

Each contender runs in its own process per round, rounds interleave the
contenders, medians are reported.  Time: from handing the array to the pool
until both sums are back (the array is made and filled before).  Memory: the
peak, over the whole machine, of used memory (MemTotal - MemAvailable) plus
hugetlb pages in use, above what was in use before -- every process counts,
shared pages once.  As root a 2 MiB pool for the 1 GiB is reserved for the
run (and given back); without it hpalloc's block falls back (see the row's
`backing`).

    python3 bench/shared_bench.py [--rounds 3] [--size-mib 1024]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import hp_pools  # noqa: E402  (the tests' one hugetlb pool fixture)
POOL_PAGESIZE = 2 << 20


def meminfo():
    vals = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            vals[k] = int(v.split()[0]) * 1024
    used = vals["MemTotal"] - vals["MemAvailable"]
    huge = (vals["HugePages_Total"] - vals["HugePages_Free"]) * vals["Hugepagesize"] // 1024
    return used + huge


def worker_sum(args):
    kind, payload, half = args
    import numpy as np
    if kind == "shm":
        from multiprocessing import shared_memory
        name, n = payload
        shm = shared_memory.SharedMemory(name=name)
        a = np.ndarray((n,), dtype=np.float64, buffer=shm.buf)
        s = float(a[half::2].sum())
        del a
        shm.close()
        return s
    return float(payload[half::2].sum())


def one_run(kind, size):
    """In a fresh process: make, fill, send, sum; print JSON."""
    import multiprocessing as mp
    import numpy as np
    n = size // 8
    time.sleep(1.0)  # let the previous run's memory go back first
    base = meminfo()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], meminfo())
            time.sleep(0.005)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    backing = None
    if kind == "hpalloc":
        import hpalloc.numpy as hn
        a = hn.shared_zeros(n)
        backing = hn.backing(a)["shared"]["backend"]
    elif kind == "shm":
        from multiprocessing import shared_memory
        shm = shared_memory.SharedMemory(create=True, size=size)
        a = np.ndarray((n,), dtype=np.float64, buffer=shm.buf)
    else:
        a = np.zeros(n)
    a[:] = 1.0
    payload = (shm.name, n) if kind == "shm" else a
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(worker_sum, [("warm", np.ones(4), 0)] * 2)  # workers up
        t0 = time.perf_counter()
        sums = pool.map(worker_sum, [(kind, payload, 0), (kind, payload, 1)])
        elapsed = time.perf_counter() - t0
    stop.set()
    t.join()
    assert sum(sums) == n, sums
    if kind == "shm":
        del a, payload
        shm.close()
        shm.unlink()
    print(json.dumps({"kind": kind, "seconds": elapsed,
                      "peak_bytes": peak[0] - base, "backing": backing}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = args.size_mib << 20
    if args.one:
        one_run(args.one, size)
        return
    pool_before = None
    if os.geteuid() == 0 and hp_pools.pool_exists(POOL_PAGESIZE):
        pool_before = hp_pools.pool_read(POOL_PAGESIZE, "nr_hugepages")
        hp_pools.pool_write_nr(POOL_PAGESIZE, pool_before + size // POOL_PAGESIZE)
    try:
        kinds = ["pickle", "shm", "hpalloc"]
        results = {k: [] for k in kinds}
        for r in range(args.rounds + 1):  # round 0 warms up
            for k in kinds:
                out = subprocess.run([sys.executable, __file__, "--one", k,
                                      "--size-mib", str(args.size_mib)],
                                     capture_output=True, text=True, check=True)
                if r:
                    results[k].append(json.loads(out.stdout))
    finally:
        if pool_before is not None:
            hp_pools.pool_write_nr(POOL_PAGESIZE, pool_before)
    base = statistics.median(x["seconds"] for x in results["pickle"])
    print("| %d MiB to 2 workers, summed | time (median) | vs pickle | peak memory (median) | backing |"
          % args.size_mib)
    print("|---|---|---|---|---|")
    for k, label in (("pickle", "pickle copy (Pool.map)"),
                     ("shm", "multiprocessing.shared_memory"),
                     ("hpalloc", "hpalloc.numpy.shared_zeros")):
        secs = statistics.median(x["seconds"] for x in results[k])
        peak = statistics.median(x["peak_bytes"] for x in results[k])
        print("| %s | %.3f s | %.2f | %.0f MiB | %s |" % (
            label, secs, secs / base, peak / (1 << 20),
            results[k][0]["backing"] or ("4K shmem" if k == "shm" else "private copies")))


if __name__ == "__main__":
    main()
