"""Shared fixtures for the hpalloc Python tests.

The tests run against the BUILD tree: make exports
HPALLOC_TEST_PYTHON_INPLACE, a directory holding the package as it would be
installed (the sources plus the freshly built _hpalloc.so and the .pth), and
HPALLOC_TEST_LIBDIR, where the uninstalled libhpalloc.so.1 is.  Without them
the tests use whatever `hpalloc` is importable (an installed copy).
"""

import ctypes
import mmap
import os
import subprocess
import sys
import textwrap

import pytest

from hp_pytest_automake import skip as skip_lacking
from hp_pools import add_pages, pool_exists, pool_read, take_back

INPLACE = os.environ.get("HPALLOC_TEST_PYTHON_INPLACE")
# make check-venv: the package pip installed into this venv (built against
# the build tree's library), not python/inplace
VENV = os.environ.get("HPALLOC_TEST_VENV")
LIBDIR = os.environ.get("HPALLOC_TEST_LIBDIR")
if LIBDIR:
    # The uninstalled extension's DT_NEEDED libhpalloc.so.1 is satisfied by
    # the library already loaded under that SONAME; interpreters started by
    # the tests get LD_LIBRARY_PATH instead (python_env).
    ctypes.CDLL(os.path.join(LIBDIR, "libhpalloc.so.1"), mode=ctypes.RTLD_GLOBAL)
if INPLACE:
    sys.path.insert(0, INPLACE)

import numpy as np  # noqa: E402

import hpalloc  # noqa: E402
import hpalloc.numpy  # noqa: E402

# The start of a child script that reads hpalloc's counters: hp_stats(), the
# counters of the libhpalloc.so.1 its activation loaded (same SONAME: dlopen
# finds it), by name.
CHILD_HP_STATS = textwrap.dedent("""
    import ctypes

    def hp_stats():
        lib = ctypes.CDLL("libhpalloc.so.1")
        lib.hp_stat_name.restype = ctypes.c_char_p
        v = (ctypes.c_uint64 * 64)()
        if lib.hp_stats_get(v) != 0:
            raise SystemExit("hp_stats_get failed")
        names = (lib.hp_stat_name(i) for i in range(64))
        return {n.decode(): v[i] for i, n in enumerate(names) if n}
""")

if INPLACE and not os.path.abspath(hpalloc.__file__).startswith(
        os.path.join(os.path.abspath(INPLACE), "hpalloc")):
    # a copy installed on the machine was imported before ours: the tests
    # would test it, not this tree
    raise ImportError("the tests must import %s, got %s" % (INPLACE, hpalloc.__file__))
if VENV and not os.path.realpath(hpalloc.__file__).startswith(
        os.path.join(os.path.realpath(VENV), "")):
    raise ImportError("the tests must import the package pip installed in %s, got %s"
                      % (VENV, hpalloc.__file__))


def pytest_report_header(config):
    return "hpalloc under test: %s (library %s), NumPy %s, Python %s" % (
        os.path.dirname(hpalloc.__file__), hpalloc.__version__, np.__version__,
        sys.version.split()[0])

GiB = 1 << 30
MiB = 1 << 20


@pytest.fixture(autouse=True)
def clean_state():
    """Every test starts and ends with NumPy's default handler in this
    context, hpalloc not installed and no per-process knob overrides."""
    assert not hpalloc.numpy.installed()
    assert hpalloc.numpy.get_handler_name() == "default_allocator"
    yield
    hpalloc.numpy.uninstall()
    hpalloc.reset()
    assert hpalloc.numpy.get_handler_name() == "default_allocator"


@pytest.fixture
def knobs():
    """Set per-process knobs for one test: knobs(mode="thp", ...)."""
    def apply(**values):
        for name, value in values.items():
            hpalloc.set(name, value)
    yield apply
    hpalloc.reset()


# ---- hugetlb pools: hp_pools.py (the one pool fixture) ----------------------

class PoolReservation:
    """Adds pages to a hugetlb pool and takes exactly those back.

    Relative changes, so a concurrent user of the same pool (another test
    binary) keeps what it reserved."""

    def __init__(self):
        self.added = {}

    def reserve(self, pagesize, count, exact=False):
        """Add `count` free pages; with exact=True, make exactly `count`
        pages free (a short pool must be short whatever free pages the
        pool already had: run-test holds the machine-wide test lock, so
        nobody else is using them)."""
        cap = "hugetlb1g" if pagesize >= GiB else "hugetlb"
        if os.geteuid() != 0:
            skip_lacking(cap, "reserving a hugetlb pool needs root (CI runs as root)")
        if not pool_exists(pagesize):
            skip_lacking(cap, "kernel offers no %d kB huge pages" % (pagesize // 1024))
        if exact:
            hpalloc.cache_flush()  # a cached hugetlb block would serve without the pool
        before = pool_read(pagesize, "nr_hugepages")
        if exact:
            count -= pool_read(pagesize, "free_hugepages")
        if count < 0 and before + count < 0:
            skip_lacking(cap, "cannot shrink the %d kB pool" % (pagesize // 1024))
        # root failing to write nr_hugepages (read-only /sys) raises: an
        # error of the test machine, not a skip
        got = add_pages(pagesize, count)
        self.added[pagesize] = self.added.get(pagesize, 0) + got
        if got != count:
            skip_lacking(cap, "kernel gave %d of %d %d kB huge pages (memory too "
                         "fragmented, or pages in use)" % (got, count,
                                                           pagesize // 1024))

    def release(self):
        hpalloc.cache_flush()  # cached blocks still hold pool pages
        for pagesize, count in self.added.items():
            if count:
                take_back(pagesize, count)
        self.added.clear()


@pytest.fixture
def hugetlb_pool():
    """hugetlb_pool(pagesize, count): reserve pages for this test; they are
    given back afterwards, also when the test fails."""
    reservation = PoolReservation()
    try:
        yield reservation.reserve
    finally:
        reservation.release()


# ---- memory as the kernel sees it: hp_memory.py (the one reader of smaps) ---

def data_address(arr):
    return arr.__array_interface__["data"][0]


# ---- contents -----------------------------------------------------------------
# Made and compared 1 MiB at a time in memory of their own (an anonymous
# mmap): NumPy madvises its arrays of 4 MiB and more MADV_HUGEPAGE, which
# would leave THP-advised memory in glibc's heap -- seen as hpalloc
# mappings left behind by the tests that count them (hg_bytes).
PATTERN_STEP = MiB


def _pattern_words(first, count, seed):
    words = np.arange(first, first + count, dtype=np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    words += np.uint64((seed * 0x9E3779B97F4A7C15 + 1) % (1 << 64))
    words ^= words >> np.uint64(31)
    return words.view(np.uint8)


def pattern(n, seed):
    """n bytes (a NumPy uint8 array) in which every 8-byte word depends on
    the seed and its position, as the C tests' harness_fill: a copy that
    stopped short or started at the wrong place cannot match, nor can an
    older fill of the same block with another seed.  A prefix of the same
    pattern whatever n."""
    out = np.frombuffer(mmap.mmap(-1, max(n, 1)), dtype=np.uint8, count=n)
    for off in range(0, n, PATTERN_STEP):
        m = min(PATTERN_STEP, n - off)
        out[off:off + m] = _pattern_words(off // 8, (m + 7) // 8, seed)[:m]
    return out


def first_wrong(buf, n, seed):
    """Offset of the first of the first n bytes of buf (any buffer: bytes,
    bytearray, ctypes.string_at's) that differs from pattern(n, seed), or
    None."""
    view = memoryview(buf).cast("B")
    for off in range(0, n, PATTERN_STEP):
        m = min(PATTERN_STEP, n - off)
        got = np.frombuffer(view[off:off + m], dtype=np.uint8)
        bad = np.flatnonzero(got != _pattern_words(off // 8, (m + 7) // 8, seed)[:m])
        del got  # no export left: buf may be resized once this returns
        if bad.size:
            return off + int(bad[0])
    return None


# ---- subprocesses -----------------------------------------------------------

def python_env(**extra):
    env = dict(os.environ)
    env.pop("HPALLOC_NUMPY", None)
    if LIBDIR:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [LIBDIR] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    if INPLACE:
        env["PYTHONPATH"] = os.pathsep.join(
            [INPLACE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # `hpctl run` started by a test activates this tree's package, not
        # a copy installed on the machine (tools/hpctl-run.c)
        env["HPALLOC_PYTHON_DIR"] = INPLACE
    env.update(extra)
    return env


def hpctl_path():
    """The hpctl a user of the interpreter under test runs: in make
    check-venv the venv's (the wheel's, which finds its own package and
    preload library), else the build tree's (python_env() points it at the
    tree's package; preload_env() at its preload library).  Never one
    configure's prefix may hold: that is another copy, or none."""
    if VENV:
        path = os.path.join(os.path.dirname(sys.executable), "hpctl")
    else:
        builddir = os.environ.get("abs_top_builddir")
        if not builddir:
            pytest.skip("needs the build tree's hpctl (run through make check)")
        path = os.path.join(builddir, "tools", "hpctl")
    if not os.access(path, os.X_OK):
        pytest.skip("%s is not built" % path)
    return path


def preload_env(env):
    """env for hpctl_path() run --preload: the build tree's hpctl is told the
    tree's preload library; the venv's finds the wheel's own.  Skips where
    an interposer of malloc cannot run (ASan)."""
    if os.environ.get("SANITIZER_FLAGS"):
        pytest.skip("AddressSanitizer cannot be combined with an interposer of malloc "
                    "(make check-preload-valgrind runs the preload tests under memcheck)")
    if VENV:
        return env
    preload = os.environ.get("HPALLOC_TEST_PRELOAD")
    if not preload:
        pytest.skip("needs the build tree's preload library (run through make check)")
    return dict(env, HPALLOC_PRELOAD_PATH=preload)


def run_python(code, env=None, check=True):
    """Run code in a fresh interpreter (the one running the tests)."""
    proc = subprocess.run([sys.executable, "-c", code], env=env or python_env(),
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def user_site(tmp_path):
    """A PYTHONUSERBASE whose site-packages holds the package and its .pth,
    as `make install` lays them out.  The user site is processed before the
    system site directories, so NumPy is not yet on sys.path when the .pth
    runs: the hard case for HPALLOC_NUMPY=1.  In make check-venv: the
    venv's own site directory, where pip put the package and the .pth."""
    if VENV:
        return python_env()
    if not INPLACE:
        pytest.skip("needs the build tree's package (run through make check)")
    env = python_env(PYTHONUSERBASE=str(tmp_path))
    env.pop("PYTHONPATH")
    proc = run_python("import site; print(site.ENABLE_USER_SITE, "
                      "site.getusersitepackages())", env=env)
    enabled, path = proc.stdout.split()
    if enabled != "True":
        pytest.skip("this interpreter disables the user site directory")
    os.makedirs(path)
    for name in os.listdir(INPLACE):  # the package, hpalloc_activate, the .pth
        os.symlink(os.path.join(INPLACE, name), os.path.join(path, name))
    return env
