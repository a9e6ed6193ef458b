#!/bin/bash
# hpctl stats with nothing to show says why, instead of an empty answer a
# user takes for "nothing uses hpalloc here": the control directory does not
# exist (and who makes it), or no process of this user uses it.  (The
# default directories: tests/cli/fresh-root.sh and fresh-user.sh.)
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

HPALLOC_CONTROL_DIR=$tmp/missing expect 0 "$HPCTL" stats
contains "$out" "no live process publishes hpalloc stats in $tmp/missing/proc: $tmp/missing does not exist" \
	"stats with a missing HPALLOC_CONTROL_DIR"
contains "$out" "HPALLOC_CONTROL_DIR names" "stats with a missing HPALLOC_CONTROL_DIR"
[ ! -e "$tmp/missing" ] || fail "hpctl stats made $tmp/missing"
ok

expect 0 "$HPCTL" stats
contains "$out" "no live process publishes hpalloc stats in $CTL/proc: no process using hpalloc runs as" \
	"stats with an empty control directory"
contains "$out" "hpalloc(7)" "stats with an empty control directory points to the rule"

# a process that was there and is gone: the same answer
start_watch w threshold
pid=$watch_pid
expect 0 "$HPCTL" stats
contains "$out" "$pid" "stats lists a live process"
kill -TERM "$pid"
wait "$pid"
expect 0 "$HPCTL" stats
contains "$out" "no process using hpalloc runs as" "stats once the process is gone"
done_ok
