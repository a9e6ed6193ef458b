#!/usr/bin/env python3
"""bench-first-touch: what a cold first touch costs per page size on this
machine, apart from any allocator (issue 35).

    first_touch.py PROGRAM [--sizes MIB,...] [--rounds N] [--gap S] [--out FILE]

PROGRAM is bench/first_touch (one process's first touch of a fresh mapping
on 4 KiB pages, THP, or hugetlb 2 MiB pages).  Each process starts --gap
seconds (default 4) after the last one ended, so that the memory freed
before it is cold (a VM that reports free pages has given it back to its
host), and the page sizes take turns (order reversed every other round).
Rows, per size:

  4 KiB pages        MADV_NOHUGEPAGE
  THP                MADV_HUGEPAGE
  hugetlb, new pool  a pool of exactly the mapping's pages reserved after
                     the gap and given back after the process (root only)
  hugetlb, kept pool a pool reserved once and kept, as an admin keeps one:
                     each process after the first meets pages an earlier
                     one freed into the pool, which the kernel never
                     reports to the host (root only; measured after the
                     interleaved rows, the pool's first process left out)

Beside each row: the free memory in blocks smaller than the kernel's
page_reporting_order when the process started (/proc/buddyinfo).  The VM
never reports those blocks to its host, so they stay warm; 4 KiB faults
can use them, a 2 MiB page cannot.

Pools are put back as they were, also on Ctrl-C, SIGTERM or a failure.
Writes a Markdown table on stdout (and to --out).
"""

import argparse
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import hp_pools  # noqa: E402  (the tests' one hugetlb pool fixture)
from bench_proc import raise_interrupt, run_process  # noqa: E402
from bench_machine import page_reporting_order  # noqa: E402
from bench_pools import Pools  # noqa: E402

MiB = 1 << 20
POOL = 2 * MiB


def say(msg):
    print("bench-first-touch: " + msg, file=sys.stderr, flush=True)


def unreported_free_mib(order):
    """Free memory in buddy blocks below order, over every zone."""
    total = 0
    with open("/proc/buddyinfo") as f:
        for line in f:
            counts = [int(x) for x in line.split()[4:]]
            total += sum(n << k for k, n in enumerate(counts) if k < order)
    return total * os.sysconf("SC_PAGE_SIZE") / MiB


class Run:
    def __init__(self, program, gap):
        self.program, self.gap = program, gap
        self.last_end = time.monotonic()
        self.order = page_reporting_order()

    def touch(self, mode, mib, prepare=None):
        """One process's first touch, started self.gap after the last ended;
        prepare (reserving its pool) runs after the gap, before the
        process, and may return an error."""
        time.sleep(max(0.0, self.gap - (time.monotonic() - self.last_end)))
        error = prepare() if prepare else None
        if error:
            return {"error": error}
        before = unreported_free_mib(self.order) if self.order is not None else None
        gap = time.monotonic() - self.last_end
        stdout, stderr, status = run_process([self.program, mode, str(mib)], None, 600)
        self.last_end = time.monotonic()
        if status != 0:
            raise SystemExit("bench-first-touch: %s %s MiB failed: %s"
                             % (mode, mib, stderr.strip()))
        seconds, faults = stdout.split()
        return {"s": float(seconds), "faults": int(faults), "gap": gap, "unreported": before}


def hugetlb_new(run, pools, mib):
    """A pool of exactly the mapping's pages, reserved after the gap and
    given back after the process."""
    pages = mib * MiB // POOL

    def reserve():
        if pools.add(POOL, pages) < pages:
            return "the kernel gave fewer than %d pages" % pages
        return None
    try:
        return run.touch("hugetlb", mib, prepare=reserve)
    finally:
        pools.give_back()
        run.last_end = time.monotonic()


def measure(opts):
    run, pools = Run(opts.program, opts.gap), Pools(say)
    rows = {}
    modes = ["4k", "thp"] + (["hugetlb-new"] if opts.pools else [])
    for rnd in range(opts.rounds):
        for mib in opts.sizes:
            order = modes if rnd % 2 == 0 else modes[::-1]
            for mode in order:
                r = hugetlb_new(run, pools, mib) if mode == "hugetlb-new" else run.touch(mode, mib)
                rows.setdefault((mode, mib), []).append(r)
                say("round %d %-12s %5d MiB %s" % (rnd + 1, mode, mib, brief(r)))
    if opts.pools:
        for mib in opts.sizes:
            pages = mib * MiB // POOL
            try:
                if pools.add(POOL, pages) < pages:
                    rows[("hugetlb-kept", mib)] = [{"error": "the kernel gave fewer than %d "
                                                             "pages" % pages}]
                    continue
                first = run.touch("hugetlb", mib)
                say("kept pool %5d MiB first process %s (left out)" % (mib, brief(first)))
                for rnd in range(opts.rounds):
                    r = run.touch("hugetlb", mib)
                    rows.setdefault(("hugetlb-kept", mib), []).append(r)
                    say("round %d %-12s %5d MiB %s" % (rnd + 1, "hugetlb-kept", mib, brief(r)))
            finally:
                pools.give_back()
                run.last_end = time.monotonic()
    return rows


def brief(r):
    if "error" in r:
        return r["error"]
    return "%.3f s, %d faults, %.1f s after the last, %s MiB unreported" % (
        r["s"], r["faults"], r["gap"], "?" if r["unreported"] is None else "%.0f" % r["unreported"])


LABELS = {"4k": "4 KiB pages (MADV_NOHUGEPAGE)", "thp": "THP (MADV_HUGEPAGE)",
          "hugetlb-new": "hugetlb 2 MiB, pool reserved after the gap",
          "hugetlb-kept": "hugetlb 2 MiB, pool kept (pages earlier processes freed)"}


def table(opts, rows):
    lines = ["| first touch of | MiB | median s | min–max s | s per GiB | minor faults "
             "| started s after the last | free in blocks < 2^%s pages, MiB |"
             % (page_reporting_order() if page_reporting_order() is not None else "?"),
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for mib in opts.sizes:
        for mode in ("4k", "thp", "hugetlb-new", "hugetlb-kept"):
            rs = rows.get((mode, mib))
            if not rs:
                continue
            ok = [r for r in rs if "error" not in r]
            if not ok:
                lines.append("| %s | %d | – | %s | | | | |" % (LABELS[mode], mib, rs[0]["error"]))
                continue
            s = [r["s"] for r in ok]
            med = statistics.median(s)
            unrep = [r["unreported"] for r in ok if r["unreported"] is not None]
            lines.append("| %s | %d | %.3f | %.3f–%.3f | %.2f | %d | %.1f | %s |" % (
                LABELS[mode], mib, med, min(s), max(s), med * 1024 / mib,
                statistics.median(r["faults"] for r in ok),
                min(r["gap"] for r in ok),
                "%.0f" % statistics.median(unrep) if unrep else "–"))
    return "\n".join(lines)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program")
    p.add_argument("--sizes", default="1024,4096",
                   help="mapping sizes in MiB, comma-separated, each even (default 1024,4096)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--gap", type=float, default=4.0)
    p.add_argument("--no-pools", action="store_true", help="leave the hugetlb rows out")
    p.add_argument("--out", help="also write the table to this file")
    opts = p.parse_args()
    try:
        opts.sizes = [int(x) for x in opts.sizes.split(",")]
    except ValueError:
        p.error("--sizes: MiB, comma-separated: %r" % opts.sizes)
    if any(m <= 0 or m % 2 for m in opts.sizes) or opts.rounds < 1 or opts.gap < 0:
        p.error("--sizes even and positive, --rounds at least 1, --gap not negative")
    opts.pools = not opts.no_pools and os.geteuid() == 0 and hp_pools.pool_exists(POOL)
    if not opts.no_pools and not opts.pools:
        say("the hugetlb rows need root and a 2 MiB hugetlb pool: left out")
    elif opts.pools and hp_pools.pool_read(POOL, "free_hugepages", 0):
        # a process takes any free page of the pool: the "reserved after
        # the gap" row would meet these, warm if a process freed them
        say("the 2 MiB pool already has %d free pages: the hugetlb rows may meet them, and "
            "\"pool reserved after the gap\" may not be what it says"
            % hp_pools.pool_read(POOL, "free_hugepages", 0))
    return opts


def main():
    opts = parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupt)
    try:
        rows = measure(opts)
    except KeyboardInterrupt as exc:
        say("interrupted (%s): pools given back" % (exc or "Ctrl-C"))
        return 130
    text = ("Cold first touch by page size (each process started ≥ %g s after the last "
            "ended; %d rounds, page sizes interleaved; bench/first_touch.py)\n\n%s\n"
            % (opts.gap, opts.rounds, table(opts, rows)))
    print(text)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
