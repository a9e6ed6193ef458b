#!/bin/bash
# The man pages stay true: hpalloc(7) lists every knob of the library's
# table with its current default, and its rule for the environment variable
# of a knob holds for each of them (checked with a process using the
# library); hpctl(8) describes every subcommand that `hpctl --help` offers;
# both format without groff warnings.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

man7=${srcdir:-.}/man/hpalloc.7
man8=${srcdir:-.}/man/hpctl.8

expect 0 "$HPCTL" show --json
printf '%s' "$out" | python3 -c '
import json, sys
for name, k in json.load(sys.stdin)["knobs"].items():
    print(name, k["default"])' >"$tmp/defaults" || fail "show --json"
[ -s "$tmp/defaults" ] || fail "no knobs"
env_args=() knobs=()
while read -r knob default; do
	# ".B knob" then, on the next line, "Default: \fBvalue\fR."
	grep -A1 -x "\.B $knob" "$man7" | grep -qxF "Default: \\fB$default\\fR." ||
		fail "hpalloc.7 does not list knob $knob with default $default"
	ok
	env_args+=("HPALLOC_${knob^^}=$default")
	knobs+=("$knob")
done <"$tmp/defaults"

# The environment: hpalloc.7 gives one rule for every knob, HPALLOC_ and
# the knob name in capitals.  The rule is checked against the library
# itself: a process given HPALLOC_<KNOB>=<default> for every knob must
# report each of them as set from the environment.
grep -A1 -x '\.BI HPALLOC_ KNOB' "$man7" | grep -q 'knob name in capitals' ||
	fail "hpalloc.7 no longer states how a knob's environment variable is named"
ok
[ -x "$KNOBWATCH" ] || { echo "knobwatch not built at $KNOBWATCH" >&2; exit 99; }
run env "${env_args[@]}" "$KNOBWATCH" -t 0.05 "${knobs[@]}"
[ "$rc" = 0 ] || fail "knobwatch: $rc $err"
for i in "${!knobs[@]}"; do
	want="${knobs[$i]}=${env_args[$i]#*=} env"
	grep -qxF "$want" <<<"$out" ||
		fail "${env_args[$i]%%=*} (hpalloc.7's rule) does not set knob ${knobs[$i]}: $out"
	ok
done

expect 0 "$HPCTL" --help
cmds=$(printf '%s\n' "$out" | sed -n 's/^  \([a-z]\+\) .*/\1/p')
[ -n "$cmds" ] || fail "no subcommands in --help"
for cmd in $cmds; do
	grep -Eq "^\.(B|BR|BI) \"?$cmd\b" "$man8" || fail "hpctl.8 does not describe '$cmd'"
	ok
done

if command -v groff >/dev/null; then
	for page in "$man7" "$man8"; do
		# groff is not ours: no sanitizer runtime preloaded into it.
		warnings=$(LC_ALL=C env -u LD_PRELOAD groff -man -ww -z "$page" 2>&1)
		[ -z "$warnings" ] || fail "groff warnings in $page: $warnings"
		ok
	done
else
	note_skip other "groff not installed; formatting not checked"
fi

done_ok
