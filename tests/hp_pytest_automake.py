"""pytest plugin for automake's test harness (loaded by tests/run-test's
PY_LOG_COMPILER with -p hp_pytest_automake).

* A test file whose every test skipped is reported as SKIP (exit 77), not
  as PASS: a skip must show up in `make check`'s summary, not hide as a
  pass.
* Every skipped test prints one line "SKIP(<capability>): <test>: <why>"
  at the end, which tests/skip-driver counts: a file where some tests
  skipped shows them in the summary too.
* skip(cap, why) skips a test because the machine lacks a capability
  (hugetlb, hugetlb1g, uring, thp, root, nonroot -- as in
  tests/c/harness.h); when HPALLOC_TEST_REQUIRE lists it, the test fails
  instead.  A plain pytest.skip() counts as "other", never required.
"""

import os

import pytest

CAPS = ("hugetlb", "hugetlb1g", "uring", "thp", "root", "nonroot")


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
