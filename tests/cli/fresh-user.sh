#!/bin/bash
# A fresh session of a user who is not root: nothing made
# $XDG_RUNTIME_DIR/hpalloc.  A process using hpalloc makes it, publishes
# itself there, and the user's hpctl stats and hpctl -p PID set reach it
# with no set-up.  Only in an XDG_RUNTIME_DIR that is the user's and private
# (0700, as the XDG specification requires): otherwise nothing is made and
# it says why (verbose=1).  Without XDG_RUNTIME_DIR (a batch job, `su -`,
# issue 34): /tmp/hpalloc-<uid>, made mode 0700 by the user's first
# process, found the same way by the library and hpctl, so stats and -p
# work there too, and hpctl status needs no directory at all; one another
# user made first, or a symbolic link there, is refused and said, never
# written into.  The user: nobody.
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

# ---- no XDG_RUNTIME_DIR (a batch job, `su -`): /tmp/hpalloc-<uid>, the user's alone -------------
TDIR=/tmp/hpalloc-$(id -u nobody)
# ours to remove: a test machine's nobody runs nothing else of hpalloc's
trap 'rm -rf "$xdg" "$TDIR"; cleanup' EXIT
rm -rf "$TDIR"
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" status
[ "$rc" = 0 ] || fail "hpctl status without XDG_RUNTIME_DIR: $rc $err"
contains "$out" "control directory: $TDIR" "hpctl status names the directory without needing it"
[ ! -e "$TDIR" ] || fail "hpctl status made $TDIR"
ok
start -u XDG_RUNTIME_DIR HPALLOC_VERBOSE=1
kw_published_within "$TDIR" 3 || fail "nobody's process did not publish itself in $TDIR: $(cat "$tmp/kw.err")"
[ "$(stat -c '%U %a' "$TDIR")" = "nobody 700" ] ||
	fail "$TDIR: $(stat -c '%U %a' "$TDIR"), not nobody's alone (700)"
ok
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" stats
[ "$rc" = 0 ] || fail "hpctl stats as nobody without XDG_RUNTIME_DIR: $rc $err"
contains "$out" "$watch_pid" "nobody's hpctl stats lists its process (batch job)"
wait_after=$(wc -l <"$tmp/kw.out")
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" -p "$watch_pid" set threshold=8M
[ "$rc" = 0 ] || fail "hpctl -p set as nobody without XDG_RUNTIME_DIR: $rc $err"
wait_for "$tmp/kw.out" '^threshold=8M process' 1 ||
	fail "hpctl -p $watch_pid set did not reach it: $(cat "$tmp/kw.out")"
ok
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" status
[ "$rc" = 0 ] || fail "hpctl status: $rc $err"
ok
stop

# another user's directory under that name (made first, to deny or to
# watch): refused and said, by the process and by hpctl; nothing published
# or written there
rm -rf "$TDIR"
mkdir -m 0755 "$TDIR" && chown daemon "$TDIR" || fail "cannot plant $TDIR"
start -u XDG_RUNTIME_DIR HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: control directory $TDIR: .*(owned by uid|made by another user)" 3 ||
	fail "no reason given for a $TDIR of daemon's: $(cat "$tmp/kw.err")"
ok
sleep 0.6 # two janitor ticks
[ -z "$(ls -A "$TDIR")" ] || fail "written into daemon's $TDIR: $(ls -A "$TDIR")"
ok
stop
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" stats
[ "$rc" = 1 ] || fail "hpctl stats with daemon's $TDIR: $rc $out"
contains "$err" "$TDIR refused" "hpctl stats says why"
run as_user -u XDG_RUNTIME_DIR "$CTLBIN" set threshold=8M
[ "$rc" = 1 ] || fail "hpctl set into daemon's $TDIR: $rc"
[ -z "$(ls -A "$TDIR")" ] || fail "hpctl set wrote into daemon's $TDIR"
ok
# a symbolic link planted there: never followed
rm -rf "$TDIR"
ln -s "$xdg" "$TDIR"
start -u XDG_RUNTIME_DIR HPALLOC_VERBOSE=1
wait_for "$tmp/kw.err" "not publishing stats: control directory $TDIR: is a symbolic link" 3 ||
	fail "no reason given for a symbolic link at $TDIR: $(cat "$tmp/kw.err")"
[ ! -e "$xdg/proc" ] || fail "published through the link at $TDIR"
ok
stop
rm -f "$TDIR"
done_ok
