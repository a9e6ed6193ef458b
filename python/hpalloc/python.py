"""hpalloc under CPython's raw memory domain (PYMEM_DOMAIN_RAW).

Everything Python allocates above pymalloc's 512-byte limit goes through the
raw domain: bytes, bytearray, pickle and io buffers (so the data of NumPy
arrays unpickled with protocol <= 4, which reference the pickle's bytes),
list item arrays, and Numba's runtime.  Importing this module changes
nothing.  Then:

    hpalloc.python.install()     # requests >= threshold on huge pages
    hpalloc.python.uninstall()   # new requests back to the previous allocator
    hpalloc.python.installed()

install() wraps the interpreter's raw allocator once, as tracemalloc does.
Frees and reallocs are routed by address, so memory allocated before
install(), or by the previous allocator below the threshold, stays valid.
The wrapper stays in place after uninstall() as a router: blocks hpalloc
handed out may be freed at any time until the process ends.

tracemalloc: start it after install() (it then wraps hpalloc and traces
everything, and tracemalloc.stop() puts hpalloc back).  install() refuses
while tracemalloc is tracing without hpalloc underneath: tracemalloc.stop()
would then restore the allocator it saved, dropping hpalloc's router while
hpalloc blocks are alive.
"""

import threading

from . import _rawdomain

__all__ = ["install", "uninstall", "installed"]

_lock = threading.Lock()


def installed():
    """True between install() and uninstall()."""
    return _rawdomain.installed()


def install():
    """Put raw-domain requests of at least `threshold` bytes on hpalloc,
    for every thread, from now on.  Idempotent.

    RuntimeError (nothing changed) if tracemalloc is tracing and hpalloc's
    wrapper is not already beneath it."""
    import tracemalloc
    with _lock:
        if not _rawdomain.wrapped() and tracemalloc.is_tracing():
            raise RuntimeError(
                "hpalloc.python.install(): tracemalloc is tracing; "
                "tracemalloc.stop() would remove hpalloc's allocator while "
                "its blocks are alive. Call install() before "
                "tracemalloc.start() (or stop tracemalloc first)")
        _rawdomain.install()


def uninstall():
    """New raw-domain requests go to the previous allocator again.  Blocks
    already on hpalloc stay valid and are freed by hpalloc."""
    with _lock:
        _rawdomain.uninstall()
