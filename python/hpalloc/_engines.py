"""What the engine integrations (hpalloc.dask, hpalloc.ray) check and set
alike: knob values and adapter lists given by the user, checked by the
library's and the activation's own parsers; the environment variables that
carry them to worker processes, merged with the user's own (LD_PRELOAD,
Arrow's pool); and the one return type of their stats().  Imports neither
engine."""

import os
import sys
import warnings

import hpalloc_activate as _activation

from . import parse_knob


def canonical_knobs(knobs):
    """{knob: canonical value}, every value checked by the library; one
    ValueError naming every refused knob, before anything changes."""
    canon, errors = {}, []
    for name, value in knobs.items():
        try:
            canon[name] = parse_knob(name, value)
        except (ValueError, TypeError) as exc:
            errors.append(str(exc))
    if errors:
        raise ValueError("hpalloc: refused knob value%s: %s"
                         % ("s" if len(errors) > 1 else "", "; ".join(errors)))
    return canon


def checked_adapters(value):
    """HPALLOC_ADAPTERS' names for value (a string as that variable takes,
    or a list of names; None: its default), checked by its own parser."""
    if value is None:
        return _activation.DEFAULT_ADAPTERS
    if not isinstance(value, str):
        value = ",".join(value)
    try:
        return _activation.parse_adapters(value)
    except ValueError as exc:
        raise ValueError("hpalloc: refused adapters %r: %s" % (value, exc)) from None


def env_name(knob):
    """A knob's environment variable: HPALLOC_ and its name in capitals
    (hpalloc(7))."""
    return "HPALLOC_" + knob.upper()


def knob_environ(knobs):
    """{HPALLOC_<KNOB>: canonical value} for knobs, checked as above."""
    return {env_name(k): v for k, v in canonical_knobs(knobs).items()}


# ---- the environment of a worker process started under the preload ---------------
#
# Both engines start worker processes whose environment the user may already
# set (a Ray runtime_env's env_vars, a Dask nanny's own environment): the
# user's LD_PRELOAD is kept with hpalloc's library appended (a sanitizer
# runtime or another tool there must stay first, as for `hpctl run
# --preload`), a pool the user chose for Arrow is kept, and a value of the
# user's that hpalloc must replace is said in a warning naming both.

PRELOAD = "LD_PRELOAD"
ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"


def with_preload(current, library):
    """LD_PRELOAD current with library appended, once (by file name);
    entries may be separated by spaces or colons, as ld.so takes them."""
    parts = (current or "").replace(":", " ").split()
    if any(os.path.basename(p) == os.path.basename(library) for p in parts):
        return current
    return " ".join(parts + [library])


def merge_environ(current, ours, keep=()):
    """The variables to set so that a process whose environment is current
    (a mapping: the user's) gets ours: LD_PRELOAD appended to current's
    (with_preload), a name in keep left as current has it (the user's
    choice), every other name of ours set over current's, and each value of
    current's that this replaces said in one UserWarning naming both."""
    current = current if current is not None else {}
    merged, replaced = {}, []
    for name, value in ours.items():
        had = current.get(name)
        if name == PRELOAD:
            value = with_preload(had, value)
        elif name in keep and had:
            value = had
        elif had is not None and had != value:
            replaced.append("%s=%s with %s" % (name, had, value))
        merged[name] = value
    if replaced:
        warnings.warn("hpalloc: replaced your " + "; ".join(replaced), UserWarning,
                      stacklevel=caller_level())
    return merged


def caller_level():
    """The warnings.warn stacklevel of the first caller outside this
    package, seen from the caller of this (a warning names the user's line,
    whichever way it came)."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level


def worker_environ(current, knobs, library=None, extra=None, keep=()):
    """merge_environ() of what a worker process whose environment is current
    gets from hpalloc: the knobs as HPALLOC_<KNOB> (checked: one ValueError
    naming every refused one, before anything), extra (more variables of
    hpalloc's, e.g. the adapters), and with library (the preload library's
    path) LD_PRELOAD and Arrow's default pool switched to the system
    allocator, so that Arrow's buffers reach malloc -- unless current names
    a pool (kept: the user chose it).  Names in keep are current's where it
    has them.  The one merge both engines use."""
    ours = knob_environ(knobs)
    ours.update(extra or {})
    if library is not None:
        ours[PRELOAD] = library
        ours[ARROW_POOL] = "system"
    return merge_environ(current, ours, keep=(ARROW_POOL,) + tuple(keep))


def malloc_owner():
    """The file of the shared object whose malloc this process's libraries
    call: the first loaded object (in the dynamic linker's order, LD_PRELOAD's
    first) that defines malloc itself, as the dynamic linker finds it; None
    if it cannot say."""
    import ctypes
    from . import _hpalloc

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    try:
        process = ctypes.CDLL(None)
        dladdr = getattr(process, "dladdr", None) or ctypes.CDLL("libdl.so.2").dladdr
    except (OSError, AttributeError):
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    for path in _hpalloc.loaded_objects():
        try:   # dlsym on an object's handle: its own definition first
            address = ctypes.cast(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).malloc,
                                  ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
        info = DlInfo()
        if dladdr(address, ctypes.byref(info)) and info.fname and \
                os.path.realpath(os.fsdecode(info.fname)) == os.path.realpath(path):
            return path
    return None


# ---- what stats() returns --------------------------------------------------------

def need_pandas(what):
    """pandas, or ImportError saying that what needs it."""
    try:
        import pandas
    except ImportError:
        raise ImportError("%s returns a pandas DataFrame: install pandas (pip install "
                          "pandas) in this interpreter" % what) from None
    return pandas


def table(rows, index, what):
    """rows (dicts) as one pandas DataFrame indexed by the columns index
    names, whatever the rows are (none: an empty one with that index)."""
    pandas = need_pandas(what)
    frame = pandas.DataFrame(rows) if rows else pandas.DataFrame(columns=list(index))
    return frame.set_index(list(index) if len(index) > 1 else index[0])
