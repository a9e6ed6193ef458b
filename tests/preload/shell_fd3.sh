#!/bin/bash
# A preloaded shell script that takes descriptor 3 for itself (`exec
# 3>file`, the usual way to open a file in a script).  Main before the fix:
# the preload library's constructor had set up hpalloc's io_uring as fd 3,
# the redirection replaced it, and the janitor spun on io_uring_enter
# failing (bash -c 'exec 3>/dev/null; sleep 2' at 87 % CPU) while the
# script's freed blocks stayed in the ring.  Now the ring has no descriptor
# in the table (lib/threads/ring.c): the script finishes, its large blocks are
# hpalloc's, and the process burns no CPU while it sleeps.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

preload_test_start

# big: an 8 MiB string (bash mallocs it, and frees it when x is cleared)
# The CPU the shell process (all its threads: the janitor's too) uses while
# it sleeps, from its own /proc/PID/stat (utime + stime, clock ticks): the
# work before the sleep -- faulting the strings in, which on a fragmented
# machine includes THP compaction -- is not what this measures.
script='big() { printf -v x "%*s" $((8 << 20)) ""; x=; }
ticks() { local f; read -r -a f </proc/$$/stat; echo $((f[13] + f[14])); }
big
exec 3>/dev/null
for i in 1 2 3 4 5 6 7 8; do big; done
before=$(ticks)
sleep 2
echo finished $(($(ticks) - before))'
timeout 60 "$HPCTL" run --preload mode=thp threshold=1M verbose=2 -- \
	bash -c "$script" >"$tmp/out" 2>"$tmp/err"
rc=$?
read -r word ticks <"$tmp/out"
[ "$rc" = 0 ] && [ "$word" = finished ] ||
	fail "the preloaded script: exit $rc: $(cat "$tmp/out") $(tail -5 "$tmp/err")"
ok
contains "$(cat "$tmp/err")" "thp map" "the script's large strings mapped by hpalloc"
# a janitor spinning on a lost ring burnt 87 % of a CPU: ~170 ticks of 200
sleep_ms=$((ticks * 1000 / $(getconf CLK_TCK)))
[ "$sleep_ms" -lt 300 ] ||
	fail "the script used $sleep_ms ms of CPU during a 2 s sleep (a janitor spinning on fd 3?): $(grep -m3 io_uring "$tmp/err")"
echo "CPU during the 2 s sleep: $sleep_ms ms"
ok
done_ok
