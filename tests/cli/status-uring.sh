# hpctl status reports io_uring as the library's own probe sees it: the
# conditions its release path needs, not merely "io_uring_queue_init
# works".  With kernel.io_uring_disabled=2 (root: machine-wide, restored
# here and by tests/run-test) it must say releases are synchronous, and a
# process must then show uring_active 0 in its published stats.
. "${srcdir:-.}/tests/cli/lib.sh"

sysctl=/proc/sys/kernel/io_uring_disabled
expect 0 "$HPCTL" status
case $out in
*"io_uring: available for page release"*) ok ;;
*"io_uring: unavailable"*) skip_test uring "io_uring unusable on this machine: $out" ;;
*) fail "status names no io_uring state: $out" ;;
esac
expect 0 "$HPCTL" --json status
printf '%s' "$out" | python3 -c 'import json,sys; assert json.load(sys.stdin)["io_uring"]["available"] is True' ||
	fail "--json status disagrees: $out"
ok

[ -e "$sysctl" ] || skip_test other "this kernel has no $sysctl"
[ "$(id -u)" = 0 ] || skip_test root "writing $sysctl needs root"
[ -w "$sysctl" ] || fail "root cannot write $sysctl"
before=$(cat "$sysctl")
restore() { echo "$before" > "$sysctl"; }
trap 'restore; cleanup' EXIT
echo 2 > "$sysctl"
expect 0 "$HPCTL" status
contains "$out" "io_uring: unavailable: processes release pages synchronously" "status with io_uring disabled"
contains "$out" "Operation not permitted" "the reason"

# A process started now agrees: no ring, synchronous releases.
"$KNOBWATCH" -t 20 mode > "$tmp/kw.out" 2>&1 &
bg_pids+=($!)
for _ in $(seq 100); do
	"$HPCTL" stats --long "${bg_pids[0]}" > "$tmp/st" 2>/dev/null && grep -q "uring_active" "$tmp/st" && break
	sleep 0.05
done
grep -Eq "uring_active +0" "$tmp/st" || fail "published uring_active: $(cat "$tmp/st")"
grep -Eq "janitor_active +1" "$tmp/st" || fail "published janitor_active: $(cat "$tmp/st")"
ok
restore
done_ok
