#!/bin/bash
# Bash completion: subcommands, knob names and choices (asked from hpctl,
# so they follow the library's table), pool sizes, PIDs.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

. "${srcdir:-.}/tools/hpctl.bash-completion" || fail "cannot source the completion"
ok

# complete WORD...: the completions offered for the last word.
complete() {
	COMP_WORDS=("$HPCTL" "$@")
	COMP_CWORD=$#
	COMPREPLY=()
	_hpctl
	printf '%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}

same() { [ "$1" = "$2" ] || fail "completion of $3: got '$1', want '$2'"; ok; }

contains " $(complete '') " " get " "subcommands"
contains " $(complete '') " " status " "subcommands"
same "$(complete st)" "stats status" "st"
same "$(complete get th)" "threshold" "get th"
same "$(complete set mo)" "mode=" "set mo"
knobs=$("$HPCTL" --list-knobs | sed 's/$/=/' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')
same "$(complete set '')" "$knobs" "set: every knob"
# bash splits "mode=t" into mode, =, t (COMP_WORDBREAKS has '=')
same "$(complete set mode = '')" "auto hugetlb off thp" "set mode="
same "$(complete set mode = t)" "thp" "set mode=t"
same "$(complete set uring = '')" "off on" "set uring="
contains " $(complete reset '') " " --all " "reset --all"
contains " $(complete --json get '') " " cache_decay_ms " "options before the subcommand"
same "$(complete -p 123 get pa)" "pagesize" "-p PID get"
if [ -d /sys/kernel/mm/hugepages/hugepages-2048kB ]; then
	contains " $(complete pool '') " " 2M= " "pool sizes"
fi
mkdir -p "$CTL/proc/4242"
same "$(complete stats 42)" "4242" "stats PID"
same "$(complete stats --l)" "--long" "stats --long"
same "$(complete t)" "top" "t"
same "$(complete m)" "metrics" "m"
same "$(complete metrics --)" "--listen --textfile" "metrics options"
same "$(complete metrics 42)" "4242" "metrics PID"
same "$(complete metrics --listen '')" "" "metrics --listen [ADDR:]PORT"
same "$(complete top -)" "--delay --iterations -d -n" "top options"
same "$(complete top -d '')" "" "top -d SECONDS"
same "$(complete -p 42)" "4242" "-p PID"

done_ok
