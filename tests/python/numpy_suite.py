#!/usr/bin/env python3
"""make check-numpy: NumPy's own test suite without and with hpalloc; make
check-suites: named subsets of SciPy's, scikit-learn's and pandas' (--suite).

Runs `python -m pytest --pyargs numpy -m "not slow"` (or the packages of
the suite --suite names, SUITES below) with NumPy's default
handler, then with HPALLOC_NUMPY=1 and HPALLOC_ADAPTERS=numpy,python, i.e.
hpalloc activated at interpreter start as users get it, NumPy's handler
and CPython's raw memory domain (bytes, pickles, list storage) both on
hpalloc.  All runs see the same package layout; only the variables differ:
with --inplace, a user site directory holding the build tree's package and
.pth (Debian's python3); with --installed, the interpreter's own package,
as pip installed it in a venv (make check-numpy's NumPy 2.x runs).

Writes <out-dir>/{default,hpalloc}.txt ("nodeid outcome" per
test) and their logs, then fails if any test's outcome differs from the
default run's unless the test is
listed in docs/numpy-testsuite.md (a line "- `nodeid` — reason"; fnmatch
patterns allowed) — each listed test must assert NumPy's own default-handler
semantics, anything else is a bug in hpalloc.

With --preload LIB a fourth run, "preload": NumPy's default handler under
LD_PRELOAD=LIB (libhpalloc-preload.so, mode=thp), so every malloc of the
interpreter, NumPy and its tests goes through the preload library; no
difference is expected there.  --variants picks runs (make
check-numpy-preload: default,preload).

This file is also the pytest plugin (-p numpy_suite) that records outcomes.
"""

import argparse
import fnmatch
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

RESULTS_ENV = "HPALLOC_TEST_NUMPY_SUITE_RESULTS"
PROG = "check-numpy"  # the make target, in messages (main() sets it)

# --suite: what pytest runs, one pytest per package: its arguments, where a
# word "@name" is the directory of module name (pandas' tests need their
# conftest.py found as the root one, which --pyargs does not do).
# The SciPy, scikit-learn and pandas subsets are where other projects' code
# meets hpalloc's blocks as users run it (issue 32: OpenBLAS reads past
# matrices); "scientific" fits CI's time, the full one is make
# check-suites-full.
SUITES = {
    "numpy": [["--pyargs", "numpy", "-m", "not slow"]],
    "scientific": [["@scipy.linalg"],
                   ["@sklearn.decomposition", "@sklearn.preprocessing"],
                   ["@pandas.tests.reshape"]],
    "scientific-full": [["@scipy.linalg", "@scipy.sparse.linalg", "@scipy.ndimage",
                         "@scipy.fft", "@scipy.interpolate", "@scipy.spatial"],
                        ["@sklearn.linear_model", "@sklearn.cluster",
                         "@sklearn.decomposition", "@sklearn.preprocessing"],
                        ["@pandas.tests.reshape", "@pandas.tests.groupby",
                         "@pandas.tests.window", "@pandas.tests.arrays"]],
}

# ---- the plugin, loaded into the NumPy test run ------------------------------

_outcomes = {}


def _merge(nodeid, outcome):
    rank = ["passed", "xfailed", "skipped", "xpassed", "thread-exception",
            "failed", "error"]
    old = _outcomes.get(nodeid)
    if old is None or rank.index(outcome) > rank.index(old):
        _outcomes[nodeid] = outcome


def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    if report.failed:
        _merge(report.nodeid, "failed" if report.when == "call" else "error")
    elif report.skipped:
        _merge(report.nodeid, "xfailed" if xfail else "skipped")
    elif report.when == "call":
        _merge(report.nodeid, "xpassed" if xfail else "passed")


def pytest_warning_recorded(warning_message, when, nodeid, location):
    # An assertion failing in a thread the test started only shows up as a
    # warning (pytest 7): count it, or such a test "passes" either way.
    name = warning_message.category.__name__
    if nodeid and name in ("PytestUnhandledThreadExceptionWarning",
                           "PytestUnraisableExceptionWarning"):
        _merge(nodeid, "thread-exception")


def pytest_sessionfinish(session):
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    try:  # NumPy 2.x (numpy.core warns there)
        from numpy._core.multiarray import get_handler_name
    except ImportError:
        from numpy.core.multiarray import get_handler_name
    raw = sys.modules.get("hpalloc.python")
    # Under pytest-xdist the tests run in workers: each writes its own file
    # (the handler its tests ran under); the controller writes the outcomes
    # of every test, which it hears of from the workers.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        path = "%s.%s" % (path, worker)
    with open(path, "w") as f:
        f.write("# handler %s\n" % get_handler_name())
        f.write("# raw %s\n" % bool(raw and raw.installed()))
        for nodeid in sorted(_outcomes):
            f.write("%s %s\n" % (nodeid, _outcomes[nodeid]))


# ---- the driver ------------------------------------------------------------------

def base_env():
    """The caller's environment without hpalloc's activation variables;
    this directory on PYTHONPATH (the plugin)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for var in ("HPALLOC_NUMPY", "HPALLOC_ADAPTERS"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    return env


def user_site_env(base, inplace):
    """Environment whose user site holds the package and its .pth."""
    env = dict(base_env(), PYTHONUSERBASE=base)
    site_dir = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getusersitepackages())"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(site_dir, exist_ok=True)
    for name in ("hpalloc", "hpalloc_activate.py", "hpalloc-numpy.pth"):
        os.symlink(os.path.join(inplace, name), os.path.join(site_dir, name))
    return env


def workers():
    """pytest-xdist's options for one worker per CPU, when it is there: the
    suite is ~50,000 tests (NumPy 2.x), minutes per run on one core."""
    try:
        import xdist  # noqa: F401
    except ImportError:
        return []
    return ["-n", str(min(len(os.sched_getaffinity(0)), 4))]


def run_suite(label, env, out_dir, work_dir, suite, pytest_args):
    """Every pytest of the suite in this variant: (handler, raw domain
    installed, {nodeid: outcome}) of them all (one handler, else "mixed")."""
    parts = [run_part("%s.%d" % (label, i) if len(SUITES[suite]) > 1 else label,
                      env, out_dir, work_dir, args + pytest_args)
             for i, args in enumerate(SUITES[suite])]
    states = {(h, r) for h, r, _ in parts}
    handler, raw = states.pop() if len(states) == 1 else ("mixed", None)
    outcomes = {}
    for _, _, theirs in parts:
        outcomes.update(theirs)
    return handler, raw, outcomes


def module_dir(word):
    """"@name": the directory of module name (imported here: the same
    interpreter runs the suite); any other word as it is."""
    if not word.startswith("@"):
        return word
    import importlib.util
    spec = importlib.util.find_spec(word[1:])
    if spec is None or not spec.submodule_search_locations:
        sys.exit(PROG + ": no package %s for %s" % (word[1:], sys.executable))
    return list(spec.submodule_search_locations)[0]


def run_part(label, env, out_dir, work_dir, args):
    args = [module_dir(a) for a in args]
    results = os.path.join(out_dir, label + ".txt")
    log = os.path.join(out_dir, label + ".log")
    env = dict(env, **{RESULTS_ENV: results})
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "numpy_suite"] + workers() + args
    print(PROG + ": %s run: %s (log: %s)" % (label, " ".join(cmd), log), flush=True)
    start = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(cmd, env=env, cwd=work_dir, stdout=out,
                                stderr=subprocess.STDOUT).returncode
    with open(log, errors="replace") as f:  # pytest's own summary ("27897 passed, ... in 150.2s")
        tail = [line.strip(" =") for line in f.read().splitlines()
                if re.search(r"\d+ (passed|failed)\b.* in [\d.]+s", line)][-1:]
    print(PROG + ": %s run: exit %d in %.0f s: %s" % (
        label, status, time.monotonic() - start, tail[0] if tail else ""), flush=True)
    # pytest: 0 all passed, 1 some failed (the comparison judges); anything
    # else (interrupted, internal error, usage, no tests) or no results (a
    # crash) is a run that did not test
    if status not in (0, 1) or not os.path.exists(results):
        with open(log, errors="replace") as f:
            last = f.read().splitlines()[-15:]
        sys.exit(PROG + ": the %s run did not test (exit %d%s; see %s):\n%s"
                 % (label, status, "" if os.path.exists(results) else ", no results",
                    log, "\n".join(last)))
    found = read_results(results)
    if not found[2]:
        sys.exit(PROG + ": the %s run reported no tests (see %s)" % (label, log))
    return found


def read_one(path):
    handler, raw, outcomes = None, False, {}
    with open(path) as f:
        for line in f:
            if line.startswith("# handler "):
                handler = line.split()[2]
            elif line.startswith("# raw "):
                raw = line.split()[2] == "True"
            elif line.strip():
                nodeid, outcome = line.rstrip("\n").rsplit(" ", 1)
                outcomes[nodeid] = outcome
    return handler, raw, outcomes


def read_results(path):
    """(handler, raw domain installed, {nodeid: outcome}).  With workers
    (pytest-xdist), the handler and raw domain are theirs -- every worker's
    must be the same, else "mixed" -- and an outcome a worker saw that the
    controller ranks lower (a thread exception) is kept."""
    handler, raw, outcomes = read_one(path)
    workers = [read_one(p) for p in sorted(glob.glob(glob.escape(path) + ".gw*"))]
    if workers:
        states = {(h, r) for h, r, _ in workers}
        handler, raw = states.pop() if len(states) == 1 else ("mixed", None)
        saved = dict(_outcomes)
        _outcomes.clear()
        _outcomes.update(outcomes)
        for _, _, theirs in workers:
            for nodeid, outcome in theirs.items():
                _merge(nodeid, outcome)
        outcomes = dict(_outcomes)
        _outcomes.clear()
        _outcomes.update(saved)
    return handler, raw, outcomes


def read_allowed(path):
    """{pattern: reason} from '- `pattern` — reason' lines."""
    allowed = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s*[-*]\s+`([^`]+)`\s*(?:[-—:]+\s*)?(.*)$", line)
            if m and "::" in m.group(1):
                allowed[m.group(1)] = m.group(2).strip()
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allowed", required=True, help="docs/numpy-testsuite.md")
    parser.add_argument("--suite", choices=sorted(SUITES), default="numpy",
                        help="what runs: NumPy's suite, or the SciPy/scikit-learn/pandas subsets")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--inplace", default=os.environ.get("HPALLOC_TEST_PYTHON_INPLACE"),
                        help="the build tree's python/inplace directory")
    parser.add_argument("--installed", action="store_true",
                        help="the interpreter's own package (a venv's, from pip)")
    parser.add_argument("--preload", metavar="LIB",
                        help="libhpalloc-preload.so: adds the 'preload' run")
    parser.add_argument("--variants", default=None,
                        help="comma-separated runs to make (default: all)")
    parser.add_argument("pytest_args", nargs="*",
                        help="extra pytest arguments (after --), e.g. -k mem_policy")
    args = parser.parse_args()
    global PROG
    PROG = "check-numpy" if args.suite == "numpy" else "check-suites"
    if not args.inplace and not args.installed:
        sys.exit(PROG + ": --inplace (or HPALLOC_TEST_PYTHON_INPLACE) or --installed "
                 "is required")
    os.makedirs(args.out_dir, exist_ok=True)
    allowed = read_allowed(args.allowed)

    # label -> (extra environment, handler and raw domain expected at the end)
    variants = [("default", {}, ("default_allocator", False)),
                ("hpalloc", {"HPALLOC_NUMPY": "1", "HPALLOC_ADAPTERS": "numpy,python"},
                 ("hpalloc", True))]
    if args.preload:
        # mode=thp: this runs outside tests/run-test's lock, so it must not
        # take hugetlb pages from a pool a test is sizing.
        preload = " ".join(filter(None, [args.preload, os.environ.get("LD_PRELOAD")]))
        variants.append(("preload", {"HPALLOC_MODE": "thp", "LD_PRELOAD": preload},
                         ("default_allocator", False)))
    if args.variants:
        wanted = set(args.variants.split(","))
        unknown = wanted - {v[0] for v in variants}
        if unknown or "default" not in wanted:
            sys.exit(PROG + ": --variants %s: runs are %s, and 'default' is needed" % (
                args.variants, ",".join(v[0] for v in variants)))
        variants = [v for v in variants if v[0] in wanted]
    results = {}
    with tempfile.TemporaryDirectory(prefix="hpalloc-check-numpy.") as tmp:
        env = base_env() if args.installed else \
            user_site_env(os.path.join(tmp, "userbase"), args.inplace)
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        for label, extra, expected in variants:
            handler, raw, outcomes = run_suite(label, dict(env, **extra), args.out_dir,
                                               work, args.suite, args.pytest_args)
            if (handler, raw) != expected:
                sys.exit(PROG + ": the %s run ended with handler %s, raw domain %s; "
                         "expected %s, %s" % ((label, handler, raw) + expected))
            results[label] = outcomes

    default = results["default"]
    unexplained, explained, unused = [], [], set(allowed)
    for label in (v[0] for v in variants if v[0] != "default"):
        hp = results[label]
        for nodeid in sorted(n for n in set(default) | set(hp) if default.get(n) != hp.get(n)):
            line = "%s: %s: %s -> %s" % (label, nodeid, default.get(nodeid, "absent"),
                                         hp.get(nodeid, "absent"))
            patterns = [p for p in allowed if fnmatch.fnmatchcase(nodeid, p)]
            unused.difference_update(patterns)
            (explained if patterns else unexplained).append(line)

    count = lambda res, what: sum(1 for o in res.values() if o == what)  # noqa: E731
    for label, res in results.items():
        print(PROG + ": %-11s %d passed, %d failed, %d errors, %d thread exceptions, "
              "%d skipped, %d xfailed" % (
                  label, count(res, "passed"), count(res, "failed"), count(res, "error"),
                  count(res, "thread-exception"), count(res, "skipped"),
                  count(res, "xfailed")))
    for line in explained:
        print(PROG + ": differs, explained in the docs: " + line)
    for pattern in sorted(unused):
        print(PROG + ": note: listed but did not differ this time: " + pattern)
    for line in unexplained:
        print(PROG + ": DIFFERS, not explained: " + line)
    print(PROG + ": %d differences, %d explained, %d unexplained" % (
        len(explained) + len(unexplained), len(explained), len(unexplained)))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
