"""Memory hpalloc keeps for reuse is never why a process is killed (issue 25).

In a fresh memory cgroup limited to 1.6 GiB, without swap, a program frees a
1 GiB array and then allocates 1 GiB more in 256 KiB arrays (below
threshold: libc's).  NumPy's default allocator runs it to the end; so must
hpalloc under `hpctl run`, `hpctl run --preload` and
`hpalloc.numpy.install()`, with a long decay (cache_decay_ms=10000) that
keeps the freed GiB in the cache throughout, and a child forked after the
free must run it in the same cgroup while its parent's cache holds the GiB.
Two layers keep the process alive and unthrottled.  The cache keeps at
most a quarter of the cgroup's headroom (lib/core/cache.c; the cache_memcg knob): the
freed GiB is given back at once, so the cgroup's peak is no higher than
under NumPy's default (plus MARGIN) and its charge never hits the limit more
often -- before, the cache kept the GiB and the cgroup sat at its limit
(peak 1638 MiB, about 14,000 limit hits).  And with that bound off, the
cached pages are still the kernel's to take back (MADV_FREE): before that
they stayed resident and the kernel OOM-killed the process (exit 137).
What the kernel takes is only that: a reused block that was written keeps
its contents under pressure, the stats stay true, hp_calloc of a reclaimed
block gives zeros (test_cache_reclaimed).

Each program checks that hpalloc is the one that held the freed GiB (cached
with the long decay in force, or given back for the cgroup), so a run that
never activated it fails.
Root; a cgroup version without a memory controller skips, saying so.  The
cgroup is removed also on failure (and one a killed run left behind, by the
next run)."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import CHILD_HP_STATS, python_env
from hp_memcg import MemCgroup, Unavailable
from hp_memory import CHILD
from hp_pytest_automake import skip

MiB = 1 << 20
LIMIT = 1638 * MiB           # 1.6 GiB: the program needs about 1 GiB at a time
MARGIN = 64 * MiB            # the cgroup's peak under hpalloc: at most the peer's plus this
DECAY_MS = "10000"
BUILDDIR = os.environ.get("abs_top_builddir")
HPCTL = os.path.join(BUILDDIR, "tools", "hpctl") if BUILDDIR else None
PRELOAD = os.path.join(BUILDDIR, "lib", ".libs", "libhpalloc-preload.so") if BUILDDIR else None
PREFIX = "hpalloc-pressure-"

# ---- the program -----------------------------------------------------------------
PROGRAM = CHILD_HP_STATS + textwrap.dedent("""
    import os, sys
    import numpy as np

    ACTIVATE
    a = np.ones(1 << 27); del a                          # 1 GiB, freed
    if os.environ.get("HP_PRESSURE_PEER") != "1":
        s = hp_stats()
        print("after the free: cached_bytes %d, cached_reclaimable_bytes %s, memcg_released_bytes %s, "
              "memcg_limit_bytes %s, decay in force %d ms"
              % (s["cached_bytes"], s.get("cached_reclaimable_bytes", "(no such stat)"),
                 s.get("memcg_released_bytes", "(no such stat)"), s.get("memcg_limit_bytes", "(no such stat)"),
                 s["cache_decay_ms_in_force"]), flush=True)
        if (s["cached_bytes"] + s.get("memcg_released_bytes", 0) < 1 << 30
                or s["cache_decay_ms_in_force"] < DECAY_MS):
            sys.exit("hpalloc neither holds the freed GiB with the long decay nor gave it back "
                     "for the cgroup: not activated?")
    if FORK:
        pid = os.fork()
        if pid == 0:
            small = [np.ones(1 << 15) for _ in range(4096)]
            os._exit(0)
        status = os.waitpid(pid, 0)[1]
        print("forked child: exit status %d, signal %d" % (os.WEXITSTATUS(status) if os.WIFEXITED(status)
              else -1, os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0), flush=True)
        if status:
            sys.exit(4)
    small = [np.ones(1 << 15) for _ in range(4096)]      # 1 GiB more, 256 KiB arrays
    print("survived", flush=True)
""")


def program(activate="", fork=False):
    return (PROGRAM.replace("ACTIVATE", activate).replace("FORK", repr(fork))
            .replace("DECAY_MS", DECAY_MS))


# ---- a memory cgroup (hp_memcg makes, measures and removes it) ------------------------
@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def memcg(request):
    try:
        cg = MemCgroup(PREFIX, limit=LIMIT, version=request.param)
    except Unavailable as e:
        skip(e.capability, str(e))
    try:
        yield cg
    finally:
        cg.remove()


def survives(cg, argv, env, like=None):
    """Run argv in cg: exit 0, "survived", no OOM kill in the cgroup; with
    like (the peer's (peak, limit hits) in such a cgroup), a cgroup peak at
    most MARGIN above the peer's and its limit hit no more often.  Returns
    (peak, limit hits)."""
    kills, hits = cg.oom_kills(), cg.limit_hits()
    proc = subprocess.run(argv, env=env, preexec_fn=cg.join, capture_output=True, text=True,
                          timeout=300)
    kills, hits, peak = cg.oom_kills() - kills, cg.limit_hits() - hits, cg.peak()
    command = " ".join("PROGRAM" if "\n" in a else a for a in argv)
    report = ("%s\n  exit status %d, OOM kills in the cgroup %d, its peak %d MiB, limit hit %d times%s"
              "\n  stdout: %s\n  stderr: %s"
              % (command, proc.returncode, kills, peak // MiB, hits,
                 "" if like is None else " (NumPy's default: peak %d MiB, limit hit %d times)"
                 % (like[0] // MiB, like[1]),
                 proc.stdout.strip(), proc.stderr.strip()[-2000:]))
    print(report)
    survived = proc.returncode == 0 and kills == 0 and proc.stdout.strip().endswith("survived")
    assert survived, report
    if like is not None:
        assert peak <= like[0] + MARGIN, "the cgroup's peak is more than %d MiB above the peer's:\n%s" % (
            MARGIN // MiB, report)
        assert hits <= like[1], "the cgroup's limit was hit more often than under the peer:\n" + report
    return peak, hits


PEER = {}  # cgroup version -> NumPy default's (peak, limit hits) running the program


def peer(version):
    """What NumPy's default allocator makes of the program in a cgroup of
    that version with the same limit (measured once per run)."""
    if version not in PEER:
        with MemCgroup(PREFIX, limit=LIMIT, version=version) as cg:
            PEER[version] = survives(cg, [sys.executable, "-c", program()],
                                     python_env(HP_PRESSURE_PEER="1"))
    return PEER[version]


# ---- what the kernel takes back, and what it must not ------------------------------
RECLAIM = CHILD + textwrap.dedent("""
    import ctypes, os, sys
    from hp_memory import overlapping
    from ctypes import c_void_p, c_size_t, c_char_p
    SIZE, MiB = 64 << 20, 1 << 20
    import hpalloc  # loads the package's own libhpalloc.so.1 (a venv's: through $ORIGIN)
    lib = ctypes.CDLL("libhpalloc.so.1")  # that one, by its SONAME
    lib.hp_malloc.restype = lib.hp_calloc.restype = c_void_p
    lib.hp_malloc.argtypes, lib.hp_calloc.argtypes = [c_size_t], [c_size_t, c_size_t]
    lib.hp_free.argtypes, lib.hp_knob_set.argtypes = [c_void_p], [c_char_p, c_char_p]
    lib.hp_stat_name.restype = c_char_p

    def stats():
        v = (ctypes.c_uint64 * 64)()
        lib.hp_stats_get(v)
        names = (lib.hp_stat_name(i) for i in range(64))
        return {n.decode(): v[i] for i, n in enumerate(names) if n}

    def rss(addr):
        # Rss of the mappings overlapping [addr, addr + SIZE)
        return sum(e.get("Rss", 0) for e in overlapping(addr, SIZE))

    def holds(addr, byte):
        return ctypes.string_at(addr, SIZE).count(bytes([byte])) == SIZE

    def cgroup(name, value=None):
        path = os.path.join(os.environ["HP_CGROUP"], name)
        if value is None:
            return int(open(path).read())
        with open(path, "w") as f:
            f.write(str(value))

    def fail(why):
        print("FAIL:", why, flush=True)
        sys.exit(1)

    # MADV_FREE alone: the cgroup's bound (cache_memcg) could give the block
    # back while the limit is lowered for a moment below
    for k, v in ((b"mode", b"thp"), (b"cache_decay_ms", b"600000"), (b"cache_max", b"1G"),
                 (b"cache_memcg", b"off")):
        if lib.hp_knob_set(k, v) != 0:
            fail("hp_knob_set %s" % k)
    p = lib.hp_malloc(SIZE)
    ctypes.memset(p, 0xAB, SIZE)
    lib.hp_free(p)                              # cached, the kernel's to take
    q = lib.hp_malloc(SIZE)                     # reused...
    if q != p:
        fail("the cached block was not reused")
    ctypes.memset(q, 0xCD, SIZE)                # ...and written: the kernel must keep it
    r = lib.hp_malloc(SIZE)
    ctypes.memset(r, 0xEE, SIZE)
    lib.hp_free(r)                              # cached
    s = stats()
    print("cached_bytes %d, cached_reclaimable_bytes %s; Rss of the cached block %d MiB"
          % (s["cached_bytes"], s.get("cached_reclaimable_bytes", "(no such stat)"), rss(r) // MiB))
    before = rss(r)
    # pressure: the cgroup must give back nearly a cached block's worth
    try:
        if os.environ["HP_CGROUP_VERSION"] == "1":
            limit = cgroup("memory.limit_in_bytes")
            cgroup("memory.limit_in_bytes", cgroup("memory.usage_in_bytes") - SIZE + 4 * MiB)
            cgroup("memory.limit_in_bytes", limit)
        else:
            cgroup("memory.reclaim", SIZE - 4 * MiB)
    except OSError as e:
        fail("the kernel could not take %d MiB back from the cgroup: %s" % (SIZE // MiB - 4, e))
    after = rss(r)
    print("under pressure the kernel took %d MiB of the cached block's %d MiB" % ((before - after) // MiB,
                                                                                 before // MiB))
    if not holds(q, 0xCD):
        fail("the reused block lost what was written to it")
    if s["cached_bytes"] != SIZE or s.get("cached_reclaimable_bytes") != SIZE:
        fail("the stats did not say the cached block was reclaimable")
    if before - after < SIZE // 2:
        fail("the cached block was not what the kernel took back")
    s = stats()
    if s["cached_bytes"] != SIZE or s["cached_reclaimable_bytes"] != SIZE:
        fail("the stats changed: %s" % s)
    hits = s["cache_hits"]
    c = lib.hp_calloc(1, SIZE)                  # the reclaimed block again: zeros
    if c != r or stats()["cache_hits"] != hits + 1:
        fail("hp_calloc did not reuse the cached block")
    if not holds(c, 0):
        fail("hp_calloc's reused block is not zero")
    ctypes.memset(c, 0x11, SIZE)
    if not holds(c, 0x11) or not holds(q, 0xCD):
        fail("contents lost")
    lib.hp_free(c)
    lib.hp_free(q)
    print("survived", flush=True)
""")


def test_cache_reclaimed(memcg):
    """The kernel takes a cached block back under pressure and keeps a reused
    one that was written; the stats stay true; hp_calloc reusing the reclaimed
    block gives zeros.  Before MADV_FREE the kernel could take nothing."""
    survives(memcg, [sys.executable, "-c", RECLAIM],
             python_env(HP_CGROUP=memcg.path, HP_CGROUP_VERSION=str(memcg.version)))


def build_tree():
    if not BUILDDIR:
        pytest.skip("needs the build tree (run through make check)")


# ---- the cases -----------------------------------------------------------------------
def test_peer_numpy_default(memcg):
    """The control: NumPy's own allocator runs the program in this cgroup (else the
    limit is wrong for this machine, and the cases below prove nothing)."""
    PEER[memcg.version] = survives(memcg, [sys.executable, "-c", program()],
                                   python_env(HP_PRESSURE_PEER="1"))


def test_hpctl_run(memcg):
    build_tree()
    survives(memcg, [HPCTL, "run", "cache_decay_ms=" + DECAY_MS, "--", sys.executable, "-c", program()],
             python_env(), like=peer(memcg.version))


def test_hpctl_run_preload(memcg):
    build_tree()
    if os.environ.get("SANITIZER_FLAGS"):
        pytest.skip("AddressSanitizer cannot be combined with an interposer of malloc "
                    "(make check-preload-valgrind runs the preload tests under memcheck)")
    survives(memcg, [HPCTL, "run", "--preload", "cache_decay_ms=" + DECAY_MS, "--", sys.executable, "-c",
                     program()], python_env(HPALLOC_PRELOAD_PATH=PRELOAD), like=peer(memcg.version))


INSTALL = "import hpalloc.numpy; hpalloc.numpy.install()"


def test_install(memcg):
    survives(memcg, [sys.executable, "-c", program(INSTALL)], python_env(HPALLOC_CACHE_DECAY_MS=DECAY_MS),
             like=peer(memcg.version))


def test_forked_child(memcg):
    """The child runs the program's second half after its parent's free,
    both in the cgroup; then the parent runs it too."""
    survives(memcg, [sys.executable, "-c", program(INSTALL, fork=True)],
             python_env(HPALLOC_CACHE_DECAY_MS=DECAY_MS), like=peer(memcg.version))


def test_madv_free_alone(memcg):
    """The cgroup's bound off (cache_memcg=off): the freed GiB stays cached
    with the long decay, and only MADV_FREE keeps the process from being
    killed (its peak is the limit: no claim on it here)."""
    build_tree()
    survives(memcg, [HPCTL, "run", "cache_decay_ms=" + DECAY_MS, "cache_memcg=off", "--", sys.executable,
                     "-c", program()], python_env())
