"""The Prometheus text of hpalloc's per-process stats (issue 37).

`hpctl metrics` for two idle running processes parses with prometheus_client's
own text parser, and every value equals what `hpctl --json stats` shows for
them: each published counter under its metric (the names below are the
interface dashboards use, so they are written out here, not derived from
the library), each knob in hpalloc_knob_info.  A comm with a quote, a
backslash and a space comes back exactly.  hpalloc.prometheus's collector
gives a prometheus_client registry the same families, for this process
(live) or for every published one.

prometheus_client comes from PyPI in make check-ray-venv's venv (required
there in CI); elsewhere this file skips saying so.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from hp_pytest_automake import need

prometheus_client = need("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import hpalloc  # noqa: E402
import hpalloc.prometheus  # noqa: E402
from conftest import python_env  # noqa: E402

# stat -> (metric family, extra labels, divisor): hp_proc_prometheus(3)
METRICS = {
    "small_live_bytes": ("hpalloc_live_bytes", {"backend": "small"}, 1),
    "thp_live_bytes": ("hpalloc_live_bytes", {"backend": "thp"}, 1),
    "hugetlb_live_bytes": ("hpalloc_live_bytes", {"backend": "hugetlb"}, 1),
    "small_live_blocks": ("hpalloc_live_blocks", {"backend": "small"}, 1),
    "thp_live_blocks": ("hpalloc_live_blocks", {"backend": "thp"}, 1),
    "hugetlb_live_blocks": ("hpalloc_live_blocks", {"backend": "hugetlb"}, 1),
    "mapped_bytes": ("hpalloc_mapped_bytes", {}, 1),
    "cached_bytes": ("hpalloc_cached_bytes", {}, 1),
    "cached_blocks": ("hpalloc_cached_blocks", {}, 1),
    "cached_reclaimable_bytes": ("hpalloc_cached_reclaimable_bytes", {}, 1),
    "cache_hits": ("hpalloc_cache_hits_total", {}, 1),
    "cache_misses": ("hpalloc_cache_misses_total", {}, 1),
    "cache_evictions": ("hpalloc_cache_evictions_total", {}, 1),
    "cache_decays": ("hpalloc_cache_decays_total", {}, 1),
    "cache_cuts": ("hpalloc_cache_cuts_total", {}, 1),
    "cache_joins": ("hpalloc_cache_joins_total", {}, 1),
    "cache_decay_ms_in_force": ("hpalloc_cache_decay_seconds", {}, 1000),
    "fallbacks": ("hpalloc_fallbacks_total", {}, 1),
    "failures": ("hpalloc_failures_total", {}, 1),
    "released_bytes": ("hpalloc_released_bytes_total", {}, 1),
    "uring_releases": ("hpalloc_releases_total", {"path": "uring"}, 1),
    "sync_releases": ("hpalloc_releases_total", {"path": "sync"}, 1),
    "realloc_inplace": ("hpalloc_reallocs_total", {"how": "inplace"}, 1),
    "realloc_copies": ("hpalloc_reallocs_total", {"how": "copy"}, 1),
    "config_generation": ("hpalloc_config_changes_total", {}, 1),
    "config_rejects": ("hpalloc_config_rejects_total", {}, 1),
    "shared_live_bytes": ("hpalloc_shared_live_bytes", {}, 1),
    "shared_live_blocks": ("hpalloc_shared_live_blocks", {}, 1),
    "shared_fallbacks": ("hpalloc_shared_fallbacks_total", {}, 1),
    "uring_active": ("hpalloc_uring_active", {}, 1),
    "janitor_active": ("hpalloc_janitor_active", {}, 1),
    "numa_refused": ("hpalloc_numa_refused_total", {}, 1),
    "populate_ahead_bytes": ("hpalloc_populate_ahead_bytes_total", {}, 1),
    "populate_saved_us": ("hpalloc_populate_saved_seconds_total", {}, 1000000),
    "populate_threads": ("hpalloc_populate_threads", {}, 1),
    "populate_small_first": ("hpalloc_populate_small_first_total", {}, 1),
    "populate_collapsed_bytes": ("hpalloc_populate_collapsed_bytes_total", {}, 1),
    "populate_small_dropped_bytes": ("hpalloc_populate_small_dropped_bytes_total", {}, 1),
    "populate_cpu_us": ("hpalloc_populate_cpu_seconds_total", {}, 1000000),
    "populate_busy": ("hpalloc_populate_busy_total", {}, 1),
    "populate_2m_us": ("hpalloc_populate_fault_seconds", {"pages": "2M"}, 1000000),
    "populate_4k_us": ("hpalloc_populate_fault_seconds", {"pages": "4K"}, 1000000),
    "populate_start": ("hpalloc_populate_start", {}, 1),
    "memcg_limit_bytes": ("hpalloc_memcg_limit_bytes", {}, 1),
    "memcg_cache_bound": ("hpalloc_memcg_cache_bound_bytes", {}, 1),
    "memcg_released_bytes": ("hpalloc_memcg_released_bytes_total", {}, 1),
    "libc_trims": ("hpalloc_libc_trims_total", {}, 1),
    "thp_splits_seen": ("hpalloc_thp_splits_seen_total", {}, 1),
    "thp_underused_splits_seen": ("hpalloc_thp_underused_splits_seen_total", {}, 1),
    "memcg_libc_blocks": ("hpalloc_memcg_libc_blocks_total", {}, 1),
    "stranded_reservations": ("hpalloc_stranded_reservations_total", {}, 1),
}
for _origin in ("api", "numpy", "python", "torch", "numba", "preload"):
    METRICS[_origin + "_huge_bytes"] = ("hpalloc_huge_bytes", {"origin": _origin}, 1)

COUNTERS = {family for family, _, _ in METRICS.values() if family.endswith("_total")}
ODD_COMM = 'hp "q\\x y'   # a quote, a backslash, a space: escaped in labels


def builddir():
    d = os.environ.get("abs_top_builddir")
    if not d:
        pytest.skip("run through make check (needs the build tree's hpctl and holder)")
    return d


def hpctl(*args):
    return subprocess.run([os.path.join(builddir(), "tools", "hpctl"), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def holders(tmp_path):
    """Two idle processes holding hpalloc blocks (tests/cli/holder): 8 MiB,
    and 4 MiB in one run through a link named ODD_COMM (its comm, which
    the entry takes when the process first publishes).  Their pids."""
    holder = os.path.join(builddir(), "tests", "cli", "holder")
    # the program itself, not libtool's wrapper, under the odd name (comm is
    # the name of the file executed); it finds the library through
    # python_env's LD_LIBRARY_PATH
    real = os.path.join(builddir(), "tests", "cli", ".libs", "holder")
    odd = tmp_path / ODD_COMM
    shutil.copy(real if os.path.exists(real) else holder, odd)
    procs = []
    try:
        for exe, size in ((holder, "8M"), (str(odd), "4M")):
            p = subprocess.Popen([exe, "-t", "120", size], stdout=subprocess.PIPE, text=True,
                                 env=python_env())
            procs.append(p)
            assert p.stdout.readline().startswith("ready"), size
        pids = [p.pid for p in procs]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            entries = {e["pid"]: e for e in json_stats(pids)}
            if len(entries) == 2 and entries[pids[1]]["comm"] == ODD_COMM:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the holders never published (comm %r)" % ODD_COMM)
        yield pids
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def json_stats(pids):
    r = hpctl("--json", "stats", *map(str, pids))
    return json.loads(r.stdout) if r.returncode == 0 else []


def samples(text):
    """{(sample name, frozenset(labels)): value}, and the families' types,
    as prometheus_client's parser reads text."""
    values, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in values, "sample twice: %s" % (key,)
            values[key] = s.value
    return values, types


def expected(entries):
    """What the text must say of these `hpctl --json stats` entries."""
    want = {}
    for e in entries:
        who = {"pid": str(e["pid"]), "comm": e["comm"]}
        unmapped = set(e["stats"]) - set(METRICS)
        assert not unmapped, "published counters without a metric here: %s" % unmapped
        for stat, value in e["stats"].items():
            family, labels, divisor = METRICS[stat]
            want[(family, frozenset(dict(who, **labels).items()))] = value / divisor \
                if divisor > 1 else float(value)
        for knob, k in e["knobs"].items():
            want[("hpalloc_knob_info", frozenset(dict(
                who, knob=knob, value=k["value"], source=k["source"]).items()))] = 1.0
    return want


def consistent(pids, produce):
    """(json entries, text) read while nothing changed: json, text, json
    again, until both json readings agree (the holders are idle, but their
    janitors may still republish a decayed cache)."""
    for _ in range(20):
        before = json_stats(pids)
        text = produce()
        if json_stats(pids) == before and len(before) == len(pids):
            return before, text
        time.sleep(0.2)
    pytest.fail("the entries kept changing")


def test_hpctl_metrics_equals_json_stats(holders):
    pids = holders
    entries, text = consistent(pids, lambda: hpctl("metrics", *map(str, pids)).stdout)
    got, types = samples(text)
    assert got == expected(entries)
    # counters are counters, the rest gauges; each family has its HELP
    for family, _, _ in METRICS.values():
        name = family[:-len("_total")] if family.endswith("_total") else family
        assert types[name] == ("counter" if family in COUNTERS else "gauge"), family
    assert types["hpalloc_knob_info"] == "gauge"
    for family in {f for f, _, _ in METRICS.values()} | {"hpalloc_knob_info"}:
        assert "# HELP %s " % family in text and "# TYPE %s " % family in text, family
    # the odd comm came back exactly, through the escapes
    assert any(dict(k[1]).get("comm") == ODD_COMM for k in got)
    assert 'comm="hp \\"q\\\\x y"' in text
    # every process's values, not only the first's
    assert {dict(k[1])["pid"] for k in got} == {str(p) for p in pids}


def test_textfile_and_served_text_parse_the_same(holders, tmp_path):
    pids = holders
    path = tmp_path / "hpalloc.prom"
    entries, _ = consistent(pids, lambda: hpctl("metrics", "--textfile", str(path)).stderr)
    got, _ = samples(path.read_text())
    want = expected(entries)
    assert {k: v for k, v in got.items() if dict(k[1])["pid"] in map(str, pids)} == want
    # served over HTTP
    server = subprocess.Popen([os.path.join(builddir(), "tools", "hpctl"), "metrics",
                               "--listen", "0"], stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert "serving metrics on http://127.0.0.1:" in line, line
        url = line.split()[-1]
        import urllib.request

        def fetch():
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
                return r.read().decode()
        entries, text = consistent(pids, fetch)
        got, _ = samples(text)
        assert {k: v for k, v in got.items() if dict(k[1])["pid"] in map(str, pids)} \
            == expected(entries)
    finally:
        server.terminate()
        assert server.wait(timeout=10) == 0


def test_collector_of_this_process_is_live():
    """A process running a prometheus_client registry: the collector gives
    it this process's counters as they are at each scrape."""
    import numpy as np
    import hpalloc.numpy as hpnp
    from prometheus_client import CollectorRegistry, generate_latest
    registry = CollectorRegistry()
    collector = hpalloc.prometheus.register(registry)
    me = str(os.getpid())

    def value(name, **labels):
        return registry.get_sample_value(name, dict(pid=me, comm=open(
            "/proc/self/comm").read().strip(), **labels))

    before = value("hpalloc_huge_bytes", origin="numpy")
    with hpnp.enabled():
        a = np.ones((32 << 20) // 8)
    assert value("hpalloc_huge_bytes", origin="numpy") >= before + a.nbytes
    assert value("hpalloc_huge_bytes", origin="numpy") == hpalloc.stats()["numpy_huge_bytes"]
    assert value("hpalloc_knob_info", knob="threshold",
                 value=hpalloc.config()["threshold"]["value"],
                 source=hpalloc.config()["threshold"]["source"]) == 1.0
    # the registry's own exposition of them parses back to the same values
    exposed, _ = samples(generate_latest(registry).decode())
    direct, _ = samples(hpalloc.prometheus.text())
    for key in ("hpalloc_live_blocks", "hpalloc_cache_hits_total", "hpalloc_knob_info"):
        assert {k: v for k, v in exposed.items() if k[0] == key} == \
            {k: v for k, v in direct.items() if k[0] == key}, key
    del a
    registry.unregister(collector)
    assert registry.get_sample_value("hpalloc_live_blocks",
                                     dict(pid=me, comm="x", backend="thp")) is None
    with pytest.raises(ValueError, match="processes must be"):
        hpalloc.prometheus.HpallocCollector("mine")


def test_collector_of_every_process(holders):
    from prometheus_client import CollectorRegistry
    pids = holders
    registry = CollectorRegistry()
    hpalloc.prometheus.register(registry, processes="all")
    entries = {e["pid"]: e for e in json_stats(pids)}
    for pid in pids:
        assert registry.get_sample_value("hpalloc_knob_info", dict(
            pid=str(pid), comm=entries[pid]["comm"], knob="mode",
            value=entries[pid]["knobs"]["mode"]["value"],
            source=entries[pid]["knobs"]["mode"]["source"])) == 1.0
