#!/bin/bash
# A fresh session of a user who is not root: nothing made
# $XDG_RUNTIME_DIR/hpalloc.  A process using hpalloc makes it, publishes
# itself there, and the user's hpctl stats and hpctl -p PID set reach it
# with no set-up.  Only in an XDG_RUNTIME_DIR that is the user's and private
# (0700, as the XDG specification requires): otherwise nothing is made and
# it says why (verbose=1); without XDG_RUNTIME_DIR nothing is made anywhere
# (no guessable /tmp path), and hpctl says why.  The user: nobody.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "switching to another user (nobody) needs root"
can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"
unset HPALLOC_CONTROL_DIR
nobody_stage "$builddir/tests/cli/knobwatch-static"
KW=$staged
nobody_stage "$HPCTL"
CTLBIN=$staged
xdg=$(mktemp -d /tmp/hpalloc-xdg.XXXXXX) || fail "mktemp"
trap 'rm -rf "$xdg"; cleanup' EXIT
chown nobody:nogroup "$xdg" && chmod 0700 "$xdg"
DIR=$xdg/hpalloc

# as_user VAR=VALUE... CMD...: as nobody, in its own environment
as_user() { as_nobody env -u LD_PRELOAD "$@"; }
# start VAR=VALUE...: a knobwatch with those variables (tests/cli/lib.sh)
start() { kw_start "$KW" as_user "$@"; }
stop() { kw_stop; }
published_within() { kw_published_within "$DIR" "$1"; }

# ---- the first process makes it -------------------------------------------------------------
start XDG_RUNTIME_DIR="$xdg" HPALLOC_VERBOSE=1
published_within 3 || fail "nobody's process did not publish itself in $DIR: $(cat "$tmp/kw.err")"
[ "$(stat -c '%U' "$DIR")" = nobody ] || fail "$DIR belongs to $(stat -c %U "$DIR")"
ok
run as_user XDG_RUNTIME_DIR="$xdg" "$CTLBIN" stats
[ "$rc" = 0 ] || fail "hpctl stats as nobody: $rc $err"
contains "$out" "$watch_pid" "nobody's hpctl stats lists its process"
wait_after=$(wc -l <"$tmp/kw.out")
run as_user XDG_RUNTIME_DIR="$xdg" "$CTLBIN" -p "$watch_pid" set threshold=8M
[ "$rc" = 0 ] || fail "hpctl -p set as nobody: $rc $err"
wait_for "$tmp/kw.out" '^threshold=8M process' 1 ||
	fail "hpctl -p $watch_pid set did not reach it: $(cat "$tmp/kw.out")"
ok
stop
rm -rf "$DIR"
run as_user XDG_RUNTIME_DIR="$xdg" "$CTLBIN" stats
[ "$rc" = 0 ] || fail "hpctl stats as nobody: $rc $err"
contains "$out" "$DIR does not exist yet" "hpctl stats of a fresh session says why"

# ---- XDG_RUNTIME_DIR not private, or not the user's: nothing made -----------------------------
chmod 0755 "$xdg"
start XDG_RUNTIME_DIR="$xdg" HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: .*XDG_RUNTIME_DIR $xdg is not private" 3 ||
	fail "no reason given for a 0755 XDG_RUNTIME_DIR: $(cat "$tmp/kw.err")"
[ ! -e "$DIR" ] || fail "$DIR was made in a 0755 XDG_RUNTIME_DIR"
ok
stop
chmod 0700 "$xdg"
other=$(mktemp -d /tmp/hpalloc-xdg-root.XXXXXX) || fail "mktemp"
chmod 0777 "$other" # writable by nobody, but not nobody's
start XDG_RUNTIME_DIR="$other" HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: .*XDG_RUNTIME_DIR $other is not private" 3 ||
	{ rm -rf "$other"; fail "no reason given for an XDG_RUNTIME_DIR of root's: $(cat "$tmp/kw.err")"; }
[ ! -e "$other/hpalloc" ] || { rm -rf "$other"; fail "$other/hpalloc was made"; }
rm -rf "$other"
ok
stop

# ---- no XDG_RUNTIME_DIR: nothing made anywhere, and said ------------------------------------------
touch "$tmp/marker"
start -u XDG_RUNTIME_DIR HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "no control directory \(not root, and neither HPALLOC_CONTROL_DIR nor XDG_RUNTIME_DIR is set\)" 3 ||
	fail "no reason given without XDG_RUNTIME_DIR: $(cat "$tmp/kw.err")"
ok
sleep 0.6 # two janitor ticks
stop
# what nobody made since: other tests and programs use /tmp meanwhile
made=$(find /tmp /var/tmp /dev/shm -maxdepth 1 -user nobody -newer "$tmp/marker" 2>/dev/null)
[ -z "$made" ] || fail "made without XDG_RUNTIME_DIR: $made"
ok
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" stats
[ "$rc" = 1 ] || fail "hpctl stats without XDG_RUNTIME_DIR: $rc"
contains "$err" "neither HPALLOC_CONTROL_DIR nor XDG_RUNTIME_DIR is set" "hpctl stats without XDG_RUNTIME_DIR"
done_ok
