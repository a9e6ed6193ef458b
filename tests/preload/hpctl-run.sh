#!/bin/bash
# hpctl run --preload as a user runs it: an ordinary program gets its large
# blocks on huge pages with the knobs given on the command line, shows up in
# `hpctl stats` with preload_huge_bytes, keeps an existing LD_PRELOAD; and
# hpctl refuses, running nothing, what LD_PRELOAD cannot reach (a static
# program, a script whose interpreter is static, a setuid program), and says
# when the dynamic linker did not load the library (--check).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

preload_test_start
LIB=$HPALLOC_PRELOAD_PATH
HOLD=$builddir/tests/preload/hold
ALLOC=$builddir/tests/preload/alloc

# ---- an ordinary program, preloaded by hpctl (it does not re-execute) ------------
expect 0 "$HPCTL" run --preload mode=auto -- "$ALLOC"
contains "$out" "PASS: preload/alloc" "preload/alloc under hpctl run --preload"

# ---- hpctl stats sees it; knobs of the command line apply -------------------------
# start_hold SIZE KNOB=VALUE...: hold in the background, its first line in $line
start_hold() {
	local size=$1
	shift
	rm -f "$tmp/in" && mkfifo "$tmp/in"
	"$HPCTL" run --preload "$@" -- "$HOLD" "$size" <"$tmp/in" >"$tmp/hold.out" 2>&1 &
	hold_pid=$!
	bg_pids+=("$hold_pid")
	exec 7>"$tmp/in"
	wait_for "$tmp/hold.out" '^ready' 10 || fail "hold did not start: $(cat "$tmp/hold.out")"
	line=$(head -n1 "$tmp/hold.out")
}
stop_hold() {
	exec 7>&-
	wait "$hold_pid"
}
preload_bytes() {
	"$HPCTL" --json stats "$1" 2>/dev/null | python3 -c '
import json, sys
try:
    (p,) = json.load(sys.stdin)
    print(p["stats"]["preload_huge_bytes"])
except Exception:
    print(-1)'
}

start_hold $((64 << 20)) mode=thp
contains "$line" "owns=1 huge=$((64 << 20))" "64 MiB block of a plain program"
for i in $(seq 100); do
	[ "$(preload_bytes "$hold_pid")" = $((64 << 20)) ] && break
	sleep 0.05
done
[ "$(preload_bytes "$hold_pid")" = $((64 << 20)) ] ||
	fail "hpctl stats: preload_huge_bytes of $hold_pid is $(preload_bytes "$hold_pid")"
ok
expect 0 "$HPCTL" stats
contains "$out" "$hold_pid" "hpctl stats lists the preloaded process"
stop_hold

start_hold $((64 << 20)) threshold=128M
contains "$line" "owns=0" "threshold=128M leaves a 64 MiB block to glibc"
stop_hold

# ---- an existing LD_PRELOAD stays first, and ours is not added twice --------------
other=$builddir/tests/preload/.libs/libearly.so
LD_PRELOAD=$other expect 0 "$HPCTL" run --preload -- sh -c 'printf %s "$LD_PRELOAD"'
[ "$out" = "$other $LIB" ] || fail "LD_PRELOAD became '$out'"
ok
LD_PRELOAD=$LIB expect 0 "$HPCTL" run --preload -- sh -c 'printf %s "$LD_PRELOAD"'
[ "$out" = "$LIB" ] || fail "LD_PRELOAD became '$out'"
ok

# ---- refused: nothing runs ---------------------------------------------------------
for other in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2; do
	[ -f "$other" ] || continue
	LD_PRELOAD=$other expect 1 "$HPCTL" run --preload -- sh -c 'echo ran'
	contains "$err" "replaces malloc itself" "another allocator in LD_PRELOAD"
	[ -z "$out" ] || fail "the command ran with $other in LD_PRELOAD"
	ok
done

printf '#include <stdio.h>\nint main(int c, char **v) { return c > 1 && fopen(v[1], "w") ? 0 : 1; }\n' \
	>"$tmp/static.c"
if env -u LD_PRELOAD ${CC:-cc} -static -o "$tmp/static" "$tmp/static.c" 2>"$tmp/cc.err"; then
	expect 0 "$tmp/static" "$tmp/ran" # it does run, without --preload
	rm -f "$tmp/ran"
	expect 1 "$HPCTL" run --preload -- "$tmp/static" "$tmp/ran"
	contains "$err" "statically linked" "static program"
	[ ! -e "$tmp/ran" ] || fail "the static program ran"
	ok
	printf '#!%s\n' "$tmp/static" >"$tmp/script" && chmod +x "$tmp/script"
	expect 1 "$HPCTL" run --preload -- "$tmp/script"
	contains "$err" "statically linked" "script with a static interpreter"
else
	echo "NOTE: no static libc to link a static program ($(head -n1 "$tmp/cc.err")): case skipped" >&2
fi

if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
	cp "$HOLD" "$tmp/suid-hold" && chown nobody "$tmp/suid-hold" && chmod 4755 "$tmp/suid-hold"
	expect 1 "$HPCTL" run --preload -- "$tmp/suid-hold"
	contains "$err" "setuid" "setuid program"
	contains "$err" "cannot help" "setuid program"
else
	echo "NOTE: not root: the setuid case needs a program owned by another user" >&2
fi

# ---- --check: the library was loaded, or why not -----------------------------------
expect 0 "$HPCTL" run --check --preload -- /bin/true
echo "not a library" >"$tmp/bogus.so"
HPALLOC_PRELOAD_PATH=$tmp/bogus.so expect 1 "$HPCTL" run --check --preload -- /bin/true
contains "$err" "loaded libhpalloc-preload.so" "--check with a library ld.so refuses"
HPALLOC_PRELOAD_PATH=/nonexistent/libhpalloc-preload.so expect 1 "$HPCTL" run --preload -- /bin/true
contains "$err" "is not a file" "missing library"
expect 2 "$HPCTL" run --preload
done_ok
