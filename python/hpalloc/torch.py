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
"""

import threading

import torch as _torch_module  # noqa: F401  (c10 loaded and initialised first)

try:
    from . import _torch
except ImportError as exc:  # built with configure --without-torch
    raise ImportError(
        "hpalloc was built without its PyTorch adapter (configure found no "
        "libtorch headers, or --without-torch; Debian: python3-hpalloc-torch): "
        "%s" % exc) from exc

__all__ = ["install", "uninstall", "installed"]

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
