"""What bench/numpy_bench.py changes on the machine and says about it: the
hugetlb pools reserved around the hugetlb contenders (exactly the pages
added, given back), the hugetlbfs mount for libhugetlbfs, free page
reporting held off on request -- all undone by Machine.restore() whatever
happened -- and the machine and Python stack a report describes."""

import os
import platform
import subprocess
import sys
import tempfile
import time

from numpy_bench_cast import GiB, MiB, PYTHON, say
from bench_pools import Pools
import bench_machine
from bench_machine import PAGE_REPORTING, first_line_with, page_reporting_order


# ---- machine state: pools, hugetlbfs, page reporting ---------------------------------

def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def write_int(path, value):
    with open(path, "w") as f:
        f.write("%d\n" % value)


class Machine:
    """Everything the run changes, undone by restore() whatever happened."""

    def __init__(self):
        self.pools = Pools(say)  # the pages added to the pools
        self.given = []         # per reservation: {pagesize: (asked, got)}
        self.mount = None
        self.reporting_old = None
        self.notes = []

    def hold_page_reporting(self):
        if not os.path.exists(PAGE_REPORTING) or os.environ.get("BENCH_KEEP_PAGE_REPORTING"):
            return
        try:
            self.reporting_old = read_int(PAGE_REPORTING)
            write_int(PAGE_REPORTING, 11)  # above MAX_PAGE_ORDER: nothing reported
            self.notes.append("free page reporting held off for the run "
                              "(page_reporting_order %d -> 11, restored after)" % self.reporting_old)
        except OSError as exc:
            self.reporting_old = None
            self.notes.append("free page reporting left on (%s)" % exc)

    def reserve_plan(self, plan):
        """Reserve every pool of plan ({pagesize: pages}); {pagesize: got},
        also remembered for the report (how many pages the kernel gave)."""
        got = {size: self.pools.add(size, pages) for size, pages in plan.items()}
        self.given.append({size: (plan[size], got[size]) for size in plan})
        return got

    def release_pools(self):
        """Give back exactly the pages reserve_plan() added."""
        self.pools.give_back()

    def pools_note(self):
        """What the kernel gave over the run's reservations, per page size."""
        parts = []
        for size in sorted({z for g in self.given for z in g}):
            asked = [g[size][0] for g in self.given if size in g]
            got = [g[size][1] for g in self.given if size in g]
            parts.append("%s: %s of %d pages asked" % (
                "1 GiB" if size == GiB else "2 MiB",
                "%d" % got[0] if min(got) == max(got) else "%d–%d" % (min(got), max(got)),
                max(asked)))
        n = len(self.given)
        return ("hugetlb pools reserved around each workload's hugetlb contenders only "
                "(%d reservation%s, each given back after its group; in the cold row one per "
                "process); the kernel gave %s"
                % (n, "" if n == 1 else "s", "; ".join(parts))) if parts else None

    def mount_hugetlbfs(self):
        self.mount = tempfile.mkdtemp(prefix="hpalloc-bench-hugetlbfs.")
        if subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "none",
                           self.mount]).returncode != 0:
            os.rmdir(self.mount)
            self.mount = None
        return self.mount

    def restore(self):
        # Quickest first: under tests/run-test a Ctrl-C gives us 0.2 s before
        # SIGKILL (run-test then restores pools and mounts itself).
        if self.reporting_old is not None:
            write_int(PAGE_REPORTING, self.reporting_old)
            self.reporting_old = None
        if self.mount:
            subprocess.run(["umount", self.mount])
            try:
                os.rmdir(self.mount)
            except OSError as exc:
                say("could not remove %s: %s" % (self.mount, exc))
            self.mount = None
        self.release_pools()


# ---- machine description ----------------------------------------------------------------

# The Python stack a report is about: the interpreter running the bench
# (Debian's python3, or a venv's python with PyPI's releases).
STACK_MODULES = ("numpy", "pandas", "scipy", "sklearn", "numba", "torch", "dask", "pyarrow")


def stack_versions():
    """module -> version, for the STACK_MODULES this interpreter imports."""
    return bench_machine.stack_versions(STACK_MODULES, PYTHON)


def stack_description():
    versions = stack_versions()
    return "%s: %s" % (bench_machine.interpreter_where(PYTHON),
                       ", ".join("%s %s" % (m, versions[m]) for m in STACK_MODULES
                                 if m in versions) or "no NumPy")


def machine_description():
    def cat(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return "?"
    return {
        "cpu": first_line_with("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory": "%.1f GiB" % bench_machine.memory_gib(),
        "kernel": platform.release(),
        "thp": cat("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": cat("/sys/kernel/mm/transparent_hugepage/defrag"),
        "numpy": stack_versions().get("numpy", "?"),
        "stack": stack_description(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": cat("/proc/loadavg"),
        # a VM that hands free memory back to its host makes fresh huge pages
        # cold (docs/benchmarks.md): whether this one does
        "page_reporting": "off" if page_reporting_order() is None else "order %d" % page_reporting_order(),
    }


def pretouch(nbytes):
    """Touch nbytes of guest memory once (all live at the same time, so they
    are distinct pages) before anything is measured."""
    if nbytes <= 0:
        return
    code = ("import numpy as np\n"
            "chunks = [np.ones(%d) for _ in range(%d)]\n" % (GiB // 8, nbytes // GiB))
    t0 = time.monotonic()
    subprocess.run([PYTHON, "-c", code], env={k: v for k, v in os.environ.items()
                                              if k != "LD_PRELOAD"})
    say("pre-touched %d GiB of guest memory in %.1f s" % (nbytes // GiB, time.monotonic() - t0))


def mem_available():
    return int(first_line_with("/proc/meminfo", "MemAvailable").split()[0]) * 1024


def pool_plan(opts, sizes):
    """Pages per pool (of the page sizes a group of contenders needs) for
    the hugetlb contenders: the gather array plus its index, result and
    temporaries (2M); for 1G every array >= threshold takes at least a
    whole page."""
    plan = {2 * MiB: (opts.gather_bytes + 5 * GiB // 4) // (2 * MiB),
            GiB: opts.gather_bytes // GiB + 4}
    return {size: pages for size, pages in plan.items() if size in sizes}


def prepare(opts, machine, contenders):
    """The machine as users have it, unless asked: page reporting held off
    (--hold-page-reporting, with a pre-touch of guest memory: memory the
    host has handed over once stays handed over).  The pools of the hugetlb
    contenders are reserved around their processes (run_all); their
    hugetlbfs mount, for libhugetlbfs, is made here for the run."""
    hugetlb_users = [c for c in contenders if c.pools and not c.skip_reason]
    if opts.hold_page_reporting and os.geteuid() != 0:
        sys.exit("bench: --hold-page-reporting changes the machine: run as root")
    machine.notes.append("no hugetlb pool reserved while NumPy, the peers and hpalloc's default "
                         "knobs run (as on a machine nobody prepared): hpalloc's default "
                         "mode=auto uses transparent huge pages"
                         + (" (the hugetlb contenders' rows: pools reserved around their "
                            "processes only)" if hugetlb_users else ""))
    if opts.hold_page_reporting:
        machine.hold_page_reporting()
        spare = mem_available() - 3 * GiB
        pretouch(max(0, min(spare, opts.pretouch_bytes)) // GiB * GiB)
    elif os.path.exists(PAGE_REPORTING):
        machine.notes.append("free page reporting left on (page_reporting_order %d): memory freed "
                             "a few seconds ago is cold again, as on cloud VMs"
                             % read_int(PAGE_REPORTING))
    if any(c.name == "libhugetlbfs" for c in hugetlb_users):
        mount = machine.mount_hugetlbfs()
        for c in contenders:
            if c.name == "libhugetlbfs":
                if mount:
                    c.env["HUGETLB_PATH"] = mount
                else:
                    c.skip_reason = "could not mount hugetlbfs"
