#!/bin/bash
# A fresh machine (a fresh boot, a container): nothing made /run/hpalloc.
# A process using hpalloc as root makes it (0755 root, whatever its umask),
# publishes itself there, and hpctl stats and hpctl -p PID set reach it with
# no set-up.  It never uses a /run/hpalloc another user made, nor makes one
# below a /run others can write to, and says why (verbose=1).  hpctl stats
# with nothing to show says why.  The machine's /run is not touched: all of
# this runs in a mount namespace of its own, with a tmpfs on /run that goes
# away with it.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "the default control directory of root, /run/hpalloc"
if [ -z "${HPALLOC_TEST_IN_NS:-}" ]; then
	unshare -m --propagation private true 2>/dev/null ||
		skip_test root "cannot make a mount namespace (unshare -m) for a private /run"
	exec unshare -m --propagation private env HPALLOC_TEST_IN_NS=1 bash "$0"
fi
mount -t tmpfs -o mode=0755,size=4m hpalloc-test-run /run || fail "cannot mount a tmpfs on /run"
[ "$(stat -c %m /run)" = /run ] || fail "/run is not the test's own mount"
unset HPALLOC_CONTROL_DIR
umask 077
RUN=/run/hpalloc

# start VAR=VALUE...: a knobwatch with those variables (tests/cli/lib.sh)
start() { kw_start "$KNOBWATCH" env "$@"; }
stop() { kw_stop; }
published_within() { kw_published_within "$RUN" "$1"; }

# ---- the first process makes it -------------------------------------------------------
start HPALLOC_VERBOSE=1
published_within 3 || fail "a root process did not publish itself in $RUN: $(ls -la /run) $(cat "$tmp/kw.err")"
[ "$(stat -c '%a %U %G' "$RUN")" = "755 root root" ] ||
	fail "$RUN is $(stat -c '%a %U %G' "$RUN"), not 755 root root"
ok
expect 0 "$HPCTL" stats
contains "$out" "$watch_pid" "hpctl stats lists the process"
wait_after=$(wc -l <"$tmp/kw.out")
expect 0 "$HPCTL" -p "$watch_pid" set threshold=8M
wait_for "$tmp/kw.out" '^threshold=8M process' 1 ||
	fail "hpctl -p $watch_pid set did not reach it: $(cat "$tmp/kw.out")"
ok
stop
[ ! -e "$RUN/proc/$watch_pid" ] || fail "the entry outlived its process"
expect 0 "$HPCTL" stats
contains "$out" "no process using hpalloc runs as root" "hpctl stats with an empty $RUN"
rm -rf "$RUN"
expect 0 "$HPCTL" stats
contains "$out" "$RUN does not exist yet" "hpctl stats on a fresh machine says why"

# ---- made by another user first: never used ------------------------------------------
mkdir -m 0755 "$RUN" && chown nobody "$RUN"
start HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: control directory $RUN: owned by uid $(id -u nobody)" 3 ||
	fail "no reason given for a $RUN of nobody's: $(cat "$tmp/kw.err")"
ok
[ -z "$(ls -A "$RUN")" ] || fail "a root process wrote into a $RUN of nobody's: $(ls -A "$RUN")"
ok
stop

# ---- /run writable by others: nothing made there -----------------------------------------
rm -rf "$RUN"
chmod 1777 /run
start HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: control directory $RUN: /run is not root's alone" 3 ||
	fail "no reason given for a /run others can write to: $(cat "$tmp/kw.err")"
ok
[ ! -e "$RUN" ] || fail "$RUN was made below a /run others can write to"
ok
stop
chmod 0755 /run

# ---- hpctl set makes it as the library does (0755 whatever the umask) --------------------
expect 0 "$HPCTL" set threshold=4M
[ "$(stat -c '%a %U' "$RUN")" = "755 root" ] || fail "hpctl set made $RUN $(stat -c '%a %U' "$RUN")"
ok
done_ok
