"""hpalloc.numpy.backing() for any buffer, not only ndarrays: bytes,
bytearray, memoryview, mmap, a Numba array, a PyTorch tensor -- hpalloc's
block and the kernel's view, or the kernel's view alone for memory that is
not hpalloc's.  Compared with our own reading of /proc/self/smaps."""

import mmap

import numpy as np
import pytest

import hpalloc.numpy as hpnp
import hpalloc.python as hpy
from conftest import MiB, data_address
from hp_memory import SIZE, assert_huge, buffer_address, huge_bytes, smaps_entry
from hp_pytest_automake import need


def check_huge(obj, address):
    assert_huge(address, SIZE)   # settled: a block faulted at 4 KiB first is collapsed behind
    info = hpnp.backing(obj)
    assert info["backend"] in ("thp", "hugetlb"), info
    assert info["handler"] is None
    assert info["mapping_size"] >= SIZE and info["usable_size"] >= SIZE
    e = smaps_entry(address)
    assert info["huge_bytes"] == huge_bytes(address) >= SIZE // 2
    assert info["rss_bytes"] == e["Rss"]


@pytest.fixture
def raw():
    hpy.install()
    try:
        yield
    finally:
        hpy.uninstall()


def test_bytes_bytearray_memoryview_on_hpalloc(raw):
    data = bytes(SIZE)            # calloc'd: touch it through a copy below
    buf = bytearray(b"x" * SIZE)
    check_huge(buf, buffer_address(buf))
    view = memoryview(buf)[MiB:2 * MiB]   # interior: the same block
    assert hpnp.backing(view)["mapping_size"] == hpnp.backing(buf)["mapping_size"]
    assert hpnp.backing(data)["backend"] in ("thp", "hugetlb")


def test_buffers_hpalloc_did_not_allocate():
    buf = bytearray(b"y" * (4 * MiB))     # before any install: libc's
    info = hpnp.backing(buf)
    assert info["backend"] is None and info["handler"] is None
    assert info["rss_bytes"] > 0 and info["kernel_page_size"] == 4096
    with mmap.mmap(-1, 4 * MiB) as m:
        m[:] = b"z" * (4 * MiB)
        info = hpnp.backing(m)
        assert info["backend"] is None
        assert info["rss_bytes"] == smaps_entry(buffer_address(m))["Rss"]
        del info
    assert hpnp.backing(b"")["backend"] is None


def test_objects_without_memory_are_refused():
    for obj in (42, "text", object()):
        with pytest.raises(TypeError):
            hpnp.backing(obj)


def test_numba_array():
    numba = need("numba")
    import hpalloc.numba as hnb

    @numba.njit
    def make(n):
        return np.ones(n)

    hnb.install()
    try:
        a = make(SIZE // 8)
    finally:
        hnb.uninstall()
    check_huge(a, data_address(a))


def test_torch_tensor():
    torch = need("torch")
    try:
        import hpalloc.torch as htorch
    except ImportError as exc:
        pytest.skip("hpalloc was built without its PyTorch adapter: %s" % exc)
    htorch.install()
    try:
        t = torch.ones(SIZE // 8, dtype=torch.float64)
    finally:
        htorch.uninstall()
    check_huge(t, t.data_ptr())
    plain = torch.ones(1000)
    assert hpnp.backing(plain)["backend"] is None
    graded = torch.ones(10, requires_grad=True)
    with pytest.raises(TypeError, match="DLPack"):
        hpnp.backing(graded)
    assert hpnp.backing(graded.detach())["backend"] is None
