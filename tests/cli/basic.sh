#!/bin/bash
# hpctl as a user drives it: help, version, get/set/reset/show, --json,
# the sysfs-style control files, precedence of the environment, run,
# status, the completion helpers.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

# ---- help and version --------------------------------------------------------
expect 0 "$HPCTL" --help
contains "$out" "Usage: hpctl" "--help"
for cmd in get set reset show status pool stats run; do
	contains "$out" "  $cmd" "--help lists $cmd"
done
expect 0 "$HPCTL" --version
contains "$out" "${PACKAGE_VERSION:-}" "--version"
expect 2 "$HPCTL"
contains "$err" "no command" "no command"

# ---- the knob list comes from the library -----------------------------------------
expect 0 "$HPCTL" --list-knobs
knobs=$out
for k in mode threshold pagesize fallback cache_max cache_decay_ms uring verbose; do
	printf '%s\n' "$knobs" | grep -qx "$k" || fail "--list-knobs lacks $k"
	ok
done
expect 0 "$HPCTL" --list-choices mode
[ "$(echo $out)" = "auto hugetlb thp off" ] || fail "choices of mode: $out"
ok

# ---- get: defaults, every knob, as KNOB=VALUE ----------------------------------------
expect 0 "$HPCTL" get
[ "$(printf '%s\n' "$out" | wc -l)" = "$(printf '%s\n' "$knobs" | wc -l)" ] || fail "get prints every knob: $out"
ok
defaults=$out
expect 0 "$HPCTL" get mode
mode_default=${out#mode=}
expect 0 "$HPCTL" --json get
valid_json "$out" "get --json"

# ---- set writes sysfs-style files atomically, get/show see them ----------------------------
expect 0 "$HPCTL" set threshold=4096K mode=thp cache_decay_ms=250
[ "$(cat "$CTL/threshold")" = 4M ] || fail "threshold file holds the canonical value: $(cat "$CTL/threshold")"
ok
[ "$(cat "$CTL/mode")" = "auto hugetlb [thp] off" ] || fail "mode file is sysfs style: $(cat "$CTL/mode")"
ok
[ "$(stat -c %a "$CTL/mode")" = 644 ] || fail "mode 0644: $(stat -c %a "$CTL/mode")"
ok
ls -A "$CTL" | grep -q '\.tmp' && fail "temporary files left: $(ls -A "$CTL")"
ok
expect 0 "$HPCTL" get threshold mode
[ "$out" = $'threshold=4M\nmode=thp' ] || fail "get after set: $out"
ok
expect 0 "$HPCTL" show
contains "$out" "threshold = 4M  (source: control" "show: value and source"
contains "$out" "accepted:" "show: accepted values"
contains "$out" "control directory: $CTL" "show: where"
expect 0 "$HPCTL" show --json
valid_json "$out" "show --json"
printf '%s' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
k = d["knobs"]["threshold"]
assert k["value"] == "4M" and k["source"] == "control", k
assert k["default"] and k["help"] and k["accepted"], k
assert d["knobs"]["mode"]["choices"].split() == ["auto", "hugetlb", "thp", "off"]
' || fail "show --json content"
ok

# The Python activation's variables are listed beside the knobs, as the
# activation reads them (python/hpalloc_activate.py: its words, its
# adapters, its default).
expect 0 "$HPCTL" show
contains "$out" "HPALLOC_NUMPY  (default: unset)" "show: HPALLOC_NUMPY"
contains "$out" "HPALLOC_ADAPTERS  (default: numpy,numba,torch,arrow)" "show: HPALLOC_ADAPTERS"
expect 0 "$HPCTL" show --json
printf '%s' "$out" | env -u HPALLOC_NUMPY -u HPALLOC_ADAPTERS \
	PYTHONPATH="${srcdir:-$(dirname "$0")/../..}/python" python3 -c '
import json, sys
import hpalloc_activate as act  # HPALLOC_NUMPY unset: activates nothing
env = json.load(sys.stdin)["environment"]
assert sorted(env) == ["HPALLOC_ADAPTERS", "HPALLOC_NUMPY"], env
a = env["HPALLOC_ADAPTERS"]
assert a["default"] == ",".join(act.DEFAULT_ADAPTERS), (a, act.DEFAULT_ADAPTERS)
names = a["accepted"].split("among ", 1)[1].split(", or all")[0].split()
assert names == [n for n, _, _ in act.ADAPTERS], (names, act.ADAPTERS)
n = env["HPALLOC_NUMPY"]["accepted"]
assert n.split(" (activate)")[0].split() == list(act._ON), (n, act._ON)
assert n.split("; ")[1].split(" or empty")[0].split() == [w for w in act._OFF if w], (n, act._OFF)
' || fail "show --json: HPALLOC_NUMPY / HPALLOC_ADAPTERS as hpalloc_activate.py reads them: $out"
ok

# A file written by hand: plain word, or the bracketed form; trailing newline optional.
printf 'off' >"$CTL/mode"
expect 0 "$HPCTL" get mode
[ "$out" = mode=off ] || fail "hand-written plain value: $out"
ok
printf 'auto [hugetlb] thp off\n' >"$CTL/mode"
expect 0 "$HPCTL" get mode
[ "$out" = mode=hugetlb ] || fail "hand-written bracketed value: $out"
ok

# ---- hpctl's own environment is not a process's: never mixed into what it reports -----------
# (a process's env layer shows in its published stats: see live.sh)
HPALLOC_THRESHOLD=2M expect 0 "$HPCTL" show --json
printf '%s' "$out" | python3 -c '
import json, sys
k = json.load(sys.stdin)["knobs"]["threshold"]
assert k["source"] != "env" and k["value"] != "2M", k' || fail "hpctl mixed its own HPALLOC_THRESHOLD into show: $out"
ok

# ---- reset -------------------------------------------------------------------------------------------
expect 0 "$HPCTL" reset threshold
[ -e "$CTL/threshold" ] && fail "reset threshold left the file"
ok
expect 0 "$HPCTL" get threshold
contains "$defaults" "$out" "threshold back to its default"
expect 0 "$HPCTL" reset threshold   # nothing to remove is fine
expect 0 "$HPCTL" reset --all
[ -z "$(ls -A "$CTL")" ] || fail "reset --all leaves: $(ls -A "$CTL")"
ok
expect 0 "$HPCTL" get
[ "$out" = "$defaults" ] || fail "all defaults again: $out"
ok

# ---- set creates a missing control directory (0755) --------------------------------------------------
HPALLOC_CONTROL_DIR=$tmp/fresh expect 0 "$HPCTL" set verbose=1
[ "$(stat -c %a "$tmp/fresh")" = 755 ] && [ "$(cat "$tmp/fresh/verbose")" = 1 ] ||
	fail "created control dir: $(ls -la "$tmp/fresh")"
ok
HPALLOC_CONTROL_DIR=$tmp/fresh expect 0 "$HPCTL" reset --all
HPALLOC_CONTROL_DIR=$tmp/nowhere/deeper expect 1 "$HPCTL" set verbose=1
contains "$err" "cannot create control directory" "missing parent is a runtime failure"

# ---- run: knobs for that process alone, NumPy handler on --------------------------------------------------
expect 0 "$HPCTL" run threshold=8192K mode=thp -- sh -c 'echo "$HPALLOC_THRESHOLD $HPALLOC_MODE $HPALLOC_NUMPY"'
[ "$out" = "8M thp 1" ] || fail "run environment: $out"
ok
expect 0 "$HPCTL" run sh -c 'echo "${HPALLOC_NUMPY-unset}"'
[ "$out" = 1 ] || fail "run without knobs: $out"
ok
expect 3 "$HPCTL" run -- sh -c 'exit 3'
expect 1 "$HPCTL" run -- /nonexistent/command
contains "$err" "cannot run" "run of a missing command"
[ -z "$(ls -A "$CTL")" ] || fail "run wrote to the control directory"
ok

# ---- status ------------------------------------------------------------------------------------------------
expect 0 "$HPCTL" status
for what in "transparent hugepages: enabled" "hugetlb pools:" "hugetlbfs mounts:" "io_uring:" "effective knobs:"; do
	contains "$out" "$what" "status"
done
thp=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unavailable)
contains "$out" "enabled $thp" "status THP matches sysfs"
if [ -d /sys/kernel/mm/hugepages/hugepages-2048kB ]; then
	total=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
	contains "$out" "2M    total $total " "status 2M pool"
fi
expect 0 "$HPCTL" status --json
valid_json "$out" "status --json"
printf '%s' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert {"thp", "hugetlb_pools", "hugetlbfs_mounts", "io_uring", "knobs"} <= set(d), d.keys()
assert isinstance(d["io_uring"]["available"], bool)
for p in d["hugetlb_pools"]:
    assert {"pagesize", "total", "free", "reserved", "surplus"} <= set(p), p
' || fail "status --json content: $out"
ok

# ---- stats with nobody publishing ------------------------------------------------------------------------------
expect 0 "$HPCTL" stats --json
[ "$out" = "[]" ] || fail "stats of nobody: $out"
ok

done_ok
