"""hpalloc under Numba's runtime (NRT).

Arrays created in @njit code (np.empty, np.zeros, the results of array
expressions) are allocated by one NRT function: NRT_MemInfo_alloc_aligned
(Numba >= 0.57), or NRT_MemInfo_alloc_safe_aligned (older Numba, and any
Numba under NUMBA_DEBUG_NRT=1: it fills arrays with debug markers).
install() makes LLVM resolve the one this Numba's code generator uses
(symbol()) to hpalloc's stand-in, which allocates the same MemInfo through
NRT's external-allocator interface with an allocator backed by hpalloc
(numba origin: `numba_huge_bytes` in hpalloc.stats()), with the debug
markers where the replaced function has them and without where it does
not.  Importing this module imports Numba and changes nothing else.

    hpalloc.numba.install()             # code compiled from now on
    hpalloc.numba.uninstall()
    hpalloc.numba.installed()
    hpalloc.numba.external_allocator()  # address of an NRT_ExternalAllocator

Each MemInfo remembers its allocator, so arrays are freed by hpalloc from
any thread, also after uninstall().  Functions compiled before install()
keep calling NRT directly; NRT allocates with PyMem_RawMalloc, which
hpalloc.python puts on hpalloc too (counted as python).  Other NRT memory
(typed lists and dicts, strings) goes through the raw domain as well.

external_allocator() is for extension authors: pass it to
NRT_MemInfo_alloc_safe_aligned_external (Numba exposes its address as
numba.core.runtime._nrt_python.c_helpers
["MemInfo_alloc_safe_aligned_external"]) to put a MemInfo's data on
hpalloc explicitly.
"""

import threading

import llvmlite.binding as _ll
from numba.core.compiler_lock import global_compiler_lock as _compiler_lock
from numba.core.runtime import _nrt_python, nrt as _nrt_module

from . import _nrt

__all__ = ["install", "uninstall", "installed", "external_allocator", "symbol"]

# The NRT function @njit code calls for array data when Numba does not say
# (Numba < 0.57: numba/core/runtime/context.py, meminfo_alloc_aligned) and
# the c_helpers entries the stand-in allocates with.
_SAFE_SYMBOL = "NRT_MemInfo_alloc_safe_aligned"
_HELPER_EXTERNAL = "MemInfo_alloc_safe_aligned_external"
_HELPER_API = "get_api"

_lock = threading.Lock()


def external_allocator():
    """Address (int) of a static NRT_ExternalAllocator backed by hpalloc:
    requests of at least `threshold` bytes on huge pages, smaller ones on
    libc, every block freed by hpalloc."""
    return _nrt.allocator_address()


def installed():
    """True between install() and uninstall()."""
    return _nrt.routing()


def _context():
    """The CPU target's context (made on first use; Numba < 0.57
    initialises its runtime then, later ones at the first compilation)."""
    from numba.core.registry import cpu_target
    return cpu_target.target_context


def _symbol(context):
    """What the code generator asks NRT for: an NRTContext made as
    compilation makes it (not context.nrt: Numba caches that on the
    context, and compilation copies the cache into its NRT-enabled copy)."""
    from numba.core.runtime.context import NRTContext
    api = getattr(NRTContext(context, True), "_meminfo_api", None)  # >= 0.57
    return api.alloc_aligned if api is not None else _SAFE_SYMBOL


def symbol():
    """The NRT function whose calls install() routes to hpalloc: the one
    this Numba's code generator emits for array data."""
    with _compiler_lock:
        return _symbol(_context())


def _helper(symbol):
    return symbol[len("NRT_"):]


def _register_standin():
    _ll.add_symbol(_symbol(_context()), _nrt.standin_address())


def _hook_runtime_initialisation():
    """NRT registers its symbols with LLVM when it initialises (the first
    compilation), overwriting ours: register ours again right after, from
    rtsys.initialize itself, so that install() does not initialise (and
    compile) Numba's runtime ahead of time."""
    rtsys = _nrt_module.rtsys
    if getattr(rtsys.initialize, "_hpalloc", False):
        return
    original = rtsys.initialize

    def initialize(ctx):
        was = rtsys._init
        original(ctx)
        if not was and rtsys._init and _nrt.routing():
            _register_standin()

    initialize._hpalloc = True
    rtsys.initialize = initialize


def install():
    """Arrays created by @njit code compiled from now on are allocated by
    hpalloc.  Idempotent."""
    with _lock, _compiler_lock:
        symbol = _symbol(_context())
        helpers = _nrt_python.c_helpers
        missing = [h for h in (_helper(symbol), _HELPER_EXTERNAL, _HELPER_API)
                   if h not in helpers]
        if missing:
            raise RuntimeError("this Numba's NRT has no %s: hpalloc.numba "
                               "cannot route its arrays" % ", ".join(missing))
        _nrt.bind(helpers[_helper(symbol)], symbol == _SAFE_SYMBOL,
                  helpers[_HELPER_EXTERNAL], helpers[_HELPER_API])
        _nrt.set_routing(True)
        _hook_runtime_initialisation()
        if _nrt_module.rtsys._init:
            _register_standin()


def uninstall():
    """Code compiled from now on calls NRT's own allocation again, and code
    compiled meanwhile stops using hpalloc for new arrays.  Arrays already
    on hpalloc stay valid."""
    with _lock, _compiler_lock:
        if not _nrt.routing():
            return
        _nrt.set_routing(False)
        if _nrt_module.rtsys._init:
            symbol = _symbol(_context())
            _ll.add_symbol(symbol, _nrt_python.c_helpers[_helper(symbol)])
