#!/bin/bash
# hpctl stats says when the kernel split huge pages while a process held THP
# blocks (issue 34): the library counts /proc/vmstat's split counters
# (thp_splits_seen), which do not say whose pages they were, and hpctl
# stats notes it on standard error under the table -- nothing when nothing
# was split.  The split is made here (MADV_COLD on half of a huge page of a
# mapping of this test's own: the kernel splits it).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

grep -q '\[\(always\|madvise\)\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null ||
	skip_test thp "transparent huge pages are off"
HPALLOC_MODE=thp HPALLOC_THRESHOLD=1M start_holder 8M
pid=$holder_pid
for i in $(seq 40); do published "$pid" | grep -q '^stat thp_live_bytes [1-9]' && break; sleep 0.05; done
sleep 0.6 # the janitor's first look at the counters
expect 0 "$HPCTL" stats
case $err in *"the kernel split"*) split_before=1 ;; *) split_before=0 ;; esac

# split one huge page of a mapping of our own
split=$(python3 - <<'PY'
import mmap, re
m = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # not shmem
# the mapping's own address: from a buffer view
import ctypes
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
off = (-addr) % (2 << 20)
m.madvise(mmap.MADV_HUGEPAGE, off, 2 << 20)
m[off:off + (2 << 20)] = b"\1" * (2 << 20)
def vm(k):
    return int(re.search(r"^%s (\d+)$" % k, open("/proc/vmstat").read(), re.M).group(1))
before = vm("thp_split_page")
m.madvise(20, off, 1 << 20)  # MADV_COLD (Linux 5.4), not named by Python 3.11's mmap
print(vm("thp_split_page") - before)
PY
) || fail "the split could not be made: $split"
[ "${split:-0}" -ge 1 ] || skip_test thp "the kernel split no huge page of the test's own mapping (given none?)"
for i in $(seq 60); do
	[ "$(published_stat "$(published "$pid")" thp_splits_seen)" -ge 1 ] && break
	sleep 0.05
done
[ "$(published_stat "$(published "$pid")" thp_splits_seen)" -ge 1 ] ||
	fail "the holder did not count the split: $(published "$pid" | grep split)"
ok
expect 0 "$HPCTL" stats
contains "$err" "note: process $pid: the kernel split" "hpctl stats notes the split"
contains "$out" "$pid" "the table is still there"
[ "$(printf '%s\n' "$out" | grep -c 'the kernel split')" = 0 ] || fail "the note went into the table"
ok
expect 0 "$HPCTL" stats --long "$pid"
contains "$out" "thp_splits_seen" "stats --long shows the counter"
[ "$split_before" = 0 ] || echo "note: something split a huge page before this test's split (another process)"
done_ok
