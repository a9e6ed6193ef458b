#!/bin/bash
# A corpus of bad command lines: each must exit 2, say what is wrong on
# stderr, and leave the control directory byte-identical (a refused
# command changes nothing, even when some of its arguments were valid).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

# A populated control directory, including a per-process area, so "nothing
# changed" covers existing files too.
expect 0 "$HPCTL" set threshold=4M mode=thp cache_decay_ms=500
mkdir -p "$CTL/proc/999999/override"
echo 8M >"$CTL/proc/999999/override/threshold"
before=$(tree_sum "$CTL")

# One case per line: the arguments, shell-quoted.  Lines starting with "!"
# are invalid knob values: the message must name the knob, the bad value
# and what is accepted.
n=0
while IFS= read -r line; do
	case $line in ''|'#'*) continue ;; esac
	value_error=no
	if [ "${line:0:1}" = "!" ]; then
		value_error=yes
		line=${line:1}
	fi
	eval "args=($line)"
	run "$HPCTL" "${args[@]}"
	n=$((n + 1))
	[ "$rc" = 2 ] || fail "hpctl $line: exit $rc, expected 2 (stderr: $err)"
	[ -n "$err" ] || fail "hpctl $line: no message on stderr"
	after=$(tree_sum "$CTL")
	[ "$after" = "$before" ] || fail "hpctl $line changed the control directory"
	if [ $value_error = yes ]; then
		# the bad one is the last KNOB=VALUE of the line
		for a in "${args[@]}"; do case $a in *=*) kv=$a ;; esac; done
		knob=${kv%%=*} val=${kv#*=}
		contains "$err" "$knob" "message of '$line' names the knob"
		contains "$err" "'$val'" "message of '$line' names the value"
		contains "$err" "accepted" "message of '$line' says what is accepted"
	fi
	ok
done <<'CORPUS'
# set: syntax
set
set threshold
set =4M
set '=4M'
set 'threshold 4M'
set bogus=1
set MODE=thp
set 'threshold=4M' --frobnicate
# set: sizes
!set threshold=
!set threshold=-1
!set threshold=4X
!set threshold=4MB
!set threshold=1.5M
!set threshold=0x10
!set threshold=+4M
!set 'threshold=4 M'
!set threshold=99999999999999999999999
!set threshold=18446744073709551616
!set threshold=16E
!set threshold=2T
!set threshold=1K
!set cache_max=-5
!set cache_max=1Q
!set cache_max=4M4
# set: choices
!set mode=
!set mode=foo
!set mode=THP
!set 'mode=thp off'
!set 'mode=[thp]'
!set 'mode=auto [thp] off'
!set pagesize=4M
!set pagesize=3M
!set pagesize=2G
!set fallback=none
!set fallback=hugetlb
!set uring=yes
!set uring=2
# set: integers
!set cache_decay_ms=abc
!set cache_decay_ms=-1
!set cache_decay_ms=+5
!set cache_decay_ms=3600001
!set cache_decay_ms=1.5
!set cache_decay_ms=10s
!set verbose=3
!set verbose=-1
!set verbose=one
# set: all or nothing
set threshold=8M threshold=16M
!set mode=off threshold=bad
set mode=off threshold=8M verbose=9
set threshold=8M bogus=1
set -p 999999 threshold=bad
-p 999999 set threshold=bad
# reset / get / show / status
reset
reset bogus
reset --all threshold
reset threshold bogus
get bogus
get mode bogus
show extra
status extra
--bogus get
frobnicate
''
# -p
-p abc get
-p 0 get
-p -5 get
-p
--pid=x get
-p 123 show
-p 123 status
-p 123 stats
# pool
pool
pool 2M
pool 3M=1
pool 2M=-1
pool 2M=abc
pool 2M=1.5
pool 2M=1K
pool 2M=99999999999
pool =5
pool 2M=1 2M=2
pool 2M=1 bogus=1
# stats
stats abc
stats 0
stats -1
stats --bogus
get --long
# top
top extra
top -d
top -d 0
top -d 0.01
top -d 5000
top -d x
top -n
top -n 0
top -n -3
top -n 1.5
top --long
--json top
-p 123 top
# run
run
run threshold=8M
run threshold=8M --
!run threshold=bad -- true
run bogus=1 -- true
-p 123 run true
-p 123 run --check
--json run true
# completion helpers
--list-choices
--list-choices bogus
CORPUS

[ "$n" -ge 50 ] || fail "only $n bad inputs, want at least 50"
echo "$n bad inputs refused with exit 2, control directory unchanged"
done_ok
