"""hpalloc's start-up hook for `hpctl run` (any install prefix).

`hpctl run` puts this directory (hpalloc/_boot, not a package) first on
PYTHONPATH and sets HPALLOC_NUMPY=1.  .pth files run only in site
directories, but every interpreter imports `sitecustomize` at start-up:
this one activates hpalloc (hpalloc_activate), then runs the sitecustomize
it shadows (Debian has one), if any.

Which hpalloc: the interpreter's own when it has one (a venv or conda
environment with hpalloc's wheel); else the package installed with hpctl, whose directory
hpctl passes in HPALLOC_PYTHON_FALLBACK and which goes last on sys.path, so
it never shadows a package of the interpreter's.  (With HPALLOC_PYTHON_DIR,
hpctl has already put that directory first on PYTHONPATH.)
"""

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _others():
    return [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _fall_back():
    """Append hpctl's package directory when this interpreter has no
    hpalloc_activate of its own."""
    fallback = os.environ.get("HPALLOC_PYTHON_FALLBACK")
    if not fallback:
        return
    fallback = os.path.abspath(fallback)  # as site.py makes PYTHONPATH's
    if fallback in sys.path:
        return
    if importlib.machinery.PathFinder.find_spec("hpalloc_activate", _others()) is None:
        sys.path.append(fallback)


def _chain():
    """Import the next sitecustomize on sys.path, as if we were not here."""
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = _others()
    try:
        import sitecustomize  # noqa: F401  (the shadowed one, if any)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


_fall_back()
try:
    import hpalloc_activate  # noqa: F401  (activates on import)
except ImportError as exc:
    if os.environ.get("HPALLOC_NUMPY"):
        sys.stderr.write("hpalloc: HPALLOC_NUMPY is set but %s (Python %s) cannot "
                         "find hpalloc_activate (%s); the program runs on the "
                         "default allocator\n" % (sys.executable, sys.version.split()[0], exc))
_chain()
