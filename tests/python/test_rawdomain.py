"""hpalloc.python: CPython's raw memory domain on huge pages.

Every claim about memory is checked in /proc/self/smaps or /proc/self/maps
(hp_memory), never only in hpalloc's counters.  Scenarios that depend on a
fresh interpreter (the first install, tracemalloc's order, shutdown) run in
a subprocess: once set, the wrapper stays for the life of the process."""

import os
import pickle
import textwrap

import numpy as np
import pytest

import hpalloc
import hpalloc.numpy as hpnp
import hpalloc.python as hpy
from conftest import (MiB, data_address, first_wrong, pattern, python_env,
                      run_python)
from hp_memory import (SIZE, assert_huge, assert_not_huge, buffer_address,
                       hugetlb_of, mapping_range, smaps_entry)


@pytest.fixture
def raw():
    """The raw domain on hpalloc for one test; uninstalled afterwards, also
    when the test fails."""
    hpy.install()
    try:
        yield
    finally:
        hpy.uninstall()


def python_bytes():
    return hpalloc.stats()["python_huge_bytes"]


def test_bytearray_on_huge_pages(raw):
    before = python_bytes()
    b = bytearray(SIZE)
    b[::4096] = b"\1" * (SIZE // 4096)  # bytearray(n) is calloc'd: touch it
    addr = buffer_address(b)
    assert_huge(addr, SIZE)
    assert addr % (2 * MiB) == 0  # the start of an hpalloc block
    assert python_bytes() >= before + SIZE
    info = hpnp.backing(b)
    assert info["backend"] in ("thp", "hugetlb") and info["handler"] is None
    assert info["huge_bytes"] >= SIZE // 2


def test_bytes_and_calloc_are_zero(raw):
    b = bytearray(SIZE)   # PyMem_RawCalloc under the hood, on a fresh block
    assert b.count(0) == SIZE
    del b
    b = bytearray(SIZE)   # a cached (dirty) block this time: still zeroed
    assert b.count(0) == SIZE


def test_mode_off_keeps_the_previous_allocator(raw, knobs):
    knobs(mode="off")
    before = python_bytes()
    b = bytearray(SIZE)
    b[::4096] = b"\1" * (SIZE // 4096)
    assert_not_huge(buffer_address(b))
    assert hpnp.backing(b)["backend"] is None
    assert python_bytes() == before


def test_below_threshold_keeps_the_previous_allocator(raw, knobs):
    knobs(threshold="128M")
    b = bytearray(SIZE)
    b[::4096] = b"\1" * (SIZE // 4096)
    assert_not_huge(buffer_address(b))
    assert hpnp.backing(b)["backend"] is None


def test_unpickled_array_on_huge_pages(raw):
    a = np.arange(SIZE // 8, dtype=np.float64)
    for protocol in (2, 4):
        data = pickle.dumps(a, protocol=protocol)
        b = pickle.loads(data)
        # NumPy's unpickled array references the pickle's bytes object
        assert not b.flags.owndata
        assert_huge(data_address(b), b.nbytes)
        assert hpnp.backing(b)["backend"] in ("thp", "hugetlb")
        assert (b == a).all()


def test_unpickled_array_mode_off(raw, knobs):
    knobs(mode="off")
    a = np.arange(SIZE // 8, dtype=np.float64)
    b = pickle.loads(pickle.dumps(a, protocol=4))
    assert_not_huge(data_address(b))
    assert (b == a).all()


def test_freed_block_is_unmapped_once(raw, knobs):
    """With no cache, freeing a bytearray gives its mapping back to the
    kernel: gone from /proc/self/maps (no leak).  A second free would have
    crashed the process (hpalloc never hands its blocks to libc)."""
    knobs(cache_max="0")
    before = python_bytes()
    b = bytearray(SIZE)
    addr = buffer_address(b)
    block = mapping_range(addr)
    assert block[0] == addr and python_bytes() >= before + SIZE
    del b
    hpalloc.cache_flush()  # waits for releases in flight
    assert mapping_range(addr) != block  # hpalloc's mapping is gone
    assert python_bytes() == before


def test_memory_from_before_install_stays_valid(knobs):
    """Blocks of the previous allocator (made before install, or below the
    threshold) are freed and resized by it; hpalloc blocks made while
    installed are freed by hpalloc after uninstall."""
    knobs(cache_max="0")
    old = bytearray(b"x" * SIZE)  # previous allocator
    small = bytearray(b"y" * 4000)
    hpy.install()
    try:
        new = bytearray(b"z" * SIZE)  # hpalloc
        new_addr = buffer_address(new)
        new_block = mapping_range(new_addr)
        assert hpnp.backing(new)["backend"] in ("thp", "hugetlb")
        assert hpnp.backing(old)["backend"] is None
        old += b"x" * MiB    # realloc of a foreign block, onto hpalloc
        assert old.count(b"x") == SIZE + MiB
        small += b"y" * 1000
        del small
    finally:
        hpy.uninstall()
    assert not hpy.installed()
    before = python_bytes()
    del new    # an hpalloc block freed after uninstall
    hpalloc.cache_flush()
    assert mapping_range(new_addr) != new_block
    assert python_bytes() <= before - SIZE
    later = bytearray(SIZE)  # after uninstall: the previous allocator
    assert hpnp.backing(later)["backend"] is None
    assert old.count(b"x") == SIZE + MiB


def assert_kept(buf, n, seed, what):
    bad = first_wrong(buf, n, seed)
    assert bad is None, "%s: wrong from byte %d of the %d kept" % (what, bad, n)


def test_realloc_crosses_the_threshold_both_ways(raw):
    """A buffer growing past the threshold moves onto huge pages with its
    contents; shrinking below it moves back to the previous allocator.
    Every byte is checked."""
    b = bytearray(pattern(1000, 5))
    for step in range(70):       # grows by realloc: 1000 B ... ~70 MiB
        b += memoryview(pattern(MiB, 100 + step))
    addr = buffer_address(b)
    assert hpnp.backing(b)["backend"] in ("thp", "hugetlb")
    assert_huge(addr, 64 * MiB)
    assert_kept(b, 1000, 5, "1000 B grown to 70 MiB")
    for s in range(70):
        assert_kept(memoryview(b)[1000 + s * MiB:], MiB, 100 + s, "MiB %d appended" % s)
    b[:] = memoryview(pattern(len(b), 6))
    del b[4096:]                 # shrinks by realloc, below the threshold
    assert len(b) == 4096
    assert_kept(b, 4096, 6, "huge -> 4096 B")
    assert hpnp.backing(b)["backend"] is None


def realloc_copies():
    return hpalloc.stats()["realloc_copies"]


def test_realloc_on_hugetlb_keeps_every_byte(raw, knobs, hugetlb_pool):
    """A hugetlb block cannot be resized in place (mremap cannot): growing
    4 -> 16 MiB and shrinking back copy it (hp_huge_realloc), every byte
    of min(old, new) kept.  The shrink's copy lands in the block the
    growth left in the cache, whose older contents must not pass for the
    copy: each step refills with another seed."""
    hugetlb_pool(2 * MiB, 32)
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    b = bytearray(4 * MiB)
    assert hpnp.backing(b)["backend"] == "hugetlb"
    b[:] = memoryview(pattern(4 * MiB, 1))
    grow = bytes(12 * MiB)
    copies = realloc_copies()
    b += grow                       # realloc to 16 MiB (+1: the trailing NUL)
    assert realloc_copies() == copies + 1, "no copy: the case tests nothing"
    assert hpnp.backing(b)["backend"] == "hugetlb"
    assert_kept(b, 4 * MiB, 1, "4 -> 16 MiB")
    b[:] = memoryview(pattern(16 * MiB, 2))
    copies = realloc_copies()
    del b[4 * MiB:]                 # realloc to 4 MiB (+1)
    assert realloc_copies() == copies + 1, "no copy: the case tests nothing"
    assert hpnp.backing(b)["backend"] == "hugetlb"
    assert_kept(b, 4 * MiB, 2, "16 -> 4 MiB")


def test_realloc_under_another_numa_policy_keeps_every_byte(raw, knobs):
    """A THP block resized under another NUMA policy is copied into a block
    placed by that policy (hp_huge_realloc): 8 -> 16 MiB under "local",
    16 -> 6 MiB under the default again."""
    try:
        hpalloc.parse_knob("numa", "local")
    except ValueError as e:
        pytest.skip("this hpalloc takes no NUMA policy here: %s" % e)
    knobs(mode="thp")
    b = bytearray(8 * MiB)
    b[:] = memoryview(pattern(8 * MiB, 3))
    grow = bytes(8 * MiB)
    knobs(numa="local")
    copies = realloc_copies()
    b += grow
    assert realloc_copies() == copies + 1, "no copy: the case tests nothing"
    assert_kept(b, 8 * MiB, 3, "8 -> 16 MiB under numa=local")
    b[:] = memoryview(pattern(16 * MiB, 4))
    knobs(numa="default")
    copies = realloc_copies()
    del b[6 * MiB:]
    assert realloc_copies() == copies + 1, "no copy: the case tests nothing"
    assert_kept(b, 6 * MiB, 4, "16 -> 6 MiB under numa=default")
    assert hpnp.backing(b)["backend"] == "thp"


def test_fallback_fail_raises_memory_error_and_keeps_nothing(raw, knobs,
                                                           hugetlb_pool):
    """An empty hugetlb pool with fallback=fail: Python's MemoryError, no
    block left behind, the process keeps working."""
    hugetlb_pool(2 * MiB, 0, exact=True)   # whatever the machine had free
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    failures = hpalloc.stats()["failures"]
    before = python_bytes()
    with pytest.raises(MemoryError):
        bytearray(SIZE)
    assert hpalloc.stats()["failures"] > failures
    assert python_bytes() == before
    assert bytearray(100)[:1] == b"\0"


def test_hugetlb_pool_backs_bytearray(raw, knobs, hugetlb_pool):
    hugetlb_pool(2 * MiB, SIZE // (2 * MiB) + 2)
    knobs(mode="hugetlb", pagesize="2M", fallback="fail")
    b = bytearray(SIZE)
    b[::4096] = b"\1" * (SIZE // 4096)
    info = hpnp.backing(b)
    assert info["backend"] == "hugetlb" and info["kernel_page_size"] == 2 * MiB
    e = smaps_entry(buffer_address(b))
    assert e["KernelPageSize"] == 2 * MiB
    assert hugetlb_of(e) >= SIZE


# ---- fresh interpreters ------------------------------------------------------

def run(code, **env):
    return run_python(textwrap.dedent(code), env=python_env(**env))


def test_install_wraps_once_and_uninstall_keeps_the_router():
    proc = run("""
        import hpalloc.python as h, hpalloc._rawdomain as r
        assert not r.wrapped() and not h.installed()
        h.install(); h.install()
        assert r.wrapped() and r.outermost() and h.installed()
        b = bytearray(64 << 20)
        h.uninstall()
        assert not h.installed() and r.outermost()  # still the router
        del b
        h.install(); assert h.installed()
        print("ok")
    """)
    assert proc.stdout.split() == ["ok"], proc.stderr


def test_tracemalloc_started_after_install_sees_hpalloc_blocks():
    """tracemalloc wraps hpalloc: it traces the huge blocks too, and its
    stop() puts hpalloc's router back."""
    proc = run("""
        import tracemalloc, hpalloc, hpalloc.python as h, hpalloc._rawdomain as r
        h.install()
        tracemalloc.start()
        assert not r.outermost()
        b = bytearray(64 << 20)
        traced = tracemalloc.get_traced_memory()[0]
        assert traced >= 64 << 20, traced
        assert hpalloc.stats()["python_huge_bytes"] >= 64 << 20
        tracemalloc.stop()
        assert r.outermost()
        del b                       # allocated under tracemalloc, freed after
        assert hpalloc.stats()["python_huge_bytes"] == 0
        h.uninstall()
        tracemalloc.start()         # started after uninstall: still fine
        c = bytearray(64 << 20)
        tracemalloc.stop(); del c
        print("ok")
    """)
    assert proc.stdout.split() == ["ok"], proc.stderr


def test_install_refuses_under_tracemalloc_and_changes_nothing():
    """tracemalloc.stop() restores the allocator it saved: had hpalloc
    wrapped tracemalloc, stop() would drop hpalloc's router while hpalloc
    blocks are alive.  So install() says so and does nothing."""
    proc = run("""
        import tracemalloc, hpalloc.python as h, hpalloc._rawdomain as r
        tracemalloc.start()
        try:
            h.install()
        except RuntimeError as e:
            print("refused", "tracemalloc" in str(e))
        assert not r.wrapped() and not h.installed()
        tracemalloc.stop()
        h.install()
        b = bytearray(64 << 20)
        print("then", h.installed())
    """)
    assert proc.stdout.split() == ["refused", "True", "then", "True"], proc.stderr


def test_pythontracemalloc_at_startup_is_refused_too():
    proc = run("""
        import hpalloc.python as h
        try:
            h.install()
        except RuntimeError:
            print("refused")
    """, PYTHONTRACEMALLOC="1")
    assert proc.stdout.split() == ["refused"], proc.stderr


def test_debug_hooks_underneath():
    """PYTHONMALLOC=debug: hpalloc wraps CPython's debug hooks; blocks of
    either side are freed by their owner (the hooks would abort on a
    mismatch)."""
    proc = run("""
        import hpalloc.python as h
        old = bytearray(64 << 20)
        h.install()
        new = bytearray(64 << 20)
        small = bytearray(1000)
        old += b"x" * 4096
        del old, new, small
        h.uninstall()
        print("ok")
    """, PYTHONMALLOC="debug")
    assert proc.stdout.split() == ["ok"], proc.stderr


def test_exit_with_hpalloc_blocks_alive():
    """Interpreter shutdown frees objects after modules are gone; the
    router and the library stay until the process ends."""
    proc = run("""
        import sys, hpalloc.python as h
        h.install()
        keep = [bytearray(8 << 20) for _ in range(4)]
        sys.modules["__main__"].keep = keep
        h.uninstall()
        h.install()
        import atexit
        atexit.register(lambda: keep.append(bytearray(8 << 20)))
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], proc.stderr


def test_fork_child_frees_inherited_blocks():
    proc = run("""
        import os, hpalloc, hpalloc.python as h
        h.install()
        b = bytearray(b"q" * (64 << 20))
        pid = os.fork()
        if pid == 0:
            ok = b.count(b"q") == 64 << 20
            b += b"r" * 4096        # realloc of an inherited hpalloc block
            c = bytearray(64 << 20)
            del b, c
            os._exit(0 if ok and hpalloc.stats()["python_huge_bytes"] == 0 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), b.count(b"q") == 64 << 20)
    """)
    assert proc.stdout.split() == ["0", "True"], proc.stderr
