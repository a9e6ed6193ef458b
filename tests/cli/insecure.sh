#!/bin/bash
# Insecure or broken control files are ignored, with the reason shown:
# other/group-writable, symlink, foreign owner, oversized, NUL bytes,
# invalid value, not a regular file (directory, FIFO), and an insecure
# control directory.  A running process keeps its last good value; a new
# one (hpctl itself) falls back to the lower layers; both show why.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ -x "$KNOBWATCH" ] || { echo "knobwatch not built at $KNOBWATCH" >&2; exit 99; }

expect 0 "$HPCTL" set threshold=4M
start_watch w threshold
pid=$watch_pid
wait_for "$tmp/w.out" '^threshold=4M control$' || fail "initial 4M"

# show_rejects REASON WHAT: hpctl show (a fresh process) does not use the
# file and names the reason; the live process looks at it -- it publishes
# one more rejection, with this reason (the library never clears an old
# one, so matching the text alone could find the previous case's line) --
# and, in that same published snapshot, still has 4M.
show_rejects() {
	local reason=$1 what=$2
	expect 0 "$HPCTL" show
	contains "$out" "rejected: $CTL/threshold ignored: $reason" "hpctl show: $what"
	case $out in *"threshold = 4M  (source: control"*|*"(source: control"*) fail "$what: hpctl used the file: $out" ;; esac
	ok
	expect 0 "$HPCTL" show --json
	printf '%s' "$out" | python3 -c '
import json, sys
k = json.load(sys.stdin)["knobs"]["threshold"]
assert k["source"] == "default" and sys.argv[1] in k["rejected"], k' "$reason" ||
		fail "show --json: $what: $out"
	ok
	wait_rejected "$pid" threshold "$reason" "$rejects_before" ||
		fail "$what: within 1 s the live process did not publish a new rejection '$reason': $(published "$pid")"
	ok
	grep -qx 'knob threshold 4M control' <<<"$snapshot" ||
		fail "$what: the live process lost its last good value: $(grep '^knob threshold' <<<"$snapshot")"
	ok
	echo "ignored as expected: $what"
}

# install_bad: move $tmp/bad over the knob file in one rename, so the
# process never sees a half-made file; the process's rejection count
# before it is in $rejects_before.
install_bad() {
	rejects_before=$(published_stat "$(published "$pid")" config_rejects)
	mv -f "$tmp/bad" "$CTL/threshold"
}

printf '8M\n' >"$tmp/bad"; chmod 0666 "$tmp/bad"; install_bad
show_rejects "writable by group or others (mode 0666)" "other-writable file"

printf '8M\n' >"$tmp/bad"; chmod 0620 "$tmp/bad"; install_bad
show_rejects "writable by group or others (mode 0620)" "group-writable file"

printf '8M\n' >"$tmp/target"; chmod 0644 "$tmp/target"; ln -s "$tmp/target" "$tmp/bad"; install_bad
show_rejects "is a symbolic link" "symlink"

if [ "$(id -u)" = 0 ]; then
	printf '8M\n' >"$tmp/bad"; chmod 0644 "$tmp/bad"; chown nobody "$tmp/bad"; install_bad
	show_rejects "owned by uid $(id -u nobody), not by uid 0 or root" "foreign owner"
else
	note_skip root "the foreign-owner case needs chown and runs as root (CI)"
fi

{ printf '8M\n'; head -c 5000 /dev/zero | tr '\0' ' '; } >"$tmp/bad"; chmod 0644 "$tmp/bad"; install_bad
show_rejects "larger than 4096 bytes" "oversized file"

printf '8M\0garbage\n' >"$tmp/bad"; chmod 0644 "$tmp/bad"; install_bad
show_rejects "contains a NUL byte" "NUL bytes"

# random bytes, but not one of them a digit: never a valid size by chance
head -c 64 /dev/urandom | tr -d '\0-9' >"$tmp/bad"; chmod 0644 "$tmp/bad"; install_bad
show_rejects "threshold: invalid value '" "random garbage"

printf 'auto [thp] [off]\n' >"$tmp/bad"; chmod 0644 "$tmp/bad"; install_bad
show_rejects "threshold: invalid value 'auto [thp] [off]" "two bracketed values"

marked=$(wc -l <"$tmp/w.out")
rm -f "$CTL/threshold"; mkdir "$tmp/bad"; mv "$tmp/bad" "$CTL/threshold"
expect 0 "$HPCTL" show
contains "$out" "rejected: $CTL/threshold ignored: not a regular file" "directory instead of a file"
rmdir "$CTL/threshold"
# no file: the live process goes back to the default (a line after the mark)
wait_after=$marked wait_for "$tmp/w.out" '^threshold=1M default$' || fail "default after deletion"

# Give it 4M again before the next cases, and wait for the process itself
# to report it: lines before the mark say 4M from the start of the test.
marked=$(wc -l <"$tmp/w.out")
expect 0 "$HPCTL" set threshold=4M
wait_after=$marked wait_for "$tmp/w.out" '^threshold=4M control$' || fail "4M again"
mkfifo -m 0644 "$tmp/bad"; install_bad
show_rejects "not a regular file" "FIFO (must not block the reader)"

# ---- an insecure control directory: nothing in it is used ---------------------------
expect 0 "$HPCTL" set threshold=4M
rejects_before=$(published_stat "$(published "$pid")" config_rejects)
chmod 0777 "$CTL"
printf '8M\n' >"$tmp/good"; chmod 0644 "$tmp/good"; mv -f "$tmp/good" "$CTL/threshold"
expect 0 "$HPCTL" show
contains "$out" "ignored: writable by group or others (mode 0777)" "insecure directory"
# the live process refused the directory (a new rejection names it) and,
# in that snapshot, still had 4M
wait_rejected "$pid" threshold "directory $CTL ignored: writable by group or others (mode 0777)" \
	"$rejects_before" || fail "the live process did not refuse the insecure directory: $(published "$pid")"
ok
grep -qx 'knob threshold 4M control' <<<"$snapshot" ||
	fail "file in an insecure directory was used: $(grep '^knob threshold' <<<"$snapshot")"
ok
chmod 0755 "$CTL"
wait_for "$tmp/w.out" '^threshold=8M control$' || fail "directory secure again: 8M not picked up"
ok

# ---- the directory as a symlink -------------------------------------------------------
mkdir -m 0755 "$tmp/realdir"
printf '8M\n' >"$tmp/realdir/threshold"
ln -s "$tmp/realdir" "$tmp/linkdir"
HPALLOC_CONTROL_DIR=$tmp/linkdir expect 0 "$HPCTL" show
contains "$out" "ignored: is a symbolic link" "control directory through a symlink"
contains "$out" "threshold = " "show still works"
case $out in *"(source: control"*) fail "a symlinked directory was used" ;; esac
ok

done_ok
