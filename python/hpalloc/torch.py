"""hpalloc as PyTorch's CPU allocator (c10).

CPU tensors (torch.empty, the results of operations, ...) get their storage
from c10's CPU allocator.  install() replaces it with hpalloc's (C++
adapter, torch origin: `torch_huge_bytes` in hpalloc.stats()).  Importing
this module imports torch and changes nothing else.

    hpalloc.torch.install()      # tensors allocated from now on, every thread
    hpalloc.torch.uninstall()    # c10's previous allocator back
    hpalloc.torch.installed()

Every storage keeps the deleter it was made with: tensors made under
hpalloc are freed by hpalloc in whichever thread drops them, also after
uninstall(); tensors made before keep c10's.  torch.from_numpy(),
Tensor.numpy() and DLPack share memory without copying, so the last owner
of either side frees the block, once, through its allocator.

install(priority=1): c10 only lets an allocator of at least the slot's
priority replace the current one (its default allocator has 0).  hpalloc
takes 1, so a library registering its own with the default priority at
import does not silently displace it; RuntimeError if a higher one holds
the slot.

The adapter is compiled for c10's Allocator of given releases (a C++
vtable that changes between releases): importing it under another release
is an ImportError that says so, before anything of c10 is touched (serves:
the releases it serves).  hpalloc's wheel builds it against a declaration
of PyTorch 2.13's, 2.14's and 2.15's interface (python/hpalloc/abi/c10.h,
checked against each one's headers), so it needs no PyTorch to build and
PyTorch may be installed after hpalloc; a build against a PyTorch's own
headers (pip install --config-settings=torch-headers=auto) serves that
release (docs/python.md, "PyTorch").  Whatever the version says, the
running libc10's vtables are checked against the compiled ones first: a
different layout is refused too.  `hpctl run --preload` puts tensors on
huge pages under any release.
"""

import importlib.util
import os
import re
import threading

import torch as _torch_module  # c10 loaded and initialised first


def _release(version):
    """'2.13.0+cpu' -> '2.13': c10's allocator interface (a C++ vtable) is
    one release's, patch releases keep it."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m.group(0) if m else version


# A package built without the adapter has no such module (find_spec: an
# import of a missing submodule says only "cannot import name").
if importlib.util.find_spec(__package__ + "._torch") is None:
    raise ImportError(
        "hpalloc.torch is not available: hpalloc was built without its "
        "PyTorch adapter (a wheel or sdist build: no C++ compiler, said in "
        "its configure summary; autotools: configure found no libtorch "
        "headers, or --without-torch; Debian: apt install "
        "python3-hpalloc-torch)"
    )
try:
    from . import _torch
except ImportError as exc:  # the dynamic linker: built for another libc10
    raise ImportError("hpalloc.torch does not load with PyTorch %s (%s): "
                      "rebuild hpalloc against this PyTorch (docs/python.md, "
                      "\"PyTorch\")" % (_torch_module.__version__, exc)) from None


# The releases the module serves ("2.13 2.14 2.15": the declared ABI; a
# build against headers: their TORCH_VERSION).
serves = tuple(_release(r) for r in _torch.built_for.split())
built_for = _torch.built_for

REBUILD = ("build hpalloc against this PyTorch's headers: pip install "
           "--no-build-isolation --config-settings=torch-headers=auto . in a "
           "clone or the sdist (docs/python.md, \"PyTorch\")")


def _other_release():
    if getattr(_torch, "declared_abi", False):
        how = "install torch==%s.* in this environment, or %s" % (serves[-1], REBUILD)
    else:
        how = REBUILD
    return ImportError("hpalloc.torch serves PyTorch %s, this is %s: %s; or %s"
                       % (", ".join(serves), _torch_module.__version__, how,
                          _torch.any_release))


if _release(_torch_module.__version__) not in serves:
    raise _other_release()

# The libc10 PyTorch loaded: the declared-ABI build finds c10's functions in
# it; both builds check its layout (vtables) before anything else.
try:
    _torch.bind(os.path.join(os.path.dirname(_torch_module.__file__), "lib", "libc10.so"))
except ImportError as exc:
    raise ImportError("hpalloc.torch cannot use PyTorch %s: %s; %s (docs/python.md, "
                      "\"PyTorch\")" % (_torch_module.__version__, exc,
                                        _torch.any_release)) from None

__all__ = ["install", "uninstall", "installed", "built_for", "serves"]

_lock = threading.Lock()


def installed():
    """True while c10's CPU allocator is hpalloc's."""
    return _torch.installed()


def install(priority=1):
    """CPU tensors allocated from now on, in every thread, come from
    hpalloc.  Idempotent."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError("priority must be an int in 0..255")
    with _lock:
        _torch.install(priority)


def uninstall():
    """c10's allocator from before install() comes back (unless another
    allocator replaced hpalloc's since: that one stays)."""
    with _lock:
        _torch.uninstall()
