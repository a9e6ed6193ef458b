#!/bin/bash
# A knob is two places: its entry in enum hp_knob_id (lib/core/internal.h) and
# its row in lib/core/knobs.c's table.  The test-only build (-DHP_TEST_KNOB, see
# tests/Makemodule.am) adds the knob test_knob in those two places and
# nowhere else; everything else must follow by itself: hpctl show, get and
# --list-knobs; hpctl set and reset, the file in the control directory and
# the table's bounds; hpctl run's environment variable; and a process using
# the library, which reads HPALLOC_TEST_KNOB, the control file (live) and
# its per-process override.
builddir=${top_builddir:-.}
HPCTL=$builddir/tests/hpctl-test-knob
KNOBWATCH=$builddir/tests/knobwatch-test-knob
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
[ -x "$KNOBWATCH" ] || { echo "knobwatch-test-knob not built at $KNOBWATCH" >&2; exit 99; }

# The real hpctl has no such knob: the test-only build adds it, nothing else.
expect 2 "$builddir/tools/hpctl" get test_knob

# ---- hpctl show: the row, as the table says it -------------------------------------
expect 0 "$HPCTL" show
contains "$out" "test_knob = 7  (source: default, default: 7)" "hpctl show"
contains "$out" "accepted: an integer 0..99" "hpctl show"
expect 0 "$HPCTL" show --json
printf '%s' "$out" | python3 -c '
import json, sys
k = json.load(sys.stdin)["knobs"]["test_knob"]
want = {"value": "7", "source": "default", "default": "7", "type": "integer"}
sys.exit(0 if all(k[f] == v for f, v in want.items()) else "show --json: %r" % k)' ||
	fail "hpctl show --json does not list test_knob as its row says: $out"
ok
expect 0 "$HPCTL" --list-knobs
grep -qx test_knob <<<"$out" || fail "hpctl --list-knobs: no test_knob in: $out"
ok

# ---- the control directory ------------------------------------------------------------
expect 0 "$HPCTL" set test_knob=33
[ "$(cat "$CTL/test_knob" 2>&1)" = 33 ] || fail "hpctl set test_knob=33 wrote: $(cat "$CTL/test_knob" 2>&1)"
ok
expect 0 "$HPCTL" show
contains "$out" "test_knob = 33  (source: control, default: 7)" "hpctl show after set"
expect 0 "$HPCTL" get test_knob
[ "$out" = test_knob=33 ] || fail "hpctl get test_knob: $out"
ok
# the row's bounds: a refused value changes nothing
expect 2 "$HPCTL" set test_knob=100
contains "$err" "test_knob" "the refusal names the knob"
[ "$(cat "$CTL/test_knob")" = 33 ] || fail "a refused value changed the file: $(cat "$CTL/test_knob")"
ok

# ---- the environment: hpctl run names the variable by the library's rule ------------------
expect 0 "$HPCTL" run test_knob=12 -- sh -c 'printf %s "${HPALLOC_TEST_KNOB-unset}"'
[ "$out" = 12 ] || fail "hpctl run test_knob=12 gave the command HPALLOC_TEST_KNOB=$out"
ok

# ---- a process using the library --------------------------------------------------------
# reads the environment, which beats the control directory
export HPALLOC_TEST_KNOB=12
start_watch env test_knob
unset HPALLOC_TEST_KNOB
wait_for "$tmp/env.out" '^test_knob=12 env$' ||
	fail "HPALLOC_TEST_KNOB=12 did not reach the process: $(cat "$tmp/env.out")"
ok
# reads the control directory, and its changes live
start_watch ctl test_knob
pid=$watch_pid
wait_for "$tmp/ctl.out" '^test_knob=33 control$' ||
	fail "the control file did not reach the process: $(cat "$tmp/ctl.out")"
ok
expect 0 "$HPCTL" set test_knob=44
wait_for "$tmp/ctl.out" '^test_knob=44 control$' ||
	fail "hpctl set test_knob=44 did not reach the process within 1 s: $(cat "$tmp/ctl.out")"
ok
expect 0 "$HPCTL" -p "$pid" set test_knob=55
wait_for "$tmp/ctl.out" '^test_knob=55 process$' ||
	fail "hpctl -p $pid set test_knob=55 did not reach the process within 1 s: $(cat "$tmp/ctl.out")"
ok
expect 0 "$HPCTL" -p "$pid" get test_knob
[ "$out" = test_knob=55 ] || fail "hpctl -p $pid get test_knob (its published entry): $out"
ok
expect 0 "$HPCTL" -p "$pid" reset test_knob
expect 0 "$HPCTL" reset test_knob
[ ! -e "$CTL/test_knob" ] || fail "hpctl reset left $CTL/test_knob"
ok
wait_for "$tmp/ctl.out" '^test_knob=7 default$' ||
	fail "hpctl reset test_knob did not reach the process within 1 s: $(cat "$tmp/ctl.out")"
ok
grep -q '^test_knob=12 env$' "$tmp/env.out" && ! grep -q 'test_knob=[^1]' "$tmp/env.out" ||
	fail "the control directory beat the environment: $(cat "$tmp/env.out")"
ok
done_ok
