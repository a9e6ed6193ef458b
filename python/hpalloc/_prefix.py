"""Where the C side of hpalloc is when it was installed inside the package
(hpalloc's wheel: the package directory is the prefix of hpctl, libhpalloc,
its preload library, hpalloc.h and hpalloc.pc)."""

import os
import re

PACKAGE = os.path.dirname(os.path.abspath(__file__))


def path(*parts):
    """PACKAGE/parts... when that exists, else None (make install and the
    Debian packages install the C side under their own prefix)."""
    p = os.path.join(PACKAGE, *parts)
    return p if os.path.exists(p) else None


def version():
    """The version of the C library inside the package (its hpalloc.pc)."""
    pc = path("lib", "pkgconfig", "hpalloc.pc")
    with open(pc) as f:
        m = re.search(r"^Version:\s*(\S+)", f.read(), re.M)
    return m.group(1) if m else "unknown"
