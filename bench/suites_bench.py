#!/usr/bin/env python3
"""make bench-suites: whole programs with many mid-sized arrays -- the test
suites of scipy.ndimage, scipy.sparse.linalg and sklearn.preprocessing in
one process -- with hpalloc installed process-wide against NumPy's default
(issue 17).

    suites_bench.py --pythonpath DIR --libdir DIR [--rounds N] [--out FILE]
                    [--knobs K=V,...]

One untimed warm-up run (file cache, .pyc), then N interleaved pairs (the
order alternating).  Each run is its own process, `pytest -q -p
no:cacheprovider` on the three packages' installed tests; it reports wall
time, user and system time and peak memory (VmHWM) of that process.  The
table gives medians and the ratios hpalloc / default, and the test outcome
counts, which must agree: a difference is a bug, not a timing.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

SUITES = ["scipy.ndimage", "scipy.sparse.linalg", "sklearn.preprocessing"]

CHILD = r"""
import importlib, json, os, resource, sys, time
import pytest
if os.environ.get("HPALLOC_NUMPY") == "1":
    import hpalloc.numpy
    if not hpalloc.numpy.installed():
        hpalloc.numpy.install()
    assert hpalloc.numpy.get_handler_name() == "hpalloc"
paths = [os.path.dirname(importlib.import_module(m).__file__) + "/tests"
         for m in sys.argv[1:]]
class Count:
    def __init__(self): self.c = {}
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.c[report.outcome] = self.c.get(report.outcome, 0) + 1
count = Count()
t = time.perf_counter()
r0 = resource.getrusage(resource.RUSAGE_SELF)
rc = pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore", *paths], plugins=[count])
r1 = resource.getrusage(resource.RUSAGE_SELF)
wall = time.perf_counter() - t
hwm = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) * 1024
stats = {}
if os.environ.get("HPALLOC_NUMPY") == "1":
    import hpalloc
    stats = hpalloc.stats()
sys.stdout.flush()
print("\nRESULT " + json.dumps({"hpalloc": stats, "wall": wall, "user": r1.ru_utime - r0.ru_utime,
                                "sys": r1.ru_stime - r0.ru_stime, "peak": hwm,
                                "minflt": r1.ru_minflt - r0.ru_minflt,
                                "outcomes": count.c, "rc": int(rc)}))
"""


def run(hp, args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if hp:
        env["HPALLOC_NUMPY"] = "1"
        env["PYTHONPATH"] = args.pythonpath
        env["LD_LIBRARY_PATH"] = args.libdir
        for kv in filter(None, args.knobs.split(",")):
            k, v = kv.split("=", 1)
            env["HPALLOC_" + k.upper()] = v
    out = subprocess.run([sys.executable, "-c", CHILD, *args.suites.split(",")], env=env, cwd="/tmp",
                         capture_output=True, text=True, check=False)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        sys.exit("suites_bench: no result (%s):\n%s\n%s" % ("hpalloc" if hp else "default",
                                                          out.stdout[-3000:], out.stderr[-3000:]))
    return json.loads(lines[-1][len("RESULT "):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythonpath", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--knobs", default="", help="hpalloc knobs, K=V,... (default: none)")
    ap.add_argument("--suites", default=",".join(SUITES), help="test packages, comma-separated")
    ap.add_argument("--out", help="write the Markdown table here too")
    ap.add_argument("--verbose", action="store_true", help="print hpalloc's counters of every run")
    args = ap.parse_args()
    run(False, args)  # warm-up
    res = {False: [], True: []}
    for r in range(args.rounds):
        for hp in ((False, True) if r % 2 == 0 else (True, False)):
            res[hp].append(run(hp, args))
            x = res[hp][-1]
            print("round %d %-8s wall %.2f user %.2f sys %.2f peak %d MiB faults %d %s%s" % (
                r + 1, "hpalloc" if hp else "default", x["wall"], x["user"], x["sys"],
                x["peak"] >> 20, x["minflt"], x["outcomes"],
                " " + json.dumps(x["hpalloc"]) if args.verbose and hp else ""), file=sys.stderr)
    name = "hpalloc" + (" (%s)" % args.knobs if args.knobs else " (default knobs)")
    rows = ["| %s | contender | wall s | user s | system s | peak MiB | minor faults | outcomes |" % " + ".join(args.suites.split(",")),
            "|---|---|---:|---:|---:|---:|---:|---|"]
    med = {}
    for hp in (False, True):
        m = {k: statistics.median(x[k] for x in res[hp]) for k in ("wall", "user", "sys", "peak", "minflt")}
        m["peak"] = int(m["peak"])  # the median of an even count is a float
        med[hp] = m
        rows.append("| | %s | %.2f | %.2f | %.2f | %d | %d | %s |" % (
            name if hp else "NumPy default", m["wall"], m["user"], m["sys"], m["peak"] >> 20,
            m["minflt"], res[hp][-1]["outcomes"]))
    rows.append("| | ratio | %.3f | %.3f | %.3f | %+d MiB | %.2f | |" % (
        med[True]["wall"] / med[False]["wall"], med[True]["user"] / med[False]["user"],
        med[True]["sys"] / med[False]["sys"], (med[True]["peak"] - med[False]["peak"]) >> 20,
        med[True]["minflt"] / max(med[False]["minflt"], 1)))
    text = "\n".join(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
