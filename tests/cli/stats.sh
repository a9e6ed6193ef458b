#!/bin/bash
# hpctl stats and hpctl top as a fleet view: one line per process using
# hpalloc, largest huge-page user first, human sizes, a total line; --long
# and --json with everything; top redraws the same table until interrupted;
# 50 processes give 50 rows.  The numbers are checked against what the
# processes published (--json, raw bytes) and against their own smaps.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

# huge_of PID: live huge bytes (THP + hugetlb) the process last published.
huge_of() {
	"$HPCTL" --json stats "$1" 2>/dev/null | python3 -c '
import json, sys
try:
    (p,) = json.load(sys.stdin)
    print(p["stats"]["thp_live_bytes"] + p["stats"]["hugetlb_live_bytes"])
except Exception:
    print(-1)'
}

# ahead_saved_of PID: populate_ahead_bytes and populate_saved_us as published,
# written as the table writes them (binary units with one decimal; seconds).
ahead_saved_of() {
	"$HPCTL" --json stats "$1" 2>/dev/null | python3 -c '
import json, sys
(p,) = json.load(sys.stdin)
b, us = p["stats"]["populate_ahead_bytes"], p["stats"]["populate_saved_us"]
if b < 1024:
    ahead = str(b)
else:
    v, u = float(b), -1
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    if v >= 1023.95 and u < 5:
        v /= 1024
        u += 1
    ahead = "%.1f%s" % (v, "KMGTPE"[u])
saved = "0" if not us else ("%.2fs" % (us / 1e6) if us < 10000000 else "%.1fs" % (us / 1e6))
print(ahead, saved)'
}

# published PID BYTES: wait (5 s) until the process published that much.
published() {
	local i
	for i in $(seq 100); do
		[ "$(huge_of "$1")" = "$2" ] && return 0
		sleep 0.05
	done
	fail "process $1 never published $2 huge bytes (last: $(huge_of "$1"))"
}

# ---- nobody publishes yet --------------------------------------------------------
expect 0 "$HPCTL" stats
contains "$out" "no live process publishes hpalloc stats in $CTL/proc: " "empty"
expect 0 "$HPCTL" --json stats
[ "$out" = "[]" ] || fail "empty --json: $out"
expect 0 "$HPCTL" top -n 1
contains "$out" "  total 0 processes" "empty top"

# ---- three processes: 64 MiB, 8 MiB, and one that never had a huge block --------
# The last has no janitor (it starts with the first huge block: hpalloc(7),
# THREADS), so it publishes nothing and is not listed.
start_holder 64M; big=$holder_pid
start_holder 8M; small=$holder_pid
start_holder; idle=$holder_pid
published "$big" $((64 << 20))
published "$small" $((8 << 20))
expect 1 "$HPCTL" stats "$idle"
contains "$err" "does not publish" "a process that never went huge"
[ ! -e "$CTL/proc/$idle" ] || fail "$idle, never huge, published $CTL/proc/$idle"
ok
# what hpctl will show is what the kernel backs (the cached block aside)
[ "$(hp_memory process_huge_bytes "$big")" -ge $((64 << 20)) ] || fail "smaps of $big: $(hp_memory process_huge_bytes "$big") huge bytes"
ok

expect 0 "$HPCTL" stats
printf '%s\n' "$out" >"$tmp/table"
header=$(sed -n 1p "$tmp/table")
[ "$(echo $header)" = "PID COMMAND HUGETLB THP CACHED HIT% FALLBACKS FAILURES AHEAD SAVED ORIGINS" ] ||
	fail "header: $header"
ok
[ "$(wc -l <"$tmp/table")" = 4 ] || fail "2 rows + header + total expected: $out"
ok
# rows: largest first
order=$(awk 'NR > 1 && $1 != "total" { printf "%s ", $1 }' "$tmp/table")
[ "$order" = "$big $small " ] || fail "order by huge bytes: got '$order', want '$big $small': $out"
ok
# row PID: its fields (PID COMMAND HUGETLB THP CACHED HIT% FALLBACKS FAILURES AHEAD SAVED ORIGINS...)
row() { awk -v p="$1" '$1 == p' "$tmp/table"; }
set -- $(row "$big")
[ "$2" = holder ] || fail "command of $big: $2"
# 64 MiB live on one backend or the other (mode=auto: hugetlb when a pool has pages)
case "$3/$4" in 64.0M/0|0/64.0M) ok ;; *) fail "huge bytes of $big: hugetlb $3 thp $4" ;; esac
# one hit of three huge allocations (holder: SIZE, then twice SIZE freed)
[ "$6" = 33.3 ] || fail "hit rate of $big: $6"
[ "$7/$8" = 0/0 ] || fail "fallbacks/failures of $big: $7/$8"
# what its populate workers did, as it published it (--json: raw numbers)
[ "$9 ${10}" = "$(ahead_saved_of "$big")" ] || fail "ahead/saved of $big: $9 ${10}, published $(ahead_saved_of "$big")"
[ "${11}" = api=64.0M ] || fail "origins of $big: ${*:11}"
ok
set -- $(awk '$1 == "total"' "$tmp/table")
[ "$2 $3" = "2 processes" ] || fail "total line: $*"
case "$4/$5" in 72.0M/0|0/72.0M|64.0M/8.0M|8.0M/64.0M) ok ;; *) fail "total huge bytes: $*" ;; esac
[ "$8/$9" = 0/0 ] && [ "${12}" = api=72.0M ] || fail "total line: $*"
ok

# --long: every counter and knob; --json: the same, raw
expect 0 "$HPCTL" stats --long "$big"
contains "$out" "pid $big (holder)" "--long header"
contains "$out" "threshold=" "--long knobs"
nstats=$(printf '%s\n' "$out" | awk '/^  stats:/ { on = 1; next } /^  knobs:/ { on = 0 } on' | wc -l)
njson=$("$HPCTL" --json stats "$big" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)[0]["stats"]))')
[ "$nstats" -ge 30 ] && [ "$nstats" = "$njson" ] || fail "--long shows $nstats counters, --json $njson"
ok
expect 0 "$HPCTL" --json stats
valid_json "$out" "stats --json"
printf '%s' "$out" | python3 -c '
import json, sys
procs = json.load(sys.stdin)
pids = [p["pid"] for p in procs]
assert pids == sorted(pids) and set(pids) == {'"$big,$small"'}, pids
for p in procs:
    assert set(p) == {"pid", "comm", "start_time", "stats", "knobs"}, p.keys()
    assert p["knobs"]["threshold"]["source"] == "default", p["knobs"]
' || fail "stats --json content: $out"
ok
# explicit PIDs: only those rows
expect 0 "$HPCTL" stats "$small"
[ "$(printf '%s\n' "$out" | awk 'NR > 1 && $1 != "total"' | awk '{print $1}')" = "$small" ] ||
	fail "stats $small: $out"
ok

# ---- top: the same table per frame, until interrupted ----------------------------
expect 0 "$HPCTL" top -n 2 -d 0.2
frames=$(printf '%s\n' "$out" | grep -c '^hpctl top - ')
[ "$frames" = 2 ] || fail "top -n 2: $frames frames: $out"
[ "$(printf '%s\n' "$out" | grep -c "^ *$big  *holder ")" = 2 ] || fail "top rows: $out"
case $out in *$'\033'*) fail "escape sequences on a pipe: $out" ;; esac
ok
t0=$(date +%s%N)
timeout --preserve-status -s INT 1.2 "$HPCTL" top >"$tmp/top.out" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 0 ] || fail "top after SIGINT: exit $rc: $(cat "$tmp/top.out")"
grep -q '^  total 2 processes' "$tmp/top.out" || fail "top frame: $(cat "$tmp/top.out")"
[ "$ms" -lt 5000 ] || fail "top took $ms ms to stop after SIGINT"
ok
# a change reaches the next frame: the small one stops
kill -TERM "$small"; wait "$small" 2>/dev/null
expect 0 "$HPCTL" top -n 1
contains "$out" "total 1 process " "top after an exit"

# ---- 50 processes: 50 rows and a total -----------------------------------------------
kill -TERM "$big" "$idle"; wait "$big" "$idle" 2>/dev/null
pids=()
for i in $(seq 50); do
	start_holder 2M
	pids+=("$holder_pid")
done
for p in "${pids[@]}"; do published "$p" $((2 << 20)); done
expect 0 "$HPCTL" stats
rows=$(printf '%s\n' "$out" | awk 'NR > 1 && $1 != "total" { print $1 }' | sort -n)
[ "$rows" = "$(printf '%s\n' "${pids[@]}" | sort -n)" ] || fail "50 rows, one per process: $out"
ok
set -- $(printf '%s\n' "$out" | awk '$1 == "total"')
[ "$2 $3" = "50 processes" ] || fail "total of 50: $*"
case "$4/$5" in 100.0M/0|0/100.0M) ok ;; *) [ "${12}" = api=100.0M ] || fail "total of 50: $*"; ok ;; esac

done_ok
