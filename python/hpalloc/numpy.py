"""hpalloc as NumPy's data-memory handler (NEP 49).

Importing this module changes nothing.  Then:

    hpalloc.numpy.install()         # this thread and threads started later
    hpalloc.numpy.uninstall()       # back to the previous handler
    with hpalloc.numpy.enabled():   # this context only (thread, asyncio task)
        ...
    a = hpalloc.numpy.zeros((1 << 27,), pagesize="1G")   # on 1 GiB pages
    b = hpalloc.numpy.zeros((1 << 27,), numa="bind:0")   # on node 0
    with hpalloc.numpy.enabled(numa="interleave"):       # placed, this context
        ...
    hpalloc.numpy.backing(a)        # backend, page size, huge bytes (smaps),
                                    # placement and pages per node (numa_maps);
                                    # also bytes, tensors, any buffer

The handler is named "hpalloc", version 1.  Its functions are the library's
NEP 49 entry points; the handler objects are immortal, so arrays made under
hpalloc stay valid and are freed correctly after uninstall(), in any thread.

NumPy keeps the current handler in a ContextVar, and a new thread starts
with an empty context (the default handler).  install() therefore also hooks
thread start-up (threading.Thread, hence concurrent.futures pools) so that
threads started after install() use hpalloc too.  Threads that were already
running keep their handler.
"""

import contextlib
import contextvars
import operator as _operator
import os as _os
import sys as _sys
import threading

import numpy as _np

from . import _hpalloc


def _check_built_for_this_numpy():
    """A module built against NumPy 1.x headers cannot load into NumPy 2.x
    (NumPy's C ABI 2); one built against 2.x headers (the wheel, with
    NPY_TARGET_VERSION 1.22) serves 1.22 and later.  Say which package to
    rebuild, in one line, instead of import_array()'s traceback."""
    built = _hpalloc.NUMPY_ABI_VERSION >> 24
    have = getattr(_np, "__version__", "0")
    try:
        major = int(have.split(".")[0])
    except ValueError:
        return
    if major <= built:
        return
    where = _os.path.dirname(_os.path.abspath(_hpalloc.__file__))
    if where.startswith(_os.path.join(_os.path.realpath(_sys.prefix), "")):
        what = "reinstall this environment's hpalloc (pip install --force-reinstall hpalloc"
    elif where.startswith("/usr/lib/python3/"):
        what = ("python3-hpalloc serves Debian's python3 and its NumPy; give this "
                "environment its own (pip install hpalloc")
    else:
        what = "give this environment its own hpalloc (pip install hpalloc"
    raise ImportError(
        "hpalloc's NumPy extension in %s was built for NumPy %d.x and this "
        "interpreter (%s) has NumPy %s: %s, the wheel, or `pip install .` in a "
        "clone; see docs/python.md)" % (where, built, _sys.executable, have, what))


_check_built_for_this_numpy()

try:  # NumPy 2.x
    from numpy._core.multiarray import get_handler_name, get_handler_version
except ImportError:  # NumPy 1.22 - 1.26
    try:
        from numpy.core.multiarray import get_handler_name, get_handler_version
    except ImportError:
        raise ImportError("NumPy %s is too old for hpalloc: its data-memory "
                          "handler (NEP 49) needs NumPy >= 1.22"
                          % getattr(_np, "__version__", "?")) from None

__all__ = ["install", "uninstall", "installed", "enabled", "empty", "zeros",
           "backing", "get_handler_name", "get_handler_version",
           "shared_empty", "shared_zeros", "is_shared",
           "HANDLER_NAME", "HANDLER_VERSION"]

HANDLER_NAME = _hpalloc.HANDLER_NAME        # the C handler's, as NumPy reports it
HANDLER_VERSION = _hpalloc.HANDLER_VERSION

_lock = threading.Lock()
_installed = False
_previous = None              # handler capsule replaced by install()
_original_bootstrap = None    # threading.Thread._bootstrap_inner before us


def installed():
    """True between install() and uninstall()."""
    return _installed


def _set_hpalloc_in_this_context():
    _hpalloc.set_handler(_hpalloc.handler())


def _bootstrap_inner_with_hpalloc(self):
    """Thread start-up: select hpalloc before the thread runs any code."""
    if _installed:
        try:
            context = getattr(self, "_context", None)
            if isinstance(context, contextvars.Context):
                # Python >= 3.14 runs Thread.run() inside self._context.
                context.run(_set_hpalloc_in_this_context)
            else:
                _set_hpalloc_in_this_context()
        except Exception:  # never prevent a thread from starting
            pass
    _original_bootstrap(self)


def _hook_threads():
    global _original_bootstrap
    current = threading.Thread._bootstrap_inner
    if current is _bootstrap_inner_with_hpalloc:
        return
    _original_bootstrap = current
    threading.Thread._bootstrap_inner = _bootstrap_inner_with_hpalloc


def _unhook_threads():
    # If someone wrapped our hook since, leave theirs in place: ours is a
    # pass-through while not installed.
    if threading.Thread._bootstrap_inner is _bootstrap_inner_with_hpalloc:
        threading.Thread._bootstrap_inner = _original_bootstrap


def install():
    """Use hpalloc for every NumPy array allocated from now on, in this
    thread (this context) and in threads started afterwards.  Idempotent."""
    global _installed, _previous
    with _lock:
        previous = _hpalloc.set_handler(_hpalloc.handler())
        if not _installed:
            _previous = previous
            _installed = True
            _hook_threads()


def uninstall():
    """Restore the handler that install() replaced (in the calling context)
    and stop selecting hpalloc in new threads.  Arrays allocated under
    hpalloc stay valid."""
    global _installed, _previous
    with _lock:
        if not _installed:
            return
        _installed = False
        _unhook_threads()
        previous, _previous = _previous, None
        _hpalloc.set_handler(previous)


def _handler(pagesize, numa=None):
    if numa is not None:
        if not isinstance(numa, str):
            raise TypeError("numa must be a policy string like \"bind:0\", not %s"
                            % type(numa).__name__)
        return _hpalloc.numa_handler(numa, pagesize)
    if pagesize is None:
        return _hpalloc.handler()
    return _hpalloc.pagesize_handler(pagesize)


@contextlib.contextmanager
def enabled(pagesize=None, numa=None):
    """hpalloc for arrays allocated inside the block, in this context only
    (this thread / this asyncio task); the previous handler comes back on
    exit, also on exceptions.  pagesize ("2M", "1G"): force hugetlb pages
    of that size regardless of the threshold and mode knobs.  numa (a value
    of the numa knob: "bind:0", "interleave", "preferred:1", "local",
    "default"): place the huge blocks made here by that policy whatever the
    knob says.  An invalid value raises ValueError saying why, before
    anything changes."""
    previous = _hpalloc.set_handler(_handler(pagesize, numa))
    try:
        yield
    finally:
        _hpalloc.set_handler(previous)


def empty(shape, dtype=float, order="C", *, pagesize="2M", numa=None):
    """np.empty on hugetlb pages of pagesize (None: as the knobs say),
    whatever the threshold, placed by numa (see enabled()).  The pool being
    short is handled by the `fallback` knob (MemoryError with
    fallback=fail)."""
    with enabled(pagesize, numa):
        return _np.empty(shape, dtype=dtype, order=order)


def zeros(shape, dtype=float, order="C", *, pagesize="2M", numa=None):
    """np.zeros on hugetlb pages of pagesize (None: as the knobs say),
    whatever the threshold, placed by numa (see enabled())."""
    with enabled(pagesize, numa):
        return _np.zeros(shape, dtype=dtype, order=order)


def _data_owner(arr):
    """The ndarray that owns arr's memory (arr itself, or the end of its
    chain of ndarray bases), or None when the memory is not an ndarray's
    (a buffer, mmap, ...)."""
    while not arr.flags.owndata:
        base = arr.base
        if not isinstance(base, _np.ndarray):
            return None
        arr = base
    return arr


def _address(arr):
    return arr.__array_interface__["data"][0]


def _as_ndarray(obj):
    """An ndarray viewing obj's memory, never a copy: ndarrays (Numba's
    included) as they are, then the array interface, the buffer protocol
    (bytes, bytearray, memoryview, mmap, array.array), DLPack (a PyTorch
    CPU tensor).  TypeError when obj exposes its memory none of these ways
    (torch.Tensor.numpy() and DLPack refuse tensors that require grad:
    pass tensor.detach())."""
    if isinstance(obj, _np.ndarray):
        return obj
    if hasattr(obj, "__array_interface__"):
        return _np.asarray(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        pass
    else:
        return _np.asarray(view)
    if hasattr(obj, "__dlpack__"):
        try:
            return _np.from_dlpack(obj)
        except (RuntimeError, BufferError, TypeError) as exc:
            raise TypeError("backing(): %s refuses DLPack export (%s)"
                            % (type(obj).__name__, exc)) from exc
    raise TypeError("backing(): %s exposes no memory (no array interface, "
                    "buffer protocol or DLPack)" % type(obj).__name__)


_NOT_HPALLOC = {"backend": None, "usable_size": None, "mapping_size": None,
                "requested_page_size": None}


# ---- shared arrays: one block of huge pages, several processes ------------------
#
# The array's memory is an hpalloc shared block (a memfd: hugetlb pages when
# the pool can hold it, else the `fallback` knob decides), owned by a
# SharedBlock at the end of the array's base chain.  multiprocessing sends
# such arrays -- and views of them -- by descriptor (ForkingPickler: Pool
# arguments, Process arguments under spawn/forkserver, Queue, Pipe), the way
# it sends sockets: the receiver maps the same pages.  Any other pickling
# (pickle.dumps, a file) copies the data as for any array.


def _shared_block(arr):
    """The SharedBlock under arr's memory, or None."""
    from ._shared import SharedBlock
    obj = arr
    while obj is not None:
        if isinstance(obj, SharedBlock):
            return obj
        obj = getattr(obj, "base", None) if isinstance(obj, _np.ndarray) else \
            getattr(obj, "obj", None) if isinstance(obj, memoryview) else None
    return None


def is_shared(arr):
    """True if arr's memory is an hpalloc shared block."""
    return isinstance(arr, _np.ndarray) and _shared_block(arr) is not None


def _pagesize_bytes(pagesize):
    if pagesize is None:
        return 0
    return _hpalloc.parse_size(pagesize) if isinstance(pagesize, str) else int(pagesize)


def _shape_tuple(shape):
    """shape as np.empty takes it (an integer or a sequence of integers,
    NumPy's too), checked: a negative size would reach frombuffer() as
    count=-1, "the whole block"."""
    try:
        shape = (_operator.index(shape),)
    except TypeError:
        shape = tuple(_operator.index(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError("negative dimensions are not allowed")
    return shape


def shared_empty(shape, dtype=float, order="C", pagesize=None):
    """An uninitialised array on an hpalloc shared block that multiprocessing
    passes to other processes by descriptor.  pagesize ("2M", "1G", None =
    the knobs): hugetlb pages of that size; a short pool goes by the
    `fallback` knob (MemoryError with fallback=fail)."""
    from ._shared import SharedBlock
    _register_reducers()
    dtype = _np.dtype(dtype)
    shape = _shape_tuple(shape)
    count = 1
    for n in shape:
        count *= int(n)
    block = SharedBlock(max(count * dtype.itemsize, 1), _pagesize_bytes(pagesize))
    flat = _np.frombuffer(block, dtype=dtype, count=count)
    return flat.reshape(shape, order=order)


def shared_zeros(shape, dtype=float, order="C", pagesize=None):
    """shared_empty(), zeroed (a new shared block is zero already)."""
    return shared_empty(shape, dtype, order, pagesize)


def _rebuild_block(dup):
    import os
    from ._shared import SharedBlock
    _register_reducers()
    fd = dup.detach()
    try:
        return SharedBlock.from_fd(fd)
    finally:
        os.close(fd)


def _reduce_block(block):
    from multiprocessing.reduction import DupFd
    return _rebuild_block, (DupFd(block.fd),)


def _rebuild_array(block, offset, shape, strides, dtype, writeable):
    arr = _np.ndarray(shape, dtype=dtype, buffer=block, offset=offset, strides=strides)
    arr.flags.writeable = writeable
    return arr


def _reduce_array(arr):
    block = _shared_block(arr)
    if block is None:
        return arr.__reduce_ex__(4)  # what multiprocessing does for any array
    offset = _address(arr) - block.address
    return _rebuild_array, (block, offset, arr.shape, arr.strides, arr.dtype,
                            bool(arr.flags.writeable))


_reducers_registered = False


def _register_reducers():
    """Teach multiprocessing (only) to send shared arrays by descriptor."""
    global _reducers_registered
    if _reducers_registered:
        return
    from multiprocessing.reduction import ForkingPickler
    from ._shared import SharedBlock
    ForkingPickler.register(SharedBlock, _reduce_block)
    ForkingPickler.register(_np.ndarray, _reduce_array)
    _reducers_registered = True


def backing(obj):
    """Where the data of obj (an ndarray, or any buffer: bytes, bytearray,
    memoryview, a PyTorch CPU tensor, a Numba array) lives: {"handler",
    "backend", "usable_size", "mapping_size", "requested_page_size",
    "kernel_page_size", "rss_bytes", "anon_huge_bytes", "hugetlb_bytes",
    "huge_bytes", "thp_eligible", "numa_policy", "numa_kernel_policy",
    "numa_node_pages", "numa_page_size"}.

    The kernel_* / *_bytes fields are what /proc/self/smaps reports;
    numa_kernel_policy ("bind:0", "interleave:0-1", "prefer:0", "local",
    "default") and numa_node_pages ({node: pages of numa_page_size bytes})
    what /proc/self/numa_maps reports; numa_policy is the placement hpalloc
    gave the block (None for memory it did not map).
    "handler" is the NumPy handler of the ndarray owning the memory, None
    when no ndarray owns it.  The block fields describe the hpalloc block
    holding the data: one of an hpalloc NumPy array, or any huge block
    (the raw domain's, PyTorch's, Numba's); for other memory they are None
    and the kernel fields cover obj's own bytes.  For an array on a shared
    block, "shared" describes that block too."""
    arr = _as_ndarray(obj)
    block = _shared_block(arr)
    if block is not None:
        info = _hpalloc.backing(_address(arr))  # the library knows shared blocks
        info["handler"] = None
        info["shared"] = block.info()
        return info
    owner = _data_owner(arr)
    handler = get_handler_name(owner) if owner is not None else None
    if handler == HANDLER_NAME:
        # The owner's pointer is the block's start, which the library can
        # look up for every backend (views may point inside the block).
        info = _hpalloc.backing(_address(owner))
    else:
        # Memory no hpalloc array owns may still sit in a huge block of
        # hpalloc's (a bytes object from the raw domain, a tensor, an NRT
        # array): the library finds the block containing the address.
        info = _hpalloc.backing(_address(arr)) if arr.nbytes else {"backend": "small"}
        if info["backend"] == "small":  # not in a huge block of hpalloc's
            info = dict(_NOT_HPALLOC)
            info.update(_hpalloc.kernel_backing(_address(arr),
                                                max(arr.nbytes, 1)))
    info["handler"] = handler
    return info
