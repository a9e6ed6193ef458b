#!/bin/bash
# The man pages stay true: hpalloc(7) lists every knob of the library's
# table with its current default; hpctl(8) describes every subcommand that
# `hpctl --help` offers; both format without groff warnings.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

man7=${srcdir:-.}/man/hpalloc.7
man8=${srcdir:-.}/man/hpctl.8

expect 0 "$HPCTL" show --json
printf '%s' "$out" | python3 -c '
import json, sys
for name, k in json.load(sys.stdin)["knobs"].items():
    print(name, k["default"])' >"$tmp/defaults" || fail "show --json"
[ -s "$tmp/defaults" ] || fail "no knobs"
while read -r knob default; do
	# ".B knob" then, on the next line, "Default: \fBvalue\fR."
	grep -A1 -x "\.B $knob" "$man7" | grep -qxF "Default: \\fB$default\\fR." ||
		fail "hpalloc.7 does not list knob $knob with default $default"
	ok
	grep -q "HPALLOC_${knob^^}\|HPALLOC_ KNOB" "$man7" || fail "environment of $knob"
	ok
done <"$tmp/defaults"

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
	echo "NOTE: groff not installed; formatting not checked" >&2
fi

done_ok
