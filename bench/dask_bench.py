"""bench-dask: Dask jobs on 2 local workers, without hpalloc and with each
way of switching it on (issues 16, 37 and 49).

Workloads (--workloads, default all three):

  merge  issue 49's job: two frames of --rows rows (int64 key k in
         0..--keys, float64 columns x and y, --partitions partitions each,
         made by dask.delayed functions), an inner merge on k with
         shuffle_method="tasks", then
         groupby("k").agg({"x_x": "sum", "y_y": "mean"}).compute();
         memory_limit="5GiB" a worker, Dask's memory settings as they come
  map    a frame of --map-rows rows (as above, --map-partitions partitions)
         through map_partitions(lambda p: p.assign(z=p.x * 2 + p.y,
         w=np.sqrt(p.x.abs()))), fresh columns in every partition, then
         .sum().compute(); memory_limit="5GiB"
  array  (x + x.T).sum() on a --size float64 array in --chunk chunks
         (da.random.random, not persisted), one warm-up compute, then the
         median of --computes timed ones; no memory limit, no spilling

Activations (--activations, default all three): none (no hpalloc in any
process); plugin (client.register_plugin(HpallocPlugin()), default knobs,
through hpalloc.dask.register); preload (LocalCluster(preload_nanny=
["hpalloc.dask"]): the worker processes under libhpalloc-preload.so).

Every run is a process of its own (this script with --child) with its own
LocalCluster(processes=True, n_workers=2, threads_per_worker=1) on
127.0.0.1; the workers import what the job needs before the clock starts,
and the time is the wall time of the computation.  Runs are interleaved,
the activations' order rotating by round (A B C, B C A, C A B, ...), and
each workload gets --runs rounds (10 by default, the fewest the verdicts
take).  Per run also: the workers' minor faults and CPU time (getrusage
inside them, hpalloc's threads included) and hpalloc's populate counters
(populate_ahead_bytes, populate_cpu_us, populate_busy, populate_saved_us,
hpalloc.stats() in the workers; "–" where the library has no such
counter), each the difference over the timed computation summed over the
workers.

The report: the machine (CPU, cores, free page reporting) and the stack's
versions, then per workload a Markdown table: the runs, the median, the
ratio of medians to "none" with its 95 % bootstrap interval and the
verdict (bench/bench_stats.py, as bench-numpy: ahead or behind only when
the interval excludes 1, none from fewer than 10 runs a side), the
medians of faults, CPU time and counters.  --out FILE writes it too,
--json FILE every run's numbers.

    python3 bench/dask_bench.py [--quick] [--runs N] [--workloads merge,map,array]
                                [--activations none,plugin,preload] [--out FILE]
                                [--json FILE]

`make bench-dask` runs it with the venv's Python (PyPI's dask[distributed],
pandas and NumPy, hpalloc's wheel: Debian's dask 2022.12 has no
shuffle_method) through tests/run-test (one at a time on the machine);
BENCH_QUICK=1 is a smoke run (small frames, a 1 GiB array, 2 runs).
Interrupted (Ctrl-C, SIGTERM, SIGHUP), the run under way ends with its
cluster, and any process of it still alive afterwards (found by a mark in
its environment) is killed: no worker is left behind.  This machine is
shared: read ratios, not absolute times.
"""

import argparse
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_machine  # noqa: E402
from bench_proc import INTERRUPTS, raise_interrupt, run_process  # noqa: E402
from bench_stats import VERDICT_MIN_N, fmt_verdict, verdict  # noqa: E402

WORKLOADS = ("merge", "map", "array")
ACTIVATIONS = ("none", "plugin", "preload")
LABELS = {"none": "without hpalloc",
          "plugin": "`client.register_plugin(HpallocPlugin())`",
          "preload": "`preload_nanny=[\"hpalloc.dask\"]`"}
# hpalloc's counters read in the workers; populate_cpu_us and populate_busy
# come with issue 49's library change: absent before it (None, "–").
COUNTERS = ("populate_ahead_bytes", "populate_cpu_us", "populate_busy", "populate_saved_us")
# Every process of a run has this in its environment (the workers inherit
# it through the nannies): what is left of a run is found by it.
MARK = "HP_DASK_BENCH_RUN"  # not HPALLOC_*: no knob, and stripped from runs
MiB = 1 << 20


def say(msg):
    print("bench-dask: " + msg, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--activations", default=",".join(ACTIVATIONS))
    ap.add_argument("--runs", type=int, default=None,
                    help="runs (processes) per workload and activation (%d; --quick 2)"
                    % VERDICT_MIN_N)
    ap.add_argument("--rows", type=int, default=12_000_000, help="rows of each merged frame")
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys: k in 0..keys-1")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--map-rows", type=int, default=96_000_000)
    ap.add_argument("--map-partitions", type=int, default=64)
    ap.add_argument("--size", default="4G", help="array bytes (4G)")
    ap.add_argument("--chunk", default="256M", help="chunk bytes (256M)")
    ap.add_argument("--computes", type=int, default=2,
                    help="timed array computes per run, after one warm-up")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a run may take (900; --quick 300)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1.2 M rows on 100 k keys, 1 GiB array in 64 MiB "
                         "chunks, 2 runs")
    ap.add_argument("--out", help="write the Markdown report here")
    ap.add_argument("--json", help="write every run's numbers here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.keys, args.partitions = 1_200_000, 100_000, 8
        args.map_rows, args.map_partitions = 1_200_000, 8
        args.size, args.chunk, args.computes = "1G", "64M", 1
    if args.runs is None:
        args.runs = 2 if args.quick else VERDICT_MIN_N
    if args.timeout is None:
        args.timeout = 300 if args.quick else 900
    args.size_bytes = args.chunk_bytes = None  # hpalloc.parse_size, when "array" runs
    args.workloads = choose(args.workloads, WORKLOADS, "workload", ap)
    args.activations = choose(args.activations, ACTIVATIONS, "activation", ap)
    if args.runs < 1 or args.computes < 1 or args.timeout <= 0 or min(args.rows, args.keys, args.partitions,
                                                 args.map_rows, args.map_partitions) < 1:
        ap.error("--runs, --computes, --rows, --keys, --partitions, --map-rows and "
                 "--map-partitions must be at least 1, --timeout above 0")
    return args


def choose(text, known, what, ap):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        ap.error("unknown %s %s (known: %s)" % (what, ",".join(bad) or "(none)", ",".join(known)))
    return [n for n in known if n in names]


# ---- inside the workers (client.run; pickled by value from __main__) ------------------------

def worker_sample(with_hpalloc):
    """This worker's minor faults, CPU seconds (every thread: hpalloc's
    too) and, where hpalloc is in it, its counters (None: no such counter)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    row = {"pid": os.getpid(), "minflt": ru.ru_minflt, "cpu_s": ru.ru_utime + ru.ru_stime}
    if with_hpalloc:
        import hpalloc
        stats = hpalloc.stats()
        row["counters"] = {name: stats.get(name) for name in COUNTERS}
    return row


def worker_activation(dask_worker=None):
    """What serves this worker: hpalloc's library mapped at all, the plugin
    set up with NumPy's handler installed, the process preloaded."""
    with open("/proc/self/maps") as f:
        mapped = any("libhpalloc" in line for line in f)
    state = {"mapped": mapped, "plugin": False, "preloaded": False}
    if mapped:
        import hpalloc
        import hpalloc.numpy
        state["plugin"] = "hpalloc" in dask_worker.plugins and hpalloc.numpy.installed()
        state["preloaded"] = hpalloc.preloaded()
    return state


def worker_imports(modules):
    """Import what the job needs before the clock starts (alike for every
    activation: imports are not the job)."""
    import importlib
    for name in modules:
        importlib.import_module(name)
    return True


def make_part(i, rows, keys, seed):
    """Partition i of a frame: k int64 in 0..keys-1, x and y float64."""
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng([seed, i])
    return pd.DataFrame({"k": rng.integers(0, keys, rows, dtype=np.int64),
                         "x": rng.random(rows), "y": rng.random(rows)})


def fresh_columns(p):
    import numpy as np
    return p.assign(z=p.x * 2 + p.y, w=np.sqrt(p.x.abs()))


# ---- one run (the child process) ------------------------------------------------------------

def frame(rows, keys, partitions, seed):
    import dask
    import dask.dataframe as dd
    per = [rows // partitions + (1 if i < rows % partitions else 0) for i in range(partitions)]
    parts = [dask.delayed(make_part)(i, n, keys, seed) for i, n in enumerate(per)]
    return dd.from_delayed(parts, meta=make_part(0, 0, keys, seed))


def job(spec):
    """The run's job: imports (what the workers import first), make (a
    fresh collection to compute: new keys each time, so a compute never
    finds the last one's results still on the workers), check (of a result
    -> a short description), limit (memory_limit), config (Dask's),
    warmup (an untimed compute first)."""
    w = spec["workload"]
    frames = ("numpy", "pandas", "dask.dataframe")
    if w == "merge":
        def make():
            left = frame(spec["rows"], spec["keys"], spec["partitions"], 1)
            right = frame(spec["rows"], spec["keys"], spec["partitions"], 2)
            merged = left.merge(right, on="k", how="inner", shuffle_method="tasks")
            return merged.groupby("k").agg({"x_x": "sum", "y_y": "mean"})

        def check(r):
            # ~rows/keys rows a key on each side: nearly every key is in both
            assert len(r) > 0.9 * min(spec["keys"], spec["rows"]), len(r)
            return "%d groups" % len(r)
        return dict(imports=frames, make=make, check=check, limit="5GiB", config={},
                    warmup=False)
    if w == "map":
        def make():
            return frame(spec["map_rows"], spec["keys"], spec["map_partitions"], 3) \
                .map_partitions(fresh_columns).sum()

        def check(r):
            # z = 2x + y row by row, so in the sums up to rounding
            assert abs(r["z"] - (2 * r["x"] + r["y"])) <= 1e-6 * abs(r["z"]), r
            return "sum z %.6g" % r["z"]
        return dict(imports=frames, make=make, check=check, limit="5GiB", config={},
                    warmup=False)
    n, c = side(spec["size"], spec["chunk"])

    def make():
        import dask.array as da
        x = da.random.random((n, n), chunks=(c, c))  # a new seed, new keys
        return (x + x.T).sum()

    def check(r):
        assert 0.9 * n * n < r < 1.1 * n * n, r  # mean 1 per element
        return "%dx%d" % (n, n)
    # no spilling or pausing: the workers hold what the workload needs
    return dict(imports=("numpy", "dask.array"), make=make, check=check, limit=0,
                config={"distributed.worker.memory.target": False,
                        "distributed.worker.memory.spill": False,
                        "distributed.worker.memory.pause": False},
                warmup=True)


def side(nbytes, chunk_bytes):
    """Square float64 array of about nbytes in square chunks of about
    chunk_bytes: (n, c) with n a multiple of c."""
    c = int(math.sqrt(chunk_bytes / 8))
    per_side = max(1, round(math.sqrt(nbytes / 8) / c))
    return per_side * c, c


def activate(client, activation):
    """Switch the activation on (the plugin) and check that each worker is
    served as it says: none has no hpalloc mapped at all."""
    if activation == "plugin":
        import hpalloc.dask
        hpalloc.dask.register(client, hpalloc.dask.HpallocPlugin())
    states = client.run(worker_activation)
    want = {"none": lambda s: not s["mapped"], "plugin": lambda s: s["plugin"],
            "preload": lambda s: s["preloaded"]}[activation]
    wrong = {a: s for a, s in states.items() if not want(s)}
    if wrong:
        raise RuntimeError("workers not as %r says: %s" % (activation, wrong))


def differences(before, after):
    """Sums over the workers of after - before: minor faults, CPU seconds,
    hpalloc's counters (None for a counter a worker lacks; no counters
    without hpalloc); restarts: workers whose process changed in between
    (the nanny restarted it), left out of the sums."""
    same = [(b, after[a]) for a, b in before.items()
            if a in after and after[a]["pid"] == b["pid"]]
    out = {"minflt": sum(a["minflt"] - b["minflt"] for b, a in same),
           "cpu_s": sum(a["cpu_s"] - b["cpu_s"] for b, a in same),
           "restarts": len(after) - len(same), "counters": None}
    if same and all("counters" in a for b, a in same):
        pairs = {name: [(a["counters"][name], b["counters"][name]) for b, a in same]
                 for name in COUNTERS}
        out["counters"] = {name: None if any(None in p for p in v) else
                           sum(x - y for x, y in v) for name, v in pairs.items()}
    return out


def interrupted(signum, frame):
    """The first Ctrl-C, SIGTERM or SIGHUP ends the run; later ones (a
    terminal's Ctrl-C reaches the run, then the driver's SIGTERM follows)
    are ignored, so that they do not cut the cluster's close short."""
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt("signal %d" % signum)


def run_child(spec):
    """One run: a fresh LocalCluster, the activation, the job timed; its
    numbers as JSON on stdout.  An interrupt ends it as Ctrl-C does, so the
    cluster is closed on the way out (the driver kills it 10 s after its
    SIGTERM, and what outlives it then is found by its MARK)."""
    for sig in INTERRUPTS:
        signal.signal(sig, interrupted)
    import logging
    import dask
    from distributed import Client, LocalCluster
    activation = spec["activation"]
    work = job(spec)
    extra = {"preload_nanny": ["hpalloc.dask"]} if activation == "preload" else {}
    hp = activation != "none"
    with dask.config.set(work["config"]), \
            LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                         memory_limit=work["limit"], host="127.0.0.1", dashboard_address=":0",
                         silence_logs=logging.ERROR, local_directory=spec["scratch"],
                         **extra) as cluster, \
            Client(cluster, timeout=60) as client:
        activate(client, activation)
        client.run(worker_imports, work["imports"])
        if work["warmup"]:
            work["make"]().compute()  # first touch of the VM's memory
        before = client.run(worker_sample, hp)
        times = []
        for _ in range(spec["computes"]):
            collection = work["make"]()
            t0 = time.perf_counter()
            result = collection.compute()
            times.append(time.perf_counter() - t0)
            work["check"](result)
        after = client.run(worker_sample, hp)
        said = work["check"](result)
    row = {"seconds": statistics.median(times), "times": times, "result": said}
    row.update(differences(before, after))
    print(json.dumps(row))


# ---- the driver -------------------------------------------------------------------------------

def marked(token):
    """pids of the live processes whose environment holds MARK=token."""
    needle = ("%s=%s" % (MARK, token)).encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def sweep(token):
    """Kill whatever of a run outlived it (a worker whose nanny was killed
    before it could close it); returns how many."""
    left = marked(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def child_env(token):
    """This environment without HPALLOC_* (every activation with default
    knobs: the caller's settings would reach the preloaded workers), with
    the run's MARK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPALLOC_")}
    env[MARK] = token
    return env


def run_one(args, workload, activation):
    """One run in a process of its own; its numbers, or "error".  Its
    spill directory is made here (exclusively) and removed after
    whatever of it outlived it is gone."""
    scratch = tempfile.mkdtemp(prefix="hpalloc-dask-bench.")
    spec = {"workload": workload, "activation": activation, "rows": args.rows,
            "keys": args.keys, "partitions": args.partitions, "map_rows": args.map_rows,
            "map_partitions": args.map_partitions, "size": args.size_bytes,
            "chunk": args.chunk_bytes, "scratch": scratch,
            "computes": args.computes if workload == "array" else 1}
    token = "%d-%s" % (os.getpid(), uuid.uuid4().hex)
    start = time.monotonic()
    try:
        stdout, stderr, status = run_process(
            [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
            child_env(token), args.timeout)
    except subprocess.TimeoutExpired:  # run_process ended it
        stdout, stderr, status = "", "", "timed out after %g s" % args.timeout
    finally:
        left = sweep(token)
        if left:
            say("%d process(es) of the %s/%s run outlived it: killed"
                % (left, workload, activation))
        shutil.rmtree(scratch, ignore_errors=True)
    row = {"workload": workload, "activation": activation, "wall_s": time.monotonic() - start,
           "left_behind": left}
    lines = stdout.strip().splitlines()
    if status == 0 and lines:
        try:
            row.update(json.loads(lines[-1]))
            return row
        except ValueError:
            pass
    tail = [line for line in stderr.strip().splitlines() if line.strip()][-3:]
    how = (status if isinstance(status, str) else
           "killed by signal %d" % -status if status < 0 else "exit %d" % status)
    row["error"] = "%s: %s" % (how, " / ".join(tail) or "no output")
    return row


def run_all(args):
    results = []
    total = args.runs * len(args.workloads) * len(args.activations)
    t0 = time.monotonic()
    for rnd in range(args.runs):
        for workload in args.workloads:
            k = rnd % len(args.activations)
            for activation in args.activations[k:] + args.activations[:k]:
                row = dict(run_one(args, workload, activation), round=rnd + 1)
                results.append(row)
                say("[%d/%d %4.0fs] round %d %-5s %-7s %s" % (
                    len(results), total, time.monotonic() - t0, rnd + 1, workload, activation,
                    row.get("error") or "%.2f s, %d faults, %s"
                    % (row["seconds"], row["minflt"], row["result"])))
    return results


# ---- what it needs ---------------------------------------------------------------------------

def how_to_get(module):
    if module.split(".")[0] == "hpalloc":
        return ("hpalloc's wheel: `make bench-dask` builds and installs it in its venv; by "
                "hand, PYTHONPATH=BUILD/python/inplace LD_LIBRARY_PATH=BUILD/lib/.libs")
    pip, deb = bench_machine.PACKAGES.get(module, (module, module))
    if sys.prefix == "/usr":  # Debian's interpreter
        return "apt-get install %s, or `make bench-dask` (a venv with PyPI's)" % deb
    return "pip install " + pip
NEEDS = {"merge": ("numpy", "pandas", "dask.dataframe", "distributed"),
         "map": ("numpy", "pandas", "dask.dataframe", "distributed"),
         "array": ("numpy", "dask.array", "distributed")}

PREFLIGHT = r"""
import importlib, inspect, json, sys
out = {"missing": {}}
for m in sys.argv[1].split(","):
    try:
        importlib.import_module(m)
    except Exception as e:
        out["missing"][m] = "%s: %s" % (type(e).__name__, e)
try:
    import dask, dask.dataframe as dd
    out["shuffle_method"] = "shuffle_method" in inspect.signature(dd.DataFrame.merge).parameters
    out["dask"] = dask.__version__
except Exception:
    pass
try:
    import hpalloc, os
    out["hpalloc"] = os.path.dirname(hpalloc.__file__)
    out["preload_library"] = hpalloc.preload_library()
except Exception as e:
    out["hpalloc_error"] = str(e)
print(json.dumps(out))
"""


def missing(args):
    """Why this interpreter cannot run the chosen workloads and activations:
    one line per missing module, saying which package brings it."""
    # hpalloc: its parse_size reads --size and --chunk; the activations
    modules = sorted({m for w in args.workloads for m in NEEDS[w]}
                     | ({"hpalloc.dask"} if set(args.activations) - {"none"} else set())
                     | ({"hpalloc"} if "array" in args.workloads else set()))
    proc = subprocess.run([sys.executable, "-c", PREFLIGHT, ",".join(modules)],
                          capture_output=True, text=True)
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ["%s cannot check its modules: %s" % (sys.executable, proc.stderr.strip())], {}
    why = []
    for m, error in sorted(found["missing"].items()):
        why.append("%s does not import (%s): %s" % (m, error, how_to_get(m)))
    frames = {"merge", "map"} & set(args.workloads)
    if frames and "dask.dataframe" not in found["missing"] and not found.get("shuffle_method"):
        why.append("dask %s has no merge(shuffle_method=) (Debian's python3-dask is too old): "
                   "`make bench-dask` runs a venv with PyPI's dask[distributed] and pandas, or "
                   "pip install -U 'dask[distributed]' pandas" % found.get("dask", "?"))
    if "preload" in args.activations and "hpalloc.dask" not in found["missing"]:
        library = found.get("preload_library")
        if not library or not os.path.exists(library):
            why.append("the preload activation needs libhpalloc-preload.so (%s)"
                       % (library or found.get("hpalloc_error", "?")))
    return why, found


# ---- the report -------------------------------------------------------------------------------

STACK = ("numpy", "pandas", "dask", "distributed", "pyarrow", "hpalloc")


def header(args, found, load_before):
    order = bench_machine.page_reporting_order()
    reporting = ("on (page_reporting_order %d)" % order if order is not None
                 else "off (no /sys/module/page_reporting)")
    versions = bench_machine.stack_versions(STACK)
    return [
        "# bench-dask",
        "",
        "- machine: %s, %d cores, %.1f GiB; free page reporting %s; load %s at the start, "
        "%s at the end (shared machine: read ratios, not times)" % (
            bench_machine.first_line_with("/proc/cpuinfo", "model name"), os.cpu_count(),
            bench_machine.memory_gib(),
            reporting, load_before,
            loadavg()),
        "- stack: %s: Python %s, %s" % (
            bench_machine.interpreter_where(), sys.version.split()[0],
            ", ".join("%s %s" % (m, versions[m]) for m in STACK if m in versions)),
        "- hpalloc from %s" % found.get("hpalloc", "(not importable)"),
        "- LocalCluster(processes=True, n_workers=2, threads_per_worker=1) on 127.0.0.1, one "
        "process (and cluster) per run, %d runs per row, activations interleaved%s" % (
            args.runs, " (--quick: a smoke run, no verdicts)" if args.quick else ""),
        ""]


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


TITLES = {
    "merge": "merge + groupby through a shuffle: 2 frames x {rows:,} rows (k in 0..{keys:,}, "
             "{partitions} partitions), merge(on=\"k\", shuffle_method=\"tasks\"), "
             "groupby(\"k\").agg(x_x sum, y_y mean); memory_limit=\"5GiB\"",
    "map": "map_partitions building fresh columns: {map_rows:,} rows in {map_partitions} "
           "partitions, p.assign(z=p.x * 2 + p.y, w=np.sqrt(p.x.abs())), .sum(); "
           "memory_limit=\"5GiB\"",
    "array": "(x + x.T).sum(), x {n}x{n} float64 ({gib:.2f} GiB) in {c}x{c} chunks, "
             "median of {computes} compute(s) after a warm-up; no memory limit"}


def title(args, workload):
    n, c = side(args.size_bytes, args.chunk_bytes) if workload == "array" else (0, 0)
    return TITLES[workload].format(rows=args.rows, keys=args.keys, partitions=args.partitions,
                                   map_rows=args.map_rows, map_partitions=args.map_partitions,
                                   n=n, c=c, gib=n * n * 8 / (1 << 30), computes=args.computes)


def median_of(rows, get):
    values = [get(r) for r in rows]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def counter_cells(rows):
    def get(name):
        return lambda r: (r.get("counters") or {}).get(name)
    cells = []
    for name, scale, fmt in (("populate_ahead_bytes", MiB, "%.0f MiB"),
                             ("populate_cpu_us", 1000, "%.0f ms"),
                             ("populate_busy", 1, "%.0f"),
                             ("populate_saved_us", 1000, "%.0f ms")):
        v = median_of(rows, get(name))
        cells.append("–" if v is None else fmt % (v / scale))
    return cells


def workload_table(args, workload, results):
    lines = ["## %s" % workload, "", title(args, workload), "",
             "| activation | runs (s) | median s | ÷ without hpalloc [95 % CI] | verdict | "
             "minor faults | workers' CPU s | populate ahead | populate CPU | populate busy | "
             "populate saved |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    ok = {a: [r for r in results if r["workload"] == workload and r["activation"] == a
              and "error" not in r] for a in args.activations}
    base = [r["seconds"] for r in ok.get("none", [])]
    notes = []
    for a in args.activations:
        rows = ok[a]
        failed = [r for r in results if r["workload"] == workload and r["activation"] == a
                  and "error" in r]
        notes += ["%s, round %d: %s" % (a, r["round"], r["error"]) for r in failed]
        notes += ["%s, round %d: %d worker(s) restarted during the job" % (a, r["round"],
                                                                            r["restarts"])
                  for r in rows if r.get("restarts")]
        if not rows:
            lines.append("| %s | (no run finished) |" % LABELS[a])
            continue
        secs = [r["seconds"] for r in rows]
        if a == "none":
            ratio = ["1.00", "–"]
        elif base:
            ratio = fmt_verdict(verdict(secs, base))
        else:
            ratio = ["–", "no verdict (no run without hpalloc)"]
        lines.append("| %s | %s | %.2f | %s | %s | %.0f | %.1f | %s |" % (
            LABELS[a], ", ".join("%.2f" % s for s in secs), statistics.median(secs),
            ratio[0], ratio[1], median_of(rows, lambda r: r["minflt"]),
            median_of(rows, lambda r: r["cpu_s"]), " | ".join(counter_cells(rows))))
    lines += ["", "Faults, CPU time and counters: medians over the runs of the difference over "
              "the timed job, summed over both workers; \"–\": no hpalloc in the workers, or "
              "this library has no such counter."]
    if notes:
        lines += [""] + ["- " + n for n in notes]
    return lines + [""]


def report(args, found, load_before, results):
    lines = header(args, found, load_before)
    for workload in args.workloads:
        lines += workload_table(args, workload, results)
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(json.loads(args.child))
        return 0
    why, found = missing(args)
    if why:
        for line in why:
            say(line)
        return 1
    if "array" in args.workloads:
        from hpalloc import parse_size
        args.size_bytes, args.chunk_bytes = parse_size(args.size), parse_size(args.chunk)
    load_before = loadavg()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupt)
    try:
        results = run_all(args)
    except KeyboardInterrupt:
        say("interrupted: the run under way was ended with its cluster")
        return 130
    text = report(args, found, load_before, results)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "child"},
                       "results": results}, f, indent=1)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
