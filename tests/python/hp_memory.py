"""The Python tests' one reader of what the kernel says about memory:
/proc/<pid>/smaps, /proc/<pid>/maps and /proc/<pid>/numa_maps, read
independently of hpalloc (never asks the library).  Every test, every child
script the tests start and the soak driver read memory through it.

"Huge" means one thing (huge_of), as in tests/c/smaps.h and lib/core/smaps.c:
the bytes of a mapping on huge pages are
    AnonHugePages + ShmemPmdMapped     (THP: anonymous, or the shmem of shared blocks)
  + Private_Hugetlb + Shared_Hugetlb   (hugetlb pages, private or shared).
FilePmdMapped (THP page cache of regular files) is not counted: hpalloc
never maps such files.

The standard library only (NumPy is imported by buffer_address alone), so a
child script imports it without hpalloc, NumPy or pytest: CHILD, put first
in the script, finds this directory whatever PYTHONPATH the child has."""

import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# First lines of a child script that reads its memory through this module.
CHILD = "import sys; sys.path.insert(0, %r)\n" % HERE

MiB = 1 << 20
SIZE = 64 * MiB
HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "Private_Hugetlb", "Shared_Hugetlb")
HUGETLB_FIELDS = ("Private_Hugetlb", "Shared_Hugetlb")
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
# hpalloc's promise for a block first touched at 4 KiB pages (populate_pages
# =measured where fresh huge pages are dear; a worker collapses it behind the
# program): >= 90 % on huge pages within 2 s of its last write.  The tests
# give it more (a sanitizer build, a loaded machine).
SETTLE_SECONDS = 10.0


# ---- /proc/<pid>/smaps ------------------------------------------------------

def smaps(pid="self"):
    """Every mapping of /proc/<pid>/smaps, in order: a dict of start, end,
    perms, path ("" if anonymous), VmFlags (a set of words) and each kB
    field in bytes ("Rss", "KernelPageSize", ...)."""
    entries, cur = [], None
    with open("/proc/%s/smaps" % pid) as f:
        for line in f:
            words = line.split()
            head = words[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                path = line.split(None, 5)[5].strip() if len(words) > 5 else ""
                cur = {"start": start, "end": end, "perms": words[1], "path": path,
                       "VmFlags": set()}
                entries.append(cur)
            elif head == "VmFlags:":
                cur["VmFlags"] = set(words[1:])
            elif words[-1] == "kB":
                cur[head.rstrip(":")] = int(words[1]) * 1024
    return entries


def smaps_entry(address, pid="self"):
    """The smaps entry (see smaps) of the mapping holding address."""
    for e in smaps(pid):
        if e["start"] <= address < e["end"]:
            return e
    raise AssertionError("address %#x not mapped" % address)


def overlapping(address, size, pid="self"):
    """The smaps entries of the mappings overlapping [address, address+size)."""
    return [e for e in smaps(pid) if e["start"] < address + size and e["end"] > address]


def huge_of(entry):
    """Bytes of one smaps entry on huge pages (THP or hugetlb)."""
    return sum(entry.get(k, 0) for k in HUGE_FIELDS)


def hugetlb_of(entry):
    """Bytes of one smaps entry on hugetlb pages (private or shared)."""
    return sum(entry.get(k, 0) for k in HUGETLB_FIELDS)


def huge_bytes(address, size=1, pid="self"):
    """Huge bytes (huge_of) of the mappings overlapping [address,
    address+size): with the default size, of the mapping holding address."""
    return sum(huge_of(e) for e in overlapping(address, size, pid))


def hpalloc_loaded(pid="self"):
    """Whether libhpalloc (or its preload library) is mapped in the process."""
    with open("/proc/%s/maps" % pid) as f:
        return any("libhpalloc" in line for line in f)


def settled_huge_bytes(address, size, within=None, pid="self"):
    """huge_bytes(address, size) once every whole 2 MiB extent of size is
    huge, or `within` seconds have passed (default: SETTLE_SECONDS where
    hpalloc is loaded, else none): a fresh block hpalloc faulted at 4 KiB
    first is collapsed to huge pages behind the program, so that a reading
    taken now stays what it is."""
    if within is None:
        within = SETTLE_SECONDS if hpalloc_loaded(pid) else 0
    deadline = time.monotonic() + within
    whole = size // (2 * MiB) * (2 * MiB)
    while True:
        got = huge_bytes(address, size, pid)
        if got >= whole or time.monotonic() >= deadline:
            return got
        time.sleep(0.05)


def process_huge_bytes(pid="self"):
    """Huge bytes (huge_of) of the whole process."""
    return sum(huge_of(e) for e in smaps(pid))


def hg_bytes(pid="self"):
    """Bytes of the mappings advised MADV_HUGEPAGE ("hg" in VmFlags):
    hpalloc's THP blocks, cached or live."""
    return sum(e["end"] - e["start"] for e in smaps(pid) if "hg" in e["VmFlags"])


# ---- /proc/<pid>/numa_maps --------------------------------------------------

def numa_maps_entry(address, pid="self"):
    """(policy, {node: pages}, huge) of the mapping starting at address."""
    with open("/proc/%s/numa_maps" % pid) as f:
        for line in f:
            words = line.split()
            if int(words[0], 16) != address:
                continue
            pages = {}
            for w in words[2:]:
                if w.startswith("N") and "=" in w:
                    node, count = w[1:].split("=")
                    pages[int(node)] = int(count)
            return words[1], pages, "huge" in words
    raise AssertionError("no numa_maps entry at %#x" % address)


# ---- /proc/self/maps --------------------------------------------------------

def mapping_range(address):
    """(start, end) of the mapping holding address; None if unmapped.
    After a block is freed, compare ranges, not presence: another mapping
    (a new malloc arena) may take the place.  A block hpalloc faults at 4
    KiB first is split in two VMAs while it is (MADV_NOHUGEPAGE on its
    rest, "nh") and one again once collapsed: the two count as one
    mapping (_one_block), so that the range does not change while the
    block lives."""
    entries = smaps()
    for i, e in enumerate(entries):
        if e["start"] <= address < e["end"]:
            lo = hi = i
            while lo > 0 and _one_block(entries[lo - 1], entries[lo]):
                lo -= 1
            while hi + 1 < len(entries) and _one_block(entries[hi], entries[hi + 1]):
                hi += 1
            return entries[lo]["start"], entries[hi]["end"]
    return None


def _one_block(a, b):
    """Whether adjacent smaps entries a (below) and b are one block split by
    hpalloc's 4 KiB advice: the part the program began "hg", the rest above
    it "nh", alike in all else.  (A thread stack is "nh" too, but its guard
    page lies below it: never an "hg" block's upper part.)"""
    return (a["end"] == b["start"] and a["perms"] == b["perms"] and a["path"] == b["path"] == ""
            and a["VmFlags"] - b["VmFlags"] == {"hg"} and b["VmFlags"] - a["VmFlags"] == {"nh"})


# ---- assertions for the adapter tests ---------------------------------------

def buffer_address(obj):
    """Address of the first byte of any buffer (bytes, bytearray,
    memoryview, ndarray), without copying."""
    import numpy as np
    return np.frombuffer(obj, dtype=np.uint8).__array_interface__["data"][0]


def assert_huge(address, nbytes, within=None):
    """The mapping holding [address, address+nbytes) is on huge pages: at
    least half of nbytes (THP may fall back to small pages for some 2 MiB
    extents when memory is fragmented; everything counts when it is not),
    once settled (settled_huge_bytes: a block faulted at 4 KiB first is
    collapsed behind the program)."""
    settled_huge_bytes(address, nbytes, within)
    e = smaps_entry(address)
    got = huge_of(e)
    assert e["end"] - address >= nbytes, e
    assert got >= nbytes // 2, "only %d of %d bytes huge, settled or not: %r" % (got, nbytes, e)
    return got


def thp_always():
    with open(THP_ENABLED) as f:
        return "[always]" in f.read()


def assert_not_huge(address):
    """No huge pages under address -- unless the machine's THP mode is
    `always`, where the kernel may give any large mapping huge pages."""
    if thp_always():
        return
    e = smaps_entry(address)
    assert huge_of(e) == 0, e
