#!/bin/bash
# The wheel as a new user without root meets it (issue 33, "Done when"):
# copied to a fresh venv of an unprivileged user (nobody), in a mount
# namespace where no other libhpalloc, hpctl or hpalloc package and no
# compiler is visible, without XDG_RUNTIME_DIR (tests/wheel/isolate.sh):
#   - pip installs the wheel, then NumPy, then PyTorch and pyarrow (after
#     hpalloc: their adapters need neither at build time);
#   - `hpctl run -- python prog.py` puts a 256 MiB np.ones, a 256 MiB
#     torch.ones and a 256 MiB Arrow buffer on huge pages per
#     /proc/self/smaps, through hpalloc (NumPy's handler, the torch and api
#     origins' counters, pyarrow's default pool), where the same program
#     without hpctl run has the tensor on small pages and none of them on
#     hpalloc; every hpalloc file the process maps is the venv's;
#   - `hpctl stats` lists that process;
#   - `hpctl run --preload` puts a 256 MiB malloc on huge pages with the
#     venv's libhpalloc-preload.so, and `python -m hpalloc` is the venv's hpctl;
#   - an interpreter without hpalloc of its own (Debian's python3) run by
#     the venv's `hpctl run` gets the wheel's package (hpctl finds it
#     relative to itself).
# It prints how long each step took.
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

fresh_user_home
cat >"$user_home/prog.py" <<'EOF'
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["HOME"], "testlib"))
from hp_memory import settled_huge_bytes as huge_bytes, smaps
import numpy as np
import pyarrow as pa
import torch

MiB = 1 << 20
def hpalloc_stats():  # hpalloc's counters, when hpalloc is active
    return sys.modules["hpalloc"].stats() if "hpalloc" in sys.modules else {}
a = np.ones(256 * MiB // 8)
t = torch.ones(256 * MiB // 4)
b = pa.allocate_buffer(256 * MiB)
np.frombuffer(b, dtype=np.uint8)[:] = 1  # touched, as a column would be
print("numpy_huge", huge_bytes(a.ctypes.data, a.nbytes))
print("torch_huge", huge_bytes(t.data_ptr(), t.nbytes))
print("arrow_huge", huge_bytes(b.address, b.size))
print("arrow_pool", pa.default_memory_pool().backend_name)
print("arrow_origin", hpalloc_stats().get("api_huge_bytes", 0))
hp = sys.modules.get("hpalloc.numpy")
print("numpy_handler", hp.get_handler_name(a) if hp else "none")
print("torch_origin", hpalloc_stats().get("torch_huge_bytes", 0))
print("mapped", " ".join(sorted({e["path"] for e in smaps() if "hpalloc" in e["path"]})))
sys.stdout.flush()
if len(sys.argv) > 1:  # stay, for hpctl stats
    open(sys.argv[1], "w").close()
    time.sleep(60)
EOF
cat >"$user_home/job.sh" <<'EOF'
set -u
cd "$HOME"
say() { echo "$@"; }
t() { local what=$1 s=$SECONDS; shift; "$@"; local rc=$?; say "time $what $((SECONDS - s)) s"; return $rc; }
# the isolation itself
for c in cc gcc c++ g++ clang cpp; do
	! command -v "$c" >/dev/null || { say "FAIL compiler $c at $(command -v "$c")"; exit 1; }
done
/usr/bin/python3 -c 'import hpalloc' 2>/dev/null && { say "FAIL system python imports hpalloc"; exit 1; }
[ -z "${XDG_RUNTIME_DIR:-}" ] || { say "FAIL XDG_RUNTIME_DIR is set"; exit 1; }
for f in $(/sbin/ldconfig -p | awk '/hpalloc/ {print $NF}'); do
	[ ! -e "$f" ] || { say "FAIL $f is visible"; exit 1; }
done
say "isolated $(id -un) PATH=$PATH"
start=$SECONDS
t venv /usr/bin/python3 -m venv venv || exit 1
t wheel pip install -q --no-cache-dir ./hpalloc-*.whl || exit 1
command -v hpctl >/dev/null && [ "$(command -v hpctl)" = "$HOME/venv/bin/hpctl" ] ||
	{ say "FAIL hpctl on PATH: $(command -v hpctl)"; exit 1; }
t numpy pip install -q --no-cache-dir numpy || exit 1
t torch pip install -q --no-cache-dir torch==2.13.0 || exit 1
t pyarrow pip install -q --no-cache-dir 'pyarrow==26.*' || exit 1
say "time setup-total $((SECONDS - start)) s"
# without hpalloc: the control
python prog.py > plain.out 2> plain.err || { say "FAIL plain run: $(cat plain.err)"; exit 1; }
# with hpctl run, and hpctl stats while it runs
rm -f ready
s=$SECONDS
hpctl run -- python prog.py "$HOME/ready" > run.out 2> run.err &
pid=$!
for _ in $(seq 600); do [ -e ready ] && break; sleep 0.1; done
[ -e ready ] || { say "FAIL hpctl run: no result: $(cat run.err)"; kill $pid; exit 1; }
say "time hpctl-run-to-result $((SECONDS - s)) s"
hpctl stats > stats.out 2> stats.err; echo "$?" > stats.rc
say "prog_pid $pid" # hpctl run execs the command
kill $pid 2>/dev/null; wait $pid 2>/dev/null
# --preload: a plain malloc of the same interpreter
hpctl run --preload -- python -c '
import ctypes, os, sys
sys.path.insert(0, os.path.join(os.environ["HOME"], "testlib"))
from hp_memory import settled_huge_bytes as huge_bytes, smaps
n = 256 << 20
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
p = libc.malloc(n)
ctypes.memset(p, 1, n)
print("preload_huge", huge_bytes(p, n))
print("preload_mapped", " ".join(sorted({e["path"] for e in smaps() if "hpalloc" in e["path"]})))
' > preload.out 2> preload.err || { say "FAIL hpctl run --preload: $(cat preload.err)"; exit 1; }
python -m hpalloc --version > module.out 2> module.err || { say "FAIL python -m hpalloc: $(cat module.err)"; exit 1; }
# an interpreter with no hpalloc of its own: the wheel's package, found by hpctl
hpctl run -- /usr/bin/python3 -c 'import hpalloc; print("fallback", hpalloc.__file__)' > fallback.out 2> fallback.err ||
	{ say "FAIL hpctl run of /usr/bin/python3: $(cat fallback.err)"; exit 1; }
say "done"
EOF
chown nobody:nogroup "$user_home"/*.py "$user_home"/job.sh

run as_fresh_user bash "$user_home/job.sh"
printf '%s\n' "$out"
[ "$rc" = 0 ] || fail "the fresh user's job failed ($rc): $(printf '%s\n' "$out" | grep FAIL) $err"
contains "$out" "isolated nobody" "the job ran as nobody in the namespace"
venv=$user_home/venv
site=$(ls -d "$venv"/lib/python3*/site-packages)
field() { sed -n "s/^$1 //p" "$user_home/$2"; }
for f in plain.out run.out preload.out module.out fallback.out; do
	echo "--- $f"
	cat "$user_home/$f"
done
MiB=$((1 << 20))

# without hpalloc: NumPy 2 madvises its own large arrays, PyTorch does not
[ "$(field torch_huge plain.out)" -lt $((16 * MiB)) ] ||
	fail "torch.ones is on huge pages without hpalloc: the test cannot tell ($(cat "$user_home/plain.out"))"
# (NumPy 2 and pyarrow's mimalloc give their own large blocks huge pages:
# what says hpalloc has them under hpctl run is its handler and counters)
[ "$(field numpy_handler plain.out)" = none ] && [ "$(field arrow_pool plain.out)" != hpalloc ] ||
	fail "hpalloc active without hpctl run: $(cat "$user_home/plain.out")"
ok
# with hpctl run: both on huge pages, through hpalloc
[ "$(field numpy_huge run.out)" -ge $((128 * MiB)) ] ||
	fail "np.ones not on huge pages under hpctl run: $(cat "$user_home/run.out") $(cat "$user_home/run.err")"
[ "$(field numpy_handler run.out)" = hpalloc ] || fail "NumPy's handler is not hpalloc: $(cat "$user_home/run.out")"
ok
[ "$(field torch_huge run.out)" -ge $((128 * MiB)) ] ||
	fail "torch.ones not on huge pages under hpctl run: $(cat "$user_home/run.out") $(cat "$user_home/run.err")"
[ "$(field torch_origin run.out)" -ge $((256 * MiB)) ] ||
	fail "hpalloc did not count the tensor (torch_huge_bytes): $(cat "$user_home/run.out")"
ok
[ "$(field arrow_huge run.out)" -ge $((128 * MiB)) ] ||
	fail "the Arrow buffer is not on huge pages under hpctl run: $(cat "$user_home/run.out") $(cat "$user_home/run.err")"
[ "$(field arrow_pool run.out)" = hpalloc ] || fail "pyarrow's default pool is not hpalloc's: $(cat "$user_home/run.out")"
[ "$(field arrow_origin run.out)" -ge $((256 * MiB)) ] ||
	fail "hpalloc did not count the Arrow buffer (api_huge_bytes): $(cat "$user_home/run.out")"
ok
for f in $(field mapped run.out) $(field preload_mapped preload.out); do
	case $f in "$site"/*) ;; *) fail "the process mapped an hpalloc file outside the venv: $f" ;; esac
done
[ "$(field mapped run.out | tr ' ' '\n' | grep -cE '/libhpalloc\.so\.1(\.[0-9]+)*$')" = 1 ] ||
	fail "not one libhpalloc.so.1: $(field mapped run.out)"
ok
# --preload from the venv
contains "$(field preload_mapped preload.out)" "$site/hpalloc/lib/libhpalloc-preload.so" "the venv's preload library"
[ "$(field preload_huge preload.out)" -ge $((128 * MiB)) ] ||
	fail "a 256 MiB malloc under hpctl run --preload is not on huge pages: $(cat "$user_home/preload.out")"
ok
contains "$(cat "$user_home/module.out")" "$PACKAGE_VERSION" "python -m hpalloc --version"
contains "$(field fallback fallback.out)" "$site/hpalloc/__init__.py" "hpctl run's fallback package for Debian's python3"
# hpctl stats lists the process (a user without XDG_RUNTIME_DIR: issue 34's
# per-user control directory)
pid=$(printf '%s\n' "$out" | sed -n 's/^prog_pid //p')
[ "$(cat "$user_home/stats.rc")" = 0 ] ||
	fail "hpctl stats as nobody without XDG_RUNTIME_DIR failed: $(cat "$user_home/stats.err")"
grep -qw "^ *$pid" "$user_home/stats.out" ||
	fail "hpctl stats does not list process $pid: $(cat "$user_home/stats.out" "$user_home/stats.err")"
ok
done_ok
