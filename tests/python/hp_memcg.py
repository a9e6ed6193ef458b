"""The one maker of memory cgroups for hpalloc's tests, soak and benchmarks
(issue 25): tests/python/test_pressure.py, tests/soak/soak.py and
bench/numpy_bench.py's rows under a memory limit.

A MemCgroup is a fresh cgroup of its own (v1 under /sys/fs/cgroup/memory,
v2 wherever cgroup2 is mounted with the memory controller), named
PREFIX<pid>-<n>, with a memory limit (or none) and no swap; processes join
it before they exec (join, as a preexec_fn).  remove() kills what is left
in it and removes it, and is meant for a finally: clause.  A driver killed
outright (tests/run-test kills its process group 0.2 s after SIGTERM) runs
no finally:, so with watchdog=True a watchdog in a session of its own
removes the cgroup once the driver's end of a pipe closes; and the next
MemCgroup of the same prefix removes the cgroups whose pid is gone and in
which nothing runs (a watchdog killed too).

The standard library only: the soak driver runs it with Debian's python3,
bench-venv with the venv's.  Root only; Unavailable says why not (its
capability is "root" or "memcg", as tests/capabilities names them)."""

import os
import re
import signal
import subprocess
import sys
import time

V1_PARENT = "/sys/fs/cgroup/memory"


class Unavailable(Exception):
    """No such memory cgroup can be made here: str() says why."""

    def __init__(self, capability, why):
        super().__init__(why)
        self.capability = capability


def read(path):
    with open(path) as f:
        return f.read()


def read_int(path, default=None):
    try:
        return int(read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return default


def cgroup2_root():
    """Where cgroup2 is mounted (first mount), None if nowhere."""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fstype = line.split()[:3]
            if fstype == "cgroup2":
                return mnt.replace("\\040", " ")
    return None


def parent_of(version):
    """The directory cgroups of that version are made in; Unavailable if
    it has no memory controller we may use (nothing is changed to get one)."""
    if version == 1:
        if not os.path.exists(V1_PARENT + "/memory.limit_in_bytes"):
            raise Unavailable("memcg", "cgroup v1: no memory hierarchy at %s" % V1_PARENT)
        return V1_PARENT
    parent = cgroup2_root()
    if parent is None:
        raise Unavailable("memcg", "cgroup v2: no cgroup2 file system is mounted")
    controllers = read(parent + "/cgroup.controllers").split()
    if "memory" not in controllers:
        bound = " (the memory controller is bound to cgroup v1 here)" \
            if os.path.isdir(V1_PARENT) else ""
        raise Unavailable("memcg", "cgroup v2 at %s has no memory controller (its controllers: %s)%s"
                          % (parent, " ".join(controllers) or "none", bound))
    if "memory" not in read(parent + "/cgroup.subtree_control").split():
        raise Unavailable("memcg", "cgroup v2: the memory controller is not enabled in "
                          "%s/cgroup.subtree_control (not changed here)" % parent)
    return parent


def pick_version():
    """The memory controller's version here: v1 where it is mounted, else v2."""
    try:
        parent_of(1)
        return 1
    except Unavailable as v1:
        try:
            parent_of(2)
            return 2
        except Unavailable as v2:
            raise Unavailable("memcg", "no memory cgroup controller: %s; %s" % (v1, v2))


def remove_stale(parent, prefix):
    """Removes PREFIX<pid>[-<n>] cgroups whose pid is gone (a run killed
    outright, its watchdog too); returns what it did or could not do."""
    said = []
    for name in os.listdir(parent):
        m = re.fullmatch(re.escape(prefix) + r"(\d+)(-\d+)?", name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its maker lives
        except ProcessLookupError:
            pass
        except OSError:
            continue
        path = os.path.join(parent, name)
        try:
            os.rmdir(path)
            said.append("removed %s, left by a run killed outright" % path)
        except OSError as e:
            said.append("a stale %s could not be removed: %s" % (path, e))
    return said


# Kills what is in the cgroup and removes it once its stdin reaches EOF (the
# driver is gone, or removed the cgroup itself and closed the pipe).
WATCHDOG = r"""
import os, shutil, signal, sys, time
cg, also = sys.argv[1], sys.argv[2:]
sys.stdin.buffer.read()  # until the driver is gone
deadline = time.time() + 30
while os.path.isdir(cg) and time.time() < deadline:
    try:
        for pid in open(cg + "/cgroup.procs").read().split():
            os.kill(int(pid), signal.SIGKILL)
        os.rmdir(cg)
    except OSError:
        time.sleep(0.1)
for d in also:
    shutil.rmtree(d, ignore_errors=True)
"""


class MemCgroup:
    """A memory cgroup of our own: see the module's comment.  limit: bytes,
    or None for no limit; version: 1, 2 or None (the one here); also_remove:
    directories the watchdog removes too."""
    seq = 0

    def __init__(self, prefix, limit=None, version=None, watchdog=False, also_remove=()):
        if os.geteuid() != 0:
            raise Unavailable("root", "making a memory cgroup needs root")
        self.version = version or pick_version()
        parent = parent_of(self.version)
        self.stale = remove_stale(parent, prefix)
        MemCgroup.seq += 1
        self.path = os.path.join(parent, "%s%d-%d" % (prefix, os.getpid(), MemCgroup.seq))
        self.watchdog = None
        os.mkdir(self.path)
        try:
            if watchdog:
                # its stdin is the pipe whose closing wakes it: no child of
                # ours inherits it (close_fds)
                self.watchdog = subprocess.Popen(
                    [sys.executable, "-c", WATCHDOG, self.path] + list(also_remove),
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
            self.set_limit(limit)
            if self.version == 2 and os.path.exists(self.file("memory.swap.max")):
                self.write("memory.swap.max", 0)
        except BaseException:
            self.remove()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def file(self, v1, v2=None):
        """The path of a control file: v1's name, or v2's when given and v2."""
        return os.path.join(self.path, v2 if v2 and self.version == 2 else v1)

    def write(self, name, value):
        with open(self.file(name), "w") as f:
            f.write(str(value))

    def set_limit(self, limit):
        """limit bytes, None: no limit."""
        if self.version == 1:
            self.write("memory.limit_in_bytes", -1 if limit is None else limit)
        else:
            self.write("memory.max", "max" if limit is None else limit)

    def usage(self):
        return read_int(self.file("memory.usage_in_bytes", "memory.current"), -1)

    def peak(self):
        """The most the cgroup was charged since it was made; -1 if unknown."""
        return read_int(self.file("memory.max_usage_in_bytes", "memory.peak"), -1)

    def events(self, key, v1, v2):
        """key's count in a "key value" file (v1's or v2's); 0 if absent."""
        try:
            for line in read(self.file(v1, v2)).splitlines():
                k, _, value = line.partition(" ")
                if k == key:
                    return int(value)
        except OSError:
            pass
        return 0

    def oom_kills(self):
        return self.events("oom_kill", "memory.oom_control", "memory.events")

    def limit_hits(self):
        """How often the charge reached the limit (v1 failcnt, v2 events' max)."""
        if self.version == 1:
            return read_int(self.file("memory.failcnt"), 0)
        return self.events("max", None, "memory.events")

    def pids(self):
        try:
            return [int(x) for x in read(self.file("cgroup.procs")).split()]
        except OSError:
            return []

    def join(self):
        """Moves the calling process in: a preexec_fn for subprocess."""
        with open(self.file("cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove(self, timeout=20):
        """Kills what runs in it and removes it; OSError if it could not
        within timeout seconds.  Idempotent."""
        deadline = time.time() + timeout
        try:
            while os.path.isdir(self.path):
                try:
                    for pid in self.pids():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    os.rmdir(self.path)
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            if self.watchdog:
                self.watchdog.stdin.close()  # it finds nothing to do, and ends
                self.watchdog.wait()
                self.watchdog = None
