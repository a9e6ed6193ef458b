#!/bin/bash
# Secure execution (setuid/setgid: AT_SECURE) ignores HPALLOC_* and the
# control directory.  A setuid-root copy of knobwatch, run by nobody with
# HPALLOC_THRESHOLD and a control file set, must see the default; the same
# binary without the setuid bit sees the environment (so the test can fail).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

bin=$builddir/tests/cli/knobwatch-static
[ -x "$bin" ] || { echo "knobwatch-static not built at $bin" >&2; exit 99; }
[ "$(id -u)" = 0 ] || skip_test root "making a setuid-root program needs root (CI runs the tests as root)"
can_be_nobody || skip_test nonroot "cannot switch to nobody (setpriv missing or no such user)"

# A directory nobody can traverse, on a file system that honours setuid
# (tests/cli/lib.sh).
nobody_setuid_dir
dir=$nobody_dir
nobody_stage "$bin"
kw=$staged
ctl=$dir/control
mkdir -m 0755 "$ctl"
echo 16M >"$ctl/threshold"

as_nobody_kw() {
	# no sanitizer preload: it is ignored in secure execution anyway
	env -u LD_PRELOAD HPALLOC_CONTROL_DIR="$ctl" HPALLOC_THRESHOLD=8M \
		setpriv --reuid=nobody --regid=nogroup --clear-groups "$kw" -t 0.3 threshold
}

run as_nobody_kw
[ "$rc" = 0 ] || fail "plain run as nobody: $rc $err"
contains "$out" "threshold=8M env" "without setuid the environment counts"

chmod 4755 "$kw"
run as_nobody_kw
[ "$rc" = 0 ] || fail "setuid run: $rc $err"
case $out in
*"threshold=1M default"*) ok ;;
*) fail "setuid process used HPALLOC_THRESHOLD or the control directory: $out" ;;
esac
[ -e "$ctl/proc" ] && fail "a setuid process published itself in the control directory"
ok

done_ok
