"""Arrays really on huge pages, as the kernel reports them: explicit 2M and
1G hugetlb arrays (pools reserved by the fixture, root only), THP arrays, and
MemoryError when the pool is empty and fallback=fail."""

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hpnp
from conftest import GiB, MiB, data_address
from hp_memory import hugetlb_of, smaps_entry
from hp_pools import pool_exists, pool_read
from hp_pytest_automake import skip as skip_lacking


def check_hugetlb(arr, pagesize):
    """backing() and our own reading of /proc/self/smaps agree that every
    byte of arr sits on hugetlb pages of pagesize."""
    info = hpnp.backing(arr)
    assert info["handler"] == "hpalloc"
    assert info["backend"] == "hugetlb"
    assert info["requested_page_size"] == pagesize
    assert info["kernel_page_size"] == pagesize
    assert info["hugetlb_bytes"] >= arr.nbytes
    assert info["huge_bytes"] >= arr.nbytes
    assert info["mapping_size"] % pagesize == 0
    smaps = smaps_entry(data_address(arr))
    assert smaps["KernelPageSize"] == pagesize
    assert hugetlb_of(smaps) >= arr.nbytes


@pytest.mark.parametrize("make", [hpnp.zeros, hpnp.empty])
def test_2m_array_on_hugetlb_pages(hugetlb_pool, make):
    hugetlb_pool(2 * MiB, 40)
    arr = make(64 * MiB // 8, pagesize="2M")
    arr[:] = 3.0  # touch every page
    assert hpnp.get_handler_name(arr) == "hpalloc"
    check_hugetlb(arr, 2 * MiB)
    assert hpalloc.stats()["hugetlb_live_bytes"] >= arr.nbytes
    # A view reports the owner's block.
    assert hpnp.backing(arr[1000:])["backend"] == "hugetlb"


def test_1g_array_on_hugetlb_pages(hugetlb_pool):
    hugetlb_pool(GiB, 1)
    arr = hpnp.zeros(GiB // 8, dtype=np.float64, pagesize="1G")
    assert arr.nbytes == GiB and not arr.any()
    arr[::512] = 1.0  # touch every 4 KiB of the page
    check_hugetlb(arr, GiB)
    assert arr.sum() == GiB // 8 // 512


def test_explicit_pagesize_ignores_threshold(hugetlb_pool, knobs):
    hugetlb_pool(2 * MiB, 2)
    knobs(threshold="1G", mode="thp")
    arr = hpnp.zeros(1000, pagesize="2M")  # 8000 bytes: far below threshold
    arr[:] = 1.0  # fault the page in: smaps counts only touched pages
    check_hugetlb(arr, 2 * MiB)


def test_knob_driven_hugetlb_through_install(hugetlb_pool, knobs):
    hugetlb_pool(2 * MiB, 20)
    knobs(mode="hugetlb", pagesize="2M", threshold="4M", fallback="fail")
    hpnp.install()
    arr = np.ones(16 * MiB // 8)
    check_hugetlb(arr, 2 * MiB)


def test_thp_array_has_anon_huge_pages(knobs):
    knobs(mode="thp", threshold="2M")
    with hpnp.enabled():
        arr = np.ones(64 * MiB // 8)
    info = hpnp.backing(arr)
    assert info["backend"] == "thp"
    assert info["thp_eligible"]
    assert info["mapping_size"] % (2 * MiB) == 0
    assert data_address(arr) % (2 * MiB) == 0
    smaps = smaps_entry(data_address(arr))
    assert smaps["AnonHugePages"] > 0, smaps
    assert info["anon_huge_bytes"] > 0 and info["huge_bytes"] > 0


def more_than_the_pool_has(pagesize):
    """Bytes the pool cannot provide right now (others may hold pages)."""
    return (pool_read(pagesize, "free_hugepages") + 4) * pagesize


def test_memory_error_not_a_crash_when_pool_is_short_and_fallback_fails(knobs):
    if not pool_exists(GiB):
        skip_lacking("hugetlb1g", "kernel offers no 1 GiB pages")
    knobs(fallback="fail")
    failures = hpalloc.stats()["failures"]
    with pytest.raises(MemoryError):
        hpnp.empty(more_than_the_pool_has(GiB) // 8, pagesize="1G")
    if pool_read(GiB, "free_hugepages") == 0:
        with pytest.raises(MemoryError):
            hpnp.zeros(10, pagesize="1G")  # even one page is too many
    assert hpalloc.stats()["failures"] > failures
    assert hpnp.get_handler_name() == "default_allocator"
    # The process carries on, and so does hpalloc.
    with hpnp.enabled():
        assert np.ones(1000).sum() == 1000


def test_memory_error_with_knob_driven_hugetlb(knobs):
    knobs(mode="hugetlb", pagesize="2M", threshold="2M", fallback="fail")
    with hpnp.enabled():
        with pytest.raises(MemoryError):
            np.empty(more_than_the_pool_has(2 * MiB) // 8)
        assert np.ones(10).sum() == 10  # below threshold: libc, fine
