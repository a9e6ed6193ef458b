# hpctl status shows the kernel's THP page sizes -- the PMD size and the
# multi-size THP ones (Linux 6.8+), each with its own setting -- and which
# of them serve hpalloc's madvised blocks, as the library (lib/threads/thp.c) reads
# them.  As root it switches the 64 KiB size on for madvised memory
# (restored here and by tests/run-test) and checks that status follows and
# that a mid-sized block (1.5 MiB, too small for a 2 MiB page) then gets
# 64 KiB folios, per the kernel's own counter.
. "${srcdir:-.}/tests/cli/lib.sh"

THP=/sys/kernel/mm/transparent_hugepage
[ -r "$THP/enabled" ] || skip_test thp "this kernel has no transparent huge pages"

word() { sed -n 's/.*\[\(.*\)\].*/\1/p' "$1"; }

# Every size the kernel offers, with the word its file selects.
expect 0 "$HPCTL" status
line=$(grep '^  page sizes:' <<<"$out") || fail "status shows no THP page sizes: $out"
for dir in "$THP"/hugepages-*kB; do
	[ -r "$dir/enabled" ] || continue
	kb=${dir##*hugepages-}
	kb=${kb%kB}
	size=$("$HPCTL" --json status | python3 -c "
import json, sys
print(next(s['pagesize'] for s in json.load(sys.stdin)['thp']['sizes'] if s['pagesize_bytes'] == $kb * 1024))")
	contains "$line" " $size $(word "$dir/enabled")" "status line for $size"
done
ok

[ -r "$THP/hugepages-64kB/enabled" ] || skip_test other "this kernel has no multi-size THP (before 6.8)"
[ "$(id -u)" = 0 ] || skip_test root "switching a THP size on needs root"

top_before=$(word "$THP/enabled")
m64_before=$(word "$THP/hugepages-64kB/enabled")
restore() {
	echo "$m64_before" > "$THP/hugepages-64kB/enabled"
	echo "$top_before" > "$THP/enabled"
}
trap 'restore; cleanup' EXIT

serves() { # SIZE: what --json status says of it
	"$HPCTL" --json status | python3 -c "
import json, sys
print(next(s['serves_hpalloc'] for s in json.load(sys.stdin)['thp']['sizes'] if s['pagesize'] == '$1'))"
}

echo madvise > "$THP/enabled"
echo never > "$THP/hugepages-64kB/enabled"
expect 0 "$HPCTL" status
contains "$out" "hpalloc's THP blocks get: 2M" "only 2M served"
[ "$(serves 64K)" = False ] || fail "64K never, yet --json says it serves"
ok

echo madvise > "$THP/hugepages-64kB/enabled"
expect 0 "$HPCTL" status
contains "$out" " 64K madvise" "64K's own setting"
contains "$out" "hpalloc's THP blocks get: 64K 2M" "64K served"
[ "$(serves 64K)" = True ] || fail "64K madvise, yet --json says it does not serve"
ok

# inherit follows the top-level setting, which then serves no size at all
echo inherit > "$THP/hugepages-64kB/enabled"
echo never > "$THP/enabled"
expect 0 "$HPCTL" status
contains "$out" "hpalloc's THP blocks get: 4K pages only" "top-level never"
echo madvise > "$THP/enabled"
[ "$(serves 64K)" = True ] || fail "64K inherit under madvise should serve"
ok

# A mid-sized block gets 64 KiB folios once the size is on, none before:
# the kernel counts each one it faults.
[ -x "$HOLDER" ] || fail "holder not built at $HOLDER"
faults=$THP/hugepages-64kB/stats/anon_fault_alloc
[ -r "$faults" ] || skip_test other "no $faults on this kernel"
folios_of_holder() {
	local before
	before=$(cat "$faults")
	HPALLOC_MODE=thp HPALLOC_THRESHOLD=1M "$HOLDER" -t 0 1536K > "$tmp/holder.out" 2>&1 ||
		fail "holder failed: $(cat "$tmp/holder.out")"
	folios=$(($(cat "$faults") - before))
}
echo never > "$THP/hugepages-64kB/enabled"
folios_of_holder
[ "$folios" = 0 ] || fail "64K never, yet $folios 64 KiB folios were faulted"
echo madvise > "$THP/hugepages-64kB/enabled"
folios_of_holder
# 1.5 MiB is 24 folios of 64 KiB (the holder writes every page)
[ "$folios" -ge 24 ] || fail "a 1.5 MiB block got $folios 64 KiB folios (want >= 24)"
ok
restore
done_ok
