"""hpalloc.torch: CPU tensors on huge pages (checked in /proc/self/smaps);
memory shared with NumPy (torch.from_numpy, Tensor.numpy, DLPack) freed
once, by its allocator, when the last owner goes, in either order; storage
freed from other threads and after uninstall(); a failed allocation is
PyTorch's RuntimeError with nothing left behind; the adapter refuses, in
one line, a PyTorch release other than those it was built for (naming
`hpctl run --preload`), and says how to get it when it was not built."""

import gc
import threading

import numpy as np
import pytest

from hp_pytest_automake import need  # noqa: E402

torch = need("torch", "hpalloc.torch")

import hpalloc  # noqa: E402
import hpalloc.numpy as hpnp  # noqa: E402
from conftest import MiB, data_address, run_python  # noqa: E402
from hp_memory import (SIZE, assert_huge, assert_not_huge, hugetlb_of,  # noqa: E402
                       mapping_range, smaps_entry)

import hpalloc.torch as htorch  # noqa: E402

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
    assert e["KernelPageSize"] == 2 * MiB and hugetlb_of(e) >= SIZE


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


# ---- built for one release ------------------------------------------------------

def test_records_the_releases_it_serves():
    assert htorch._release(torch.__version__) in htorch.serves
    assert htorch.built_for == htorch._torch.built_for
    assert htorch.serves == tuple(htorch._release(r) for r in htorch.built_for.split())


def import_error(prelude):
    """The one line `import hpalloc.torch` raises after prelude, in a fresh
    interpreter."""
    proc = run_python(prelude + """
try:
    import hpalloc.torch
except ImportError as exc:
    print(exc)
else:
    print("imported")
""")
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return lines[0]


REBUILD = ("build hpalloc against this PyTorch's headers: pip install --no-build-isolation "
           "--config-settings=torch-headers=auto . in a clone or the sdist (docs/python.md, "
           "\"PyTorch\")")
ANY_RELEASE = ("; or `hpctl run --preload -- COMMAND` puts tensors on huge pages under any "
               "PyTorch release")


def test_refuses_another_release():
    """c10's Allocator is a C++ vtable of one release: under another, the
    adapter must not be used (a wrong vtable is a crash, not an error)."""
    served = htorch.serves
    line = import_error("import torch; torch.__version__ = '1.0.0+other'")
    assert line.startswith("hpalloc.torch serves PyTorch %s, this is 1.0.0+other: "
                           % ", ".join(served)), line
    if htorch._torch.declared_abi:  # the wheel's: the release to install
        assert line.endswith(": install torch==%s.* in this environment, or %s%s"
                             % (served[-1], REBUILD, ANY_RELEASE)), line
    else:
        assert line.endswith(": %s%s" % (REBUILD, ANY_RELEASE)), line
    # a patch release or a nightly of one served: the running libc10's
    # layout decides (tests/python/test_torch_layout.py: another is refused)
    for release in served:
        assert import_error("import torch; torch.__version__ = %r"
                            % (release + ".99+local")) == "imported"


def test_not_built_says_how_to_get_it():
    line = import_error("import sys; sys.modules['hpalloc._torch'] = None")
    assert line.startswith("hpalloc.torch is not available: hpalloc was built "
                           "without its PyTorch adapter")
    for how in ("no C++ compiler", "python3-hpalloc-torch", "--without-torch"):
        assert how in line


def test_not_loadable_says_rebuild():
    """The dynamic linker refusing the module (built against another
    libc10: a missing symbol) is said with its reason."""
    line = import_error("""
import sys, importlib.abc, importlib.machinery
class Refuse(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "hpalloc._torch":  # found, as the file is
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):  # and refused when loaded
        raise ImportError("_torch.so: undefined symbol: _ZN3c1010Allocator")
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, Refuse())
""")
    assert line.startswith("hpalloc.torch does not load with PyTorch %s "
                           "(_torch.so: undefined symbol: " % torch.__version__)
    assert line.endswith("rebuild hpalloc against this PyTorch (docs/python.md, "
                         "\"PyTorch\")"), line


def test_declared_abi_binds_only_to_the_loaded_libc10():
    """The wheel's adapter (declared ABI) links nothing of PyTorch: until
    hpalloc.torch binds it to the libc10 PyTorch loaded, it refuses to touch
    c10, and it binds to nothing else (a libc10 that is not loaded, a
    library without c10's functions)."""
    if not htorch._torch.declared_abi:
        pytest.skip("this build links libc10 (configure --with-torch): nothing to "
                    "bind; the declared-ABI build (the wheel's) runs this in make "
                    "check-venv")
    proc = run_python("""
import ctypes.util, os, torch
from hpalloc import _torch
try:
    _torch.install()
except RuntimeError as exc:
    print("install:", exc)
for path in ("/nonexistent/libc10.so", "libc.so.6"):
    try:
        _torch.bind(path)
    except ImportError as exc:
        print("bind:", exc)
_torch.bind(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
_torch.install(); print("installed:", _torch.installed()); _torch.uninstall()
""")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("install: hpalloc._torch is not bound to PyTorch's libc10"), lines
    assert lines[1].startswith("bind: /nonexistent/libc10.so is not loaded (import torch "
                               "first)"), lines
    assert lines[2] == ("bind: libc.so.6 has no _ZN3c1015GetCPUAllocatorEv: not the libc10 "
                        "of PyTorch %s" % htorch.built_for), lines
    assert lines[3] == "installed: True", lines


def test_copy_on_write_clone_on_hpalloc(adapter):
    """PyTorch 2's lazy (copy-on-write) clone copies the storage when one
    side is written, through the storage's allocator: Allocator::clone,
    i.e. allocate() + copy_data(), the members PyTorch 2 added."""
    lazy_clone = getattr(torch, "_lazy_clone", None)
    if lazy_clone is None:
        pytest.skip("PyTorch %s has no copy-on-write storage (torch._lazy_clone, "
                    "PyTorch >= 2.3)" % torch.__version__)
    t = torch.arange(N, dtype=torch.float64)
    c = lazy_clone(t)
    # shared until written (data_ptr() would materialise it: a write access)
    assert torch._C._is_cow_tensor(c)
    assert c.const_data_ptr() == t.const_data_ptr()
    before = torch_bytes()
    c.add_(1.0)                               # materialised: clone()
    assert not torch._C._is_cow_tensor(c)
    assert c.data_ptr() != t.data_ptr()
    assert torch_bytes() >= before + SIZE
    assert_huge(c.data_ptr(), SIZE)
    assert t[N - 1].item() == N - 1 and c[N - 1].item() == N
    assert c[0].item() == 1.0 and t[0].item() == 0.0
