#!/usr/bin/python3
"""soak.py -- the driver of `make soak` (docs/soak.md; issue 25, part 2).

Runs the workload (tests/soak/workload.c: soak-workload on the hp_* API and
soak-plain, a plain malloc program, under libhpalloc-preload.so) for a set
time in a memory-limited cgroup, with a small hugetlb pool reserved for the
run, changes knobs with `hpctl set` every second, and every second checks
from outside the processes -- `hpctl --json stats PID` against
/proc/PID/smaps and the workload's own list of live blocks -- that:

  * every live block is mapped, and the library's live counters are the
    workload's blocks exactly (per backend, per origin, shared, small);
  * the counters balance: mapped = live + cached + releasing, releasing >= 0;
  * no huge mapping lacks a live, cached or releasing block: the huge
    mappings outside every live and shared block add up to no more than
    cached + releasing of the same snapshot;
  * cached_bytes <= cache_max in every published snapshot;
  * the knobs `hpctl set` wrote are in force;
  * after a drain, nothing is cached or releasing and no huge mapping is
    left but the live blocks; at the end, nothing at all;
  * idle cached blocks are gone after cache_decay_ms;
  * no OOM kill in the cgroup, no workload death, no contents mismatch
    (the workload checks every block before each free, and aborts).

How a check is made exact while the workload runs: the workload's threads
park (each finishes the call it is in); the driver then plants an invalid
file in the control directory, which the library rejects (counting it in
config_rejects, changing nothing); the janitor's iteration that rejects it
polls the control directory, expires the cache and only then publishes, so
the first published snapshot whose config_rejects moved was composed after
every thread stopped, with every knob written before it in force.  Between
that snapshot and the read of smaps only the janitor runs, and it only
unmaps (releases completing, cached blocks decaying): a huge mapping can
disappear in that window, never appear.  Hence the one tolerance of the
mapping check, the in-flight window: huge mappings outside live and shared
blocks may add up to cached + releasing of that snapshot (releasing =
mapped - live - cached: blocks handed to release.c, in the io_uring or
pending, still mapped), not a byte more.

Machine state is put back on every exit (success, failure, SIGINT,
SIGTERM): hugetlb pools, the cgroup (its processes killed, then removed),
the private control directory.  It runs under tests/run-test (make soak),
whose lock keeps other hpalloc tests off the machine meanwhile and which
also restores the pools if this driver is killed outright.

Exit status: 0 no violation, 1 violations, 77 skipped (not root), 99 the
machine could not be put back.
"""

import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import hp_memcg  # noqa: E402  (the one maker of memory cgroups)
import hp_memory  # noqa: E402  (the tests' one reader of smaps)
import hp_pools  # noqa: E402  (the tests' one hugetlb pool fixture)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
TICK = 0.25             # the janitor's tick (lib/threads/janitor.c TICK_MS)
FENCE_TIMEOUT = 5.0     # a parked process's janitor publishes within a tick
PARK_TIMEOUT = 90.0     # a fork child may take long under load (its alarm: 50 s)

# Knob values the driver chooses from.  cache_max stays within the memory
# cgroup's room (see memory_limit()); cache_decay_ms 0 (decay at once) to 3 s.
KNOB_CHOICES = {
    "cache_max": ["0", "4M", "32M", "64M", "128M", "256M"],
    "cache_decay_ms": ["0", "50", "200", "500", "1000", "3000"],
    "threshold": ["256K", "1M", "2M", "4M"],
    "mode": ["auto", "auto", "thp", "thp", "hugetlb", "off"],
    "uring": ["on", "off"],
    "fallback": ["thp", "small", "fail"],
    "pagesize": ["auto", "2M", "1G"],
    "numa": ["default", "local", "interleave", "bind:0", "preferred:0"],
    "guard": ["read", "fault"],
}
CACHE_MAX_CEILING = 256 * MiB


def say(*a):
    print("soak:", *a, flush=True)


def human(n):
    for unit, size in (("G", GiB), ("M", MiB), ("K", KiB)):
        if abs(n) >= size:
            return "%.1f%s" % (n / size, unit)
    return str(n)


class Abort(Exception):
    """The run cannot go on (a workload died, a command timed out)."""


# ---- machine state ----------------------------------------------------------------
class Machine:
    """What the run changes, and how to put it back."""

    def __init__(self):
        self.pools = {}         # pagesize -> original nr_hugepages
        self.cgroup = None      # hp_memcg.MemCgroup
        self.control = None     # private control directory
        self.scratch = None

    # hugetlb pools (hp_pools): `extra` more pages than now; returns how many were had
    def reserve(self, size_kb, extra):
        pagesize = size_kb * KiB
        before = hp_pools.pool_read(pagesize, "nr_hugepages", -1)
        if before < 0:
            return 0
        self.pools.setdefault(pagesize, before)  # the value before the run, on a second call too
        return max(0, hp_pools.add_pages(pagesize, extra, refused_ok=True))

    def make_cgroup(self, limit):
        try:
            self.cgroup = hp_memcg.MemCgroup(CGROUP_PREFIX, limit=limit, watchdog=True,
                                             also_remove=[self.scratch])
        except hp_memcg.Unavailable as e:
            raise Abort(str(e))
        for line in self.cgroup.stale:
            say(line)

    def restore(self):
        ok = True
        if self.cgroup:
            try:
                self.cgroup.remove(timeout=10)
            except OSError as e:
                say("could not remove cgroup %s: %s" % (self.cgroup.path, e))
                ok = False
        for pagesize, value in self.pools.items():
            if not hp_pools.restore_nr(pagesize, value):  # tries for 5 s
                say("could not restore %s to %d (it is %s)" % (
                    hp_pools.pool_file(pagesize), value, hp_pools.pool_read(pagesize, "nr_hugepages", "?")))
                ok = False
        for d in (self.control, self.scratch):
            if d:
                shutil.rmtree(d, ignore_errors=True)
        return ok


# The cgroup's prefix: hp_memcg names it PREFIX<pid>-<n>, and its watchdog
# removes it (and the scratch directory) if this driver is killed outright.
CGROUP_PREFIX = "hpalloc-soak-"


# ---- /proc/PID/smaps (tests/python/hp_memory.py reads it) -------------------------------
class Vma:
    __slots__ = ("start", "end", "perms", "path", "kps", "huge_bytes", "hugetlb", "flags")

    def huge(self):
        """A mapping of huge pages, or one asking for them (MADV_HUGEPAGE): hpalloc's
        kind.  The guards after blocks (read-only, or no access under guard=fault)
        are not memory."""
        if "w" not in self.perms:
            return False
        return self.kps >= 2 * MiB or self.huge_bytes > 0 or "hg" in self.flags

    def __repr__(self):
        return "%x-%x %s %s (page %s, huge %s, hugetlb %s, flags %s)" % (
            self.start, self.end, self.perms, self.path or "[anon]", human(self.kps),
            human(self.huge_bytes), human(self.hugetlb), " ".join(sorted(self.flags)))


def read_smaps(pid):
    vmas = []
    for e in hp_memory.smaps(pid):
        v = Vma()
        v.start, v.end, v.perms, v.path = e["start"], e["end"], e["perms"], e["path"]
        v.kps = e.get("KernelPageSize", 0)
        v.huge_bytes, v.hugetlb = hp_memory.huge_of(e), hp_memory.hugetlb_of(e)
        v.flags = e["VmFlags"]
        vmas.append(v)
    return vmas


def read_list(path):
    """The workload's live blocks: (addr, usable, huge, size, id) and shared (addr, len)."""
    blocks, shared, ended = [], [], False
    for line in open(path):
        f = line.split()
        if f[0] == "B":
            blocks.append((int(f[1], 16), int(f[2]), f[3] == "1", int(f[4]), int(f[5])))
        elif f[0] == "S":
            shared.append((int(f[1], 16), int(f[2])))
        elif f[0] == "E":
            ended = True
    if not ended:
        raise Abort("%s is incomplete" % path)
    return blocks, shared


def covered(vmas, start, end):
    """The VMAs covering [start, end) without a hole, or None."""
    out, at = [], start
    for v in vmas:
        if v.end <= at:
            continue
        if v.start > at:
            return None
        out.append(v)
        at = v.end
        if at >= end:
            return out
    return None


# ---- a workload -----------------------------------------------------------------------------
class Workload:
    def __init__(self, name, argv, env, machine, origin, threads):
        self.name, self.origin, self.threads = name, origin, threads
        self.list = os.path.join(machine.scratch, name + ".blocks")
        self.errlog = os.path.join(machine.scratch, name + ".stderr")
        self.err = open(self.errlog, "w")
        self.proc = subprocess.Popen(argv + ["--list", self.list], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, env=env,
                                     preexec_fn=machine.cgroup.join)
        self.pid = self.proc.pid
        self.buf = b""
        self.summary = {}

    def stderr_tail(self, n=60):
        try:
            lines = open(self.errlog, errors="replace").read().splitlines()
        except OSError:
            return ""
        return "\n".join("    | " + l for l in lines[-n:])

    def command(self, cmd, want, timeout):
        try:
            self.proc.stdin.write((cmd + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise Abort("%s died (before '%s'): %s\n%s" % (self.name, cmd, self.status(), self.stderr_tail()))
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise Abort("%s: no reply to '%s' in %d s\n%s" % (self.name, cmd, timeout, self.stderr_tail()))
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=10)
                    raise Abort("%s died (during '%s'): %s\n%s" % (self.name, cmd, self.status(),
                                                                   self.stderr_tail()))
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        line = line.decode(errors="replace")
        if not line.startswith(want):
            raise Abort("%s: '%s' answered '%s'" % (self.name, cmd, line))
        return line

    def status(self):
        rc = self.proc.poll()
        if rc is None:
            return "still running"
        return "exit status %d" % rc if rc >= 0 else "killed by signal %d" % -rc

    def alive(self):
        return self.proc.poll() is None


# ---- the soak ----------------------------------------------------------------------------------
class Soak:
    def __init__(self, args, machine):
        self.args, self.m = args, machine
        self.t0 = time.time()  # again when the workloads run
        self.rng = random.Random(args.seed)
        self.hpctl = os.path.join(args.builddir, "tools", "hpctl")
        self.env_ctl = {k: v for k, v in os.environ.items() if not k.startswith("HPALLOC_")}
        self.env_ctl["HPALLOC_CONTROL_DIR"] = machine.control
        self.expected = {}     # knob -> canonical value in force
        self.fences = 0
        self.violations = []
        self.checks = 0
        self.counts = {"parked": 0, "unparked": 0, "drains": 0, "decay": 0, "knob_sets": 0,
                       "knob_changes": 0}
        self.max_releasing = {}
        self.max_fence = 0.0
        self.workloads = []
        self.canon = {}
        self.resv_below_zero, self.resv_min = 0, 0
        self.last_cached = {}  # workload -> cached_bytes of its last snapshot
        self.forks_later = None  # on a kernel losing count of reservations: see main()
        self.lowered = 0       # cache_max set below what a workload had cached

    # -- hpctl --
    def ctl(self, *argv, check=True):
        r = subprocess.run([self.hpctl] + list(argv), env=self.env_ctl, capture_output=True,
                           text=True, timeout=30)
        if check and r.returncode != 0:
            raise Abort("hpctl %s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
        return r

    def stats(self, w):
        r = self.ctl("--json", "stats", str(w.pid), check=False)
        if r.returncode != 0:
            return None
        procs = json.loads(r.stdout)
        return procs[0] if procs else None

    def canonical_values(self):
        """Each choice as the library canonicalises it (learnt through hpctl, before any
        workload runs); values the library refuses here (numa without libnuma) go."""
        for knob, values in KNOB_CHOICES.items():
            keep = []
            for v in values:
                r = self.ctl("set", "%s=%s" % (knob, v), check=False)
                if r.returncode != 0:
                    continue
                got = json.loads(self.ctl("--json", "get", knob).stdout)[knob]
                self.canon[(knob, v)] = got
                keep.append(v)
            KNOB_CHOICES[knob] = keep
        self.ctl("reset", "--all")

    def set_knobs(self, initial=False):
        """hpctl set: a random handful of knobs, sometimes all of them as they are (so the
        decay in force can learn across seconds: any effective change starts it over)."""
        knobs = list(KNOB_CHOICES) if initial else self.rng.sample(list(KNOB_CHOICES), self.rng.randint(1, 4))
        new = {}
        for k in knobs:
            cached = max(self.last_cached.values(), default=0)
            if not initial and self.rng.random() < 0.25 and k in self.expected:
                new[k] = self.expected[k]
            elif k == "cache_max" and cached and self.rng.random() < 0.5:
                # below what is cached now, half the time: a lowered cache_max must trim
                # the cache (issue 25 mentions a report that it does not)
                below = [v for v in KNOB_CHOICES[k] if parse_size(v) < cached]
                new[k] = self.canon[(k, self.rng.choice(below))]
            else:
                new[k] = self.canon[(k, self.rng.choice(KNOB_CHOICES[k]))]
        if initial:
            new["cache_max"] = "64M"
            # a process starts its janitor, and so publishes itself, with its first huge
            # block (issue 24, item 5): the first knobs must let each workload map one
            # (mode=off, or hugetlb with fallback=fail on a short pool, would not), since
            # the run starts once every workload shows in hpctl stats
            new["mode"] = self.canon[("mode", self.rng.choice(["auto", "thp"]))]
        self.ctl("set", *("%s=%s" % kv for kv in sorted(new.items())))
        if "cache_max" in new and any(c > parse_size(new["cache_max"]) for c in self.last_cached.values()):
            self.lowered += 1  # the next fence's snapshot must show the cache trimmed
        if any(self.expected.get(k) != v for k, v in new.items()):
            self.counts["knob_changes"] += 1
        self.expected.update(new)
        self.counts["knob_sets"] += 1

    # -- checks --
    def violation(self, w, what):
        name = w.name if w else "-"
        t = time.time() - self.t0
        self.violations.append((t, name, what))
        say("VIOLATION at %.1f s, %s (seed %d): %s" % (t, name, self.args.seed, what))

    def expect(self, w, cond, what):
        self.checks += 1
        if not cond:
            self.violation(w, what)
        return cond

    def snapshot_checks(self, w, snap):
        """What holds in every published snapshot, whenever it was composed."""
        s, k = snap["stats"], snap["knobs"]
        cache_max = parse_size(k["cache_max"]["value"])
        self.last_cached[w.name] = s["cached_bytes"]
        self.expect(w, s["cached_bytes"] <= cache_max,
                    "cached_bytes %d > cache_max %s in one published snapshot" % (s["cached_bytes"],
                                                                                 k["cache_max"]["value"]))
        self.expect(w, (s["cached_blocks"] == 0) == (s["cached_bytes"] == 0),
                    "cached_blocks %d but cached_bytes %d" % (s["cached_blocks"], s["cached_bytes"]))
        wrapped = [n for n, v in s.items() if v >= 1 << 63]
        self.expect(w, not wrapped, "counters below zero (wrapped): %s" % wrapped)

    def fence(self):
        """Plant an invalid control file; return once every workload published a snapshot
        composed after it (see the top of this file), or None for those that did not."""
        self.fences += 1
        before = {}
        for w in self.workloads:
            snap = self.stats(w)
            before[w.name] = snap["stats"]["config_rejects"] if snap else -1
        path = os.path.join(self.m.control, "verbose")
        tmp = path + ".soak-tmp"
        with open(tmp, "w") as f:
            f.write("soak-fence-%d\n" % self.fences)
        os.rename(tmp, path)
        t = time.time()
        got = {}
        while len(got) < len(self.workloads) and time.time() - t < FENCE_TIMEOUT:
            for w in self.workloads:
                if w.name in got:
                    continue
                snap = self.stats(w)
                if snap and snap["stats"]["config_rejects"] > before[w.name]:
                    got[w.name] = snap
            if len(got) < len(self.workloads):
                time.sleep(0.02)
        self.max_fence = max(self.max_fence, time.time() - t)
        for w in self.workloads:
            if w.name not in got:
                self.violation(w, "no snapshot published within %.0f s of a control-directory change "
                                  "(janitor stalled?)" % FENCE_TIMEOUT)
        return got

    def parked_checks(self, w, snap, phase):
        """Exact checks on a snapshot composed while w was parked (phase: run, drain,
        finish)."""
        s, k = snap["stats"], snap["knobs"]
        blocks, shared = read_list(w.list)
        vmas = read_smaps(w.pid)
        self.snapshot_checks(w, snap)
        # the knobs written are in force
        for knob, value in self.expected.items():
            self.expect(w, k[knob]["value"] == value and k[knob]["source"] == "control",
                        "knob %s is %s (%s), hpctl set %s" % (knob, k[knob]["value"], k[knob]["source"], value))
        # every live block mapped; its backend by the kernel's page size
        live = {"thp": [0, 0], "hugetlb": [0, 0]}
        small = [0, 0]
        extents = []
        for addr, usable, huge, size, bid in blocks:
            if not huge:
                small[0] += size
                small[1] += 1
                continue
            cov = covered(vmas, addr, addr + usable)
            if not self.expect(w, cov is not None and all("w" in v.perms for v in cov),
                               "live block %d at %x (%d bytes) is not mapped whole: %s" %
                               (bid, addr, usable, cov)):
                continue
            backend = "hugetlb" if cov[0].kps >= 2 * MiB else "thp"
            live[backend][0] += usable
            live[backend][1] += 1
            extents.append((addr, addr + usable))
        for addr, length in shared:
            extents.append((addr, addr + length))
        for b in ("thp", "hugetlb"):
            self.expect(w, s[b + "_live_bytes"] == live[b][0] and s[b + "_live_blocks"] == live[b][1],
                        "%s_live: %d bytes in %d blocks published, the workload's live blocks on %s "
                        "mappings: %d bytes in %d" % (b, s[b + "_live_bytes"], s[b + "_live_blocks"], b,
                                                      live[b][0], live[b][1]))
        huge_live = live["thp"][0] + live["hugetlb"][0]
        origin_key = w.origin + "_huge_bytes"
        others = {o: s[o] for o in s if o.endswith("_huge_bytes") and o != origin_key and s[o]}
        self.expect(w, s[origin_key] == huge_live and not others,
                    "%s %d, live huge bytes %d; other origins %s" % (origin_key, s[origin_key], huge_live, others))
        self.expect(w, s["shared_live_bytes"] == sum(l for _, l in shared) and
                    s["shared_live_blocks"] == len(shared),
                    "shared_live %d bytes in %d, the workload maps %d bytes in %d" %
                    (s["shared_live_bytes"], s["shared_live_blocks"], sum(l for _, l in shared), len(shared)))
        if w.origin == "api":  # soak-plain's small blocks are glibc's own
            self.expect(w, s["small_live_bytes"] == small[0] and s["small_live_blocks"] == small[1],
                        "small_live %d bytes in %d, the workload's small blocks %d in %d" %
                        (s["small_live_bytes"], s["small_live_blocks"], small[0], small[1]))
        # the balance, and the in-flight window
        releasing = s["mapped_bytes"] - huge_live - s["cached_bytes"]
        self.max_releasing[w.name] = max(self.max_releasing.get(w.name, 0), releasing)
        self.expect(w, releasing >= 0, "mapped_bytes %d < live %d + cached %d" %
                    (s["mapped_bytes"], huge_live, s["cached_bytes"]))
        stray, stray_bytes = [], 0
        extents.sort()
        for v in vmas:
            if not v.huge():
                continue
            inside = sum(max(0, min(v.end, b) - max(v.start, a)) for a, b in extents
                         if a < v.end and b > v.start)
            if inside < v.end - v.start:
                stray.append(v)
                stray_bytes += v.end - v.start - inside
        window = s["cached_bytes"] + max(releasing, 0)
        self.expect(w, stray_bytes <= window,
                    "huge mappings outside every live block: %d bytes > cached %d + releasing %d:\n      %s" %
                    (stray_bytes, s["cached_bytes"], releasing, "\n      ".join(map(repr, stray[:12]))))
        if phase in ("drain", "finish"):
            self.expect(w, s["cached_bytes"] == 0 and releasing == 0 and stray_bytes == 0,
                        "after hp_cache_flush + hp_release_drain: cached %d, releasing %d, huge mappings "
                        "outside live blocks %d bytes: %s" % (s["cached_bytes"], releasing, stray_bytes,
                                                             stray[:12]))
        if phase == "finish":
            self.expect(w, not blocks and not shared and s["mapped_bytes"] == 0 and huge_live == 0 and
                        not [v for v in vmas if v.huge()],
                        "after freeing everything and a drain: %d blocks listed, mapped_bytes %d, "
                        "huge mappings %s" % (len(blocks), s["mapped_bytes"], [v for v in vmas if v.huge()][:12]))

    def machine_checks(self):
        resv = hp_pools.pool_read(2 * MiB, "resv_hugepages", 0)
        if resv >= 1 << 63:
            self.resv_below_zero += 1
            self.resv_min = min(self.resv_min, resv - (1 << 64))
        for w in self.workloads:
            if not w.alive():
                raise Abort("%s died: %s\n%s" % (w.name, w.status(), w.stderr_tail()))
        self.expect(None, self.m.cgroup.oom_kills() == 0,
                    "the memory cgroup OOM-killed %d processes" % self.m.cgroup.oom_kills())

    # -- the cycle --
    def all(self, cmd, want, timeout=PARK_TIMEOUT):
        for w in self.workloads:
            w.command(cmd, want, timeout)

    def parked_cycle(self, phase="run"):
        try:
            self.parked_cycle_checks(phase)
        except OSError as e:  # smaps or the block list gone: a workload died
            dead = [w for w in self.workloads if not w.alive()]
            raise Abort("%s (%s)\n%s" % (e, ", ".join("%s %s" % (w.name, w.status()) for w in dead),
                                          "\n".join(w.stderr_tail() for w in dead)))

    def parked_cycle_checks(self, phase):
        self.all("park", "parked")
        if phase in ("drain", "finish"):
            self.all(phase, {"drain": "drained", "finish": "finished"}[phase], 300)
        snaps = self.fence()
        for w in self.workloads:
            if w.name in snaps:
                self.parked_checks(w, snaps[w.name], phase)
        self.counts["drains" if phase == "drain" else "parked"] += 1

    def decay_check(self):
        """Parked, nothing allocates: with cache_decay_ms = D set, after D and two ticks every
        cached block must have decayed."""
        # a value other than the one in force: the change is what starts the decay in
        # force over from the knob (lib/core/cache.c), forgetting what it learnt
        d = self.canon[("cache_decay_ms", self.rng.choice(
            [v for v in ["0", "50", "200", "500"] if v != self.expected.get("cache_decay_ms")]))]
        self.ctl("set", "cache_decay_ms=%s" % d)
        self.expected["cache_decay_ms"] = d
        self.counts["knob_sets"] += 1
        time.sleep(int(d) / 1000 + 3 * TICK)
        snaps = self.fence()
        for w in self.workloads:
            if w.name in snaps:
                s = snaps[w.name]["stats"]
                self.expect(w, s["cache_decay_ms_in_force"] == int(d),
                            "cache_decay_ms set to %s (a change), the decay in force is %d ms" %
                            (d, s["cache_decay_ms_in_force"]))
                self.expect(w, s["cached_bytes"] == 0,
                            "%d bytes still cached %.2f s after cache_decay_ms=%s, nothing allocating "
                            "(decay in force %d ms)" % (s["cached_bytes"], int(d) / 1000 + 3 * TICK, d,
                                                        s["cache_decay_ms_in_force"]))
        self.counts["decay"] += 1

    def run_phase(self, length):
        """The workload runs; at a random moment hpctl set; snapshots taken on the way are
        checked for what holds in any snapshot."""
        end = time.time() + length
        at = time.time() + self.rng.uniform(0, length)
        done_set = False
        while time.time() < end:
            if not done_set and time.time() >= at:
                self.set_knobs()
                done_set = True
            for w in self.workloads:
                snap = self.stats(w)
                if snap:
                    self.snapshot_checks(w, snap)
                    self.counts["unparked"] += 1
            time.sleep(min(0.3, max(0, end - time.time())))
        if not done_set:
            self.set_knobs()

    def run(self):
        self.t0 = time.time()
        cycle = 0
        while time.time() - self.t0 < self.args.seconds:
            if self.forks_later and time.time() - self.t0 >= self.args.seconds / 2:
                added = self.forks_later()
                self.forks_later = None
                self.all("forks on", "forks on")
                say("%.0f s: forks on, the pool grown by %d pages" % (time.time() - self.t0, added))
            self.run_phase(max(0.5, 1.0 - getattr(self, "last_check", 0)))
            c0 = time.time()
            # a drain every minute, an idle-decay check every 15 cycles (both early on,
            # so a short run has them too)
            self.parked_cycle("drain" if cycle % 60 == 30 else "run")
            if cycle % 15 == 2:
                self.decay_check()
            self.machine_checks()
            self.all("resume", "resumed")
            self.last_check = time.time() - c0
            cycle += 1
            if self.args.progress > 0 and cycle % self.args.progress == 0:
                say("%4.0f s: %d cycles, %d checks, %d violations" % (time.time() - self.t0, cycle,
                                                                       self.checks, len(self.violations)))
        self.elapsed = time.time() - self.t0
        # the end: a drain with the blocks still live, then everything freed
        self.parked_cycle("drain")
        self.parked_cycle("finish")
        self.machine_checks()
        for w in self.workloads:
            line = w.command("exit", "summary", 60)
            w.summary = dict(kv.split("=") for kv in line.split()[1:])
            w.proc.wait(timeout=60)
            self.expect(w, w.proc.returncode == 0, "%s exited with %s\n%s" % (w.name, w.status(), w.stderr_tail()))


def probe_resv(builddir, m):
    """Does this kernel's hugetlb reserve count go below zero when a process unmaps a
    private hugetlb page a fork child still maps (soak-workload --probe-resv)?  Then,
    while such a child lives, free - reserved overstates the pool: reservations succeed
    that no page backs, and whoever touches a reserved page when the pool runs out dies
    of SIGBUS -- hpalloc's processes or any other.  Returns a description, or ''."""
    r = subprocess.run([builddir + "/tests/soak/soak-workload", "--probe-resv"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, HPALLOC_CONTROL_DIR=m.control))
    out = r.stdout.strip()
    if r.returncode != 0 or not out.startswith("resv-underflow"):
        say("could not probe the hugetlb reserve count: %s %s" % (out, r.stderr.strip()))
        return ""
    if out.split()[1] == "0":
        return ""
    return ("the hugetlb reserve count drops below zero while a fork child maps private hugetlb "
            "pages its parent unmapped (%s; soak-workload --probe-resv reproduces it)" % out)


def pool_bound(args, plain):
    """The most 2 MiB pages the workloads can hold at once: live blocks (budget, plus a page
    of rounding per block: threads x 24 slots + 8 queued, workload.c), as much again for
    the copies fork's copy-on-write makes while a child lives, cache_max, a fork child's
    own blocks per thread; and slack for releases in flight."""
    def one(threads, budget):
        live = budget // (2 * MiB) + threads * 24 + 8
        return 2 * live + CACHE_MAX_CEILING // (2 * MiB) + threads * 6
    return one(args.threads, args.budget) + (one(args.plain_threads, args.plain_budget) if plain else 0) + 64


def parse_size(text):
    mult = {"K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def memory_limit(budgets, sanitized):
    """Room for what the workloads may hold by their own bounds: live blocks (their
    budgets, plus up to 2 MiB of rounding per huge block), cache_max per process, and
    slack for releases in flight, libc, fork children; ASan adds its shadow and
    quarantine."""
    live = sum(budgets) + 2 * MiB * 120
    return live + len(budgets) * CACHE_MAX_CEILING + 512 * MiB + (1024 * MiB if sanitized else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--budget", type=int, default=256 * MiB, help="live bytes of soak-workload")
    ap.add_argument("--plain-threads", type=int, default=2)
    ap.add_argument("--plain-budget", type=int, default=128 * MiB)
    ap.add_argument("--pool-2m", type=int, default=128, help="2 MiB pages reserved for the run")
    ap.add_argument("--no-plain", action="store_true", help="without the preload workload")
    ap.add_argument("--inject", default="", help="corrupt|foreign: prove that the checks fail")
    ap.add_argument("--workload-args", default="", help="more arguments for soak-workload "
                    "(--no-fork, --kinds MASK: narrowing a failure down)")
    ap.add_argument("--progress", type=int, default=60, help="a progress line every N cycles (0: none)")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 48)

    if os.geteuid() != 0:
        req = "," + os.environ.get("HPALLOC_TEST_REQUIRE", "") + ","
        msg = "SKIP(root): soak.py: the soak reserves hugetlb pages and makes a memory cgroup"
        print(msg, file=sys.stderr)
        return 1 if ",root," in req else 77

    sanitized = bool(os.environ.get("SANITIZER_PRELOAD"))
    m = Machine()
    status = 1

    def terminate(signum, frame):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # one is enough: now the machine goes back
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminate)
    soak = None
    try:
        m.scratch = tempfile.mkdtemp(prefix="hpalloc-soak.")
        m.control = os.path.join(m.scratch, "control")
        os.mkdir(m.control, 0o755)
        say("seed %d, %.0f s (SOAK_SEED=%d reproduces the choices)" % (args.seed, args.seconds, args.seed))
        plain = not (args.no_plain or sanitized)
        got2m = m.reserve(2048, args.pool_2m)
        underflow = probe_resv(args.builddir, m)
        got1g = 0
        if underflow:
            # An exhausted pool kills someone on this kernel while a fork child lives (see
            # probe_resv); short-pool paths need a pool the workloads exhaust.  So the run
            # comes in two halves: the tight pool without forks, then a pool that holds the
            # most the workloads can ever take, with forks.  No 1 GiB page: one page is
            # always short.
            say("KERNEL BUG on this machine: %s" % underflow)
            say("  so: first half without forks on %d pages, second half with forks on a pool "
                "that cannot run out (%d pages); no 1 GiB pages" % (got2m, pool_bound(args, plain)))
        elif hp_pools.pool_exists(GiB):
            got1g = m.reserve(1048576, 1)
        say("hugetlb pool: %d 2 MiB pages added for the run; 1 GiB page: %s" %
            (got2m, "reserved" if got1g else "not used" if underflow else
             "none could be had (no contiguous GiB free): 1 GiB blocks not exercised"))
        budgets = [args.budget] + ([args.plain_budget] if plain else [])
        limit = memory_limit(budgets, sanitized)
        m.make_cgroup(limit)
        say("memory cgroup v%d %s, limit %s" % (m.cgroup.version, m.cgroup.path, human(limit)))
        soak = Soak(args, m)
        soak.canonical_values()
        soak.set_knobs(initial=True)

        base = {k: v for k, v in os.environ.items() if not k.startswith("HPALLOC_") and k != "LD_PRELOAD"}
        base["HPALLOC_CONTROL_DIR"] = m.control
        if sanitized:  # the workloads link ASan themselves; leaks do count there
            base["ASAN_OPTIONS"] = ("halt_on_error=1:abort_on_error=0:detect_leaks=1:"
                                    "quarantine_size_mb=64")
        bd = args.builddir
        common = ["--seed", str(args.seed)] + (["--have-1g"] if got1g else []) + \
            (["--no-fork"] if underflow else [])
        inject = ["--inject", args.inject] if args.inject else []
        soak.workloads.append(Workload(
            "soak-workload", [bd + "/tests/soak/soak-workload", "--threads", str(args.threads),
                              "--budget", str(args.budget)] + common + inject + args.workload_args.split(),
            base, m, "api", args.threads))
        if args.no_plain:
            say("the preload workload is off (--no-plain)")
        elif sanitized:
            say("the preload workload does not run in a sanitizer build: ASan's malloc and an "
                "interposer exclude each other (the plain build runs it)")
        else:
            env = dict(base, LD_PRELOAD=bd + "/lib/.libs/libhpalloc-preload.so")
            soak.workloads.append(Workload(
                "soak-plain", [bd + "/tests/soak/soak-plain", "--threads", str(args.plain_threads),
                               "--budget", str(args.plain_budget), "--seed", str(args.seed + 1)] +
                              (["--no-fork"] if underflow else []),
                env, m, "preload", args.plain_threads))
        if underflow:
            soak.forks_later = lambda: m.reserve(2048, pool_bound(args, plain) - got2m)
        # each must have published before the first check
        deadline = time.time() + 20
        for w in soak.workloads:
            while soak.stats(w) is None:
                if not w.alive() or time.time() > deadline:
                    raise Abort("%s never appeared in `hpctl stats`: %s\n%s" % (w.name, w.status(),
                                                                                w.stderr_tail()))
                time.sleep(0.05)
        soak.run()
        status = 0 if not soak.violations else 1
    except Abort as e:
        say("ABORTED: %s" % e)
        say("hugetlb pools now: %s" % hp_pools.pool_state())
        for w in soak.workloads if soak else []:
            if not w.alive() and w.name not in str(e):
                say("%s also died: %s\n%s" % (w.name, w.status(), w.stderr_tail()))
        if soak:
            soak.violation(None, "run aborted: " + str(e).split("\n")[0])
        status = 1
    except KeyboardInterrupt as e:
        say("interrupted (%s): putting the machine back" % (e or "SIGINT"))
        status = 130
    finally:
        for w in soak.workloads if soak else []:
            if w.alive():
                w.proc.kill()
                w.proc.wait()
        peak = m.cgroup.peak() if m.cgroup else 0
        failcnt = m.cgroup.limit_hits() if m.cgroup else 0
        oom = m.cgroup.oom_kills() if m.cgroup else 0
        if soak:
            report(soak, m, peak, failcnt, oom)
        if not m.restore():
            say("the machine could not be put back as it was")
            status = 99
    return status


def report(soak, m, peak, failcnt, oom):
    a = soak.args
    elapsed = getattr(soak, "elapsed", time.time() - getattr(soak, "t0", time.time()))
    say("summary")
    print("  duration        %.0f s of workload (asked %.0f s)" % (elapsed, a.seconds))
    print("  seed            %d" % a.seed)
    for w in soak.workloads:
        s = w.summary
        if s:
            print("  %-15s %s allocations, %s frees, %s reallocs, %s forks, %s shared blocks, "
                  "%s hand-overs, %s ENOMEM, %s checks of contents (%.1f GiB), %s zero checks" %
                  (w.name, s["allocs"], s["frees"], s["reallocs"], s["forks"], s["shared"], s["handoffs"],
                   s["enomem"], s["verifies"], int(s["verified_bytes"]) / GiB, s["zero_checks"]))
        else:
            print("  %-15s no summary (%s)" % (w.name, w.status()))
    c = soak.counts
    print("  knobs           %d hpctl set (%d changed a value), %d control-directory fences "
          "(slowest %.2f s)" % (c["knob_sets"], c["knob_changes"], soak.fences, soak.max_fence))
    print("  checks made     %d invariant checks: %d parked snapshots, %d after drains, %d idle-decay, "
          "%d snapshots while running" % (soak.checks, c["parked"], c["drains"], c["decay"], c["unparked"]))
    print("  cache_max       set below the bytes a workload had cached %d times" % soak.lowered)
    print("  in flight       largest releasing window seen: %s" %
          ", ".join("%s %s" % (k, human(v)) for k, v in soak.max_releasing.items()))
    print("  memory cgroup   v%s, peak %s, limit hit %d times, OOM kills %d" %
          (m.cgroup.version if m.cgroup else "-", human(peak), failcnt, oom))
    if soak.resv_below_zero:
        print("  kernel          the 2 MiB reserve count was below zero at %d checks (lowest %d): the "
              "kernel bug above, not counted as a violation" % (soak.resv_below_zero, soak.resv_min))
    print("  violations      %d" % len(soak.violations))
    for t, name, what in soak.violations[:20]:
        print("    %.1f s %s: %s" % (t, name, what.split("\n")[0]))


if __name__ == "__main__":
    sys.exit(main())
