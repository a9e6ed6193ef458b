#!/bin/bash
# A user without XDG_RUNTIME_DIR (a batch job, `su -`) gets its control
# directory in /tmp, as /tmp/hpalloc-<uid> (fresh-user.sh), and only if
# /tmp is root's and sticky: in a /tmp anyone may write to without the
# sticky bit, or one that is another user's, someone else could remove or
# replace the directory under the user's processes (lib/control/securedir.c
# check_parent).  Dropping that check left the suite green (issue 45), as
# no test could give /tmp another owner or mode.  Here a mount namespace
# does: a tmpfs over /tmp, root's 0777, daemon's 1777, then root's 1777,
# only in this test's namespace -- the machine's /tmp is never touched.  In
# the first two nobody's hpctl and nobody's hpalloc process refuse to make
# the directory and say why; in the last both make it and use it.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "a mount namespace and switching to nobody need root"
can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"
command -v unshare >/dev/null || skip_test other "unshare (util-linux) missing"
unshare -m --propagation private true 2>/dev/null || skip_test root "no mount namespace here (unshare -m refused)"
KWS=$builddir/tests/cli/knobwatch-static
[ -x "$KWS" ] || { echo "knobwatch-static not built at $KWS" >&2; exit 99; }
NOBODY=$(id -u nobody)

# Run in a private mount namespace, the programs on file descriptors 8
# (knobwatch) and 9 (hpctl): /tmp is mounted over, so their paths below it
# (the build tree may be there) are hidden; /proc/self/fd/N still opens
# them.  For each UID:MODE: a tmpfs of that owner and mode over /tmp, then
# as nobody (no XDG_RUNTIME_DIR, no HPALLOC_*): `hpctl set threshold=8M`,
# which makes the control directory, and a knobwatch (verbose=1), which
# publishes itself in it.  One "UID:MODE what: ..." line per result.
inner='
set -u
nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups env -i PATH=/usr/bin:/bin "$@"; }
for spec in "$@"; do
	mount -t tmpfs -o "uid=${spec%:*},gid=0,mode=${spec#*:},size=64m" hpalloc-test-tmp /tmp || exit 3
	mkdir -m 0755 /tmp/.bin && cp /proc/self/fd/9 /tmp/.bin/hpctl &&
		cp /proc/self/fd/8 /tmp/.bin/knobwatch && chmod 0755 /tmp/.bin/* || exit 3
	echo "$spec tmp: $(stat -c "%u %a" /tmp)"
	out=$(nobody /tmp/.bin/hpctl set threshold=8M 2>&1)
	echo "$spec hpctl: rc=$? $out"
	echo "$spec made by hpctl: $(stat -c "%U %a" /tmp/hpalloc-* 2>/dev/null || echo none)"
	rm -rf /tmp/hpalloc-*
	nobody HPALLOC_VERBOSE=1 /tmp/.bin/knobwatch -t 20 threshold >/tmp/.kw.out 2>/tmp/.kw.err &
	kw=$!
	for i in $(seq 60); do
		grep -q "not publishing stats" /tmp/.kw.err && break
		pid=$(sed -n "s/^ready //p" /tmp/.kw.out)
		[ -n "$pid" ] && [ -f "/tmp/hpalloc-'"$NOBODY"'/proc/$pid/stats" ] && break
		sleep 0.05
	done
	kill -TERM $kw
	wait $kw
	echo "$spec library: $(grep -m1 "not publishing stats" /tmp/.kw.err)"
	pid=$(sed -n "s/^ready //p" /tmp/.kw.out)
	echo "$spec published: $( [ -n "$pid" ] && ls /tmp/hpalloc-'"$NOBODY"'/proc 2>/dev/null | grep -x "$pid" || echo none)"
	echo "$spec made by the library: $(stat -c "%U %a" /tmp/hpalloc-* 2>/dev/null || echo none)"
	# the knobwatch is gone, but the kernel may still be tearing its
	# io_uring down: busy for a moment; lazy at last (the namespace ends
	# with this script anyway)
	for i in 1 2 3 4 5; do umount /tmp 2>/dev/null && break; sleep 0.2; done
	mountpoint -q /tmp && umount -l /tmp
done
'
tmp_before=$(stat -c '%u %a' /tmp)
run unshare -m --propagation private bash -c "$inner" tmp-parent 0:0777 1:1777 0:1777 8<"$KWS" 9<"$HPCTL"
[ "$rc" = 0 ] || fail "the namespace's script failed ($rc): $err $out"
echo "$out"
line() { grep "^$1 $2: " <<<"$out" | head -1; }

for spec in 0:0777 1:1777; do
	uid=${spec%:*} mode=${spec#*:}
	contains "$(line "$spec" tmp)" "$uid ${mode#0}" "the staged /tmp"
	contains "$(line "$spec" hpctl)" "rc=1 " "nobody's hpctl in a /tmp of uid $uid, mode $mode"
	contains "$(line "$spec" hpctl)" "/tmp is not root's and sticky (owner uid $uid, mode $mode)" \
		"hpctl says why"
	contains "$(line "$spec" 'made by hpctl')" "none" "no directory made by hpctl in a /tmp of uid $uid, mode $mode"
	contains "$(line "$spec" library)" "/tmp is not root's and sticky" "the library says why"
	contains "$(line "$spec" published)" "none" "nothing published in a /tmp of uid $uid, mode $mode"
	contains "$(line "$spec" 'made by the library')" "none" "no directory made by the library"
done
# root's and sticky: made, nobody's alone, and used
contains "$(line 0:1777 hpctl)" "rc=0 " "nobody's hpctl in root's sticky /tmp"
contains "$(line 0:1777 'made by hpctl')" "nobody 700" "the directory hpctl made"
contains "$(line 0:1777 'made by the library')" "nobody 700" "the directory the library made"
case $(line 0:1777 published) in
"0:1777 published: "[0-9]*) ok ;;
*) fail "the library did not publish in root's sticky /tmp: $out" ;;
esac
[ "$(stat -c '%u %a' /tmp)" = "$tmp_before" ] || fail "the machine's /tmp changed: $(stat -c '%u %a' /tmp)"
ok
done_ok
