"""The Python tests' one hugetlb pool fixture: the sysfs pool files, whole
and per node (spelt here only), their counters read and written, and pages
added to a pool and taken back.  conftest.py's hugetlb_pool, the soak driver
(tests/soak/soak.py) and the bench scripts (bench/numpy_bench.py,
bench/shared_bench.py) use it; they find this directory through their own
path.

The Python tests' one pool writer (pool_write_nr; the C tests' is
tests/c/pool.c, the shell tests' tests/run-test): nothing else in tests/
writes a pool file.  Changes are relative (add_pages / take_back): a
concurrent user of the same pool keeps what it reserved.  The soak driver
also puts a pool back to the value it saved (restore_nr).  tests/run-test
restores every pool whatever happens to the process.

The standard library only, like hp_memory.py, so a child script, a bench
worker or the soak driver imports it without hpalloc, NumPy or pytest."""

import os
import time

POOLS = "/sys/kernel/mm/hugepages"
NODES = "/sys/devices/system/node"
COUNTERS = ("nr", "free", "resv", "surplus")


def pool_dir(pagesize):
    return os.path.join(POOLS, "hugepages-%dkB" % (pagesize // 1024))


def pool_file(pagesize, what="nr_hugepages"):
    """The path of one counter of the pool of pagesize (bytes)."""
    return os.path.join(pool_dir(pagesize), what)


def node_pool_read(node, pagesize, what):
    """A counter of node's share of the pool of pagesize."""
    path = os.path.join(NODES, "node%d" % node, "hugepages",
                        "hugepages-%dkB" % (pagesize // 1024), what)
    with open(path) as f:
        return int(f.read().split()[0])


def pool_exists(pagesize):
    return os.path.isdir(pool_dir(pagesize))


def pool_sizes():
    """The page sizes (bytes) the kernel has pools of, smallest first."""
    try:
        names = os.listdir(POOLS)
    except OSError:
        return []
    return sorted(int(n.split("-")[1][:-2]) * 1024 for n in names
                  if n.startswith("hugepages-") and n.endswith("kB"))


def pool_read(pagesize, what, default=None):
    """A counter ("nr_hugepages", "free_hugepages", ...) of the pool of
    pagesize.  Without a default, a missing pool raises (OSError)."""
    try:
        with open(pool_file(pagesize, what)) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        if default is None:
            raise
        return default


def pool_write_nr(pagesize, count):
    """Asks for count pages in the pool; OSError if the kernel refuses the
    write (read-only /sys, not root)."""
    with open(pool_file(pagesize), "w") as f:
        f.write("%d\n" % count)


def add_pages(pagesize, count, refused_ok=False):
    """Adds count pages (negative: removes) to the pool of pagesize: how
    many the kernel really added (it may give fewer, or none).  A refused
    write raises unless refused_ok."""
    before = pool_read(pagesize, "nr_hugepages")
    try:
        pool_write_nr(pagesize, before + count)
    except OSError:
        if not refused_ok:
            raise
    return pool_read(pagesize, "nr_hugepages", before) - before


def take_back(pagesize, count):
    """Removes count pages that add_pages added (never below zero).  A
    page still in use when the pool is lowered stays counted in
    nr_hugepages, as surplus, until its holder frees it (a process that is
    ending frees it a moment later), so the write is repeated until the
    pool reads back the target (restore_nr).  Whether it took in that time
    (if not, holders() says who keeps pages: test_bench_restore's
    "pool left at 1 pages" was a process the bench had lost track of)."""
    target = max(pool_read(pagesize, "nr_hugepages") - count, 0)
    pool_write_nr(pagesize, target)
    return restore_nr(pagesize, target)


def restore_nr(pagesize, value, tries=50, pause=0.1):
    """Puts nr_hugepages back to value, trying for a while: pages a dying
    process held come back shortly.  Whether it took."""
    for _ in range(tries):
        try:
            pool_write_nr(pagesize, value)
        except OSError:
            pass
        if pool_read(pagesize, "nr_hugepages", -1) == value:
            return True
        time.sleep(pause)
    return False


def holders():
    """Who holds hugetlb pages now: "pid(comm, size)" for every process
    whose HugetlbPages is not zero, and the hugetlbfs mounts (files there
    keep pages too) -- what a pool that does not shrink back is waiting for."""
    out = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open("/proc/%s/status" % pid) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            size = fields.get("HugetlbPages", "0").strip()
            if size.split()[0] != "0":
                out.append("%s(%s, %s)" % (pid, fields.get("Name", "?").strip(), size))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    try:
        with open("/proc/self/mounts") as f:
            out += ["hugetlbfs at %s" % line.split()[1] for line in f
                    if line.split()[2:3] == ["hugetlbfs"]]
    except OSError:
        pass
    return ", ".join(out) or "none visible"


def pool_state():
    """Every pool's counters on one line: "2048kB nr 4 free 4 resv 0
    surplus 0; 1048576kB ..."."""
    out = []
    for size in pool_sizes():
        values = " ".join("%s %s" % (n, pool_read(size, n + "_hugepages", "?"))
                          for n in COUNTERS)
        out.append("%dkB %s" % (size // 1024, values))
    return "; ".join(out)
