#!/usr/bin/env python3
"""make check-numba: Numba's own tests without and with hpalloc.

Runs numba.tests.test_dyn_array, test_nrt, test_array_methods and
test_buffer_protocol (or the modules given after --) twice with unittest:
once as Numba ships, once with hpalloc active in every interpreter the
tests start -- NumPy's handler, the raw domain (hpalloc.python) and NRT
(hpalloc.numba) installed at start-up by a sitecustomize module, with
threshold=64K so that most of the tests' arrays take the huge path.
Numba's tests check NRT's allocation counters themselves (MemoryLeakMixin).

The hpalloc tested is the build tree's (--inplace, what make check-numba
passes) or, with --installed, the one this interpreter imports (a package
pip installed into a venv).

Writes <out-dir>/{default,hpalloc}.txt ("test id outcome" per test) and
logs, and fails if any outcome differs, if a run fails, or if the hpalloc
run served no huge block.

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


def worker(results, modules):
    suite = unittest.defaultTestLoader.loadTestsFromNames(modules)
    runner = unittest.TextTestRunner(resultclass=RecordingResult, verbosity=1)
    result = runner.run(suite)
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


def run(label, env, out_dir, modules):
    results = os.path.join(out_dir, label + ".txt")
    log = os.path.join(out_dir, label + ".log")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", results] + modules
    print("check-numba: %s run (log: %s)" % (label, log), flush=True)
    start = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    print("check-numba: %s run: exit %d in %.0f s" % (label, status, time.monotonic() - start),
          flush=True)
    if not os.path.exists(results):
        raise SystemExit("check-numba: the %s run wrote no results (see %s)" % (label, log))
    return (status,) + read_results(results)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3:] or MODULES)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--inplace", default=os.environ.get("HPALLOC_TEST_PYTHON_INPLACE"),
                        help="the build tree's python/inplace directory")
    parser.add_argument("--installed", action="store_true",
                        help="test the hpalloc this interpreter imports instead")
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
        # The two runs are independent processes, mostly Numba compiling on
        # one CPU each: side by side where there are two.
        with concurrent.futures.ThreadPoolExecutor(
                max_workers=2 if len(os.sched_getaffinity(0)) >= 2 else 1) as pool:
            runs = [pool.submit(run, label, e, args.out_dir, modules)
                    for label, e in (("default", env), ("hpalloc", hp_env))]
            (d_status, _, default), (h_status, header, hp) = [r.result() for r in runs]

    count = lambda res, what: sum(1 for o in res.values() if o == what)  # noqa: E731
    for label, res in (("default", default), ("hpalloc", hp)):
        print("check-numba: %-8s %d passed, %d failed, %d errors, %d skipped, %d xfailed" % (
            label, count(res, "passed"), count(res, "failed"), count(res, "error"),
            count(res, "skipped"), count(res, "xfailed")))
    print("check-numba: hpalloc run: %s; Numba %s" % (header, numba.__version__))
    differ = sorted(t for t in set(default) | set(hp) if default.get(t) != hp.get(t))
    for test_id in differ:
        print("check-numba: DIFFERS: %s: %s -> %s" % (
            test_id, default.get(test_id, "absent"), hp.get(test_id, "absent")))
    blocks = int(header.rsplit("huge_blocks=", 1)[-1]) if "huge_blocks=" in header else 0
    problems = []
    if differ:
        problems.append("%d tests differ" % len(differ))
    if d_status or h_status:
        problems.append("a run failed (exit %d / %d)" % (d_status, h_status))
    if "python=True numba=True" not in header or blocks == 0:
        problems.append("hpalloc was not active in the hpalloc run (%s)" % header)
    print("check-numba: %s" % ("; ".join(problems) if problems else
                               "same outcomes with and without hpalloc"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
