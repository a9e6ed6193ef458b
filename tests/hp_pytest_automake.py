"""pytest plugin for automake's test harness (loaded by tests/run-test's
PY_LOG_COMPILER with -p hp_pytest_automake).

A test file whose every test skipped is reported as SKIP (exit 77), not as
PASS: a skip must show up in `make check`'s summary, not hide as a pass.
"""


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    stats = reporter.stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    if ran == 0 and stats.get("skipped"):
        session.exitstatus = 77
