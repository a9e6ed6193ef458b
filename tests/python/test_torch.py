"""hpalloc.torch: CPU tensors on huge pages (checked in /proc/self/smaps);
memory shared with NumPy (torch.from_numpy, Tensor.numpy, DLPack) freed
once, by its allocator, when the last owner goes, in either order; storage
freed from other threads and after uninstall(); a failed allocation is
PyTorch's RuntimeError with nothing left behind."""

import gc
import threading

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (Debian: python3-torch)")

import hpalloc  # noqa: E402
import hpalloc.numpy as hpnp  # noqa: E402
from conftest import MiB, data_address, smaps_entry  # noqa: E402
from hp_memory import SIZE, assert_huge, assert_not_huge, mapping_range  # noqa: E402

try:
    import hpalloc.torch as htorch
except ImportError as exc:  # configure --without-torch
    pytest.skip("hpalloc was built without its PyTorch adapter: %s" % exc,
                allow_module_level=True)

N = SIZE // 8  # float64 elements in 64 MiB


@pytest.fixture
def adapter():
    htorch.install()
    try:
        yield
    finally:
        htorch.uninstall()
    assert not htorch.installed()


def torch_bytes():
    return hpalloc.stats()["torch_huge_bytes"]


def numpy_bytes():
    return hpalloc.stats()["numpy_huge_bytes"]


def test_empty_tensor_on_huge_pages(adapter):
    before = torch_bytes()
    t = torch.empty(N, dtype=torch.float64)
    t.fill_(2.0)
    assert_huge(t.data_ptr(), SIZE)
    assert t.data_ptr() % (2 * MiB) == 0
    assert torch_bytes() >= before + SIZE
    info = hpnp.backing(t)
    assert info["backend"] in ("thp", "hugetlb") and info["huge_bytes"] >= SIZE // 2
    del t
    assert torch_bytes() == before


def test_operation_results_on_huge_pages(adapter):
    a = torch.ones(N, dtype=torch.float64)
    b = a * 2 + a     # a temporary and a result
    assert_huge(b.data_ptr(), SIZE)
    assert b[123].item() == 3.0


def test_mode_off_leaves_tensors_small(adapter, knobs):
    knobs(mode="off")
    before = torch_bytes()
    t = torch.empty(N, dtype=torch.float64)
    t.fill_(1.0)
    assert_not_huge(t.data_ptr())
    assert torch_bytes() == before
    assert hpnp.backing(t)["backend"] is None


def test_without_install_tensors_are_c10s():
    assert not htorch.installed()
    t = torch.empty(N, dtype=torch.float64)
    t.fill_(1.0)
    assert hpnp.backing(t)["backend"] is None


def test_hugetlb_pool_backs_tensor(adapter, knobs, hugetlb_pool):
    hugetlb_pool(2 * MiB, SIZE // (2 * MiB) + 2)
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    t = torch.zeros(N, dtype=torch.float64)
    t.fill_(1.0)
    e = smaps_entry(t.data_ptr())
    assert e["KernelPageSize"] == 2 * MiB and e.get("Private_Hugetlb", 0) >= SIZE


def test_out_of_memory_is_runtime_error(adapter, knobs, hugetlb_pool):
    hugetlb_pool(2 * MiB, 0, exact=True)   # whatever the machine had free
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    before, failures = torch_bytes(), hpalloc.stats()["failures"]
    with pytest.raises(RuntimeError, match="not enough memory"):
        torch.empty(N, dtype=torch.float64)
    assert torch_bytes() == before
    assert hpalloc.stats()["failures"] > failures
    assert torch.ones(10).sum().item() == 10.0  # small tensors still fine


def test_freed_in_another_thread_and_after_uninstall(knobs):
    knobs(cache_max="0")
    htorch.install()
    before = torch_bytes()
    tensors = [torch.empty(N // 4, dtype=torch.float64) for _ in range(4)]
    blocks = [mapping_range(t.data_ptr()) for t in tensors]
    assert torch_bytes() >= before + SIZE
    t = threading.Thread(target=lambda: tensors.pop())
    t.start()
    t.join()
    htorch.uninstall()
    later = torch.empty(N, dtype=torch.float64)   # c10's own again
    assert hpnp.backing(later)["backend"] is None
    del tensors[:]   # made by hpalloc, freed after uninstall: hp_free
    hpalloc.cache_flush()
    assert torch_bytes() == before
    assert all(mapping_range(b[0]) != b for b in blocks)


def test_zero_size_and_small_tensors(adapter):
    assert torch.empty(0).numel() == 0
    small = torch.arange(1000, dtype=torch.float64)
    assert small.data_ptr() % 64 == 0      # c10's alignment
    assert small.sum().item() == 999 * 1000 / 2


def test_install_priority_and_previous_allocator_restored():
    htorch.install(priority=3)
    assert htorch.installed()
    htorch.install(priority=3)   # idempotent
    htorch.uninstall()
    assert not htorch.installed()
    htorch.install()             # retakes the slot it gave back at 3
    assert htorch.installed()
    htorch.uninstall()
    with pytest.raises(TypeError):
        htorch.install(priority="high")
    with pytest.raises(ValueError):
        htorch.install(priority=300)
    assert not htorch.installed()


# ---- memory shared with NumPy -------------------------------------------------
# Whichever side allocated frees, once, when the last owner goes: a double
# free of a huge block would abort the process (hpalloc hands libc nothing
# of its own), a leak shows as the mapping still there after cache_flush().

@pytest.fixture
def uncached(knobs):
    knobs(cache_max="0")


def gone(block):
    gc.collect()
    hpalloc.cache_flush()
    return mapping_range(block[0]) != block


@pytest.mark.parametrize("drop_array_first", [True, False])
def test_from_numpy_shares_an_hpalloc_array(uncached, drop_array_first):
    hpnp.install()
    try:
        a = np.zeros(N)
    finally:
        hpnp.uninstall()
    assert hpnp.backing(a)["backend"] in ("thp", "hugetlb")
    block = mapping_range(data_address(a))
    t = torch.from_numpy(a)
    assert t.data_ptr() == data_address(a)
    a[7] = 42.0
    t[8] = 43.0
    assert t[7].item() == 42.0 and a[8] == 43.0
    before = numpy_bytes()
    if drop_array_first:
        del a
        assert not gone(block) and numpy_bytes() == before
        del t
    else:
        del t
        assert not gone(block) and numpy_bytes() == before
        del a
    assert gone(block)
    assert numpy_bytes() <= before - SIZE


@pytest.mark.parametrize("drop_tensor_first", [True, False])
def test_tensor_numpy_shares_an_hpalloc_tensor(adapter, uncached, drop_tensor_first):
    t = torch.zeros(N, dtype=torch.float64)
    block = mapping_range(t.data_ptr())
    a = t.numpy()
    assert data_address(a) == t.data_ptr()
    a[3] = 5.0
    t[4] = 6.0
    assert t[3].item() == 5.0 and a[4] == 6.0
    assert hpnp.backing(a)["backend"] in ("thp", "hugetlb")
    before = torch_bytes()
    if drop_tensor_first:
        del t
        assert not gone(block) and torch_bytes() == before
        del a
    else:
        del a
        assert not gone(block) and torch_bytes() == before
        del t
    assert gone(block)
    assert torch_bytes() <= before - SIZE


@pytest.mark.parametrize("drop_order", ["array", "tensor", "back"])
def test_dlpack_round_trip_shares_memory(adapter, uncached, drop_order):
    """hpalloc NumPy array -> torch (DLPack) -> NumPy (DLPack): one block,
    three owners, freed when the last goes, whichever it is."""
    hpnp.install()
    try:
        a = np.zeros(N)
    finally:
        hpnp.uninstall()
    block = mapping_range(data_address(a))
    t = torch.utils.dlpack.from_dlpack(a)
    back = np.from_dlpack(t)
    assert data_address(a) == t.data_ptr() == data_address(back)
    a[1] = 1.0
    t[2] = 2.0    # (NumPy 1.24 marks DLPack imports read-only: back reads)
    assert a[2] == 2.0 and t[1].item() == 1.0
    assert back[1] == 1.0 and back[2] == 2.0
    owners = {"array": a, "tensor": t, "back": back}
    del a, t, back
    order = [drop_order] + [k for k in owners if k != drop_order]
    for name in order[:-1]:
        del owners[name]
        assert not gone(block)
    del owners[order[-1]]
    assert gone(block)


def test_dlpack_of_an_hpalloc_tensor(adapter, uncached):
    """An hpalloc tensor exported through DLPack to NumPy and, as a
    capsule, to another tensor: one block, freed after the last owner."""
    t = torch.ones(N, dtype=torch.float64)
    block = mapping_range(t.data_ptr())
    a = np.from_dlpack(t)
    t2 = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert data_address(a) == t.data_ptr() == t2.data_ptr()
    t2[5] = 7.0
    assert a[5] == 7.0 and t[5].item() == 7.0
    del t, t2
    assert not gone(block)
    assert a.sum() == N + 6
    del a
    assert gone(block)


def test_profiler_sees_hpalloc_allocations(adapter):
    """Allocations are reported to c10's memory reporter, as c10's own
    allocator does: torch.profiler(profile_memory=True) counts them."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.empty(MiB, dtype=torch.float64)
        del x
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::empty"].cpu_memory_usage >= 8 * MiB
