#!/bin/bash
# hpctl pool: as root, resize the 2 MiB hugetlb pool to a few pages more,
# check the report against sysfs, put it back (tests/run-test restores it
# too, whatever happens).  As another user: exit 1, nothing changed.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
[ "$(id -u)" = 0 ] || skip_test hugetlb "resizing hugetlb pools needs root (CI runs the tests as root)"
[ -e "$nr" ] || skip_test hugetlb "this kernel offers no 2 MiB hugetlb pool ($nr)"
# root and a pool, but no way to resize it (read-only /sys): a broken test
# machine, not a missing feature
[ -w "$nr" ] || fail "root cannot write $nr"
saved=$(cat "$nr")
pools_put_back_at_exit

want=$((saved + 4))
expect 0 "$HPCTL" pool 2M=$want
contains "$out" "2M: requested $want, kernel gave $want" "pool report"
[ "$(cat "$nr")" = "$want" ] || fail "sysfs says $(cat "$nr"), wanted $want"
ok
expect 0 "$HPCTL" status
contains "$out" "2M    total $want " "status shows the new pool"
expect 0 "$HPCTL" --json pool 2048K=$saved
valid_json "$out" "pool --json"
printf '%s' "$out" | python3 -c '
import json, sys
(p,) = json.load(sys.stdin)
assert p["pagesize"] == "2M" and p["requested"] == int(sys.argv[1]) and p["total"] == p["requested"] and p["ok"] is True, p
' "$saved" || fail "pool --json content: $out"
ok
[ "$(cat "$nr")" = "$saved" ] || fail "pool not restored: $(cat "$nr")"
ok

# Not root: a runtime failure that changes nothing.  nobody runs a copy of
# hpctl: the build tree may be out of its reach (a clone under /root).
if can_be_nobody; then
	nobody_stage "$HPCTL"
	run as_nobody "$staged" pool 2M=$want
	[ "$rc" = 1 ] || fail "pool as nobody: exit $rc ($err)"
	contains "$err" "needs root" "pool as nobody"
	[ "$(cat "$nr")" = "$saved" ] || fail "pool as nobody changed the pool"
	ok
else
	note_skip nonroot "cannot switch to nobody (setpriv missing or no such user): non-root case not run"
fi

done_ok
