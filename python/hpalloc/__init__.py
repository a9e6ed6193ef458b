"""hpalloc: huge-page backed memory for NumPy arrays.

This package only translates: every policy (knobs, sizes, page choice) lives
in libhpalloc.  Importing it does not import NumPy; ``hpalloc.numpy`` does.

    import hpalloc
    hpalloc.stats()               # the library's counters
    hpalloc.config()              # effective knobs, their sources and help
    hpalloc.set("threshold", "4M")
    hpalloc.processes()           # every process using hpalloc, as hpctl stats
    import hpalloc.numpy
    hpalloc.numpy.install()       # every NumPy array from now on
"""

import os as _os

from . import _hpalloc, _prefix

__all__ = ["__version__", "stats", "config", "set", "reset", "parse_size",
           "format_size", "cache_flush", "processes", "parse_knob", "preload_library", "preloaded",
           "get_include", "get_pkgconfig_dir"]

__version__ = _hpalloc.version()


def stats():
    """The library's counters as {name: int} (names from hp_stat_name)."""
    return _hpalloc.stats()


def config():
    """Effective knobs: {knob: {"value", "source", "default", "help", ...}}."""
    return _hpalloc.config()


def set(knob, value):
    """Per-process override of one knob (highest precedence).

    Raises ValueError with the library's message when the knob or the value
    is refused; nothing changes then."""
    if isinstance(value, bool):
        raise TypeError("knob values are strings or ints, not bool")
    if isinstance(value, int):
        value = str(value)
    if not isinstance(knob, str) or not isinstance(value, str):
        raise TypeError("set(knob: str, value: str | int)")
    _hpalloc.set(knob, value)


def parse_knob(knob, value):
    """Validate without applying: the canonical form of value for knob
    ("4096K" -> "4M"), or ValueError with the library's message."""
    if isinstance(value, bool):
        raise TypeError("knob values are strings or ints, not bool")
    if isinstance(value, int):
        value = str(value)
    if not isinstance(knob, str) or not isinstance(value, str):
        raise TypeError("parse_knob(knob: str, value: str | int)")
    return _hpalloc.parse_knob(knob, value)


def reset(knob=None):
    """Drop the per-process override of knob (None: of every knob)."""
    _hpalloc.unset(knob)


def parse_size(text):
    """'4M' -> 4194304, parsed by the library."""
    return _hpalloc.parse_size(text)


def format_size(nbytes):
    """4194304 -> '4M', formatted by the library."""
    return _hpalloc.format_size(nbytes)


def cache_flush():
    """Give every cached huge block back to the kernel now and wait."""
    _hpalloc.cache_flush()


def processes():
    """Every process that publishes hpalloc stats in the control directory
    (the same entries `hpctl stats` shows), sorted by pid:
    [{"pid", "comm", "start_time", "alive", "stats": {name: int},
      "knobs": {knob: {"value", "source", "rejected"}}}].

    The library reads the entries and removes those of processes proven
    gone; "alive" is True when checked, None when it cannot be checked from
    here (another pid namespace, no /proc)."""
    return _hpalloc.processes()


PRELOAD_NAME = "libhpalloc-preload.so"


def preload_library():
    """The path of libhpalloc-preload.so that goes with this package: the
    one next to the libhpalloc this package runs on (one library per
    process: the preload links that very file), unless HPALLOC_PRELOAD_PATH
    names another, as for `hpctl run --preload`.  FileNotFoundError saying
    where it looked.  The Dask and Ray integrations find it here only."""
    given = _os.environ.get("HPALLOC_PRELOAD_PATH")
    if given:
        if not _os.path.isfile(given):
            raise FileNotFoundError("HPALLOC_PRELOAD_PATH=%s is not a file" % given)
        return _os.path.realpath(given)
    library = _hpalloc.library_path()
    if library is None:
        raise FileNotFoundError("cannot tell which libhpalloc this package runs on")
    path = _os.path.join(_os.path.dirname(_os.path.realpath(library)), PRELOAD_NAME)
    if not _os.path.isfile(path):
        raise FileNotFoundError("%s is not installed next to %s" % (PRELOAD_NAME, library))
    return path


def preloaded():
    """Whether libhpalloc-preload.so is loaded in this process (LD_PRELOAD):
    then every large malloc of the process, whatever library makes it, is
    hpalloc's (counted as preload_huge_bytes)."""
    return any(_os.path.basename(path) == PRELOAD_NAME
               for path in _hpalloc.loaded_objects())


def get_include():
    """The directory of hpalloc.h inside this package (hpalloc's wheel),
    for C, C++ or Cython extensions built in the environment; None when
    the package was installed without the C side inside it (make install,
    the Debian packages: pkg-config finds it under their prefix)."""
    return _prefix.path("include")


def get_pkgconfig_dir():
    """The directory of the wheel's hpalloc.pc (`hpalloc-config
    --pkgconfigdir`), or None as for get_include()."""
    return _prefix.path("lib", "pkgconfig")
