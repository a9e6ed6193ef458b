"""Build of hpalloc's Python package for pip (PEP 517, setuptools).

    pip install ./python          # from the top of a clone, into any environment

What it builds, against what:
  * the extensions, linked with the C library that pkg-config finds
    (libhpalloc is one per process: the preload library, hpctl and this
    package share its registry and its background thread, so the package
    links the installed library rather than carrying a copy);
  * hpalloc._hpalloc against NumPy >= 2 headers (the build requirement),
    for NumPy 1.22 ... 2.x at run time (NPY_TARGET_VERSION in _hpalloc.c);
  * hpalloc._torch against the PyTorch of the environment being installed
    into, when it has one (c10's allocator interface changes between
    releases: the module is for that release, and says so when another one
    imports it).  pip builds in an isolated environment that hides the
    target's packages, so the target interpreter is asked directly;
  * hpalloc._arrow the same way against that environment's pyarrow (its
    headers and libarrow.so.<major>00, C++20 as Arrow's headers want).

The version is AC_INIT's in ../configure.ac, the one place the C library
takes it from; the library pkg-config finds must be that version.
Every reason to stop is one line beginning "hpalloc:".
"""

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP_HINT = ("install the C library first (README command 1: ./autogen.sh && "
              "mkdir -p build && cd build && ../configure && make && make install), "
              "or point PKG_CONFIG_PATH at the directory of its hpalloc.pc")


def stop(message):
    raise SystemExit("hpalloc: " + message)


def package_version():
    """AC_INIT's version (a clone), else the sdist's PKG-INFO."""
    configure_ac = os.path.join(HERE, os.pardir, "configure.ac")
    if os.path.exists(configure_ac):
        with open(configure_ac) as f:
            m = re.search(r"AC_INIT\(\[hpalloc\],\s*\[([^\]]+)\]", f.read())
        if m:
            return m.group(1)
    pkg_info = os.path.join(HERE, "PKG-INFO")
    if os.path.exists(pkg_info):
        with open(pkg_info) as f:
            m = re.search(r"^Version:\s*(\S+)", f.read(), re.M)
        if m:
            return m.group(1)
    stop("cannot tell the version: build from a clone (python/ next to configure.ac)")


def pkg_config(*args):
    try:
        r = subprocess.run(["pkg-config", *args, "hpalloc"], capture_output=True,
                           text=True)
    except FileNotFoundError:
        stop("pkg-config is not installed (Debian: pkg-config); it finds the C "
             "library, libhpalloc: " + SETUP_HINT)
    if r.returncode != 0:
        stop("pkg-config finds no libhpalloc (hpalloc.pc): " + SETUP_HINT)
    return r.stdout.split()


def library(version):
    """Compile and link flags of the libhpalloc of this version."""
    found = pkg_config("--modversion")[0]
    libdir = pkg_config("--variable=libdir")
    if found != version:
        stop("pkg-config finds libhpalloc %s (%s), this package is %s: %s"
             % (found, libdir[0] if libdir else "?", version, SETUP_HINT))
    include_dirs = [f[2:] for f in pkg_config("--cflags-only-I")]
    library_dirs = [f[2:] for f in pkg_config("--libs-only-L")]
    # The extensions find the library where pkg-config found it, whichever
    # prefix that is (ld.so's default paths do not cover most of them).
    return dict(include_dirs=include_dirs, library_dirs=library_dirs,
                runtime_library_dirs=library_dirs, libraries=["hpalloc"])


TORCH_PROBE = r"""
import json, os, sys
try:
    import torch
except Exception as exc:
    print(json.dumps({"absent": "%s: %s" % (type(exc).__name__, exc)}))
    sys.exit(0)
top = os.path.dirname(torch.__file__)
print(json.dumps({
    "version": torch.__version__,
    "include": [d for d in (os.path.join(top, "include"),) if os.path.isdir(d)],
    "libdir": [d for d in (os.path.join(top, "lib"),)
               if os.path.exists(os.path.join(d, "libc10.so"))],
    "cxx11_abi": int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1)),
}))
"""


def target_torch():
    """What the environment being installed into has of PyTorch: its
    interpreter, run without pip's build isolation (PYTHONPATH,
    PYTHONNOUSERSITE), imports torch and says where its headers are."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    try:
        r = subprocess.run([sys.executable, "-c", TORCH_PROBE], env=env,
                           capture_output=True, text=True, timeout=600)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as exc:  # no torch for us then, and say why
        return {"absent": "probing %s failed: %s" % (sys.executable, exc)}


ARROW_PROBE = r"""
import glob, json, os, sys
try:
    import pyarrow
except Exception as exc:
    print(json.dumps({"absent": "%s: %s" % (type(exc).__name__, exc)}))
    sys.exit(0)
libdirs = pyarrow.get_library_dirs()
# the wheel ships libarrow.so.<major>00 only (no unversioned link)
libarrow = sorted(os.path.basename(p) for d in libdirs
                  for p in glob.glob(os.path.join(d, "libarrow.so.*"))
                  if p.rsplit(".so.", 1)[1].isdigit())
print(json.dumps({"version": pyarrow.__version__,
                  "include": pyarrow.get_include(), "libdir": libdirs,
                  "libarrow": libarrow[:1]}))
"""


def target_arrow():
    """The environment's pyarrow, asked as target_torch() asks for torch."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    try:
        r = subprocess.run([sys.executable, "-c", ARROW_PROBE], env=env,
                           capture_output=True, text=True, timeout=600)
        found = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as exc:
        return {"absent": "probing %s failed: %s" % (sys.executable, exc)}
    if "absent" not in found and not found["libarrow"]:
        return {"absent": "no libarrow.so.N in %s" % found["libdir"]}
    return found


def extensions(lib):
    import numpy
    c = dict(lib, extra_compile_args=["-std=gnu11", "-Wall", "-Wextra"])
    exts = [
        Extension("hpalloc._hpalloc", ["hpalloc/_hpalloc.c"],
                  **dict(c, include_dirs=c["include_dirs"] + [numpy.get_include()])),
        Extension("hpalloc._shared", ["hpalloc/_shared.c"], **c),
        Extension("hpalloc._rawdomain", ["hpalloc/_rawdomain.c"], **c),
        Extension("hpalloc._nrt", ["hpalloc/_nrt.c"], **c),
    ]
    exts += arrow_extension(lib)
    torch = target_torch()
    if "absent" in torch:
        print("hpalloc: no PyTorch in %s (%s): building without hpalloc.torch"
              % (sys.prefix, torch["absent"]))
        return exts
    print("hpalloc: building hpalloc.torch for PyTorch %s" % torch["version"])
    exts.append(Extension(
        "hpalloc._torch", ["hpalloc/_torch.cpp"],
        include_dirs=lib["include_dirs"] + torch["include"],
        library_dirs=lib["library_dirs"] + torch["libdir"],
        runtime_library_dirs=lib["runtime_library_dirs"] + torch["libdir"],
        libraries=["hpalloc", "c10"], language="c++",
        extra_compile_args=["-std=c++17", "-Wall", "-Wextra",
                            "-D_GLIBCXX_USE_CXX11_ABI=%d" % torch["cxx11_abi"]]))
    return exts


def arrow_extension(lib):
    arrow = target_arrow()
    if "absent" in arrow:
        print("hpalloc: no pyarrow in %s (%s): building without hpalloc.arrow"
              % (sys.prefix, arrow["absent"]))
        return []
    print("hpalloc: building hpalloc.arrow for pyarrow %s" % arrow["version"])
    return [Extension(
        "hpalloc._arrow", ["hpalloc/_arrow.cpp"],
        include_dirs=lib["include_dirs"],
        library_dirs=lib["library_dirs"] + arrow["libdir"],
        runtime_library_dirs=lib["runtime_library_dirs"] + arrow["libdir"],
        libraries=["hpalloc", "arrow_python", ":" + arrow["libarrow"][0]],
        language="c++",
        # -isystem: Arrow's headers are not ours to warn about
        extra_compile_args=["-std=c++20", "-Wall", "-Wextra",
                            "-isystem", arrow["include"]])]


class BuildExt(build_ext):
    """A PyTorch or pyarrow adapter that does not compile (a release whose
    headers it does not know) leaves the rest installable: hpalloc.torch /
    hpalloc.arrow then says it was not built, and this build said why."""

    def build_extension(self, ext):
        if ext.name not in ("hpalloc._torch", "hpalloc._arrow"):
            return super().build_extension(ext)
        try:
            super().build_extension(ext)
        except Exception as exc:
            print("hpalloc: %s did not build (%s): installing without it"
                  % (ext.name.replace("._", "."), str(exc).splitlines()[0]))


class BuildPy(build_py):
    """hpalloc_activate.py and hpalloc-numpy.pth go next to the package, in
    the site directory itself (HPALLOC_NUMPY=1 at start-up), and the
    start-up hook hpctl run uses goes inside it (hpalloc/_boot)."""

    def run(self):
        super().run()
        for name, into in (("hpalloc-numpy.pth", ""),
                           ("hpalloc/_boot/sitecustomize.py", "hpalloc/_boot")):
            target = os.path.join(self.build_lib, into)
            self.mkpath(target)
            self.copy_file(os.path.join(HERE, name), target)


def build_dirs():
    """setuptools' scratch (build/, *.egg-info) outside the source tree, so
    a clone stays clean and a read-only one builds."""
    scratch = tempfile.mkdtemp(prefix="hpalloc-pip-")
    atexit.register(shutil.rmtree, scratch, True)
    return {"build": {"build_base": os.path.join(scratch, "build")},
            "egg_info": {"egg_base": scratch}}


os.chdir(HERE)
VERSION = package_version()
COMMANDS = ("build", "build_ext", "bdist_wheel", "install", "develop",
            "editable_wheel", "bdist_egg")
needs_build = any(a in COMMANDS for a in sys.argv[1:])
setup(
    version=VERSION,
    packages=["hpalloc"],
    py_modules=["hpalloc_activate"],
    ext_modules=extensions(library(VERSION)) if needs_build else [],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    options=build_dirs(),
    zip_safe=False,
)
