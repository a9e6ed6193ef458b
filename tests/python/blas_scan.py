"""BLAS and LAPACK through SciPy on matrices across hpalloc's threshold, as a
user's program calls them: the scan of issue 32.

OpenBLAS's complex kernels (zgemv_n, reached from LAPACK's zgesdd and zgelsd
by scipy.linalg.svdvals and lstsq) load up to a column past the end of a
matrix.  Under glibc that read lands in the next mapping; hpalloc must give
it something to read too (the guard after every block, hpalloc(7)).

Run as a script, it works through the cases named on its command line (all
of them without any) and prints one line per case: "CASE <name> <guards>
<json summary of the result>" (guards: see guards()), flushed before the
next case starts, so that a
parent can tell which case a crash cut short.  First it prints "CORE <name>":
the OpenBLAS core type in use (openblas_get_corename), "-" if the BLAS is not
OpenBLAS.  tests/python/test_blas_overread.py runs it under NumPy's default
and under hpalloc and compares.
"""

import ctypes
import json
import sys

OPS = ("svd", "lstsq", "eig", "qr", "solve", "matvec")
DTYPES = ("float64", "complex128")
SIZES = (256, 300, 512, 700)
# "snippet": issue 32's own reproduction, svdvals of hilbert(300) in complex128
CASES = ("snippet",) + tuple("%s-%s-%d" % (op, dt, n) for dt in DTYPES for n in SIZES for op in OPS)

# The core types of issue 32's scan and the CPU flags each needs (forcing one
# the CPU lacks would run instructions it does not have).
CORETYPES = {
    "Sandybridge": {"avx"},
    "Haswell": {"avx2", "fma"},
    "Zen": {"avx2", "fma"},
    "SkylakeX": {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"},
    "Cooperlake": {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"},
}


def supported_coretypes():
    """The core types of CORETYPES this CPU can run."""
    with open("/proc/cpuinfo") as f:
        flags = next((set(line.split(":", 1)[1].split()) for line in f
                      if line.startswith("flags")), set())
    return [name for name, need in CORETYPES.items() if need <= flags]


# openblas_get_corename, as Debian's OpenBLAS and PyPI's scipy-openblas
# (whose symbols carry a prefix) name it
CORENAME_SYMBOLS = ("openblas_get_corename", "scipy_openblas_get_corename")


def corename_function():
    """openblas_get_corename of the OpenBLAS this process loaded, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "openblas" in path.lower() or path.endswith("/libblas.so.3"):
                lib = ctypes.CDLL(path)
                for name in CORENAME_SYMBOLS:
                    if hasattr(lib, name):
                        fn = getattr(lib, name)
                        fn.restype = ctypes.c_char_p
                        return fn
    return None


def corename():
    fn = corename_function()
    return fn().decode() if fn else "-"


def matrix(np, dtype, n):
    import scipy.linalg as sl
    a = sl.hilbert(n) + np.eye(n)
    if dtype == "complex128":
        return a.astype(np.complex128) + 1j * np.tri(n)
    return a


def run_case(case):
    import numpy as np
    import scipy.linalg as sl
    if case == "snippet":
        return [float(x) for x in sl.svdvals(sl.hilbert(300).astype(np.complex128))]
    op, dtype, n = case.split("-")
    a = matrix(np, dtype, int(n))
    b = np.ones(int(n), a.dtype)
    if op == "svd":
        r = sl.svdvals(a)
    elif op == "lstsq":
        r = sl.lstsq(a, b)[0]
    elif op == "eig":
        r = np.sort(np.abs(sl.eigvals(a)))
    elif op == "qr":
        r = np.abs(np.diag(sl.qr(a)[1]))
    elif op == "solve":
        r = sl.solve(a, b)
    else:
        r = a @ b
    r = np.asarray(r)
    return [float(x) for x in np.concatenate([r.real.ravel(), r.imag.ravel()])]


def guards():
    """Mappings of this process that look like hpalloc's guards: 2 MiB,
    anonymous, read-only (or no access), right after a writable anonymous
    mapping (/proc/self/maps).  NumPy's default makes none: 0 says hpalloc
    served no block."""
    n, prev_end, prev_rw = 0, None, False
    with open("/proc/self/maps") as f:
        for line in f:
            w = line.split()
            start, end = (int(x, 16) for x in w[0].split("-"))
            anon = len(w) < 6
            if anon and w[1] in ("r--p", "---p") and end - start == 2 << 20 and prev_rw and prev_end == start:
                n += 1
            prev_end, prev_rw = end, anon and w[1] == "rw-p"
    return n


def main(argv):
    import scipy.linalg  # noqa: F401  (loads the BLAS before CORE is asked)
    print("CORE", corename(), flush=True)
    for case in argv or CASES:
        result = run_case(case)
        print("CASE", case, guards(), json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
