#!/usr/bin/env python3
"""make check-numba: Numba's own tests with hpalloc, and without where they do not pass.

Runs numba.tests.test_dyn_array, test_nrt, test_array_methods and
test_buffer_protocol (or the modules given after --) with unittest, with
hpalloc active in every interpreter the tests start -- NumPy's handler,
the raw domain (hpalloc.python) and NRT (hpalloc.numba) installed at
start-up by a sitecustomize module, with threshold=64K so that most of the
tests' arrays take the huge path.  Numba's tests check NRT's allocation
counters themselves (MemoryLeakMixin).

Then every test whose outcome with hpalloc is not "passed" (skipped,
xfailed, failed, ...) runs again as Numba ships, to say whether that
outcome is hpalloc's: a test that passes with hpalloc needs no second
run, and its compilation, most of the time, is not paid twice
(--whole-baseline runs every test without hpalloc too).  The hpalloc run
is split into two processes (every other test) where there are two CPUs.

The hpalloc tested is the build tree's (--inplace, what make check-numba
passes) or, with --installed, the one this interpreter imports (a package
pip installed into a venv).

Writes <out-dir>/{default,hpalloc}.txt ("test id outcome" per test) and
logs, and fails if a test fails or errs with hpalloc, if any outcome
differs without it, if a run fails, or if the hpalloc run served no huge
block.

This file is also the worker (--worker) that runs the tests and records
outcomes.
"""

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
import unittest

MODULES = ["numba.tests.test_dyn_array", "numba.tests.test_nrt",
           "numba.tests.test_array_methods", "numba.tests.test_buffer_protocol"]
ADAPTERS_ENV = "HPALLOC_TEST_ADAPTERS"

# Imported by every interpreter of the hpalloc run (PYTHONPATH), the
# tests' subprocesses included.  Until start-up activation covers the
# adapters (hpctl run / HPALLOC_NUMPY=1), this is how they are turned on.
SITECUSTOMIZE = '''
import os
if os.environ.get("%s"):
    import hpalloc.numpy, hpalloc.python, hpalloc.numba
    hpalloc.python.install()
    hpalloc.numpy.install()
    hpalloc.numba.install()
''' % ADAPTERS_ENV


# ---- the worker ----------------------------------------------------------------

class RecordingResult(unittest.TextTestResult):
    outcomes = {}

    def _record(self, test, outcome):
        self.outcomes[test.id()] = outcome

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "xfailed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "xpassed")


def flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def shard_of(tests, index, count):
    """The tests of shard index of count: every count-th test in id order,
    so that a class of slow tests (Numba compiling) is shared out too."""
    return sorted(tests, key=lambda test: test.id())[index::count]


def worker(results, names, shard=None):
    """Runs the tests names lists (modules or test ids; @FILE reads one per
    line), shard "I/N" of them if given, and writes their outcomes."""
    if len(names) == 1 and names[0].startswith("@"):
        with open(names[0][1:]) as f:
            names = [line.strip() for line in f if line.strip()]
    tests = list(flatten(unittest.defaultTestLoader.loadTestsFromNames(names)))
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        tests = shard_of(tests, index, count)
    runner = unittest.TextTestRunner(resultclass=RecordingResult, verbosity=1)
    result = runner.run(unittest.TestSuite(tests))
    with open(results, "w") as f:
        if os.environ.get(ADAPTERS_ENV):
            import hpalloc
            import hpalloc.numba
            import hpalloc.python
            stats = hpalloc.stats()
            f.write("# adapters python=%s numba=%s mode=%s huge_blocks=%d\n" % (
                hpalloc.python.installed(), hpalloc.numba.installed(),
                hpalloc.config()["mode"]["value"], stats["cache_hits"] + stats["cache_misses"]))
        for test_id in sorted(RecordingResult.outcomes):
            f.write("%s %s\n" % (test_id, RecordingResult.outcomes[test_id]))
    return 0 if result.wasSuccessful() else 1


# ---- the driver ------------------------------------------------------------------

def read_results(path):
    header, outcomes = "", {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                header = line[1:].strip()
            elif line.strip():
                test_id, outcome = line.split()
                outcomes[test_id] = outcome
    return header, outcomes


def run(label, env, out_dir, names, shard=None):
    results = os.path.join(out_dir, label + ".txt")
    log = os.path.join(out_dir, label + ".log")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", results] + (
        ["--shard", shard] if shard else []) + names
    print("check-numba: %s run (log: %s)" % (label, log), flush=True)
    start = time.monotonic()
    if os.path.exists(results):
        os.unlink(results)
    with open(log, "w") as out:
        status = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    print("check-numba: %s run: exit %d in %.0f s" % (label, status, time.monotonic() - start),
          flush=True)
    if not os.path.exists(results):
        raise SystemExit("check-numba: the %s run wrote no results (see %s)" % (label, log))
    return (status,) + read_results(results)


def write_results(path, header, outcomes):
    with open(path, "w") as f:
        if header:
            f.write("# %s\n" % header)
        for test_id in sorted(outcomes):
            f.write("%s %s\n" % (test_id, outcomes[test_id]))


def run_hpalloc(env, out_dir, modules, cpus):
    """The tests with hpalloc, in one process per CPU (two at most), each
    running a shard of them; returns (status, headers, outcomes)."""
    count = min(cpus, 2)
    shards = ["%d/%d" % (i, count) for i in range(count)] if count > 1 else [None]
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        runs = [pool.submit(run, "hpalloc-%d" % i if shard else "hpalloc", env, out_dir,
                            modules, shard) for i, shard in enumerate(shards)]
        done = [r.result() for r in runs]
    outcomes = {}
    for _, _, part in done:
        outcomes.update(part)
    headers = [header for _, header, _ in done]
    write_results(os.path.join(out_dir, "hpalloc.txt"), "; ".join(headers), outcomes)
    return max(status for status, _, _ in done), headers, outcomes


def run_default(env, out_dir, modules, hp, whole):
    """The tests as Numba ships: all of them (whole), or those whose outcome
    with hpalloc is not "passed"; returns (status, outcomes, ids compared)."""
    if whole:
        status, _, outcomes = run("default", env, out_dir, modules)
        return status, outcomes, set(outcomes) | set(hp)
    ids = sorted(t for t, outcome in hp.items() if outcome != "passed")
    if not ids:
        write_results(os.path.join(out_dir, "default.txt"), "", {})
        print("check-numba: default run: not needed, every test passed with hpalloc", flush=True)
        return 0, {}, set()
    id_file = os.path.join(out_dir, "default-ids.txt")
    with open(id_file, "w") as f:
        f.write("".join(t + "\n" for t in ids))
    status, _, outcomes = run("default", env, out_dir, ["@" + id_file])
    return status, outcomes, set(ids)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        shard = None
        names = sys.argv[3:]
        if names[:1] == ["--shard"]:
            shard, names = names[1], names[2:]
        return worker(sys.argv[2], names or MODULES, shard)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--inplace", default=os.environ.get("HPALLOC_TEST_PYTHON_INPLACE"),
                        help="the build tree's python/inplace directory")
    parser.add_argument("--installed", action="store_true",
                        help="test the hpalloc this interpreter imports instead")
    parser.add_argument("--whole-baseline", action="store_true",
                        help="run every test without hpalloc too, not only those that do not "
                             "pass with it")
    parser.add_argument("modules", nargs="*", help="test modules (after --)")
    args = parser.parse_args()
    if args.installed:
        args.inplace = None
        try:
            import hpalloc
        except ImportError as exc:
            sys.exit("check-numba: --installed, but %s cannot import hpalloc: %s"
                     % (sys.executable, exc))
        print("check-numba: testing %s" % os.path.dirname(hpalloc.__file__), flush=True)
    elif not args.inplace:
        sys.exit("check-numba: --inplace (or HPALLOC_TEST_PYTHON_INPLACE) or "
                 "--installed is required")
    try:
        import numba
    except ImportError:
        sys.exit("check-numba: Numba is not installed (Debian: python3-numba)")
    modules = args.modules or MODULES
    os.makedirs(args.out_dir, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="hpalloc-check-numba.") as tmp:
        with open(os.path.join(tmp, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop(ADAPTERS_ENV, None)
        env["PYTHONPATH"] = os.pathsep.join([tmp] + ([args.inplace] if args.inplace else []) + [
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # The default run gets no HPALLOC_* variable; the hpalloc run the
        # caller's (CI runs this beside the pool tests with HPALLOC_MODE=thp,
        # so that it takes no pool page they reserved), over a 64K threshold.
        knobs = {k: env.pop(k) for k in [k for k in env if k.startswith("HPALLOC_")]}
        hp_env = dict(env, HPALLOC_THRESHOLD="64K", **{ADAPTERS_ENV: "1"})
        hp_env.update(knobs)
        h_status, headers, hp = run_hpalloc(hp_env, args.out_dir, modules,
                                            len(os.sched_getaffinity(0)))
        d_status, default, compared = run_default(env, args.out_dir, modules, hp,
                                                  args.whole_baseline)

    count = lambda res, what: sum(1 for o in res.values() if o == what)  # noqa: E731
    for label, res in (("default", default), ("hpalloc", hp)):
        print("check-numba: %-8s %d passed, %d failed, %d errors, %d skipped, %d xfailed" % (
            label, count(res, "passed"), count(res, "failed"), count(res, "error"),
            count(res, "skipped"), count(res, "xfailed")))
    print("check-numba: hpalloc run: %s; Numba %s" % ("; ".join(headers), numba.__version__))
    differ = sorted(t for t in compared if default.get(t) != hp.get(t))
    for test_id in differ:
        print("check-numba: DIFFERS: %s: %s -> %s" % (
            test_id, default.get(test_id, "absent"), hp.get(test_id, "absent")))
    blocks = sum(int(h.rsplit("huge_blocks=", 1)[-1]) for h in headers if "huge_blocks=" in h)
    problems = []
    if differ:
        problems.append("%d tests differ" % len(differ))
    if d_status or h_status:
        problems.append("a run failed (exit %d / %d)" % (d_status, h_status))
    if not all("python=True numba=True" in h for h in headers) or blocks == 0:
        problems.append("hpalloc was not active in the hpalloc run (%s)" % "; ".join(headers))
    print("check-numba: %s" % ("; ".join(problems) if problems else
                               "every test passes with hpalloc or has the outcome it has "
                               "without (%d compared)" % len(compared)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
