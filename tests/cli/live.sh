#!/bin/bash
# Running processes: a change in the control directory reaches them within
# 1 s without a restart; per-process overrides (hpctl -p PID) reach only
# that process and beat the environment; their stats are published, shown
# by hpctl stats, removed at exit; entries of killed processes are pruned;
# a lowered cache_max takes back what a process has cached.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ -x "$KNOBWATCH" ] || { echo "knobwatch not built at $KNOBWATCH" >&2; exit 99; }

# ms_since T0: milliseconds since date +%s%N gave T0.
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# mark WATCHNAME: only what the process prints from now on counts.
mark() { marked=$(wc -l <"$tmp/$1.out"); }
marked=0

# reaches WATCHNAME KNOB=VALUE SOURCE WHAT: after the mark, the process
# prints the value within the bound.
reaches() {
	local t0=$(date +%s%N) rc
	wait_after=$marked wait_for "$tmp/$1.out" "^$2 $3\$"
	rc=$?
	marked=0
	[ $rc = 0 ] || fail "$4: '$2 $3' did not reach the process within 1 s; it printed: $(tail -3 "$tmp/$1.out")"
	echo "$4: reached the process in $(ms_since "$t0") ms (after hpctl returned)"
	ok
}

expect 0 "$HPCTL" get threshold
threshold_default=${out#threshold=}

# ---- live changes ----------------------------------------------------------------
start_watch w1 threshold mode
pid1=$watch_pid
reaches w1 "threshold=$threshold_default" default "initial value"
mark w1
expect 0 "$HPCTL" set threshold=8M
reaches w1 threshold=8M control "hpctl set threshold=8M"
mark w1
expect 0 "$HPCTL" set mode=thp
reaches w1 mode=thp control "hpctl set mode=thp"
# Edited in place (same inode), twice with the same size within a second:
# coarse timestamps must not hide the second edit.
mark w1
printf '16M\n' >"$CTL/threshold"
reaches w1 threshold=16M control "in-place edit"
mark w1
printf '32M\n' >"$CTL/threshold"
reaches w1 threshold=32M control "second same-size in-place edit"
# A deleted file means back to the default.
mark w1
expect 0 "$HPCTL" reset mode
reaches w1 mode=auto default "hpctl reset mode"
# A refused value keeps the last good one: checked once the process has
# looked at it (it published the rejection), on that same snapshot.
rejects=$(published_stat "$(published "$pid1")" config_rejects)
printf 'bogus\n' >"$CTL/threshold"
wait_rejected "$pid1" threshold "invalid value 'bogus" "$rejects" ||
	fail "the process did not reject 'bogus' within 1 s: $(published "$pid1")"
grep -qx 'knob threshold 32M control' <<<"$snapshot" ||
	fail "a rejected value changed the process: $(grep '^knob threshold' <<<"$snapshot")"
! grep -q bogus "$tmp/w1.out" || fail "knobwatch saw the rejected value: $(tail -3 "$tmp/w1.out")"
ok
printf '32M\n' >"$CTL/threshold"

# ---- stats of a running process ------------------------------------------------------
expect 0 "$HPCTL" stats --long "$pid1"
contains "$out" "pid $pid1 (knobwatch)" "stats PID header"
contains "$out" "threshold=32M (control)" "stats PID knobs"
contains "$out" "config_generation" "stats PID counters"
contains "$out" "rejected: " "stats shows the rejected value"
expect 0 "$HPCTL" stats --long
contains "$out" "pid $pid1 (knobwatch)" "stats of all processes"
expect 0 "$HPCTL" stats --json "$pid1"
valid_json "$out" "stats --json"
printf '%s' "$out" | python3 -c '
import json, sys
(p,) = json.load(sys.stdin)
assert p["pid"] == '"$pid1"' and p["comm"] == "knobwatch", p
assert p["start_time"] > 0
assert len(p["stats"]) >= 20 and "config_rejects" in p["stats"], p["stats"]
assert p["stats"]["config_rejects"] >= 1, p["stats"]
assert p["knobs"]["threshold"] == {"value": "32M", "source": "control", "rejected": p["knobs"]["threshold"]["rejected"]}
assert "bogus" in p["knobs"]["threshold"]["rejected"], p["knobs"]["threshold"]
' || fail "stats --json content: $out"
ok
# The stats file holds every counter hp_stat_name() knows.
[ "$(grep -c '^stat ' "$CTL/proc/$pid1/stats")" -ge 20 ] || fail "stats file: $(cat "$CTL/proc/$pid1/stats")"
ok

# ---- per-process override ---------------------------------------------------------------------
start_watch w2 threshold
pid2=$watch_pid
HPALLOC_THRESHOLD=2M start_watch w3 threshold
pid3=$watch_pid
reaches w3 threshold=2M env "environment beats the control directory"
mark w1
expect 0 "$HPCTL" -p "$pid1" set threshold=64M
reaches w1 threshold=64M process "hpctl -p PID set"
[ "$(cat "$CTL/proc/$pid1/override/threshold")" = 64M ] || fail "override file"
ok
mark w3
expect 0 "$HPCTL" -p "$pid3" set threshold=128M
reaches w3 threshold=128M process "override beats the environment"
# $pid2 must not have taken $pid1's override.  Proof that it polled since:
# a control file every process rejects (a bad verbose), published by it.
rejects=$(published_stat "$(published "$pid2")" config_rejects)
printf 'sentinel-%s\n' "$pid2" >"$tmp/sentinel"; mv "$tmp/sentinel" "$CTL/verbose"
wait_rejected "$pid2" verbose "sentinel-$pid2" "$rejects" ||
	fail "w2 did not look at the control directory within 1 s: $(published "$pid2")"
rm -f "$CTL/verbose"
grep -qx 'knob threshold 32M control' <<<"$snapshot" ||
	fail "the override of $pid1 reached $pid2: $(grep '^knob threshold' <<<"$snapshot")"
! grep -q '^threshold=64M' "$tmp/w2.out" || fail "the override of $pid1 reached $pid2"
grep '^threshold=' "$tmp/w2.out" | tail -1 | grep -q '^threshold=32M control$' || fail "w2: $(cat "$tmp/w2.out")"
ok
# hpctl -p PID get reads what the process published.
for i in $(seq 30); do
	run "$HPCTL" -p "$pid1" get threshold
	[ "$out" = threshold=64M ] && break
	sleep 0.05
done
[ "$rc" = 0 ] && [ "$out" = threshold=64M ] || fail "-p get: $rc $out $err"
ok
expect 0 "$HPCTL" -p "$pid1" --json get
valid_json "$out" "-p get --json"
mark w1
expect 0 "$HPCTL" -p "$pid1" reset threshold
reaches w1 threshold=32M control "hpctl -p PID reset"
# A process that does not use hpalloc, or no such process: runtime failure.
expect 1 "$HPCTL" -p $$ set threshold=4M
contains "$err" "does not publish" "-p of a non-hpalloc process"
expect 2 "$HPCTL" -p "$pid1" set threshold=4Q
[ -e "$CTL/proc/$pid1/override/threshold" ] && fail "refused -p set wrote a file"
ok

# ---- removed at exit -----------------------------------------------------------------------------
[ -d "$CTL/proc/$pid2" ] || fail "w2 entry"
kill -TERM "$pid2"
wait "$pid2" 2>/dev/null
[ -d "$CTL/proc/$pid2" ] && fail "entry of $pid2 not removed at exit: $(ls -R "$CTL/proc/$pid2")"
ok

# ---- fork: the child publishes itself; its exit leaves the parent's entry ----
start_watch w5 -f threshold
parent=$watch_pid
wait_for "$tmp/w5.out" '^forked ' || fail "no child"
child=$(sed -n 's/^forked //p' "$tmp/w5.out")
for i in $(seq 40); do [ -f "$CTL/proc/$child/stats" ] && break; sleep 0.05; done
[ -f "$CTL/proc/$child/stats" ] || fail "child $child of $parent did not publish itself"
grep -qx "pid $child" "$CTL/proc/$child/stats" || fail "child's stats name the child: $(head -3 "$CTL/proc/$child/stats")"
ok
for i in $(seq 60); do [ -e "$CTL/proc/$child" ] || break; sleep 0.05; done
[ -e "$CTL/proc/$child" ] && fail "child's entry not removed at its exit"
ok
[ -f "$CTL/proc/$parent/stats" ] || fail "the child's exit removed the parent's entry"
ok
expect 0 "$HPCTL" stats "$parent"

# ---- pruning of a killed process ----------------------------------------------------------------------
kill -KILL "$pid3"
wait "$pid3" 2>/dev/null
[ -f "$CTL/proc/$pid3/stats" ] || fail "a SIGKILLed process cannot clean up: its entry should still be there"
ok
expect 0 "$HPCTL" stats --long
case $out in *"pid $pid3 "*) fail "stats lists dead $pid3" ;; esac
contains "$err" "pruned the entry of dead process $pid3" "prune message"
[ -e "$CTL/proc/$pid3" ] && fail "entry of $pid3 not pruned"
ok
# A live pid whose entry was left by an earlier process (recycled pid):
# start times differ, so it is stale too.
mkdir -p "$CTL/proc/$$/override"
printf 'hpalloc-stats 1\npid %s\ncomm old\nstart_time 1\npidns %s\n' $$ \
	"$(stat -L -c '%d %i' /proc/self/ns/pid)" >"$CTL/proc/$$/stats"
echo 1G >"$CTL/proc/$$/override/threshold"
expect 0 "$HPCTL" stats --json
valid_json "$out" "stats --json of all"
case $out in *"\"pid\":$$,"*) fail "stats lists the recycled pid $$" ;; esac
[ -e "$CTL/proc/$$" ] && fail "recycled-pid entry not pruned"
ok
expect 1 "$HPCTL" -p "$pid3" get
expect 0 "$HPCTL" stats "$pid1"

# ---- a lowered cache_max reaches what a process has cached ------------------------------------
# holder keeps one 64 MiB block live and one cached; its decay is 10
# minutes (environment), so only the lowered bound can take the cached
# block: gone from the process's count (cached_bytes, published each
# janitor period) and from its mappings (smaps) within 2 s -- the change
# reaches it within 1 s, the release follows.
HPALLOC_MODE=thp HPALLOC_THRESHOLD=1M HPALLOC_CACHE_DECAY_MS=600000 start_holder 64M
hpid=$holder_pid
cached_of() { published_stat "$(published "$1")" cached_bytes; }
for i in $(seq 40); do
	[ "$(cached_of "$hpid")" -ge $((64 << 20)) ] && break
	sleep 0.05
done
[ "$(cached_of "$hpid")" -ge $((64 << 20)) ] || fail "holder $hpid published $(cached_of "$hpid") cached bytes, not 64 MiB"
hg_before=$(hp_memory hg_bytes "$hpid")
[ "$hg_before" -ge $((128 << 20)) ] || fail "holder $hpid has $hg_before bytes of THP blocks mapped, not its two of 64 MiB"
ok
t0=$(date +%s%N)
expect 0 "$HPCTL" set cache_max=8M
while :; do
	cached=$(cached_of "$hpid")
	hg=$(hp_memory hg_bytes "$hpid")
	[ "$cached" -le $((8 << 20)) ] && [ "$hg" -le $((hg_before - (64 << 20))) ] && break
	[ "$(ms_since "$t0")" -ge 2000 ] &&
		fail "2 s after hpctl set cache_max=8M, holder $hpid has $cached bytes cached and" \
			"$hg of THP blocks mapped (before: $hg_before)"
	sleep 0.05
done
echo "cache_max=8M: the cached 64 MiB block left holder $hpid in $(ms_since "$t0") ms" \
	"($cached bytes cached, THP blocks mapped $hg_before -> $hg bytes)"
ok
expect 0 "$HPCTL" reset cache_max

done_ok
