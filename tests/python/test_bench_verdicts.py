"""bench/numpy_bench.py's verdicts and run order (issue 35), without running
a benchmark: the rules a sceptic reads the report by.

  * a verdict is "ahead"/"behind" only when the 95 % bootstrap interval of
    the ratio excludes 1, "not slower" only when its upper end is <= 1.02,
    none from fewer than 10 processes a side; two samples of one
    distribution are called level (almost always), a clear difference is
    found;
  * run_all: every cold first-touch process starts >= --cold-gap after the
    last process ended; no contender but the hugetlb ones ever runs while
    a pool is reserved; in the cold row each hugetlb contender reserves its
    own pool after the gap (pages a pool kept would be warm)."""

import os
import random
import sys
import types

import pytest

SRCDIR = os.environ.get("abs_top_srcdir",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRCDIR, "bench"))
import numpy_bench as nb  # noqa: E402


def lognormal(rng, n, mu, sigma):
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def test_same_values_are_level_and_not_slower():
    v = nb.verdict([1.0] * 10, [1.0] * 10)
    assert (v["ratio"], v["lo"], v["hi"]) == (1.0, 1.0, 1.0)
    assert v["word"] == "level" and v["not_slower"]


def test_clear_differences_are_ahead_and_behind():
    rng = random.Random(7)
    fast, slow = lognormal(rng, 10, -0.3, 0.05), lognormal(rng, 10, 0.0, 0.05)
    ahead = nb.verdict(fast, slow)
    assert ahead["word"] == "ahead" and ahead["hi"] < 1 and ahead["not_slower"], ahead
    behind = nb.verdict(slow, fast)
    assert behind["word"] == "behind" and behind["lo"] > 1 and not behind["not_slower"], behind


def test_level_but_not_proven_not_slower():
    """A wide spread around 1: level, but the upper end is above 1.02, so
    the row may not be called "not slower"."""
    rng = random.Random(3)
    a, b = lognormal(rng, 10, 0.0, 0.3), lognormal(rng, 10, 0.0, 0.3)
    v = nb.verdict(a, b)
    assert v["lo"] < 1 < v["hi"], v
    assert v["word"] == "level" and v["hi"] > nb.NOT_SLOWER and not v["not_slower"], v
    assert nb.fmt_verdict(v)[1] == "level"


def test_too_few_processes_give_no_verdict():
    v = nb.verdict([0.5] * 9, [1.0] * 10)
    assert v["word"] is None and v["not_slower"] is None
    assert "9 and 10 processes" in v["why"] and "needs 10" in v["why"]
    assert nb.fmt_verdict(v)[1].startswith("no verdict")


def test_same_samples_same_report():
    rng = random.Random(5)
    a, b = lognormal(rng, 12, 0.0, 0.2), lognormal(rng, 11, 0.1, 0.2)
    assert nb.bootstrap_ratio(a, b) == nb.bootstrap_ratio(a, b)


def test_no_difference_is_rarely_called_ahead_or_behind():
    """Two samples of one distribution, 10 processes each: the verdict must
    say level in about 95 % of such runs (here 120 runs: at least 90 %)."""
    rng = random.Random(11)
    runs = 120
    called = sum(nb.verdict(lognormal(rng, 10, 0, 0.25), lognormal(rng, 10, 0, 0.25))["word"]
                 != "level" for _ in range(runs))
    assert called <= runs // 10, "%d of %d runs called a difference that is not there" % (
        called, runs)


# ---- run_all's order: cold gaps and pools ------------------------------------------------

class FakeMachine:
    def __init__(self, log):
        self.log, self.held = log, False

    def reserve_plan(self, plan):
        assert not self.held, "a pool reserved twice without a release"
        self.held = True
        self.log.append(("reserve", nb.time.monotonic(), sorted(plan)))
        return {size: 4 for size in plan}

    def release_pools(self):
        self.held = False
        self.log.append(("release", nb.time.monotonic(), None))


@pytest.fixture
def fake_run(monkeypatch):
    """run_one recording (what, start, end, contender, pool held), and a
    machine recording reservations."""
    log = []
    machine = FakeMachine(log)

    def run_one(opts, c, w, base_env):
        start = nb.time.monotonic()
        nb.time.sleep(0.01)
        log.append(("run", start, (w, c.name, machine.held)))
        return {"metrics": {"s": [1.0]}, "peak_bytes": 0, "info": {}}

    monkeypatch.setattr(nb, "run_one", run_one)
    return log, machine


def contenders():
    return [nb.Contender("numpy", "numpy"), nb.Contender("peer", "peer"),
            nb.Contender("huge2M", "huge2M", pools=(2 * nb.MiB,)),
            nb.Contender("huge1G", "huge1G", pools=(nb.GiB,)),
            nb.Contender("hp", "hp", run="hpctl")]


def run(fake_run, workloads, cold_gap=0.2, rounds=2):
    log, machine = fake_run
    opts = types.SimpleNamespace(rounds=rounds, cold_gap=cold_gap, gather_bytes=nb.GiB)
    results = nb.run_all(opts, contenders(), [(w,) for w in workloads], {}, machine)
    return log, results


def test_no_other_contender_meets_a_pool(fake_run):
    log, results = run(fake_run, ["zeros1G", "gather"])
    runs = [e[2] for e in log if e[0] == "run"]
    for w, name, held in runs:
        assert held == name.startswith("huge"), (w, name, held)
    assert not fake_run[1].held, "a pool left reserved"
    # one reservation per workload and round, for both page sizes, each given back
    reserves = [e for e in log if e[0] == "reserve"]
    assert len(reserves) == 2 * 2 and all(e[2] == [2 * nb.MiB, nb.GiB] for e in reserves)
    assert len([e for e in log if e[0] == "release"]) == len(reserves)
    assert all(r["pool_given"] for r in results["gather"]["huge1G"])


def test_cold_processes_start_after_the_gap(fake_run):
    log, results = run(fake_run, ["zeros1G", "zeros1G-cold"], cold_gap=0.2)
    last_end = None
    for i, (what, t, detail) in enumerate(log):
        if what == "run" and detail[0] == "zeros1G-cold":
            assert t - last_end >= 0.2, (detail, t - last_end)
        if what == "run":
            last_end = t + 0.01
        if what == "release":
            last_end = t
    for name, rs in results["zeros1G-cold"].items():
        assert all(r["gap_s"] >= 0.2 for r in rs), name
    assert all(r["gap_s"] < 0.2 for r in results["zeros1G"]["numpy"])


def test_cold_hugetlb_contenders_reserve_after_the_gap(fake_run):
    """In the cold row each hugetlb contender gets a pool of its own,
    reserved only once the gap has passed (and given back right after)."""
    log, _ = run(fake_run, ["zeros1G-cold"], cold_gap=0.2, rounds=1)
    events = [(what, detail) for what, _, detail in log]
    for name, size in (("huge2M", 2 * nb.MiB), ("huge1G", nb.GiB)):
        i = events.index(("run", ("zeros1G-cold", name, True)))
        assert events[i - 1] == ("reserve", [size]) and events[i + 1] == ("release", None)
        gap = log[i][1] - log[i - 2][1]  # from the previous release or run to the start
        assert gap >= 0.2, (name, gap)
