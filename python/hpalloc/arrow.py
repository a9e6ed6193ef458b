"""hpalloc as pyarrow's default memory pool (pandas' Arrow-backed columns).

pyarrow allocates every buffer -- pa.array(), pandas' "int64[pyarrow]" and
pyarrow-backed string columns, compute results, IPC and Parquet reads made
from Python -- from its default memory pool: a jemalloc or mimalloc built
into the wheel, which neither hpalloc's NumPy handler nor its preload
library sees.  install() makes that pool hpalloc's (C++ adapter): requests
of at least the `threshold` knob go to hpalloc's huge path (mode, fallback,
page size: the library's knobs), the others to the pool it replaced, so
small buffers keep its speed.  Importing this module imports pyarrow and
changes nothing else.

    hpalloc.arrow.install()      # buffers allocated from now on
    hpalloc.arrow.uninstall()    # the previous default pool back
    hpalloc.arrow.installed()
    hpalloc.arrow.pool()         # hpalloc's pool, for memory_pool= arguments

Every buffer goes back to the allocator it came from (routed by address),
also after uninstall().  Code that asks for a pool by name
(pa.jemalloc_memory_pool(), pa.system_memory_pool()) or C++ code using
arrow::default_memory_pool() directly keeps that pool: docs/python.md
("pandas and pyarrow") says what stays on small pages.

The adapter serves one Arrow release (a MemoryPool is a C++ vtable of that
release; the libraries are libarrow.so.<major>00): importing it under
another release is an ImportError that says so (built_for: the release it
serves).  It is built against a declaration of that release's ABI
(python/hpalloc/abi/arrow.h, Arrow 26), with no Arrow at build time, so
pyarrow may be installed after hpalloc.  Whatever the version says, the
running libarrow's MemoryPool vtable is checked against the declaration
before anything is swapped.  `hpctl run --preload` puts Arrow's buffers on
huge pages under any release (it selects pyarrow's system pool).
"""

import importlib.util
import os
import re
import threading

import pyarrow as _pyarrow  # libarrow loaded first


def _release(version):
    """'26.0.1' -> '26': Arrow's C++ ABI is one per major release (the
    libarrow.so.2600 SONAME)."""
    m = re.match(r"(\d+)", version)
    return m.group(1) if m else version


# A package built without the adapter has no such module (find_spec: an
# import of a missing submodule says only "cannot import name").
if importlib.util.find_spec(__package__ + "._arrow") is None:
    raise ImportError(
        "hpalloc.arrow is not available: hpalloc was built without its "
        "pyarrow adapter (no C++ compiler, said in configure's summary, or "
        "--without-arrow)"
    )
from . import _arrow  # noqa: E402  (links nothing of Arrow: loads anywhere)

ANY_RELEASE = ("`hpctl run --preload -- COMMAND` puts Arrow buffers on huge pages "
               "under any pyarrow release (docs/python.md, \"pandas and pyarrow\")")

if _release(_arrow.built_for) != _release(_pyarrow.__version__):
    raise ImportError("hpalloc.arrow serves pyarrow %s, this is %s: install "
                      "pyarrow==%s.* in this environment; or %s"
                      % (_release(_arrow.built_for), _pyarrow.__version__,
                         _release(_arrow.built_for), ANY_RELEASE))


def _library(name):
    """The file of one of pyarrow's libraries of this release, as pyarrow
    loaded it (libarrow.so.2600 sits next to pyarrow's modules)."""
    so = "%s.so.%s00" % (name, _release(_pyarrow.__version__))
    for directory in [os.path.dirname(_pyarrow.__file__)] + _pyarrow.get_library_dirs():
        path = os.path.join(directory, so)
        if os.path.exists(path):
            return path
    return so  # the dynamic linker's name: bind() says it is not loaded


try:
    _arrow.bind(_library("libarrow"), _library("libarrow_python"))
except ImportError as exc:
    raise ImportError("hpalloc.arrow cannot use pyarrow %s: %s; %s"
                      % (_pyarrow.__version__, exc, ANY_RELEASE)) from None

__all__ = ["install", "uninstall", "installed", "pool", "built_for"]

built_for = _arrow.built_for

_lock = threading.Lock()


def installed():
    """True while pyarrow's default memory pool is hpalloc's."""
    return _arrow.installed()


def install():
    """Buffers pyarrow allocates from now on, without an explicit
    memory_pool=, come from hpalloc (large ones on huge pages).
    Idempotent.  RuntimeError if the default pool was changed to another
    one after a first install()."""
    with _lock:
        _arrow.install()


def uninstall():
    """The pool install() replaced is the default again (unless another
    pool replaced hpalloc's since: that one stays).  Buffers made under
    hpalloc stay valid."""
    with _lock:
        _arrow.uninstall()


def pool():
    """hpalloc's pool as a pyarrow.MemoryPool (memory_pool= arguments);
    its small requests go to the default pool of the first install() or
    pool() call."""
    with _lock:
        return _arrow.pool()
