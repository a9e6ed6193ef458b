#!/usr/bin/python3
"""hpalloc's main job: NumPy arrays on huge pages, shown as the kernel sees them.

Run it with hpalloc active for NumPy, with no change to the program:

    hpctl run -- /usr/bin/python3 examples/demo.py
    HPALLOC_NUMPY=1 /usr/bin/python3 examples/demo.py

(Started plainly, it installs hpalloc itself and says so.)  It allocates a
small array, a 1 GiB array (THP, or hugetlb when mode/pools say so) and,
when a hugetlb pool has free pages (e.g. after `hpctl pool 2M=300`), arrays
placed explicitly on 2 MiB and 1 GiB pages.  For each it prints the handler
NumPy recorded, hpalloc's backend, the page size and the huge-page bytes
that /proc/self/smaps reports, then highlights of hpalloc.stats().

Options: --size BYTES (default 1G) for the big array.
"""

import argparse
import os
import sys
import time

import numpy as np

import hpalloc
import hpalloc.numpy as hpnp

GiB = 1 << 30
HUGEPAGES = "/sys/kernel/mm/hugepages"
STATS_SHOWN = ("small_live_bytes", "thp_live_bytes", "hugetlb_live_bytes",
               "mapped_bytes", "cached_bytes", "cache_hits", "cache_misses",
               "fallbacks", "failures", "released_bytes", "uring_releases",
               "sync_releases")


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


def report(label, arr, seconds=None):
    info = hpnp.backing(arr)
    if info["hugetlb_bytes"]:
        huge = "%s hugetlb" % size_text(info["hugetlb_bytes"])
    elif info["anon_huge_bytes"]:
        huge = "%s AnonHugePages" % size_text(info["anon_huge_bytes"])
    else:
        huge = "0"
    timing = "" if seconds is None else "%8.3f s" % seconds
    print("%-40s %-17s %-8s %-9s %-22s %s" % (
        label, info["handler"], info["backend"],
        size_text(info["kernel_page_size"]), huge, timing))


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def big_array(nbytes):
    def make_and_touch():
        arr = np.zeros(nbytes // 8)
        arr += 1.0  # every page touched
        return arr
    arr, seconds = timed(make_and_touch)
    report("np.zeros(%s) ; a += 1" % size_text(nbytes), arr, seconds)
    return arr


def pool_array(pagesize, limit):
    """An array on explicit hugetlb pages, sized to what the pool has free."""
    pages = min(free_pool_pages(pagesize), max(limit // pagesize, 1))
    if pages == 0:
        print("%-40s (no free %s pages: e.g. `hpctl pool %s=%d` as root)" % (
            "hpalloc.numpy.zeros(pagesize=%s)" % size_text(pagesize),
            size_text(pagesize), size_text(pagesize), max(limit // pagesize, 1)))
        return None
    nbytes = pages * pagesize

    def make_and_touch():
        arr = hpnp.zeros(nbytes // 8, pagesize=size_text(pagesize))
        arr += 1.0
        return arr
    try:
        arr, seconds = timed(make_and_touch)
    except MemoryError as exc:
        print("%-40s MemoryError: %s" % ("pagesize=%s" % size_text(pagesize), exc))
        return None
    report("hpalloc.numpy.zeros(%s, pagesize=%s)" % (
        size_text(nbytes), size_text(pagesize)), arr, seconds)
    return arr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G",
                        help="bytes of the big array (default 1G)")
    args = parser.parse_args()
    big = hpalloc.parse_size(args.size)

    if hpnp.get_handler_name() == "hpalloc":
        how = "active for this process (HPALLOC_NUMPY=1 / hpctl run)"
    else:
        hpnp.install()
        how = "installed by the demo (run it under `hpctl run` or HPALLOC_NUMPY=1)"
    print("hpalloc %s, NumPy %s, Python %s" % (
        hpalloc.__version__, np.__version__, sys.version.split()[0]))
    print("NumPy handler: %s, %s" % (hpnp.get_handler_name(), how))
    knobs = hpalloc.config()
    print("knobs: " + " ".join("%s=%s" % (k, v["value"]) for k, v in knobs.items()))
    print()
    print("%-40s %-17s %-8s %-9s %-22s %s" % (
        "array", "handler", "backend", "page", "huge pages (smaps)", "time"))

    keep = []
    keep.append(np.ones(1000))
    report("np.ones(1000)", keep[-1])
    keep.append(big_array(big))
    keep.append(pool_array(2 << 20, big // 2))
    keep.append(pool_array(GiB, GiB))

    print()
    stats = hpalloc.stats()
    print("hpalloc.stats(): " + ", ".join(
        "%s=%s" % (name, size_text(stats[name]) if name.endswith("bytes") else stats[name])
        for name in STATS_SHOWN if name in stats))
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
