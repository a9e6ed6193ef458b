"""`python -m hpalloc ARGS...`, and the `hpctl` and `hpalloc-config` commands
pip installs with hpalloc's wheel.

hpctl (and python -m hpalloc) runs the hpctl installed inside the package,
hpalloc/bin/hpctl, which finds the package's own preload library and Python
package relative to itself: `hpctl run -- python prog.py` and `hpctl run
--preload` from a venv use that venv's hpalloc, whatever else the machine
has.

hpalloc-config says where the wheel's C library and header are, for C, C++
or Cython code built in the environment:

    cc prog.c $(PKG_CONFIG_PATH=$(hpalloc-config --pkgconfigdir) pkg-config --cflags --libs hpalloc)
    cc prog.c $(hpalloc-config --cflags --libs)
"""

import os
import sys

from . import _prefix


def main():
    """hpctl with this command line, in place of this process."""
    hpctl = _prefix.path("bin", "hpctl")
    if hpctl is None:
        sys.exit("hpalloc: this hpalloc package (%s) was installed without hpctl inside it "
                 "(make install or the Debian packages put hpctl on PATH instead): run hpctl"
                 % _prefix.PACKAGE)
    os.execv(hpctl, ["hpctl"] + sys.argv[1:])


CONFIG_USAGE = """usage: hpalloc-config [--pkgconfigdir] [--includedir] [--libdir] [--cflags] [--libs] [--version]
Where hpalloc's C header and library are in this environment (hpalloc's wheel)."""


def config_main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or "-h" in argv or "--help" in argv:
        print(CONFIG_USAGE)
        return 0 if argv else 2
    pc = _prefix.path("lib", "pkgconfig", "hpalloc.pc")
    if pc is None:
        sys.stderr.write("hpalloc-config: this hpalloc package (%s) was installed without its "
                         "C library inside it (make install or the Debian packages: "
                         "pkg-config finds hpalloc.pc under that prefix)\n" % _prefix.PACKAGE)
        return 1
    include, lib = _prefix.path("include"), _prefix.path("lib")
    answers = {"--pkgconfigdir": os.path.dirname(pc), "--includedir": include,
               "--libdir": lib, "--cflags": "-I" + include,
               "--libs": "-L%s -Wl,-rpath,%s -lhpalloc" % (lib, lib),
               "--version": _prefix.version()}
    out = []
    for arg in argv:
        if arg not in answers:
            sys.stderr.write("hpalloc-config: unknown option %s\n%s\n" % (arg, CONFIG_USAGE))
            return 2
        out.append(answers[arg])
    print(" ".join(out))
    return 0


if __name__ == "__main__":
    main()
