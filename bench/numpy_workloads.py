"""One workload of the NumPy benchmark, in this process, for one contender.

    python3 numpy_workloads.py WORKLOAD [--reps N] [--warmup N] [--gather-bytes N]

The contender is chosen by the environment the harness (numpy_bench.py)
gives this process: LD_PRELOAD of a peer allocator, NUMPY_MADVISE_HUGEPAGE,
or HPALLOC_NUMPY=1 plus HPALLOC_<KNOB> settings.  Prints one JSON object on
stdout: {"metrics": {name: [sample, ...]}, "peak_bytes": N, "info": {...}}.

Every workload warms up first (the allocator's caches, the guest memory it
touches) and then takes several samples; the harness takes the medians.
Faults are minor page faults of this process (getrusage) during the timed
operation.  Peak memory is the larger of VmHWM and the RSS + hugetlb pages
sampled where the workload holds the most memory: hugetlb pages are not
counted in RSS, so VmHWM alone would flatter the hugetlb contenders.
"""

import argparse
import json
import os
import resource
import sys
import threading
import time

import numpy as np

# The tests' one reader of smaps, found through this script's path.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import hp_memory  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
F64 = 8


# ---- hpalloc, when this contender uses it ---------------------------------

def activate_hpalloc():
    """HPALLOC_NUMPY=1 selects hpalloc at start-up through the installed
    .pth; from a build tree (PYTHONPATH) no .pth runs, so install here.
    Either way the handler is checked: a contender that silently ran on
    NumPy's default would make the whole table wrong."""
    if os.environ.get("HPALLOC_NUMPY", "") != "1":
        return None
    import hpalloc
    import hpalloc.numpy
    if not hpalloc.numpy.installed():
        hpalloc.numpy.install()
    name = hpalloc.numpy.get_handler_name()
    if name != "hpalloc":
        sys.exit("numpy_workloads: HPALLOC_NUMPY=1 but the handler is %r" % name)
    return hpalloc


HPALLOC = activate_hpalloc()


def check_preload():
    """A contender that preloads an allocator (hpalloc's under `hpctl run
    --preload`, a peer's) must really have it in this process."""
    want = os.environ.get("HPALLOC_BENCH_PRELOADED")
    if not want:
        return
    with open("/proc/self/maps") as f:
        if want not in f.read():
            sys.exit("numpy_workloads: %s is not loaded in this process" % want)


# ---- measuring --------------------------------------------------------------

def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Peak:
    """Largest RSS + hugetlb seen at the sampling points."""

    def __init__(self):
        self.bytes = 0
        self.hugetlb = 0  # shows whether e.g. libhugetlbfs used the pool

    def sample(self):
        hugetlb = status_bytes("HugetlbPages")
        self.hugetlb = max(self.hugetlb, hugetlb)
        self.bytes = max(self.bytes, status_bytes("VmRSS") + hugetlb)

    def result(self):
        return max(self.bytes, status_bytes("VmHWM"))


PEAK = Peak()
INFO = {}  # what a workload wants to tell about its arrays


def timed(fn):
    """(seconds, minor faults) of one call of fn."""
    f0 = minor_faults()
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    return t1 - t0, minor_faults() - f0


def warm_then_time(once, opts):
    """opts.warmup untimed calls, then opts.reps timed ones."""
    for _ in range(opts.warmup):
        once()
    secs, faults = [], []
    for _ in range(opts.reps):
        t, f = timed(once)
        secs.append(t)
        faults.append(f)
    return {"s": secs, "faults": faults}


def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# ---- workloads ----------------------------------------------------------------
# Each returns {metric: [samples]}.  `opts` has reps and warmup.

def temporaries(nbytes, opts):
    """`d = a + b` (allocates the result) over the in-place
    `np.add(a, b, out=c)` (no allocation), alternating blocks of both in the
    same process so drift hits both; one ratio per block.

    `d = a + b` keeps the old d alive while the new one is computed, so four
    arrays take turns in the CPU caches where the in-place loop has three.
    Where 3 arrays fit in the last-level cache and 4 do not (8 MiB here, 32
    MiB L3), that alone costs time no allocator can win back; the second
    baseline writes alternately to two outputs, the same footprint without
    allocating, and separates the allocator's cost from the cache's."""
    n = nbytes // F64
    a, b, c, c2 = np.ones(n), np.ones(n), np.ones(n), np.ones(n)
    iters = max(6, min(2000, (256 * MiB) // nbytes * 6))

    def with_temporary():
        for _ in range(iters):
            d = a + b  # noqa: F841 (the allocation is the point)
        PEAK.sample()

    def in_place():
        for _ in range(iters):
            np.add(a, b, out=c)

    def in_place_two_outputs():
        for _ in range(iters // 2):
            np.add(a, b, out=c)
            np.add(a, b, out=c2)

    for _ in range(opts.warmup + 1):
        with_temporary()
        in_place()
        in_place_two_outputs()
    out = {k: [] for k in ("ratio", "ratio_same_footprint", "us_per_op",
                           "inplace_us_per_op", "faults")}
    for _ in range(opts.reps + 2):
        t_inplace, _ = timed(in_place)
        t_temp, f = timed(with_temporary)
        t_two, _ = timed(in_place_two_outputs)
        out["ratio"].append(t_temp / t_inplace)
        out["ratio_same_footprint"].append(t_temp / t_two)
        out["us_per_op"].append(t_temp / iters * 1e6)
        out["inplace_us_per_op"].append(t_inplace / iters * 1e6)
        out["faults"].append(f / iters)
    return out


def small(opts):
    """`x + y` on 128 float64: the ordinary (libc) path, ns per operation."""
    x, y = np.ones(128), np.ones(128)
    iters = 100_000

    def loop():
        for _ in range(iters):
            x + y

    for _ in range(opts.warmup):
        loop()
    samples = []
    for _ in range(2 * opts.reps + 3):  # short loops: more of them
        t, _ = timed(loop)
        samples.append(t / iters * 1e9)
    PEAK.sample()
    return {"ns_per_op": samples}


def zeros_touch(opts):
    """`a = np.zeros(1 GiB); a += 1`: time and minor faults.  The first call
    in the process is reported too (no reuse cache can help it); the
    harness starts this process right after the previous one ended, so the
    first call meets memory freed a moment ago: the warm first touch (the
    cold one is zeros1G-cold's)."""
    def once():
        a = np.zeros(GiB // F64)
        a += 1
        PEAK.sample()

    first_s, first_faults = timed(once)
    return dict(warm_then_time(once, opts), first_s=[first_s], first_faults=[first_faults])


# how long zeros1G-cold watches its array become huge: populate_pages=4K's
# collapse of 1 GiB took 2-4 s on the development VM (issue 35)
HUGE_WAIT_S = 8.0


def first_touch_only(opts):
    """The first touch alone: `a = np.zeros(1 GiB); a += 1` once, as the
    first thing the process does -- the harness starts it at least
    --cold-gap seconds after the last process ended, so the memory it meets
    has been given back to the host (cold).  Time, minor faults, and how
    much of the array smaps shows on huge pages right after the touch and
    once HUGE_WAIT_S have passed (or as soon as 90 % is): a mechanism that
    faults small pages first and collapses later shows there."""
    made = []

    def once():  # np.zeros in the timing: tcmalloc's calloc writes the zeros
        a = np.zeros(GiB // F64)
        a += 1
        made.append(a)

    t, f = timed(once)
    a = made.pop()
    PEAK.sample()
    huge_now = huge_bytes(a)
    waited, huge_later = 0.0, huge_now
    while huge_later < 0.9 * a.nbytes and waited < HUGE_WAIT_S:
        time.sleep(0.25)
        waited += 0.25
        huge_later = huge_bytes(a)
    return {"s": [t], "faults": [f], "huge_now_mib": [huge_now / MiB],
            "huge_later_mib": [huge_later / MiB], "huge_wait_s": [waited]}


def mapping_backing(a):
    """(Rss, AnonHugePages, hugetlb) in bytes of the mappings holding array
    a's memory (/proc/self/smaps): what the kernel committed for it,
    whoever's allocator it is.  A mapping that also holds other memory (a
    peer's arena) counts whole.  hugetlb pages are not in Rss: smaps counts
    them as Private_Hugetlb and Shared_Hugetlb."""
    entries = hp_memory.overlapping(a.ctypes.data, a.nbytes)
    return (sum(e.get("Rss", 0) for e in entries),
            sum(e.get("AnonHugePages", 0) for e in entries),
            sum(hp_memory.hugetlb_of(e) for e in entries))


def mapping_rss(a):
    """(Rss, AnonHugePages) of a's mappings (mapping_backing)."""
    return mapping_backing(a)[:2]


def huge_bytes(a):
    """Bytes of a's mappings on huge pages of either kind, per smaps."""
    _, huge, hugetlb = mapping_backing(a)
    return huge + hugetlb


def sparse_touch(opts):
    """`np.zeros(8 GiB)` touched at 1 %: one element per 100 x 2 MiB (41
    elements), then a pause in which workers that populate ahead would have
    run on: the array's committed memory (smaps Rss) and the touch's time."""
    n = opts.sparse_bytes // F64
    step = 100 * 2 * MiB // F64
    out = {"committed_mib": [], "anon_huge_mib": [], "s": [], "faults": []}
    for _ in range(opts.reps):
        a = np.zeros(n)
        t, f = timed(lambda: a.__setitem__(slice(None, None, step), 1))
        time.sleep(1.5)
        rss, huge = mapping_rss(a)
        PEAK.sample()
        out["committed_mib"].append(rss / MiB)
        out["anon_huge_mib"].append(huge / MiB)
        out["s"].append(t)
        out["faults"].append(f)
        del a
    INFO["sparse_touched_elements"] = len(range(0, n, step))
    return out


def gather(opts):
    """20 M random `take` from a (by default 4 GiB) float64 array: TLB-bound."""
    n = opts.gather_bytes // F64
    big = np.arange(n, dtype=np.float64)
    if HPALLOC is not None:  # did the big array get what the mode promises?
        b = HPALLOC.numpy.backing(big)
        INFO["big_array"] = "%s, %d MiB huge, kernel page %d KiB" % (
            b["backend"], b["huge_bytes"] >> 20, b["kernel_page_size"] >> 10)
    idx = np.random.default_rng(12345).integers(0, n, 20_000_000)
    out = None

    def once():
        nonlocal out
        out = big.take(idx)
        PEAK.sample()

    for _ in range(opts.warmup):
        once()
    secs = []
    for _ in range(opts.reps):
        secs.append(timed(once)[0])
    expect = float(idx[-1])
    if out[-1] != expect:  # the work really happened
        sys.exit("gather: wrong result %r != %r" % (out[-1], expect))
    return {"s": secs}


def threads(opts):
    """2 threads, each 40 x (np.ones(64 MiB), *= 2, free); wall time."""
    def worker():
        for _ in range(40):
            a = np.ones(64 * MiB // F64)
            a *= 2
            del a

    def once():
        ts = [threading.Thread(target=worker) for _ in range(2)]
        for t in ts:
            t.start()
        PEAK.sample()
        for t in ts:
            t.join()

    return warm_then_time(once, opts)


def resize(opts):
    """ndarray.resize doubling from 1 MiB up to 1 GiB (NumPy reallocs and
    zero-fills the new half each time): time and minor faults."""
    def once():
        a = np.ones(MiB // F64)
        n = a.size
        while n * F64 < GiB:
            n *= 2
            a.resize(n, refcheck=False)
        PEAK.sample()
        assert a[0] == 1.0 and a[-1] == 0.0

    return warm_then_time(once, opts)


def alloc_path(opts):
    """The allocation path itself: `np.empty(64 MiB)` + free (a cache hit
    for a caching allocator) and `np.empty(16)` + free, ns per pair.  Run
    with and without a live control directory, it shows what the knob
    check costs each allocation."""
    def loop(count, nelem):
        def run():
            for _ in range(count):
                np.empty(nelem)
        return run

    big, tiny = loop(20_000, 64 * MiB // F64), loop(200_000, 16)
    for _ in range(opts.warmup):
        big()
        tiny()
    big_ns, tiny_ns = [], []
    for _ in range(opts.reps + 2):
        big_ns.append(timed(big)[0] / 20_000 * 1e9)
        tiny_ns.append(timed(tiny)[0] / 200_000 * 1e9)
    PEAK.sample()
    return {"large_ns": big_ns, "small_ns": tiny_ns}


ALLOCIR_WARMUP = 200  # pairs before the counted loop: caches filled, sizes learnt


def alloc_instructions(opts):
    """For `valgrind --tool=callgrind` (the harness's --callgrind): the
    same `np.empty` + free pairs as allocpath, opts.count of them after
    ALLOCIR_WARMUP, untimed; opts.which is "small" (16 elements), "large"
    (64 MiB, cached by a caching allocator) or "none" (the warm-up alone:
    the baseline the harness subtracts, so that what is left is the pairs'
    own instructions)."""
    nelem = {"small": 16, "large": 64 * MiB // F64, "none": 16}[opts.which]
    count = 0 if opts.which == "none" else opts.count
    for _ in range(ALLOCIR_WARMUP):
        np.empty(nelem)
    for _ in range(count):
        np.empty(nelem)
    return {"pairs": [count]}


# ---- under a memory limit (issue 25) ------------------------------------------
# The harness runs these in a memory cgroup of their own (numpy_bench.py:
# CGROUP_WORKLOADS), limited to LIMIT (HPALLOC_BENCH_LIMIT) for the
# pressure rows and unlimited for `reuse`; it reads the cgroup's peak and
# OOM kills itself (a killed process reports nothing).  A process learns
# its cgroup's charge from HPALLOC_BENCH_CGROUP_USAGE, a file.

def rss_bytes():
    return status_bytes("VmRSS")


def limit_repro(opts):
    """Issue 25's reproduction: a 1 GiB array freed, then 1 GiB more in 4096
    arrays of 256 KiB (below hpalloc's threshold: libc's).  Wall time of the
    whole program; the resident memory the allocator kept after the free."""
    t0, f0 = time.perf_counter(), minor_faults()
    before = rss_bytes()
    a = np.ones(1 << 27)
    PEAK.sample()
    del a
    kept = max(rss_bytes() - before, 0)
    small = [np.ones(1 << 15) for _ in range(4096)]
    PEAK.sample()
    t, faults = time.perf_counter() - t0, minor_faults() - f0
    if small[-1][-1] != 1.0:  # the work really happened
        sys.exit("limit_repro: wrong contents")
    return {"s": [t], "faults": [faults], "kept_after_free_bytes": [kept]}


REUSE_ARRAYS = 4                 # live at once: 4 distinct blocks to reuse
REUSE_BYTES = 64 * MiB
CHURN_BYTES = 256 * MiB          # 1024 arrays of 256 KiB, libc's, freed again
SMALL = 1 << 15                  # float64 elements: 256 KiB


def reuse(opts):
    """Reuse speed with and without memory pressure: REUSE_ARRAYS arrays of
    64 MiB made (np.ones writes every page), then freed, timed; between two
    rounds, 256 MiB of 256 KiB arrays (libc's) made and freed.  A ballast
    of 256 KiB arrays, held throughout, is sized from the cgroup's charge
    at the start so that everything live stays 128 MiB under the limit
    while the freed 256 MiB, kept too, would not fit: under the limit the
    kernel must take back at least half of what an allocator keeps after a
    free (a reuse cache refaults what it lost), without it nothing.  Run
    with and without the limit, the ballast is the same."""
    limit = int(os.environ["HPALLOC_BENCH_LIMIT"])
    with open(os.environ["HPALLOC_BENCH_CGROUP_USAGE"]) as f:
        usage = int(f.read())
    ballast_bytes = limit - usage - CHURN_BYTES - REUSE_ARRAYS * REUSE_BYTES // 2
    ballast = [np.ones(SMALL) for _ in range(max(ballast_bytes, 0) // (SMALL * F64))]
    INFO["ballast"] = "%d MiB held, %d MiB charged at the start" % (ballast_bytes >> 20, usage >> 20)

    def arrays():
        held = [np.ones(REUSE_BYTES // F64) for _ in range(REUSE_ARRAYS)]
        PEAK.sample()
        del held

    def churn():
        small = [np.ones(SMALL) for _ in range(CHURN_BYTES // (SMALL * F64))]
        PEAK.sample()
        del small

    for _ in range(opts.warmup):
        arrays()
        churn()
    ms, faults = [], []
    for _ in range(opts.reps + 2):
        t, f = timed(arrays)
        ms.append(t * 1e3)
        faults.append(f)
        churn()
    assert len(ballast) == 0 or ballast[-1][-1] == 1.0
    return {"ms": ms, "faults": faults}


# ---- whole applications (issue 17) ---------------------------------------------
# Each builds its data once, then times a whole step of a real library:
# what users run, not an allocation loop.  opts.scale shrinks the data
# (quick mode); the results are checked, so a broken contender cannot look
# fast.

def scaled(n, opts):
    return max(1, int(n * opts.scale))


def app_groupby(opts):
    """pandas `groupby().agg` on 20 M rows (100,000 groups)."""
    import pandas as pd
    n = scaled(20_000_000, opts)
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"k": rng.integers(0, 100_000, n), "a": rng.standard_normal(n),
                       "b": rng.standard_normal(n)})

    def once():
        r = df.groupby("k").agg({"a": "sum", "b": "mean"})
        PEAK.sample()
        assert len(r) == df["k"].nunique()
    return warm_then_time(once, opts)


def app_merge(opts):
    """pandas 4 M x 4 M `merge` on a permuted integer key."""
    import pandas as pd
    n = scaled(4_000_000, opts)
    rng = np.random.default_rng(1)
    left = pd.DataFrame({"k": rng.permutation(n), "a": rng.standard_normal(n)})
    right = pd.DataFrame({"k": rng.permutation(n), "b": rng.standard_normal(n)})

    def once():
        m = left.merge(right, on="k")
        PEAK.sample()
        assert len(m) == n
    return warm_then_time(once, opts)


def app_kmeans(opts):
    """scikit-learn `KMeans(8).fit` on 1 M x 16 (Lloyd, 20 iterations)."""
    from sklearn.cluster import KMeans
    X = np.random.default_rng(1).standard_normal((scaled(1_000_000, opts), 16))

    def once():
        km = KMeans(n_clusters=8, n_init=1, max_iter=20, tol=0.0, random_state=0,
                    algorithm="lloyd").fit(X)
        PEAK.sample()
        assert km.cluster_centers_.shape == (8, 16)
    return warm_then_time(once, opts)


def app_fft(opts):
    """`scipy.fft` round trip (rfft, irfft) on 2^25 doubles."""
    import scipy.fft
    x = np.random.default_rng(1).standard_normal(scaled(2 ** 25, opts))

    def once():
        y = scipy.fft.irfft(scipy.fft.rfft(x), n=x.size)
        PEAK.sample()
        assert abs(y[123] - x[123]) < 1e-9
    return warm_then_time(once, opts)


def app_pipeline(opts):
    """A NumPy expression pipeline on 2^25 doubles: a dozen temporaries of
    256 MiB per call (norm, log, standardise, weight)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(scaled(2 ** 25, opts)), rng.standard_normal(scaled(2 ** 25, opts))

    def once():
        r = np.sqrt(a * a + b * b)
        r = np.where(r > 1.0, np.log(r), r * 0.5)
        r = (r - r.mean()) / r.std()
        s = np.exp(-np.abs(r)) * a + b
        PEAK.sample()
        assert np.isfinite(s[:1000]).all()
    return warm_then_time(once, opts)


def app_numba(opts):
    """An `@njit` function making ten 128 MiB temporaries per call."""
    from numba import njit
    require_adapters("numba")

    @njit
    def ten_temporaries(a):
        s = 0.0
        for i in range(10):
            t = a * 2.0
            s += t[i * 1000]
        return s

    a = np.ones(scaled(128 * MiB // F64, opts))

    def once():
        assert ten_temporaries(a) == 20.0
        PEAK.sample()
    return warm_then_time(once, opts)


def app_torch(opts):
    """PyTorch CPU: ten `(a * 2 + b).sum()` on 128 MiB tensors, one thread."""
    import torch
    torch.set_num_threads(1)
    require_adapters("torch")
    n = scaled(128 * MiB // F64, opts)
    a = torch.ones(n, dtype=torch.float64)
    b = torch.ones(n, dtype=torch.float64)

    def once():
        s = 0.0
        for _ in range(10):
            s += (a * 2 + b).sum().item()
        PEAK.sample()
        assert s == 30.0 * n
    return warm_then_time(once, opts)


def app_dask(opts):
    """Dask: `(x + x.T).sum()` on a 1 GiB random array in 64 MiB chunks,
    the threaded scheduler (every chunk a NumPy array made in a worker
    thread)."""
    import dask.array as da
    n = int(11585 * opts.scale ** 0.5)
    x = da.random.random((n, n), chunks=(n // 4, n // 4))

    def once():
        v = (x + x.T).sum().compute(scheduler="threads")
        PEAK.sample()
        assert v > 0
    return warm_then_time(once, opts)


def require_adapters(*names):
    """Under `hpctl run` the library's adapter must have been installed when
    the program imported it; otherwise this is no hpalloc measurement."""
    if HPALLOC is None:
        return
    import importlib
    for name in names:
        if not importlib.import_module("hpalloc." + name).installed():
            sys.exit("numpy_workloads: hpalloc.%s was not activated" % name)


WORKLOADS = {
    "temp256M": lambda o: temporaries(256 * MiB, o),
    "temp8M": lambda o: temporaries(8 * MiB, o),
    "temp1M": lambda o: temporaries(1 * MiB, o),
    "small": small,
    "zeros1G": zeros_touch,
    "zeros1G-cold": first_touch_only,
    "sparse8G": sparse_touch,
    "gather": gather,
    "threads": threads,
    "resize1G": resize,
    "allocpath": alloc_path,
    "allocir": alloc_instructions,
    "pressure": limit_repro,
    "reuse": reuse,
    "reuse-pressure": reuse,
    "groupby": app_groupby,
    "merge": app_merge,
    "kmeans": app_kmeans,
    "fft": app_fft,
    "pipeline": app_pipeline,
    "numba": app_numba,
    "torch": app_torch,
    "dask": app_dask,
}


# ---- what ran -----------------------------------------------------------------

def hpalloc_info():
    if HPALLOC is None:
        return {}
    stats = HPALLOC.stats()
    knobs = {k: v["value"] for k, v in HPALLOC.config().items()}
    keep = ("thp_live_bytes", "hugetlb_live_bytes", "cache_hits", "cache_misses",
            "fallbacks", "failures", "realloc_inplace", "realloc_copies",
            "populate_ahead_bytes", "populate_saved_us", "populate_threads", "memcg_released_bytes")
    return {"knobs": knobs, "stats": {k: stats.get(k) for k in keep},
            "cache_max_bytes": HPALLOC.parse_size(knobs["cache_max"])}


def hpalloc_backing_probe():
    """Where a fresh 64 MiB array lands (backend and kernel page size), so
    the report can show that e.g. the hugetlb contender really got hugetlb."""
    if HPALLOC is None:
        return {}
    a = np.ones(64 * MiB // F64)
    b = HPALLOC.numpy.backing(a)
    return {"probe_backend": b["backend"], "probe_huge_bytes": b["huge_bytes"],
            "probe_kernel_page_size": b["kernel_page_size"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--gather-bytes", type=int, default=4 * GiB)
    p.add_argument("--sparse-bytes", type=int, default=8 * GiB)
    p.add_argument("--scale", type=float, default=1.0,
                   help="data of the application workloads, times this (quick mode)")
    p.add_argument("--count", type=int, default=20000, help="allocir: pairs counted")
    p.add_argument("--which", choices=("small", "large", "none"), default="none",
                   help="allocir: which pairs")
    opts = p.parse_args()
    check_preload()
    metrics = WORKLOADS[opts.workload](opts)
    peak = PEAK.result()  # before the probe below allocates anything
    info = {"handler": np.core.multiarray.get_handler_name(), "numpy": np.__version__,
            "hugetlb_peak_bytes": PEAK.hugetlb}
    info.update(INFO)
    info.update(hpalloc_info())
    info.update(hpalloc_backing_probe())
    json.dump({"metrics": metrics, "peak_bytes": peak, "info": info}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
