#!/bin/bash
# Only proof that a process is gone may remove its published entry (and
# with it the override files hpctl -p wrote for it).  hpctl run where it
# cannot tell -- the process's /proc/<pid> hidden, no /proc at all (private
# mount namespaces), or another pid namespace where the pid names some other
# process or none -- keeps live entries, lists them, and prunes nothing it
# cannot prove dead.  Where it can tell, a killed process's entry is pruned.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ -x "$KNOBWATCH" ] || { echo "knobwatch not built at $KNOBWATCH" >&2; exit 99; }
if ! unshare --mount --propagation private true 2>/dev/null ||
   ! unshare --pid --fork --mount-proc true 2>/dev/null; then
	skip_test root "cannot create mount and pid namespaces here (needs root / CAP_SYS_ADMIN)"
fi

start_watch w threshold
pid=$watch_pid
expect 0 "$HPCTL" -p "$pid" set threshold=64M
override=$CTL/proc/$pid/override/threshold
[ -f "$override" ] || fail "no override file for $pid"
ok
# the process applies it and publishes it (within ~250 ms)
for i in $(seq 40); do
	run "$HPCTL" -p "$pid" get threshold
	[ "$out" = threshold=64M ] && break
	sleep 0.05
done
[ "$out" = threshold=64M ] || fail "the override did not reach $pid: $out $err"
ok

# entry_intact WHAT: the live process's entry and override are still there.
entry_intact() {
	[ -f "$CTL/proc/$pid/stats" ] || fail "$1: the live process's entry was removed"
	[ "$(cat "$override" 2>/dev/null)" = 64M ] || fail "$1: its override file was removed"
	ok
}

# ---- /proc/<pid> of the live process unreadable: an empty directory bound
# over it in a private mount namespace (kill(pid, 0) still finds it)
empty=$tmp/empty
mkdir "$empty"
hidden() {
	run unshare --mount --propagation private \
		bash -c 'mount --bind "$0" /proc/"$1" && shift && exec "$@"' \
		"$empty" "$pid" "$@"
}
hidden "$HPCTL" stats
[ "$rc" = 0 ] || fail "hpctl stats with /proc/$pid hidden: exit $rc: $err"
ok
entry_intact "hpctl stats with /proc/$pid hidden"
contains "$out" "$pid" "hpctl stats with /proc/$pid hidden lists the live process"
hidden "$HPCTL" stats "$pid"
[ "$rc" = 0 ] || fail "hpctl stats PID with /proc/$pid hidden: exit $rc: $err"
entry_intact "hpctl stats PID with /proc/$pid hidden"
hidden "$HPCTL" -p "$pid" get threshold
[ "$rc/$out" = 0/threshold=64M ] || fail "hpctl -p PID get with /proc/$pid hidden: $rc $out $err"
entry_intact "hpctl -p PID get with /proc/$pid hidden"

# ---- no /proc at all: an empty tmpfs over /proc ------------------------------
# The sanitizer runtime reads its options (ASAN_OPTIONS) through
# /proc/self/environ and lists threads in /proc/<pid>/task for the leak check:
# without /proc it cannot be told not to, and fails at exit.  The rule it
# would check is the one above (nothing readable about the pid: no proof).
if [ -z "${SANITIZER_FLAGS:-}" ]; then
	without_proc() {
		run unshare --mount --propagation private \
			bash -c 'mount -t tmpfs none /proc && exec "$@"' - "$@"
	}
	without_proc "$HPCTL" stats
	[ "$rc" = 0 ] || fail "hpctl stats without /proc: exit $rc: $err"
	ok
	entry_intact "hpctl stats without /proc"
	contains "$out" "$pid" "hpctl stats without /proc lists the live process"
	without_proc "$HPCTL" stats "$pid"
	[ "$rc" = 0 ] || fail "hpctl stats PID without /proc: exit $rc: $err"
	ok
	entry_intact "hpctl stats PID without /proc"
	without_proc "$HPCTL" --json stats
	[ "$rc" = 0 ] || fail "hpctl --json stats without /proc: exit $rc: $err"
	entry_intact "hpctl --json stats without /proc"
else
	note_skip other "sanitizer build: the no-/proc case runs in plain builds only (ASan needs /proc to read its options)"
fi

# ---- another pid namespace (its own /proc): pid $pid is nobody there, or
# someone else
run unshare --pid --fork --mount-proc "$HPCTL" stats
[ "$rc" = 0 ] || fail "hpctl stats in another pid namespace: exit $rc: $err"
ok
entry_intact "hpctl stats in another pid namespace"
contains "$out" "$pid" "hpctl stats in another pid namespace lists the process"
run unshare --pid --fork --mount-proc "$HPCTL" -p "$pid" get threshold
entry_intact "hpctl -p PID get in another pid namespace"

# ---- a dead process: no proof from another namespace, proof here ---------
kill -KILL "$pid"
wait "$pid" 2>/dev/null
[ -f "$CTL/proc/$pid/stats" ] || fail "a SIGKILLed process cannot clean up: its entry should still be there"
ok
run unshare --pid --fork --mount-proc "$HPCTL" stats
[ -e "$CTL/proc/$pid" ] || fail "hpctl in another pid namespace pruned $pid without proof"
ok
expect 0 "$HPCTL" stats
contains "$err" "pruned the entry of dead process $pid" "prune message"
[ -e "$CTL/proc/$pid" ] && fail "entry of dead $pid not pruned"
ok

done_ok
