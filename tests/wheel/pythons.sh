#!/bin/bash
# One wheel, every supported CPython, and the PyTorch releases pip gives
# (issue 47).  The wheel `python -m build` made (cp310-abi3) is installed,
# as a new user without root or a compiler would (tests/wheel/isolate.sh:
# nobody, no compiler, no other copy of hpalloc; pyenv's Pythons visible),
# into a fresh venv of each of CPython 3.10, 3.11, 3.12 and 3.13, with:
#   3.10, 3.13   NumPy;
#   3.11         NumPy, PyTorch 2.14.1 (on this machine's disk) and pyarrow:
#                the PyTorch release on the machine that fresh-user.sh's
#                2.13.0 venv does not cover;
#   3.12         `pip install numpy torch pyarrow` unpinned: whatever the
#                machine serves (2.14.1 here, where pip's cap holds it; the
#                newest PyPI has elsewhere).
# In each venv:
#   - `hpctl run -- python prog.py` puts a 256 MiB np.ones on huge pages
#     per /proc/self/smaps, through hpalloc's NumPy handler, and, where
#     PyTorch and pyarrow are, a 256 MiB torch.ones and a 256 MiB Arrow
#     buffer too (the torch and api origins' counters);
#   - `hpctl stats` lists that process;
#   - `hpctl run --preload` puts a 256 MiB malloc (and a torch.ones) on
#     huge pages with the venv's preload library: what the adapters' refusals
#     say works under any release;
# then (as root, with the compiler) tests/wheel/abi_check.cpp compares the
# declared c10 and Arrow ABIs with the headers of each venv's PyTorch and
# pyarrow.  It prints how long each step took, per venv (the job's lines
# "time VERSION STEP N s").
. "${abs_top_srcdir:?}/tests/wheel/lib.sh"

pythons=$(pyenv_pythons)
for minor in 3.10 3.11 3.12 3.13; do
	grep -q "/versions/$minor\." <<<"$pythons" ||
		skip_test pythons "no CPython $minor under ${PYENV_ROOT:-/root/.pyenv}/versions"
done
# VERSION:PACKAGES; the torch pin of 3.11: the release on this machine's
# disk besides venv-requirements.txt's 2.13.0
torch_pin=${HPALLOC_TEST_TORCH_PIN:-torch==2.14.1}
specs="3.10:numpy 3.11:numpy,$torch_pin,pyarrow==$(declared_releases arrow.h).* 3.12:numpy,torch,pyarrow 3.13:numpy"

fresh_user_home
cat >"$user_home/prog.py" <<'EOF'
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["HOME"], "testlib"))
from hp_memory import settled_huge_bytes as huge_bytes, smaps
import numpy as np
MiB = 1 << 20
def hpalloc_stats():
    return sys.modules["hpalloc"].stats() if "hpalloc" in sys.modules else {}
a = np.ones(256 * MiB // 8)
print("numpy_huge", huge_bytes(a.ctypes.data, a.nbytes))
hp = sys.modules.get("hpalloc.numpy")
print("numpy_handler", hp.get_handler_name(a) if hp else "none")
print("versions", "python=%d.%d.%d" % sys.version_info[:3], "numpy=" + np.__version__, end=" ")
try:
    import torch, pyarrow as pa
except ImportError:
    print()
else:
    print("torch=" + torch.__version__, "pyarrow=" + pa.__version__)
    t = torch.ones(256 * MiB // 4)
    b = pa.allocate_buffer(256 * MiB)
    np.frombuffer(b, dtype=np.uint8)[:] = 1
    print("torch_huge", huge_bytes(t.data_ptr(), t.nbytes))
    print("torch_origin", hpalloc_stats().get("torch_huge_bytes", 0))
    print("arrow_huge", huge_bytes(b.address, b.size))
    print("arrow_pool", pa.default_memory_pool().backend_name)
    print("arrow_origin", hpalloc_stats().get("api_huge_bytes", 0))
print("mapped", " ".join(sorted({e["path"] for e in smaps() if "hpalloc" in e["path"]})))
sys.stdout.flush()
open(sys.argv[1], "w").close()  # stay, for hpctl stats
time.sleep(60)
EOF
cat >"$user_home/preload.py" <<'EOF'
import ctypes, os, sys
sys.path.insert(0, os.path.join(os.environ["HOME"], "testlib"))
from hp_memory import settled_huge_bytes as huge_bytes, smaps
n = 256 << 20
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
p = libc.malloc(n)
ctypes.memset(p, 1, n)
print("preload_huge", huge_bytes(p, n))
try:
    import torch
except ImportError:
    pass
else:
    t = torch.ones(n // 4)
    print("preload_torch_huge", huge_bytes(t.data_ptr(), t.nbytes))
print("preload_mapped", " ".join(sorted({e["path"] for e in smaps() if "hpalloc" in e["path"]})))
EOF
{
	echo 'set -u'
	echo 'cd "$HOME"'
	printf 'specs=%q\n' "$specs"
	printf 'pythons=%q\n' "$pythons"
	cat <<'EOF'
say() { echo "$@"; }
t() { local what=$1 s=$SECONDS; shift; "$@"; local rc=$?; say "time $what $((SECONDS - s)) s"; return $rc; }
for c in cc gcc c++ g++ clang cpp; do
	! command -v "$c" >/dev/null || { say "FAIL compiler $c at $(command -v "$c")"; exit 1; }
done
say "isolated $(id -un)"
for spec in $specs; do
	ver=${spec%%:*} pkgs=${spec#*:} v=$HOME/venv$ver
	py=$(grep "/versions/$ver\." <<<"$pythons")
	start=$SECONDS
	t "$ver venv" "$py" -m venv "$v" || { say "FAIL $ver venv"; exit 1; }
	t "$ver wheel" "$v/bin/pip" install -q ./hpalloc-*.whl || { say "FAIL $ver wheel"; exit 1; }
	t "$ver stack" "$v/bin/pip" install -q ${pkgs//,/ } || { say "FAIL $ver pip install ${pkgs//,/ }"; exit 1; }
	rm -f ready
	s=$SECONDS
	"$v/bin/hpctl" run -- "$v/bin/python" prog.py "$HOME/ready" > "run-$ver.out" 2> "run-$ver.err" &
	pid=$!
	for _ in $(seq 900); do [ -e ready ] && break; sleep 0.1; done
	[ -e ready ] || { say "FAIL $ver hpctl run: no result: $(cat "run-$ver.err")"; kill $pid; exit 1; }
	"$v/bin/hpctl" stats > "stats-$ver.out" 2>&1; echo "$?" > "stats-$ver.rc"
	say "pid $ver $pid"
	kill $pid 2>/dev/null; wait $pid 2>/dev/null
	"$v/bin/hpctl" run --preload -- "$v/bin/python" preload.py > "preload-$ver.out" 2> "preload-$ver.err" ||
		{ say "FAIL $ver hpctl run --preload: $(cat "preload-$ver.err")"; exit 1; }
	say "time $ver tests $((SECONDS - s)) s"
	say "time $ver total $((SECONDS - start)) s"
done
say "done"
EOF
} >"$user_home/job.sh"
chown nobody:nogroup "$user_home"/*.py "$user_home"/job.sh

run as_fresh_user_with_pyenv bash "$user_home/job.sh"
job=$out
printf '%s\n' "$out"
[ "$rc" = 0 ] || fail "the fresh user's job failed ($rc): $(printf '%s\n' "$out" | grep FAIL) $err"
contains "$out" "isolated nobody" "the job ran as nobody in the namespace"
MiB=$((1 << 20))
field() { sed -n "s/^$1 //p" "$user_home/$2"; }
for spec in $specs; do
	ver=${spec%%:*} pkgs=${spec#*:}
	site=$(ls -d "$user_home/venv$ver"/lib/python3*/site-packages)
	echo "--- CPython $ver (pip install ${pkgs//,/ }): $(field versions "run-$ver.out")"
	sed 's/^/  /' "$user_home/run-$ver.out" "$user_home/preload-$ver.out"
	grep -v '^$' "$user_home/run-$ver.err" | sed 's/^/  stderr: /'
	[ "$(field numpy_handler "run-$ver.out")" = hpalloc ] ||
		fail "$ver: NumPy's handler is not hpalloc under hpctl run: $(cat "$user_home/run-$ver.out" "$user_home/run-$ver.err")"
	[ "$(field numpy_huge "run-$ver.out")" -ge $((128 * MiB)) ] ||
		fail "$ver: np.ones not on huge pages under hpctl run: $(cat "$user_home/run-$ver.out")"
	ok
	case $pkgs in *torch*)
		[ -n "$(field torch_huge "run-$ver.out")" ] ||
			fail "$ver: no torch in the venv of pip install ${pkgs//,/ }: $(cat "$user_home/run-$ver.err")"
		[ "$(field torch_huge "run-$ver.out")" -ge $((128 * MiB)) ] &&
			[ "$(field torch_origin "run-$ver.out")" -ge $((256 * MiB)) ] ||
			fail "$ver: torch.ones not on hpalloc's huge pages under hpctl run ($(field versions "run-$ver.out")): $(cat "$user_home/run-$ver.out" "$user_home/run-$ver.err")"
		[ "$(field arrow_huge "run-$ver.out")" -ge $((128 * MiB)) ] &&
			[ "$(field arrow_pool "run-$ver.out")" = hpalloc ] &&
			[ "$(field arrow_origin "run-$ver.out")" -ge $((256 * MiB)) ] ||
			fail "$ver: the Arrow buffer is not on hpalloc's huge pages under hpctl run: $(cat "$user_home/run-$ver.out" "$user_home/run-$ver.err")"
		[ "$(field preload_torch_huge "preload-$ver.out")" -ge $((128 * MiB)) ] ||
			fail "$ver: torch.ones not on huge pages under hpctl run --preload: $(cat "$user_home/preload-$ver.out")"
		ok ;;
	esac
	[ "$(field preload_huge "preload-$ver.out")" -ge $((128 * MiB)) ] ||
		fail "$ver: a 256 MiB malloc under hpctl run --preload is not on huge pages: $(cat "$user_home/preload-$ver.out")"
	for f in $(field mapped "run-$ver.out") $(field preload_mapped "preload-$ver.out"); do
		case $f in "$site"/*) ;; *) fail "$ver: the process mapped an hpalloc file outside its venv: $f" ;; esac
	done
	ok
	pid=$(printf '%s\n' "$job" | sed -n "s/^pid $ver //p")
	[ "$(cat "$user_home/stats-$ver.rc")" = 0 ] && grep -qw "^ *$pid" "$user_home/stats-$ver.out" ||
		fail "$ver: hpctl stats does not list process $pid: $(cat "$user_home/stats-$ver.out")"
	ok
done

# the declared ABIs against the headers of each PyTorch and pyarrow installed
for spec in $specs; do
	case $spec in *torch*) check_declarations "$user_home/venv${spec%%:*}/bin/python"; ok ;; esac
done
done_ok
