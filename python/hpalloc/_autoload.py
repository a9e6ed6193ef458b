"""HPALLOC_NUMPY=1: select hpalloc for NumPy at interpreter start.

hpalloc-numpy.pth (installed next to the package) imports this module only
when HPALLOC_NUMPY is set and non-empty, so interpreters without it pay for
one environment lookup and never import NumPy or hpalloc.
"""

import os
import site
import sys

_ON = ("1", "yes", "on", "true")
_OFF = ("", "0", "no", "off", "false")


def _warn(message):
    sys.stderr.write("hpalloc: %s\n" % message)


def _import_numpy():
    """Import NumPy while site.py is still processing .pth files.

    Site directories are added one at a time and .pth files run as their
    directory is added: when ours runs (e.g. from /usr/local/.../dist-packages
    or the user site), the directory holding NumPy (/usr/lib/python3/
    dist-packages on Debian) may not be on sys.path yet.  Borrow the site
    directories site.py is about to add, in its order, import NumPy, and give
    them back so site.py adds them (and runs their .pth files) as usual."""
    borrowed = [d for d in site.getsitepackages()
                if d not in sys.path and os.path.isdir(d)]
    sys.path.extend(borrowed)
    try:
        import numpy  # noqa: F401
    finally:
        for d in borrowed:
            if d in sys.path:
                sys.path.remove(d)


def main():
    value = os.environ.get("HPALLOC_NUMPY", "")
    choice = value.strip().lower()
    if choice in _OFF:
        return
    if choice not in _ON:
        _warn("ignoring HPALLOC_NUMPY=%r (expected 1 or 0)" % value)
        return
    try:
        _import_numpy()
        from hpalloc import numpy as hpalloc_numpy
        hpalloc_numpy.install()
    except Exception as exc:  # the program must still start
        _warn("HPALLOC_NUMPY=%s but hpalloc could not be installed for "
              "NumPy (%s: %s); NumPy uses its default allocator"
              % (value, type(exc).__name__, exc))
