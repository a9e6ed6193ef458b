#!/bin/bash
# hpctl metrics --textfile in a sticky world-writable directory (as
# node_exporter's textfile directory often is): another user (nobody)
# pre-creates the temporary names the next pids would use (.NAME.PID.tmp:
# regular files of its own and symlinks to a file of root's); root's
# `hpctl metrics --textfile` still writes a complete file of root's, mode
# 0644, and every file the other user made is untouched (issue 46: the
# temporary is created exclusively under a random name).  Before, root
# wrote into the squatter's file, which stayed the squatter's after the
# rename (or, on a symlink, failed: a denial of service).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

[ "$(id -u)" = 0 ] || skip_test root "only root can write where another user squats"
can_be_nobody || skip_test nonroot "cannot switch to nobody"

# a world-readable directory of the test's (tests/run-test's scratch
# directory is 0700), with the sticky world-writable one inside
squat=$tmp/squat.py
cat >"$squat" <<'EOF'
# squat.py DIR NAME FIRST LAST TARGET: .NAME.PID.tmp for PID in FIRST..LAST,
# a file of ours for even PIDs, a symlink to TARGET for odd ones (one
# process: forks would take the very pids it squats)
import os, sys
d, name, target = sys.argv[1], sys.argv[2], sys.argv[5]
for pid in range(int(sys.argv[3]), int(sys.argv[4]) + 1):
    path = os.path.join(d, ".%s.%d.tmp" % (name, pid))
    if pid % 2 == 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.write(fd, b"squatter's %d\n" % pid)
        os.fchmod(fd, 0o666)
        os.close(fd)
    else:
        os.symlink(target, path)
EOF
nobody_stage "$squat"
squat=$staged
dir=$nobody_dir/textfile
mkdir "$dir" && chmod 1777 "$dir" || fail "cannot make $dir"
victim=$nobody_dir/victim
echo "root's own file" >"$victim" && chmod 0644 "$victim"
cp "$victim" "$tmp/victim.before"

# the squatter's files: names, types, owners, sizes, times, link targets,
# contents
squatted() {
	(cd "$dir" && find . -name '.hpalloc.prom.*.tmp' -printf '%p %y %u %m %s %T@ %l\n' | LC_ALL=C sort &&
		find . -name '.hpalloc.prom.*.tmp' -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) |
		sha256sum
}

"$HPCTL" metrics >"$tmp/expected" || fail "hpctl metrics"
hit=
for attempt in 1 2 3; do
	last=$(cat /proc/sys/kernel/ns_last_pid)
	first=$((last + 1)) end=$((last + 400))
	as_nobody /usr/bin/python3 "$squat" "$dir" hpalloc.prom "$first" "$end" "$victim" || fail "squatting failed"
	before=$(squatted)
	[ "$(find "$dir" -name '.hpalloc.prom.*.tmp' | wc -l)" -ge 400 ] || fail "squatted $(ls -A "$dir" | wc -l)"
	# root's run; its pid said first, so the test knows it was a squatted one
	run bash -c 'echo $$ >"$1"; exec "$2" metrics --textfile "$3/hpalloc.prom"' sh "$tmp/pid" "$HPCTL" "$dir"
	pid=$(cat "$tmp/pid")
	[ "$rc" = 0 ] || fail "hpctl metrics --textfile beside the squatter (pid $pid, .hpalloc.prom.$pid.tmp squatted: $([ "$pid" -ge "$first" ] && [ "$pid" -le "$end" ] && echo yes || echo no)): exit $rc: $err"
	[ "$(stat -c '%u %a %F' "$dir/hpalloc.prom")" = "0 644 regular file" ] ||
		fail "hpalloc.prom is $(stat -c 'uid %u mode %a %F' "$dir/hpalloc.prom") (pid $pid)"
	cmp -s "$tmp/expected" "$dir/hpalloc.prom" || fail "hpalloc.prom is not the whole text (pid $pid)"
	[ "$(squatted)" = "$before" ] || fail "the squatter's files changed (pid $pid)"
	cmp -s "$tmp/victim.before" "$victim" || fail "the symlinks' target changed"
	# nothing of root's left but the file itself
	left=$(find "$dir" -mindepth 1 -user root ! -name hpalloc.prom -printf '%f ')
	[ -z "$left" ] || fail "root left $left"
	ok
	if [ "$pid" -ge "$first" ] && [ "$pid" -le "$end" ]; then
		hit=$pid
		break
	fi
	echo "pid $pid was not among the squatted ones ($first..$end): again"
	find "$dir" -name '.hpalloc.prom.*.tmp' -delete
done
[ -n "$hit" ] || fail "hpctl never ran with a squatted pid (3 tries)"
echo "hpctl ran as pid $hit, whose old temporary name .hpalloc.prom.$hit.tmp was the squatter's $(
	[ $((hit % 2)) = 0 ] && echo file || echo symlink)"
ok
done_ok
