"""bench/numpy_bench.py's cast: the contenders (NumPy's default, the peers a
user would pick instead, hpalloc as a user switches it on), the workloads,
who runs which, and what this machine lacks for them -- a peer's library
(and the Debian package that brings it), an application's module (pip or
apt), a memory cgroup, hpalloc itself.  Everything else of the bench
imports from here: the interpreter, the worker, say()."""

import importlib.metadata
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "numpy_workloads.py")
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import hp_memcg  # noqa: E402  (the one maker of memory cgroups: the pressure rows)
from bench_machine import PACKAGES, in_venv  # noqa: E402
PYTHON = sys.executable
MiB = 1 << 20
GiB = 1 << 30
LIBDIR_SYS = "/usr/lib/x86_64-linux-gnu"


def say(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


# ---- contenders ------------------------------------------------------------------

class Contender:
    """name, environment, and what it needs (a preloaded library, pools).
    run says how hpalloc is switched on: "numpy" (HPALLOC_NUMPY=1 in the
    program), "hpctl" (`hpctl run`), "hpctl-preload" (`hpctl run
    --preload`), None (not hpalloc).  per_workload: workload -> (run,
    [KNOB=VALUE, ...]) for the contenders whose configuration depends on the
    workload (hp-best); it runs only those workloads.  pools: the hugetlb
    page sizes (bytes) it needs reserved, () for none.  says: a regular
    expression for the lines of its stderr worth keeping in the report
    (what libhugetlbfs says it does)."""

    def __init__(self, name, label, env=None, preload=None, package=None,
                 run=None, pools=(), per_workload=None, only=None, says=None):
        self.name, self.label = name, label
        self.env = dict(env or {})
        self.preload, self.package = preload, package
        self.run = run
        self.hpalloc = run is not None or per_workload is not None
        self.pools = tuple(pools)  # hugetlb page sizes it needs reserved
        self.says = says
        self.per_workload = per_workload
        self.only = only  # the workloads a peer's switch applies to (None: all)
        self.skip_reason = None

    def uses_hpctl(self):
        runs = [r for r, _ in self.per_workload.values()] if self.per_workload else [self.run]
        return any(r in ("hpctl", "hpctl-preload") for r in runs)

    def runs(self, workload):
        if self.only is not None and workload not in self.only:
            return False
        return self.per_workload is None or workload in self.per_workload

    def how(self, workload):
        """(run, hpctl run's KNOB=VALUE arguments) for this workload."""
        if self.per_workload is not None:
            return self.per_workload[workload]
        return self.run, []

    def environment(self, base, workload):
        env = dict(base)
        env.update(self.env)
        run = self.how(workload)[0]
        if self.preload:
            env["LD_PRELOAD"] = self.preload
            # as /proc/self/maps names it (libhugetlbfs.so.0 is libhugetlbfs-2.23.so)
            env["HPALLOC_BENCH_PRELOADED"] = os.path.basename(os.path.realpath(self.preload))
        if run == "numpy":
            env["HPALLOC_NUMPY"] = "1"
        if run == "hpctl-preload":
            env["HPALLOC_BENCH_PRELOADED"] = "libhpalloc-preload.so"
        return env

    def command(self, opts, workload):
        """What goes before the worker's command line."""
        run, knobs = self.how(workload)
        if run not in ("hpctl", "hpctl-preload"):
            return []
        return ([opts.hpctl, "run", "--check"] + (["--preload"] if run == "hpctl-preload" else [])
                + knobs + ["--"])


def hp(name, label, pools, **knobs):
    env = {"HPALLOC_" + k.upper(): v for k, v in knobs.items()}
    return Contender(name, label, env=env, run="numpy", pools=pools)


# hpalloc's best configuration for a workload where it is neither `hpctl
# run` nor `hpctl run --preload` with default knobs (those run anyway),
# found by trying (docs/benchmarks.md): `hpctl run` with these arguments.
# hp-best runs only the workloads listed.
BEST = {}


def best_contender():
    per = {w: ("hpctl-preload" if "--preload" in args else "hpctl",
               [a for a in args if a != "--preload"]) for w, args in BEST.items()}
    return Contender("hp-best", "hpalloc, best knobs for the workload", per_workload=per)


def config_name(c, workload):
    """How an hpalloc contender ran a workload, as a user would type it."""
    run, knobs = c.how(workload)
    if run == "numpy":
        return "HPALLOC_NUMPY=1 " + " ".join("%s=%s" % (k, v) for k, v in sorted(c.env.items())
                                              if k.startswith("HPALLOC_") and k != "HPALLOC_CONTROL_DIR")
    return "`hpctl run%s%s`" % (" --preload" if run == "hpctl-preload" else "",
                                "".join(" " + k for k in knobs))


def all_contenders():
    lib = lambda so: os.path.join(LIBDIR_SYS, so)  # noqa: E731
    return [
        # NumPy's default madvises its own buffers >= 4 MiB (NumPy 2.x its
        # calloc'd ones too): the huge pages a NumPy user has with no install
        Contender("numpy", "NumPy default (its hugepage madvise)"),
        Contender("numpy-nomadv", "NumPy, NUMPY_MADVISE_HUGEPAGE=0",
                  env={"NUMPY_MADVISE_HUGEPAGE": "0"}),
        # glibc >= 2.35's own switches: THP for its mmap'd chunks and heap
        # (1), hugetlb pages from the pool (2)
        Contender("glibc-thp", "glibc, GLIBC_TUNABLES=glibc.malloc.hugetlb=1",
                  env={"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
        Contender("glibc-hugetlb", "glibc, GLIBC_TUNABLES=glibc.malloc.hugetlb=2 (pool)",
                  env={"GLIBC_TUNABLES": "glibc.malloc.hugetlb=2"}, pools=(2 * MiB,)),
        # PyTorch >= 2.2: madvise(MADV_HUGEPAGE) on its CPU buffers >= 2 MiB
        Contender("torch-thp", "PyTorch, THP_MEM_ALLOC_ENABLE=1",
                  env={"THP_MEM_ALLOC_ENABLE": "1"}, only={"torch"}),
        Contender("tcmalloc", "tcmalloc", preload=lib("libtcmalloc_minimal.so.4"),
                  package="libtcmalloc-minimal4"),
        Contender("jemalloc", "jemalloc", preload=lib("libjemalloc.so.2"),
                  package="libjemalloc2"),
        Contender("mimalloc", "mimalloc, large OS pages", preload=lib("libmimalloc.so.2"),
                  package="libmimalloc2.0", env={"MIMALLOC_ALLOW_LARGE_OS_PAGES": "1"}),
        # HUGETLB_VERBOSE=3: it says on stderr what it set up, and what not
        Contender("libhugetlbfs", "libhugetlbfs, HUGETLB_MORECORE=yes",
                  preload=lib("libhugetlbfs.so.0"), package="libhugetlbfs0",
                  env={"HUGETLB_MORECORE": "yes", "HUGETLB_VERBOSE": "3"}, pools=(2 * MiB,),
                  says=r"morecore|WARNING|ERROR"),
        Contender("hp-run", "hpalloc, default knobs (`hpctl run`)", run="hpctl"),
        Contender("hp-preload", "hpalloc, `hpctl run --preload`", run="hpctl-preload"),
        best_contender(),
        hp("hp-2M", "hpalloc mode=hugetlb pagesize=2M (pool)", (2 * MiB,),
           mode="hugetlb", pagesize="2M"),
        hp("hp-1G", "hpalloc mode=hugetlb pagesize=1G (pool)", (GiB,),
           mode="hugetlb", pagesize="1G"),
        hp("hp-auto", "hpalloc mode=auto (pools)", (2 * MiB, GiB), mode="auto"),
    ]


# The first touch against the populate knob (issue 27): hpalloc as `hpctl
# run` has it, with the populate workers off, 1 and 2 of them; and against
# populate_pages (issues 35, 44): auto (decided per block), 4 KiB first, and
# 2M (huge pages from the first fault, the default until measured was).
def populate_contenders():
    return [Contender("hp-populate-%s" % n, "hpalloc, `hpctl run populate=%s`" % n,
                      per_workload={w: ("hpctl", ["populate=%s" % n]) for w in FIRST_TOUCH})
            for n in ("off", "1", "2")] + [
        Contender("hp-pages-%s" % p, "hpalloc, `hpctl run populate_pages=%s`" % p,
                  per_workload={w: ("hpctl", ["populate_pages=%s" % p]) for w in FIRST_TOUCH})
        for p in ("auto", "4K", "2M")]


# The allocation-path cost of the knob check (issue 4): the same hpalloc
# mode with a live control directory and with none.
def control_contenders(control_dir):
    return [
        Contender("hp-thp-ctl", "hpalloc mode=thp, live control directory", run="numpy",
                  env={"HPALLOC_MODE": "thp", "HPALLOC_CONTROL_DIR": control_dir}),
        Contender("hp-thp-noctl", "hpalloc mode=thp, no control directory", run="numpy",
                  env={"HPALLOC_MODE": "thp", "HPALLOC_CONTROL_DIR": "/nonexistent/hpalloc-bench"}),
    ]


# ---- workloads -------------------------------------------------------------------

# name -> (title, primary metric, unit, lower is better, contenders it runs for)
WORKLOADS = [
    ("temp256M", "temporaries `d = a + b`, 256 MiB, ÷ in-place", "ratio", "×"),
    ("temp8M", "temporaries, 8 MiB, ÷ in-place", "ratio", "×"),
    ("temp1M", "temporaries, 1 MiB, ÷ in-place", "ratio", "×"),
    ("small", "small `x + y`, 128 elements", "ns_per_op", "ns"),
    ("zeros1G", "`np.zeros(1 GiB); a += 1`", "s", "s"),
    ("zeros1G-cold", "`np.zeros(1 GiB); a += 1`, first touch, cold (process started "
     "≥ --cold-gap s after the last one ended)", "s", "s"),
    ("sparse8G", "`np.zeros(8 GiB)` touched at 1 %: memory committed", "committed_mib", "MiB"),
    ("gather", "20 M random `take` from 4 GiB", "s", "s"),
    ("threads", "2 threads × 40 × (`np.ones(64 MiB)`, `*= 2`, free)", "s", "s"),
    ("resize1G", "`ndarray.resize` doubling to 1 GiB", "s", "s"),
    ("allocpath", "allocation path: `np.empty(64 MiB)` + free", "large_ns", "ns"),
    ("pressure", "issue 25's program, 1.6 GiB memory limit", "s", "s"),
    ("reuse", "reuse 4 × 64 MiB, no memory limit", "ms", "ms"),
    ("reuse-pressure", "reuse 4 × 64 MiB, 1.6 GiB limit (pressure)", "ms", "ms"),
    ("groupby", "pandas `groupby().agg`, 20 M rows", "s", "s"),
    ("merge", "pandas `merge`, 4 M × 4 M rows", "s", "s"),
    ("kmeans", "scikit-learn `KMeans(8).fit`, 1 M × 16", "s", "s"),
    ("fft", "`scipy.fft` round trip, 2^25 doubles", "s", "s"),
    ("pipeline", "NumPy expression pipeline, 2^25 doubles", "s", "s"),
    ("numba", "Numba `@njit`: ten 128 MiB temporaries", "s", "s"),
    ("torch", "PyTorch: ten `(a * 2 + b).sum()`, 128 MiB", "s", "s"),
    ("dask", "Dask `(x + x.T).sum()`, 1 GiB, threads", "s", "s"),
]
CONTROL_ONLY = {"allocpath"}
# Run in a memory cgroup of their own (issue 25): workload -> limited?
# (`reuse` is in one without a limit, so that it is measured alike).
CGROUP_WORKLOADS = {"pressure": True, "reuse": False, "reuse-pressure": True}
CGROUP_LIMIT = 1638 * MiB  # 1.6 GiB: what the program needs is about 1 GiB at a time
CGROUP_PREFIX = "hpalloc-bench-"
# The first touch of a fresh block (issue 27): who populates it, how fast,
# and what it commits of a block touched sparsely.
FIRST_TOUCH = ("zeros1G", "zeros1G-cold", "sparse8G")
# Started at least --cold-gap seconds after the last process ended (issue
# 35): the VM has given the memory freed then back to its host.
COLD_WORKLOADS = {"zeros1G-cold"}
COLD_GAP_MIN = 3.0
# Workloads with a memory bound of their own (targets), not NumPy's peak.
OWN_BOUND = {"sparse8G"}
APPS = {"groupby", "merge", "kmeans", "fft", "pipeline", "numba", "torch", "dask"}
# What an application workload needs besides NumPy (a module: the package
# that brings it is bench_machine.PACKAGES's).
APP_NEEDS = {"groupby": "pandas", "merge": "pandas", "kmeans": "sklearn", "fft": "scipy",
             "numba": "numba", "torch": "torch", "dask": "dask.array"}


# Who runs which workload: the allocation-path workload only NumPy's
# default and the control contenders; --preload and the per-workload best
# knobs only the applications (whose big buffers partly come from malloc
# outside NumPy); NumPy without madvise only the microbenchmarks; the rows
# under a memory limit NumPy's default, the peers a user would preload or
# switch on instead, and hpalloc under `hpctl run` and `hpctl run --preload`
# (the activations issue 25 found OOM-killed).
CGROUP_CONTENDERS = ("numpy", "tcmalloc", "jemalloc", "mimalloc", "glibc-thp", "hp-run",
                     "hp-preload")
# The allocation path's time: NumPy's default, the peers a user preloads or
# switches on, hpalloc as `hpctl run` has it, and the control pair.
ALLOCPATH_CONTENDERS = ("numpy", "tcmalloc", "jemalloc", "mimalloc", "glibc-thp", "hp-run")


def wanted(workload, c):
    if workload in CONTROL_ONLY:
        return c.name in ALLOCPATH_CONTENDERS or c.name.endswith("ctl")
    if c.name.endswith("ctl") or not c.runs(workload):
        return False
    if workload in CGROUP_WORKLOADS:
        return c.name in CGROUP_CONTENDERS
    if workload in APPS:
        return c.name != "numpy-nomadv" and not c.pools
    if workload == "sparse8G" and c.pools:
        # a hugetlb mapping takes its whole pool share at mmap, by design
        # (smaps Rss does not count hugetlb pages): the row is about THP
        return False
    return c.name not in ("hp-preload", "hp-best")


def runs_for(workload, contenders):
    return [c for c in contenders if not c.skip_reason and wanted(workload, c)]


# ---- what this machine lacks -------------------------------------------------------------------------

def check_peers(contenders, opts):
    for c in contenders:
        if c.preload and not os.path.exists(c.preload):
            c.skip_reason = ("%s not found: apt-get install %s" % (c.preload, c.package))
        elif c.pools and not opts.pools:
            c.skip_reason = ("left out (--no-pools)" if os.geteuid() == 0 else
                             "needs a hugetlb pool, which only root can reserve: run as root")
        elif c.uses_hpctl() and not opts.hpctl:
            c.skip_reason = "no hpctl to run it with (--hpctl)"
        elif c.name == "torch-thp" and not torch_has_thp_switch():
            c.skip_reason = "this PyTorch has no THP_MEM_ALLOC_ENABLE (2.2 and later have)"


def torch_has_thp_switch():
    """PyTorch 2.2 and later read THP_MEM_ALLOC_ENABLE (no PyTorch: the
    torch workload is skipped anyway)."""
    try:
        major, minor = (int(x) for x in importlib.metadata.version("torch").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return True
    return (major, minor) >= (2, 2)


def missing_libraries(workloads):
    """Application workloads whose library is not installed: name -> why."""
    missing = {}
    for w, *_ in workloads:
        if w in APP_NEEDS:
            module = APP_NEEDS[w]
            if subprocess.run([PYTHON, "-c", "import " + module], capture_output=True).returncode:
                pip, deb = PACKAGES[module]
                how = "pip install " + pip if in_venv() else "apt-get install " + deb
                missing[w] = "%s is not installed: %s" % (module, how)
    return missing


def missing_cgroup(workloads):
    """The workloads run under a memory limit, when no memory cgroup can be
    made here: name -> why."""
    wants = [w for w, *_ in workloads if w in CGROUP_WORKLOADS]
    if not wants:
        return {}
    why = None
    if os.geteuid() != 0:
        why = "making a memory cgroup needs root"
    else:
        try:
            hp_memcg.pick_version()
        except hp_memcg.Unavailable as e:
            why = str(e)
    return {w: why for w in wants} if why else {}


def hpalloc_importable(base_env):
    code = "import hpalloc.numpy"
    return subprocess.run([PYTHON, "-c", code], env=base_env, capture_output=True).returncode == 0
