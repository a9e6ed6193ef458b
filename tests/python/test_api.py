"""hpalloc.stats/config/set/reset/__version__: the library's tables, as dicts."""

import pytest

import hpalloc
from conftest import run_python


def test_version_is_the_library_version():
    assert isinstance(hpalloc.__version__, str)
    assert hpalloc.__version__ == hpalloc._hpalloc.version()
    assert hpalloc.__version__[0].isdigit()


def test_stats_has_every_counter_as_int():
    stats = hpalloc.stats()
    for name in ("small_live_bytes", "thp_live_bytes", "hugetlb_live_bytes",
                 "cache_hits", "fallbacks", "failures", "config_generation"):
        assert name in stats
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())
    assert len(stats) >= 20


def test_config_lists_every_knob_with_value_source_default_help():
    config = hpalloc.config()
    for knob in ("mode", "threshold", "pagesize", "fallback", "cache_max",
                 "cache_decay_ms", "uring", "verbose"):
        entry = config[knob]
        assert {"value", "source", "default", "help"} <= set(entry)
        assert entry["source"] in ("default", "control", "env", "process")
        assert entry["help"]


def test_set_overrides_for_this_process_and_reset_drops_it():
    generation = hpalloc.stats()["config_generation"]
    hpalloc.set("threshold", "8M")
    entry = hpalloc.config()["threshold"]
    assert entry["value"] == "8M"
    assert entry["source"] == "process"
    assert hpalloc.stats()["config_generation"] > generation
    hpalloc.set("threshold", 16 << 20)  # ints are accepted too
    assert hpalloc.config()["threshold"]["value"] == "16M"
    hpalloc.reset("threshold")
    assert hpalloc.config()["threshold"]["source"] != "process"


@pytest.mark.parametrize("knob,value", [
    ("threshold", "-1"), ("threshold", "4Q"), ("threshold", ""),
    ("threshold", "4M junk"), ("threshold", "99999999999999999999"),
    ("mode", "sometimes"), ("fallback", ""), ("verbose", "7"),
])
def test_bad_value_is_refused_with_the_library_message_and_changes_nothing(knob, value):
    before = hpalloc.config()[knob]
    with pytest.raises(ValueError) as err:
        hpalloc.set(knob, value)
    assert knob in str(err.value)
    after = hpalloc.config()[knob]
    assert (after["value"], after["source"]) == (before["value"], before["source"])


DECAY_LEARNS = r"""
import re, sys, time
import numpy as np
import hpalloc, hpalloc.numpy
hpalloc.numpy.install()
for knob, value in (("mode", "thp"), ("threshold", "1M"), ("cache_max", "1G"),
                    ("cache_decay_ms", "50")):
    hpalloc.set(knob, value)
said = re.search(r"up to (\d+) times", hpalloc.config()["cache_decay_ms"]["help"])
if not said:
    sys.exit("the cache_decay_ms help names no growth: %r"
             % hpalloc.config()["cache_decay_ms"]["help"])
most = 0
for _ in range(7):  # each fresh block right after a decay doubles the decay
    # (a window of the growth times 50 ms leaves a loaded machine room)
    a = np.ones(8 << 20, np.uint8)
    most = max(most, hpalloc.stats()["cache_decay_ms_in_force"])
    del a
    deadline = time.monotonic() + 10
    while hpalloc.stats()["cached_blocks"] and time.monotonic() < deadline:
        time.sleep(0.002)
print(said.group(1), most // 50)
"""


def test_decay_growth_in_the_help_is_the_growth_the_cache_learns():
    """cache_decay_ms's help says how far the learned decay grows (lib/core/cache.c,
    CACHE_DECAY_GROWTH): a program that maps afresh right after every decay
    drives it there, and no further."""
    said, reached = run_python(DECAY_LEARNS).stdout.split()
    assert said == reached, "help says up to %s times, the cache grew %s times" % (said, reached)


def test_unknown_knob_is_refused():
    with pytest.raises(ValueError, match="no_such_knob"):
        hpalloc.set("no_such_knob", "1")
    with pytest.raises(ValueError, match="no_such_knob"):
        hpalloc.reset("no_such_knob")


def test_unknown_knob_message_lists_every_knob_of_the_table():
    with pytest.raises(ValueError) as err:
        hpalloc.parse_knob("no_such_knob", "1")
    listed = str(err.value).split("(knobs: ", 1)[1].rstrip(")").split()
    assert listed == list(hpalloc.config()), str(err.value)


def test_wrong_types_are_refused():
    with pytest.raises(TypeError):
        hpalloc.set("threshold", 4.5)
    with pytest.raises(TypeError):
        hpalloc.set("verbose", True)


def test_sizes_are_parsed_and_formatted_by_the_library():
    assert hpalloc.parse_size("4M") == 4 << 20
    assert hpalloc.parse_size("1G") == 1 << 30
    assert hpalloc.format_size(4 << 20) == "4M"
    for bad in ("", "-2M", "4X", "1G2"):
        with pytest.raises(ValueError):
            hpalloc.parse_size(bad)


def test_importing_hpalloc_does_not_import_numpy():
    from conftest import run_python
    proc = run_python("import sys, hpalloc; hpalloc.stats(); "
                      "print('numpy' in sys.modules)")
    assert proc.stdout.strip() == "False"
