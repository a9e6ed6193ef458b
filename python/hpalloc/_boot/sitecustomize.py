"""hpalloc's start-up hook for `hpctl run` (any install prefix).

`hpctl run` puts this directory (hpalloc/_boot, not a package) first on
PYTHONPATH, followed by the directory holding the hpalloc package, and sets HPALLOC_NUMPY=1.  .pth files
run only in site directories, but every interpreter imports
`sitecustomize` at start-up: this one activates hpalloc (hpalloc_activate),
then runs the sitecustomize it shadows (Debian has one), if any.
"""

import os
import sys


def _chain():
    """Import the next sitecustomize on sys.path, as if we were not here."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path
                   if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the shadowed one, if any)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


try:
    import hpalloc_activate  # noqa: F401  (activates on import)
except ImportError as exc:
    if os.environ.get("HPALLOC_NUMPY"):
        sys.stderr.write("hpalloc: HPALLOC_NUMPY is set but %s (Python %s) cannot "
                         "find hpalloc_activate (%s); the program runs on the "
                         "default allocator\n" % (sys.executable, sys.version.split()[0], exc))
_chain()
