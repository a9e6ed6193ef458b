"""The import hook of hpalloc_activate (`hpctl run`, HPALLOC_NUMPY=1) against
the ways programs import NumPy.  Each program runs under `hpctl run --check`
(the build tree's, or in make check-venv the venv's) and must end with
hpalloc as the handler of a large array allocated in its main thread, exit
0, and print no traceback.

Failed on main before the fixes:
  find_spec      importlib.util.find_spec("numpy") (a test for an optional
                 package) consumed the hook: the real import later was not
                 seen, hpalloc never activated, --check exited 1;
  spec_loader    the spec's loader was a wrapper without is_package() /
                 get_filename(): AttributeError in the program;
  thread         NumPy first imported in a worker thread: hpalloc selected in
                 that thread only, the main thread stayed on NumPy's default
                 allocator while --check said it was active."""

import subprocess
import sys
import textwrap

import pytest

from conftest import VENV, hpctl_path, python_env


CASES = {
    "find_spec": """
        import importlib.util
        assert importlib.util.find_spec("numpy") is not None
    """,
    "spec_loader": """
        import importlib.util
        spec = importlib.util.find_spec("numpy")
        assert spec.loader.is_package("numpy")
        assert spec.loader.get_filename("numpy").endswith("__init__.py")
    """,
    "thread": """
        import threading
        t = threading.Thread(target=__import__, args=("numpy",))
        t.start()
        t.join()
    """,
    "submodule": """
        import numpy.linalg
    """,
    "resources": """
        import importlib.resources
        import numpy
        assert importlib.resources.files("numpy").joinpath("__init__.py").is_file()
    """,
}

CHECK = """
import numpy as np
from hpalloc.numpy import get_handler_name
print(get_handler_name(np.zeros(1 << 22)))
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_styles_activate_in_main_thread(case, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(CASES[case]) + CHECK)
    python = sys.executable if VENV else "/usr/bin/python3"
    proc = subprocess.run([hpctl_path(), "run", "--check", "--", python, str(prog)],
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "hpalloc", proc.stdout + proc.stderr
