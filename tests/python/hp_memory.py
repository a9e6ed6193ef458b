"""What the kernel says about a buffer's memory, read from /proc/self/smaps
and /proc/self/maps independently of hpalloc (for the adapter tests:
raw domain, Numba, PyTorch).  Never asks the library."""

import numpy as np

from conftest import MiB, smaps_entry

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def buffer_address(obj):
    """Address of the first byte of any buffer (bytes, bytearray,
    memoryview, ndarray), without copying."""
    return np.frombuffer(obj, dtype=np.uint8).__array_interface__["data"][0]


def huge_bytes(address):
    """THP + hugetlb bytes of the mapping holding address."""
    e = smaps_entry(address)
    return (e.get("AnonHugePages", 0) + e.get("Private_Hugetlb", 0) +
            e.get("Shared_Hugetlb", 0))


def assert_huge(address, nbytes):
    """The mapping holding [address, address+nbytes) is on huge pages: at
    least half of nbytes (THP may fall back to small pages for some 2 MiB
    extents when memory is fragmented; everything counts when it is not)."""
    e = smaps_entry(address)
    got = huge_bytes(address)
    assert e["end"] - address >= nbytes, e
    assert got >= nbytes // 2, "only %d of %d bytes huge: %r" % (got, nbytes, e)
    return got


def thp_always():
    with open(THP_ENABLED) as f:
        return "[always]" in f.read()


def assert_not_huge(address):
    """No huge pages under address -- unless the machine's THP mode is
    `always`, where the kernel may give any large mapping huge pages."""
    if thp_always():
        return
    assert huge_bytes(address) == 0, smaps_entry(address)


def mapping_range(address):
    """(start, end) of the mapping holding address, from /proc/self/maps;
    None if unmapped.  After a block is freed, compare ranges, not
    presence: another mapping (a new malloc arena) may take the place."""
    with open("/proc/self/maps") as f:
        for line in f:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return start, end
    return None


SIZE = 64 * MiB
