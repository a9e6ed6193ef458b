#!/bin/bash
# hpctl run --check and signals.  Without --check hpctl execs the command,
# so a signal sent to it reaches the command and the caller sees the
# command's own end.  With --check hpctl stays in between (it waits to read
# the activation report); it must not change that:
#   - SIGTERM/SIGHUP sent to hpctl (Popen.terminate(), kill, a supervisor)
#     reach the command: main before the fix died alone, the command ran on
#     orphaned and the report file stayed in $TMPDIR;
#   - a command killed by a signal makes hpctl die of the same signal, as
#     the caller would see without --check (a shell script interrupted by
#     Ctrl-C stops): main exited 128+N instead.
. "${top_srcdir:-.}/tests/cli/lib.sh"

[ -d "$builddir/python/inplace" ] && export HPALLOC_PYTHON_DIR=$builddir/python/inplace
export TMPDIR=$tmp/reports
mkdir -p "$TMPDIR"
# How the caller sees hpctl end: "exit N" or "signal N".
how_it_ended() {
	python3 -c 'import subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
print("signal %d" % -rc if rc < 0 else "exit %d" % rc)' "$@"
}

# 1. Signals sent to hpctl reach the command.
for sig in TERM HUP; do
	rm -f "$tmp/cmd.pid"
	"$HPCTL" run --check -- sh -c 'echo $$ > "$0"; exec sleep 30' "$tmp/cmd.pid" &
	hpctl_pid=$!
	bg_pids+=("$hpctl_pid")
	for _ in $(seq 100); do [ -s "$tmp/cmd.pid" ] && break; sleep 0.05; done
	[ -s "$tmp/cmd.pid" ] || fail "the command did not start"
	cmd_pid=$(cat "$tmp/cmd.pid")
	kill -"$sig" "$hpctl_pid"
	wait "$hpctl_pid" 2>/dev/null
	for _ in $(seq 40); do kill -0 "$cmd_pid" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$cmd_pid" 2>/dev/null; then
		kill -KILL "$cmd_pid"
		fail "SIG$sig sent to hpctl run --check: the command (pid $cmd_pid) runs on without it"
	fi
	ok
	left=$(ls "$TMPDIR")
	[ -z "$left" ] || fail "SIG$sig: hpctl left its report file behind: $left"
	ok
done

# 2. A command killed by a signal: hpctl ends the same way with and without --check.
for sig in TERM INT; do
	plain=$(how_it_ended "$HPCTL" run -- sh -c "kill -$sig \$\$")
	checked=$(how_it_ended "$HPCTL" run --check -- sh -c "kill -$sig \$\$")
	[ "$plain" = "signal $(kill -l "$sig")" ] || fail "without --check: $plain"
	[ "$checked" = "$plain" ] ||
		fail "command killed by SIG$sig: hpctl run --check ended with '$checked', without --check '$plain'"
	ok
done

# 3. Exit statuses are unchanged: the command's failure, else 1 without activation.
expect 3 "$HPCTL" run --check -- sh -c 'exit 3'
expect 1 "$HPCTL" run --check -- true
contains "$err" "no process of true activated hpalloc" "stderr"
done_ok
