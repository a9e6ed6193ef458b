"""pytest plugin for automake's test harness (loaded by tests/run-test's
PY_LOG_COMPILER with -p hp_pytest_automake).

* A test file whose every test skipped is reported as SKIP (exit 77), not
  as PASS: a skip must show up in `make check`'s summary, not hide as a
  pass.
* Every skipped test prints one line "SKIP(<capability>): <test>: <why>"
  at the end, which tests/skip-driver counts: a file where some tests
  skipped shows them in the summary too.
* skip(cap, why) skips a test because the machine lacks a capability
  (one of tests/capabilities: hugetlb, hugetlb1g, uring, thp, root,
  nonroot, or a library of the Python stack under test: numba, torch,
  distributed, pyarrow, ray, prometheus_client); when HPALLOC_TEST_REQUIRE lists it, the test
  fails instead.  need(module) imports such a library or skips that way.
  A plain pytest.skip() counts as "other", never required.
"""

import importlib
import os

import pytest

# the Python libraries hpalloc has adapters for, as capabilities: module ->
# (capability, where a missing one comes from)
LIBRARIES = {
    "numba": ("numba", "Debian: python3-numba; PyPI: numba"),
    "torch": ("torch", "Debian: python3-torch; PyPI: torch==2.13.0"),
    "distributed": ("distributed", "Debian: python3-distributed; PyPI: distributed"),
    "pyarrow": ("pyarrow", "PyPI: pyarrow (Debian 12 has none)"),
    "ray": ("ray", "PyPI: ray (make check-ray-venv's venv)"),
    "prometheus_client": ("prometheus_client",
                          "PyPI: prometheus_client (make check-ray-venv's venv)"),
}


def _caps():
    """The capability names of tests/capabilities, the list the C and
    shell harnesses read too."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capabilities")
    with open(path, encoding="utf-8") as f:
        return tuple(line.split()[0] for line in f
                     if line.strip() and not line.startswith("#"))


CAPS = _caps()


def _required():
    names = [n for n in os.environ.get("HPALLOC_TEST_REQUIRE", "").replace(",", " ").split()]
    unknown = [n for n in names if n not in CAPS]
    if unknown:
        raise pytest.UsageError("HPALLOC_TEST_REQUIRE names %s; known: %s"
                                % (", ".join(unknown), " ".join(CAPS)))
    return set(names)


def required(cap):
    """Whether HPALLOC_TEST_REQUIRE names cap."""
    return cap in _required()


def skip(cap, why, allow_module_level=False):
    """Skip the current test because the machine lacks cap, or fail it
    when cap is required."""
    if cap not in CAPS:
        raise ValueError("unknown capability %r" % cap)
    if required(cap):
        pytest.fail("required capability %s (HPALLOC_TEST_REQUIRE) is missing: %s"
                    % (cap, why), pytrace=False)
    pytest.skip("(%s) %s" % (cap, why), allow_module_level=allow_module_level)


def need(module, what=None):
    """import module, one of LIBRARIES, or skip for its capability (fail
    when required).  what: the hpalloc adapter module to import after it
    (hpalloc.torch): a library that is there with an adapter that is not
    is the same missing capability, said as such."""
    cap, where = LIBRARIES[module]
    try:
        lib = importlib.import_module(module)
    except ImportError as exc:
        skip(cap, "%s is not installed (%s): %s" % (module, where, exc),
             allow_module_level=True)
    if what:
        try:
            importlib.import_module(what)
        except ImportError as exc:
            skip(cap, "%s is installed but %s does not import: %s" % (module, what, exc),
                 allow_module_level=True)
    return lib


def pytest_configure(config):
    _required()  # a misspelt capability stops the run


def _skip_reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = longrepr[2]
    else:
        reason = str(longrepr)
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    cap = "other"
    if reason.startswith("("):
        tag, _, rest = reason[1:].partition(") ")
        if tag in CAPS:
            cap, reason = tag, rest
    return cap, reason


def pytest_terminal_summary(terminalreporter):
    for report in terminalreporter.stats.get("skipped", []):
        cap, reason = _skip_reason(report)
        terminalreporter.write_line("SKIP(%s): %s: %s" % (cap, report.nodeid, reason))


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    # 5: nothing collected -- what pytest says of a file that skipped at
    # module level (pytest.skip(..., allow_module_level=True)); a skip too
    if reporter is None or exitstatus not in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        return
    stats = reporter.stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    if ran == 0 and stats.get("skipped"):
        session.exitstatus = 77
