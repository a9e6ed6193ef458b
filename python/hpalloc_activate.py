"""Activation at interpreter start-up: HPALLOC_NUMPY=1 (`hpctl run` sets it).

A top-level module next to the `hpalloc` package, imported -- whatever the
prefix hpalloc was installed to -- by
  * hpalloc-numpy.pth, when that directory is one of the interpreter's site
    directories (.pth files only run there), or
  * hpalloc/_boot/sitecustomize.py, which `hpctl run` puts first on
    PYTHONPATH with this directory (then it runs the sitecustomize it
    shadows).
Importing it runs main() once per process (a second import is a no-op).
It imports `hpalloc` only inside main(), so a package this interpreter
cannot load is reported like any other failure, never as a traceback.

Activation is lazy: each adapter (NumPy's handler, Numba's runtime,
PyTorch's CPU allocator; see ADAPTERS) is installed when the program
imports the module it serves -- at once if that is already imported, else from an
import hook -- so start-up costs no NumPy import and a program imports
NumPy whenever it likes, from whichever thread.  HPALLOC_ADAPTERS
chooses which (default numpy,numba,torch,arrow; CPython's raw domain, "python",
is opt-in and installed at start-up).  Whatever does not take
is said on stderr in one line (and the program runs on); with the
`verbose` knob >= 1 what took is said too.  For `hpctl run --check`,
each outcome also goes to the library's activation report
(hp_report_activation: lib/control/report.c owns its line, its file and when it
is written at all -- never in secure execution).  In secure execution
(setuid, setgid: the library's hp_secure_execution decides) neither
HPALLOC_NUMPY nor HPALLOC_ADAPTERS counts, as no HPALLOC_* variable does.

This module must not import hpalloc (or NumPy) at module level.
"""

import importlib.abc
import importlib.machinery
import os
import site
import sys

_ON = ("1", "yes", "on", "true")
_OFF = ("", "0", "no", "off", "false")

# (adapter, module whose import triggers it -- None: at start-up --,
# installer "module:function").  In this order: the raw domain, when chosen,
# goes first, so everything allocated after start-up can land on it.
ADAPTERS = [
    ("python", None, "hpalloc.python:install"),
    ("numpy", "numpy", "hpalloc.numpy:install"),
    ("numba", "numba", "hpalloc.numba:install"),
    ("torch", "torch", "hpalloc.torch:install"),
    ("arrow", "pyarrow", "hpalloc.arrow:install"),
]

# HPALLOC_ADAPTERS chooses among them (comma-separated names, or "all").
# The raw domain is opt-in: its wrapper stays for the life of the process,
# it covers every bytes/bytearray/list of the program, not only array
# libraries' buffers, and it refuses to go under a running tracemalloc
# (PYTHONTRACEMALLOC) -- a change to the whole interpreter a user asks for.
DEFAULT_ADAPTERS = ("numpy", "numba", "torch", "arrow")



def _interpreter():
    return "%s (Python %s)" % (sys.executable or "python",
                               sys.version.split()[0])


def _report_line(adapter, ok, detail):
    """The line for `hpctl run --check`, written by the library
    (hp_report_activation, lib/control/report.c owns the line, the file's checks
    and secure execution); nothing of it is decided here."""
    write = _report_writer()
    if write is not None:
        try:
            write(adapter, ok, detail)
        except Exception:  # refused (not one word): the program runs on
            pass


# The library's file, for a package that cannot be imported: the wheel's
# copy inside the package (hpalloc/lib, where its extensions find it), else
# the dynamic linker's (make install, the Debian packages).
_LIBRARY = "libhpalloc.so.1"


def _report_writer():
    """hp_report_activation through the package's extension or, when the
    package itself cannot be imported (the failure being reported),
    straight from libhpalloc with ctypes, so that hpctl still learns why;
    None when no libhpalloc with it can be loaded either (then hpctl says
    that no process activated hpalloc, and stderr why)."""
    try:
        from hpalloc import _hpalloc
        return _hpalloc.report_activation
    except Exception:
        pass
    wheel = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hpalloc",
                         "lib", _LIBRARY)
    try:
        import ctypes
        lib = ctypes.CDLL(wheel if os.path.exists(wheel) else _LIBRARY)
        call = lib.hp_report_activation
    except Exception:  # no ctypes, no library, one older than the call
        return None
    call.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    call.restype = ctypes.c_int
    return lambda adapter, ok, detail: call(
        os.fsencode(adapter), 1 if ok else 0, os.fsencode(detail))


def _report(adapter, ok, detail=""):
    _report_line(adapter, ok, detail)
    if not ok:
        sys.stderr.write("hpalloc: HPALLOC_NUMPY=%s but hpalloc is not active "
                         "for %s in %s: %s; the program runs on the default "
                         "allocator\n" % (os.environ.get("HPALLOC_NUMPY", ""),
                                          adapter, _interpreter(), detail))
    elif _verbose() >= 1:
        sys.stderr.write("hpalloc[%d]: active for %s in %s\n"
                         % (os.getpid(), adapter, _interpreter()))


def _verbose():
    try:
        import hpalloc
        return int(hpalloc.config()["verbose"]["value"])
    except Exception:
        return 0


def _install(adapter, installer):
    module, _, function = installer.partition(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception as exc:  # the program must still run
        _report(adapter, False, "%s: %s" % (type(exc).__name__, exc))
    else:
        _report(adapter, True)
        if adapter == "numpy":
            _numpy_in_main_thread()


_pending_calls = []  # ctypes callbacks handed to CPython: kept alive


def _numpy_in_main_thread():
    """NumPy keeps its handler per context (a ContextVar), so install() in
    another thread -- the program imported NumPy there first -- selected
    hpalloc in that thread and in threads started later, not in the main
    thread, where programs allocate most.  The main thread selects it at its
    next bytecode, through a pending call (Py_AddPendingCall: CPython runs
    those in the main thread), unless it chose a handler of its own."""
    import threading
    if threading.current_thread() is threading.main_thread():
        return
    try:
        import ctypes

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        def select(_):
            try:
                hn = sys.modules.get("hpalloc.numpy")
                if hn is not None and hn.installed() and \
                        hn.get_handler_name() == "default_allocator":
                    hn._set_hpalloc_in_this_context()
            except Exception:  # never raise into the main thread
                pass
            return 0

        add = ctypes.pythonapi.Py_AddPendingCall
        add.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        add.restype = ctypes.c_int
        _pending_calls.append(select)
        if add(ctypes.cast(select, ctypes.c_void_p), None) != 0:
            raise RuntimeError("Py_AddPendingCall refused")
    except Exception as exc:
        _report("numpy", False, "NumPy was imported in thread %s, and the main "
                "thread cannot be switched (%s: %s)"
                % (threading.current_thread().name, type(exc).__name__, exc))


class _AfterImport(importlib.abc.Loader):
    """The real loader, then the adapters waiting for this module."""

    def __init__(self, loader, trigger):
        self._loader = loader
        self._trigger = trigger

    def __getattr__(self, name):  # is_package, get_filename... of a spec
        if name == "_loader":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its real loader (importlib.resources & co).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        for adapter, installer in self._trigger.loaded(module.__name__):
            _install(adapter, installer)


class _Trigger(importlib.abc.MetaPathFinder):
    """Spots the first import of a trigger module (sys.meta_path[0]).

    A spec is not an import: importlib.util.find_spec("numpy") (how many
    programs test for an optional package) asks for one and never runs it.
    So the adapters wait until a loader really executes the module."""

    def __init__(self):
        self.pending = {}  # module -> [(adapter, installer)]

    def loaded(self, name):
        """The adapters of name, once: name has just been executed."""
        adapters = self.pending.pop(name, [])
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        return adapters

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AfterImport(spec.loader, self)
        return spec


def _findable(module):
    """Can this interpreter import module?  Looked up on sys.path plus the
    site directories site.py may not have added yet (we may run from a .pth
    file early in start-up), without importing it."""
    if module in sys.modules:
        return True
    search = list(sys.path) + [d for d in site.getsitepackages()
                               if d not in sys.path]
    return importlib.machinery.PathFinder.find_spec(module, search) is not None


def parse_adapters(value):
    """HPALLOC_ADAPTERS' grammar (comma-separated names of ADAPTERS, or
    "all"): the names, or ValueError saying what is expected."""
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    known = [a for a, _, _ in ADAPTERS]
    if names == ["all"]:
        return tuple(known)
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise ValueError("expected a comma-separated list of %s, or all"
                         % " ".join(known))
    return tuple(names)


def _secure_execution():
    """The library's answer (hp_secure_execution): in secure execution no
    HPALLOC_* variable counts, HPALLOC_NUMPY and HPALLOC_ADAPTERS included."""
    from hpalloc import _hpalloc
    return _hpalloc.secure_execution()


def chosen():
    """The adapters HPALLOC_ADAPTERS names (DEFAULT_ADAPTERS when unset).
    A bad value is said on stderr and ignored as a whole (the defaults)."""
    value = None if _secure_execution() else os.environ.get("HPALLOC_ADAPTERS")
    if value is None:
        return DEFAULT_ADAPTERS
    try:
        return parse_adapters(value)
    except ValueError as exc:
        sys.stderr.write("hpalloc: ignoring HPALLOC_ADAPTERS=%r (%s); using %s\n"
                         % (value, exc, ",".join(DEFAULT_ADAPTERS)))
        return DEFAULT_ADAPTERS


def activate(wanted=None):
    """Install the adapters wanted (default: chosen()) now or when their
    module is first imported; the import hook, if one was needed, is
    returned (hpalloc.dask removes it at teardown)."""
    trigger = _Trigger()
    if wanted is None:
        wanted = chosen()
    for adapter, module, installer in ADAPTERS:
        if adapter not in wanted:
            continue
        if module is None or module in sys.modules:
            _install(adapter, installer)
        elif adapter == "numpy" and not _findable(module):
            _report(adapter, False, "NumPy is not installed for this "
                    "interpreter (Debian: python3-numpy for /usr/bin/python3)")
        else:
            trigger.pending.setdefault(module, []).append((adapter, installer))
    if trigger.pending:
        sys.meta_path.insert(0, trigger)
        return trigger
    return None


def main():
    value = os.environ.get("HPALLOC_NUMPY", "")
    choice = value.strip().lower()
    if choice in _OFF:
        return
    if choice not in _ON:
        sys.stderr.write("hpalloc: ignoring HPALLOC_NUMPY=%r (expected 1 or 0)\n"
                         % value)
        return
    try:
        import hpalloc  # noqa: F401  (the package itself, not an adapter)
    except Exception as exc:
        _report("numpy", False, "cannot import hpalloc (%s: %s)"
                % (type(exc).__name__, exc))
        return
    if _secure_execution():
        return  # HPALLOC_NUMPY does not count: the library says so
    activate()


main()
