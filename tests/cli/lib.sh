# Shared helpers of the hpctl tests (sourced, not run).
#
# Every test gets a private control directory from tests/run-test
# (HPALLOC_CONTROL_DIR); run by hand, a temporary one is made here.  Tests
# drive hpctl as a user would and check what it prints, what it leaves in
# the control directory and how its exit status says it went.

set -u
builddir=${top_builddir:-.}
HPCTL=${HPCTL:-$builddir/tools/hpctl}
KNOBWATCH=${KNOBWATCH:-$builddir/tests/cli/knobwatch}
[ -x "$HPCTL" ] || { echo "hpctl not built at $HPCTL" >&2; exit 99; }

tmp=$(mktemp -d "${HPALLOC_TEST_TMPDIR:-${TMPDIR:-/tmp}}/cli.XXXXXX") || exit 99
if [ -z "${HPALLOC_CONTROL_DIR:-}" ]; then
	export HPALLOC_CONTROL_DIR=$tmp/control
	mkdir -m 0755 "$HPALLOC_CONTROL_DIR"
fi
CTL=$HPALLOC_CONTROL_DIR
# The caller's knob settings must not change results.
for var in $(compgen -e HPALLOC_); do
	case $var in HPALLOC_CONTROL_DIR|HPALLOC_TEST_*) ;; *) unset "$var" ;; esac
done

bg_pids=()
cleanup() {
	local p
	for p in "${bg_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${bg_pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
	[ -z "${nobody_dir:-}" ] || rm -rf "$nobody_dir"
}
trap cleanup EXIT

checks=0
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); }
done_ok() { echo "PASS: $checks checks"; exit 0; }

# pools_put_back_at_exit: every hugetlb pool (whole and per NUMA node) is
# put back at exit, however the test exits, to what it is now.  A test that
# resizes a pool calls it first.  tests/run-test saves and writes the values
# (--save-pools, --restore-pools: the shell tests' one pool writer); run by
# make check, it restores them around the test as well.
hp_run_test=${srcdir:-$(dirname "${BASH_SOURCE[0]}")/../..}/tests/run-test
pools_put_back_at_exit() {
	bash "$hp_run_test" --save-pools "$tmp/pools" || fail "cannot save the hugetlb pools"
	trap 'bash "$hp_run_test" --restore-pools "$tmp/pools"; cleanup' EXIT
}

# ---- what the machine lacks (as in tests/c/harness.h) ----------------------
# A skip names the capability it lacks, one of tests/capabilities (hugetlb,
# hugetlb1g, uring, thp, root, nonroot, ...; or "other", never required).
# HPALLOC_TEST_REQUIRE (comma-separated; CI: all of them) turns a skip of a
# listed one into a failure; a name that file does not list is an error.
hp_caps_file=${srcdir:-$(dirname "${BASH_SOURCE[0]}")/../..}/tests/capabilities
HP_CAPS=$(sed -n 's/^\([a-z0-9]\+\)[[:space:]].*/\1/p' "$hp_caps_file" 2>/dev/null | tr '\n' ' ')
[ -n "$HP_CAPS" ] || { echo "cannot read the capability list $hp_caps_file" >&2; exit 99; }
hp_required=${HPALLOC_TEST_REQUIRE:-}
for cap in ${hp_required//,/ }; do
	case " $HP_CAPS " in
	*" $cap "*) ;;
	*) echo "HPALLOC_TEST_REQUIRE names '$cap'; known: $HP_CAPS" >&2; exit 99 ;;
	esac
done
required() { case ",${HPALLOC_TEST_REQUIRE:-}," in *",$1,"*) return 0 ;; esac; return 1; }
# note_skip CAP WHY...: a part of this test does not run here; one
# "SKIP(CAP): ..." line, which tests/skip-driver counts.
note_skip() {
	local cap=$1
	shift
	required "$cap" && fail "required capability $cap (HPALLOC_TEST_REQUIRE) is missing: $*"
	echo "SKIP($cap): ${0##*/}: $*"
}
# skip_test CAP WHY...: none of this test can run here.
skip_test() { note_skip "$@"; exit 77; }

# ---- running things as an unprivileged user ------------------------------------
# The build and source trees may sit where nobody cannot enter (a clone
# under /root or under `mktemp -d`, both 0700), and so does the scratch
# directory of tests/run-test (HPALLOC_TEST_TMPDIR, $tmp: 0700, root's):
# whatever nobody must read or run (programs, the libraries they load by
# RUNPATH, control files) goes into a directory of its own under /tmp
# first, $nobody_dir (0755, removed at exit; made in this shell, not in a
# subshell, so that cleanup finds it).  Every test that runs something as
# another user brings it there.
nobody_dir=
# nobody_dir_make: makes $nobody_dir once; nobody must be able to enter it
# (needs can_be_nobody).
nobody_dir_make() {
	[ -z "$nobody_dir" ] || return 0
	nobody_dir=$(mktemp -d /tmp/hpalloc-nobody.XXXXXX) || fail "mktemp"
	chmod 0755 "$nobody_dir" || fail "chmod $nobody_dir"
	as_nobody test -x "$nobody_dir" ||
		fail "nobody cannot enter $nobody_dir (a directory above it is closed to others)"
}
# nobody_setuid_dir: nobody_dir_make, and the test is skipped when that
# directory's file system is mounted nosuid (no setuid program runs there).
nobody_setuid_dir() {
	nobody_dir_make
	if findmnt -no OPTIONS -T "$nobody_dir" | grep -qw nosuid; then
		skip_test root "$nobody_dir is on a nosuid file system: no setuid program can run there"
	fi
}
# nobody_stage FILE: copies FILE (a symbolic link: what it points to) into
# $nobody_dir under FILE's own name, readable and runnable by all; its
# path in $staged.
nobody_stage() {
	nobody_dir_make
	staged=$nobody_dir/${1##*/}
	cp "$1" "$staged" && chmod a+rx "$staged" || fail "cannot stage $1"
}
# can_be_nobody: setpriv exists and can switch to nobody:nogroup.
can_be_nobody() {
	command -v setpriv >/dev/null &&
		setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null
}
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

# run CMD...: runs it, stdout in $out, stderr in $err, status in $rc.
run() {
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	out=$(cat "$tmp/out")
	err=$(cat "$tmp/err")
}

# expect RC CMD...: run and check the exit status.
expect() {
	local want=$1
	shift
	run "$@"
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $err; stdout: $out"
	ok
}

contains() { # contains HAYSTACK NEEDLE WHAT
	case $1 in *"$2"*) ok ;; *) fail "$3: expected '$2' in: $1" ;; esac
}

# One line per entry: path, type, mode, owner, size, mtime (ns), content
# hash: any change at all to the tree changes the sum.
tree_sum() {
	(cd "$1" && find . -printf '%p %y %m %u %s %T@\n' | LC_ALL=C sort &&
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) |
		sha256sum | cut -d' ' -f1
}

valid_json() { # valid_json TEXT WHAT
	printf '%s' "$1" | python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null ||
		fail "$2: not valid JSON: $1"
	ok
}

# wait_for FILE PATTERN [SECONDS]: poll (every 50 ms) until a line of FILE
# matches the extended regex; by default within the specification's bound
# for a change to reach a process, 1 s (seen: at most ~320 ms on this
# shared 2-core machine under load, the janitor looks every 250 ms).
# Only lines after line $wait_after (default 0) count.
wait_after=0
wait_for() {
	local file=$1 pattern=$2 limit=${3:-1} start now
	start=$(date +%s%N)
	while :; do
		tail -n "+$((wait_after + 1))" "$file" 2>/dev/null | grep -Eq -- "$pattern" && return 0
		now=$(date +%s%N)
		[ $(( (now - start) / 1000000 )) -ge "$(awk "BEGIN{print int($limit*1000)}")" ] && return 1
		sleep 0.05
	done
}

# ---- what a running process published (<control dir>/proc/<pid>/stats) ----
# The file is replaced whole (rename), so one read is one consistent
# snapshot of the process: its counters and knob values at one moment.
published() { cat "$CTL/proc/$1/stats" 2>/dev/null; }
# published_stat SNAPSHOT NAME: a counter of a snapshot (0 if absent).
published_stat() {
	local v
	v=$(sed -n "s/^stat $2 //p" <<<"$1" | head -1)
	echo "${v:-0}"
}
# wait_rejected PID KNOB TEXT BEFORE: wait (1 s, the bound for a change to
# reach a process) until PID has published config_rejects above BEFORE and
# a rejected line for KNOB containing TEXT: proof that the process has
# looked at what was just installed.  That snapshot is left in $snapshot,
# so a negative check ("kept its value") is made on what the process had
# after it looked, not before.
wait_rejected() {
	local pid=$1 knob=$2 text=$3 before=$4 start now
	start=$(date +%s%N)
	while :; do
		snapshot=$(published "$pid")
		if [ "$(published_stat "$snapshot" config_rejects)" -gt "$before" ] &&
		   grep "^rejected $knob " <<<"$snapshot" | grep -qF -- "$text"; then
			return 0
		fi
		now=$(date +%s%N)
		[ $(( (now - start) / 1000000 )) -ge 1000 ] && return 1
		sleep 0.02
	done
}

# start_watch NAME KNOB...: a background knobwatch; its pid in $watch_pid,
# output in $tmp/NAME.out.  Waits until it is ready and has published.
start_watch() {
	local name=$1
	shift
	"$KNOBWATCH" -t 120 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	watch_pid=$!
	bg_pids+=("$watch_pid")
	wait_for "$tmp/$name.out" '^ready' 5 || fail "knobwatch did not start: $(cat "$tmp/$name.err")"
	local real
	real=$(sed -n 's/^ready //p' "$tmp/$name.out")
	[ "$real" = "$watch_pid" ] || watch_pid=$real
	# The janitor publishes within one tick (250 ms); allow 2 s.
	local i
	for i in $(seq 40); do
		[ -f "$CTL/proc/$watch_pid/stats" ] && return 0
		sleep 0.05
	done
	fail "knobwatch $watch_pid never published $CTL/proc/$watch_pid/stats"
}

# ---- a holder in the background (tests/cli/holder.c) ------------------------
# start_holder SIZE...: a background holder (a block of each SIZE live,
# one more of the first SIZE cached); its pid in $holder_pid.  Variables
# set on the call (VAR=VALUE start_holder ...) reach it.
HOLDER=${HOLDER:-$builddir/tests/cli/holder}
start_holder() {
	local out=$tmp/holder.$RANDOM$RANDOM
	[ -x "$HOLDER" ] || { echo "holder not built at $HOLDER" >&2; exit 99; }
	"$HOLDER" -t 120 "$@" >"$out" 2>&1 &
	bg_pids+=("$!")
	holder_pid=$!
	wait_for "$out" '^ready' 10 || fail "holder $* did not start: $(cat "$out")"
}

# ---- what the kernel says of a process ----------------------------------------
# hp_memory FUNCTION PID: what tests/python/hp_memory.py, the tests' one
# reader of smaps, says of the process (bytes): process_huge_bytes (on
# huge pages), hg_bytes (in mappings advised MADV_HUGEPAGE: hpalloc's THP
# blocks, live or cached).
hp_memory_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../python" && pwd)
hp_memory() {
	python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import hp_memory
print(getattr(hp_memory, sys.argv[2])(sys.argv[3]))' "$hp_memory_dir" "$1" "$2"
}

# ---- a knobwatch in the background (fresh-root.sh, fresh-user.sh) ----------
# kw_start PROGRAM PREFIX...: `PREFIX... PROGRAM -t 60 threshold` in the
# background (PREFIX: env VAR=VALUE..., or a wrapper that switches user),
# its output in $tmp/kw.out and $tmp/kw.err; once it is ready, its pid in
# $watch_pid.
kw_start() {
	local prog=$1
	shift
	"$@" "$prog" -t 60 threshold >"$tmp/kw.out" 2>"$tmp/kw.err" &
	watch_pid=$!
	wait_after=0
	bg_pids+=("$watch_pid")
	wait_for "$tmp/kw.out" '^ready' 5 || fail "knobwatch did not start: $(cat "$tmp/kw.err")"
	watch_pid=$(sed -n 's/^ready //p' "$tmp/kw.out")
}
kw_stop() {
	kill -TERM "$watch_pid"
	wait "${bg_pids[@]}" 2>/dev/null
	bg_pids=()
}
# kw_published_within DIR SECONDS: DIR/proc/$watch_pid/stats appeared in time
kw_published_within() {
	local i
	for i in $(seq $(($2 * 20))); do
		[ -f "$1/proc/$watch_pid/stats" ] && return 0
		sleep 0.05
	done
	return 1
}

# ---- the preload tests' start (tests/preload/*.sh) --------------------------
# preload_test_start: skip under a sanitizer (ASan and an interposer of
# malloc exclude each other; make check-preload-valgrind runs these under
# memcheck), point hpctl run --preload at the build's library (exported as
# HPALLOC_PRELOAD_PATH), and run nothing preloaded by accident.
preload_test_start() {
	if [ -n "${SANITIZER_FLAGS:-}" ]; then
		echo "SKIP: AddressSanitizer cannot be combined with an interposer of malloc" \
			"(make check-preload-valgrind runs the preload tests under memcheck)" >&2
		exit 77
	fi
	export HPALLOC_PRELOAD_PATH=${HPALLOC_TEST_PRELOAD:?make check sets HPALLOC_TEST_PRELOAD}
	unset LD_PRELOAD
}
