#!/usr/bin/python3
"""hpalloc's main job, shown as the kernel sees it: with hpalloc and without.

Run it with hpalloc active, with no change to the program:

    hpctl run -- /usr/bin/python3 examples/demo.py
    HPALLOC_NUMPY=1 /usr/bin/python3 examples/demo.py
    venv/bin/python examples/demo.py          # a venv with `pip install ./python`

(Started plainly, it installs hpalloc itself and says so.)  Each row runs
twice: here, with hpalloc, and in a child process -- the same code, this
same interpreter, started without hpalloc (its HPALLOC_* settings and
hpalloc's preload library taken out of the environment) -- and the two go
side by side.  For each: who allocated the memory (NumPy's handler, or the
library's own allocator), hpalloc's backend, the bytes on huge pages that
/proc/self/smaps reports (of hpalloc's blocks once its workers had up to
3 s to collapse what they faulted at 4 KiB first), the time and the minor
page faults.

The rows, for what is installed: a small NumPy array (it stays on libc's
path); the first touch of a big array, `np.zeros; a += 1`; the same again
after freeing it (reuse); a PyTorch tensor, an array made in Numba's @njit
code, an Arrow buffer, a plain `malloc` (only `hpctl run --preload` reaches
it); and, when a hugetlb pool has free pages (`hpctl pool 2M=600 1G=1`),
arrays on explicit 2 MiB and 1 GiB pages.  NumPy 2.x alone madvises its own
arrays of 4 MiB and more (so its first-touch row may be huge in both
columns); the other rows are what hpalloc adds.

Options: --size BYTES (default 1G) for the big array; the others are a
quarter of it.
"""

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

import hpalloc
import hpalloc.numpy as hpnp

GiB = 1 << 30
MiB = 1 << 20
HUGEPAGES = "/sys/kernel/mm/hugepages"
STATS_SHOWN = ("small_live_bytes", "thp_live_bytes", "hugetlb_live_bytes",
               "mapped_bytes", "cached_bytes", "cache_hits", "cache_misses",
               "fallbacks", "failures", "released_bytes", "uring_releases",
               "sync_releases")
# The environment of the child without hpalloc keeps only where the package is.
KEEP_ENV = ("HPALLOC_PYTHON_DIR", "HPALLOC_PYTHON_FALLBACK")
LABEL_W = 34
WITH_FMT = "%-9s %-8s %-19s %8s %9s"
WITHOUT_FMT = "%-17s %-19s %8s %9s"


def size_text(nbytes):
    return hpalloc.format_size(nbytes) if nbytes else "0"


def free_pool_pages(pagesize):
    path = os.path.join(HUGEPAGES, "hugepages-%dkB" % (pagesize // 1024),
                        "free_hugepages")
    try:
        with open(path) as f:
            return int(f.read())
    except OSError:
        return 0


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measured(fn):
    """(fn's result, seconds, minor faults) of one call."""
    f0, t0 = minor_faults(), time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0, minor_faults() - f0


def huge_text(info):
    """The bytes smaps shows on huge pages, with their kind."""
    if info["hugetlb_bytes"]:
        return "%s hugetlb" % size_text(info["hugetlb_bytes"])
    if info["anon_huge_bytes"]:
        return "%s AnonHugePages" % size_text(info["anon_huge_bytes"])
    return "0"


# hpalloc may fault a fresh block at 4 KiB pages first, where a fresh huge
# page costs more (a VM that hands its free memory back to its host), and
# collapse it to huge pages behind the program: within 2 s of its last
# write.  A row reads smaps once that has had its time.
SETTLE_SECONDS = 3.0


def settled(obj):
    """hpnp.backing(obj), once an hpalloc THP block is on huge pages (90 %)
    or SETTLE_SECONDS have passed."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        info = hpnp.backing(obj)
        size = info.get("mapping_size") or 0
        if (info["backend"] != "thp" or (info["huge_bytes"] or 0) >= size * 9 // 10
                or time.monotonic() >= deadline):
            return info
        time.sleep(0.05)


def row(label, obj, seconds=None, faults=None, allocator=None):
    """One row's facts: who allocated obj (the NumPy handler of its owner,
    else hpalloc when the memory is in one of its blocks, else `allocator`,
    the library's own), hpalloc's backend, and smaps' huge-page bytes (an
    hpalloc block's once settled)."""
    info = settled(obj)
    backend = info["backend"]
    who = info["handler"] or ("hpalloc" if backend else allocator or "?")
    return {"label": label, "allocator": who, "backend": backend or "-",
            "huge": huge_text(info), "huge_bytes": info["huge_bytes"] or 0,
            "seconds": seconds, "faults": faults}


def absent(label, why):
    return {"label": label, "absent": why}


# ---- the rows: the same code with and without hpalloc ------------------------------
# Each takes (nbytes, with_hpalloc, keep) and returns a row; keep holds what
# must stay alive until the end (so the other process never meets memory
# this one just freed).

def small_array(nbytes, with_hpalloc, keep):
    keep.append(np.ones(1000))
    return row("np.ones(1000)", keep[-1])


def big_array(nbytes):
    a = np.zeros(nbytes // 8)
    a += 1.0  # every page touched
    return a


def first_touch(nbytes, with_hpalloc, keep):
    a, seconds, faults = measured(lambda: big_array(nbytes))
    r = row("np.zeros(%s) ; a += 1" % size_text(nbytes), a, seconds, faults)
    keep.append(a)
    return r


def reuse(nbytes, with_hpalloc, keep):
    """The first touch's array freed, then the same made again."""
    keep.pop()
    a, seconds, faults = measured(lambda: big_array(nbytes))
    r = row("again, after del a (reuse)", a, seconds, faults)
    keep.append(a)
    return r


# Set when the demo installs hpalloc itself (started plainly): it then
# installs the adapter of each library it imports too, as `hpctl run` and
# HPALLOC_NUMPY=1 do at the library's import.
INSTALL_ADAPTERS = []


def adapter(name, with_hpalloc):
    if with_hpalloc and INSTALL_ADAPTERS:
        module = __import__("hpalloc." + name, fromlist=["installed"])
        if not module.installed():
            module.install()


def torch_tensor(nbytes, with_hpalloc, keep):
    try:
        import torch
    except ImportError:
        return absent("torch.ones", "PyTorch is not installed")
    adapter("torch", with_hpalloc)
    t, seconds, faults = measured(lambda: torch.ones(nbytes // 8, dtype=torch.float64))
    keep.append(t)
    return row("torch.ones(%s)" % size_text(nbytes), t, seconds, faults, allocator="c10")


def numba_array(nbytes, with_hpalloc, keep):
    try:
        from numba import njit
    except ImportError:
        return absent("@njit np.ones", "Numba is not installed")
    adapter("numba", with_hpalloc)

    @njit
    def ones(n):
        return np.ones(n)

    ones(1)  # compiled here, not in the measurement
    a, seconds, faults = measured(lambda: ones(nbytes // 8))
    keep.append(a)
    return row("@njit np.ones(%s)" % size_text(nbytes), a, seconds, faults, allocator="NRT")


def arrow_buffer(nbytes, with_hpalloc, keep):
    try:
        import pyarrow as pa
    except ImportError:
        return absent("pyarrow.allocate_buffer", "pyarrow is not installed")
    adapter("arrow", with_hpalloc)

    def make():
        buf = pa.allocate_buffer(nbytes)
        np.frombuffer(buf, dtype=np.uint8)[:] = 1  # every page touched
        return buf
    buf, seconds, faults = measured(make)
    keep.append(buf)
    return row("pyarrow.allocate_buffer(%s)" % size_text(nbytes), buf, seconds, faults,
               allocator=pa.default_memory_pool().backend_name)


def libc_malloc(nbytes, with_hpalloc, keep):
    """A plain malloc, as C code in an extension would make: only the
    preload library (`hpctl run --preload`) puts it on hpalloc."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def make():
        p = libc.malloc(nbytes)
        if not p:
            raise MemoryError("malloc(%d)" % nbytes)
        ctypes.memset(p, 1, nbytes)
        return p
    p, seconds, faults = measured(make)
    buf = (ctypes.c_char * nbytes).from_address(p)
    r = row("malloc(%s) ; memset" % size_text(nbytes), buf, seconds, faults, allocator="libc")
    keep.append((buf, p, libc))
    return r


def pool_array(pagesize, limit, with_hpalloc, keep):
    """An array on explicit hugetlb pages, sized to what the pool has free
    (hpalloc only: without it, NumPy has no way to ask for them)."""
    label = "hpalloc.numpy.zeros(pagesize=%s)" % size_text(pagesize)
    if not with_hpalloc:
        return absent(label, "NumPy alone cannot ask for hugetlb pages")
    pages = min(free_pool_pages(pagesize), max(limit // pagesize, 1))
    if pages == 0:
        return absent(label, "no free %s pages: e.g. `hpctl pool %s=%d` as root" % (
            size_text(pagesize), size_text(pagesize), max(limit // pagesize, 1)))
    nbytes = pages * pagesize

    def make():
        arr = hpnp.zeros(nbytes // 8, pagesize=size_text(pagesize))
        arr += 1.0
        return arr
    try:
        arr, seconds, faults = measured(make)
    except MemoryError as exc:
        return absent(label, "MemoryError: %s" % exc)
    keep.append(arr)
    return row(label, arr, seconds, faults)


def rows(big, with_hpalloc, keep):
    other = max(big // 4, 8 * MiB)
    out = [f(big if f in (first_touch, reuse) else other, with_hpalloc, keep)
           for f in (small_array, first_touch, reuse, torch_tensor, numba_array,
                     arrow_buffer, libc_malloc)]
    out.append(pool_array(2 * MiB, big // 2, with_hpalloc, keep))
    out.append(pool_array(GiB, GiB, with_hpalloc, keep))
    return out


# ---- the child without hpalloc --------------------------------------------------------

def environment_without_hpalloc():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HPALLOC_") or k in KEEP_ENV}
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
               if "libhpalloc" not in os.path.basename(p)]
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def preloaded():
    """Whether hpalloc's preload library is in this process (its maps)."""
    with open("/proc/self/maps") as f:
        return "libhpalloc-preload" in f.read()


def child_main(big):
    """The rows without hpalloc, as JSON on stdout."""
    if hpnp.get_handler_name() != "default_allocator" or preloaded():
        sys.exit("demo: the child meant to run without hpalloc has it (handler %s, preload "
                 "library loaded: %s)" % (hpnp.get_handler_name(), preloaded()))
    keep = []
    print(json.dumps(rows(big, False, keep)))
    return 0


def without_hpalloc(big):
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--size", str(big),
                           "--without-hpalloc"], env=environment_without_hpalloc(),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        return None, why
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


# ---- printing -----------------------------------------------------------------------------

def cells(r, fmt, with_hpalloc):
    if r is None:
        return fmt % (("",) * fmt.count("%"))
    if "absent" in r:
        return "(%s)" % r["absent"]
    t = "-" if r["seconds"] is None else "%.3fs" % r["seconds"]
    n = "-" if r["faults"] is None else "{:,}".format(r["faults"])
    if with_hpalloc:
        return fmt % (r["allocator"], r["backend"], r["huge"], t, n)
    return fmt % (r["allocator"], r["huge"], t, n)


def print_table(mine, theirs):
    print("%-*s %-*s | %s" % (LABEL_W, "", len(WITH_FMT % (("",) * 5)),
                              "with hpalloc (this process)",
                              "without hpalloc (child process, same code)"))
    print("%-*s %s | %s" % (LABEL_W, "row", WITH_FMT % ("allocator", "backend",
                                                         "huge pages (smaps)", "time", "faults"),
                            WITHOUT_FMT % ("allocator", "huge pages (smaps)", "time", "faults")))
    for i, r in enumerate(mine):
        other = theirs[i] if theirs else None
        left = cells(r, WITH_FMT, True)
        right = cells(other, WITHOUT_FMT, False) if other else ""
        if right:
            left = "%-*s" % (len(WITH_FMT % (("",) * 5)), left)
        print(("%-*s %s | %s" % (LABEL_W, r["label"], left, right)).rstrip())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G",
                        help="bytes of the big array (default 1G); the others a quarter")
    parser.add_argument("--without-hpalloc", action="store_true",
                        help=argparse.SUPPRESS)  # the child: rows as JSON
    args = parser.parse_args()
    big = hpalloc.parse_size(args.size)
    if args.without_hpalloc:
        return child_main(big)

    if hpnp.get_handler_name() == "hpalloc":
        how = "active for this process (HPALLOC_NUMPY=1 / hpctl run)"
    elif preloaded():
        how = "NumPy's own, its memory from hpalloc's preload library (hpctl run --preload)"
    else:
        hpnp.install()
        INSTALL_ADAPTERS.append(True)
        how = "installed by the demo (run it under `hpctl run` or HPALLOC_NUMPY=1)"
    print("hpalloc %s, NumPy %s, Python %s (%s)" % (
        hpalloc.__version__, np.__version__, sys.version.split()[0], sys.executable))
    print("NumPy handler: %s, %s" % (hpnp.get_handler_name(), how))
    knobs = hpalloc.config()
    print("knobs: " + " ".join("%s=%s" % (k, v["value"]) for k, v in knobs.items()))
    print()

    keep = []
    mine = rows(big, True, keep)  # kept alive while the child runs
    theirs, why = without_hpalloc(big)
    print_table(mine, theirs)
    if theirs is None:
        print("(without hpalloc: the child failed: %s)" % why)
    print()
    print("Times depend on which memory the machine hands a process (on a VM, memory freed")
    print("seconds ago may have gone back to the host: docs/benchmarks.md); smaps and faults do not.")
    stats = hpalloc.stats()
    print("hpalloc.stats(): " + ", ".join(
        "%s=%s" % (name, size_text(stats[name]) if name.endswith("bytes") else stats[name])
        for name in STATS_SHOWN if name in stats))
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
