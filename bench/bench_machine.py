"""What the benches say about the machine and the Python stack they ran on
(bench/numpy_bench.py, bench/dask_bench.py): /proc and /sys facts, and the
versions of the modules an interpreter imports, and which package brings a
missing one.  Reads only; no threads."""

import json
import subprocess
import sys

PAGE_REPORTING = "/sys/module/page_reporting/parameters/page_reporting_order"

# module -> (pip, Debian): the package that brings a module the benches
# import, for the line that says how to get a missing one
PACKAGES = {"numpy": ("numpy", "python3-numpy"), "pandas": ("pandas", "python3-pandas"),
            "scipy": ("scipy", "python3-scipy"), "sklearn": ("scikit-learn", "python3-sklearn"),
            "numba": ("numba", "python3-numba"), "torch": ("torch", "python3-torch"),
            "dask.array": ("'dask[array]'", "python3-dask"),
            "dask.dataframe": ("'dask[dataframe]'", "python3-dask"),
            "distributed": ("distributed", "python3-distributed")}


def first_line_with(path, key):
    """The value after the colon of path's first line starting with key
    (/proc/cpuinfo, /proc/meminfo), or "?"."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def page_reporting_order():
    """The VM's free page reporting order, or None where the kernel does
    not report free pages to a host (no page_reporting module)."""
    try:
        with open(PAGE_REPORTING) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def in_venv():
    return sys.prefix != sys.base_prefix


def interpreter_where(python=sys.executable):
    """Whose Python stack a report is about: a venv's (PyPI) or the system's."""
    return "venv %s (PyPI)" % sys.prefix if in_venv() else "%s (system)" % python


def memory_gib():
    """The machine's memory, GiB (MemTotal)."""
    return int(first_line_with("/proc/meminfo", "MemTotal").split()[0]) / (1 << 20)


def stack_versions(modules, python=sys.executable):
    """module -> version, for the modules that python imports (in a process
    of its own: importing them here would change what the bench measures)."""
    code = ("import importlib, json\n"
            "v = {}\n"
            "for m in %r:\n"
            "    try:\n"
            "        v[m] = importlib.import_module(m).__version__\n"
            "    except Exception:\n"
            "        pass\n"
            "print(json.dumps(v))\n" % (tuple(modules),))
    out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout
    try:
        return json.loads(out)
    except ValueError:
        return {}
