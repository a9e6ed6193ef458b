#!/bin/bash
# `hpctl run --preload -- unshare -U /bin/true` as a user of bwrap, rootless
# containers or browser sandboxes runs it: unshare(CLONE_NEWUSER) refuses a
# process with more than one thread (EINVAL), and main before the fix
# started hpalloc's janitor in every preloaded process's constructor:
# "unshare: unshare failed: Invalid argument".  The janitor now comes with
# the first huge block only (lib/threads/janitor.c).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

preload_test_start
command -v unshare >/dev/null || skip_test other "no unshare(1) (util-linux) here"

# What the kernel allows without hpalloc decides whether this can run.
run unshare -U /bin/true
[ "$rc" = 0 ] || skip_test other "this kernel refuses user namespaces here (unshare -U: $err)"

run "$HPCTL" run --preload -- unshare -U /bin/true
[ "$rc" = 0 ] || fail "hpctl run --preload -- unshare -U /bin/true: exit $rc: $err"
ok
# the same with knobs that make hpalloc busy elsewhere in the process tree
run "$HPCTL" run --preload threshold=64K verbose=1 -- unshare -U --map-root-user /bin/sh -c 'id -u'
[ "$rc" = 0 ] && [ "$out" = 0 ] || fail "unshare -U --map-root-user under --preload: exit $rc: $out $err"
ok
done_ok
