#!/bin/bash
# A preloaded shell script that takes descriptor 3 for itself (`exec
# 3>file`, the usual way to open a file in a script).  Main before the fix:
# the preload library's constructor had set up hpalloc's io_uring as fd 3,
# the redirection replaced it, and the janitor spun on io_uring_enter
# failing (bash -c 'exec 3>/dev/null; sleep 2' at 87 % CPU) while the
# script's freed blocks stayed in the ring.  Now the ring has no descriptor
# in the table (lib/ring.c): the script finishes, its large blocks are
# hpalloc's, and the process burns no CPU while it sleeps.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

preload_test_start

# big: an 8 MiB string (bash mallocs it, and frees it when x is cleared)
script='big() { printf -v x "%*s" $((8 << 20)) ""; x=; }
big
exec 3>/dev/null
for i in 1 2 3 4 5 6 7 8; do big; done
sleep 2
echo finished'
TIMEFORMAT='%U %S'
{ time timeout 60 "$HPCTL" run --preload mode=thp threshold=1M verbose=2 -- \
	bash -c "$script" >"$tmp/out" 2>"$tmp/err"; } 2>"$tmp/time"
rc=$?
[ "$rc" = 0 ] && [ "$(cat "$tmp/out")" = finished ] ||
	fail "the preloaded script: exit $rc: $(cat "$tmp/out") $(tail -5 "$tmp/err")"
ok
contains "$(cat "$tmp/err")" "thp map" "the script's large strings mapped by hpalloc"
read -r user sys <"$tmp/time"
cpu_ms=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%d", (u + s) * 1000 }')
[ "$cpu_ms" -lt 700 ] ||
	fail "the script used $cpu_ms ms of CPU around a 2 s sleep (a janitor spinning on fd 3?): $(grep -m3 io_uring "$tmp/err")"
ok
done_ok
