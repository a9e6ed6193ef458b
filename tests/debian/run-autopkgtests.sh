#!/bin/bash
# run-autopkgtests.sh — run the debian/tests (autopkgtest) scripts of a source
# tree directly against the packages installed on this machine, the way
# autopkgtest's runner would, without its testbed machinery:
#   * each test's Depends must be installed (@ = the packages of
#     debian/control, which the caller installed);
#   * Restrictions: allow-stderr (otherwise any stderr output fails the test,
#     as in autopkgtest), needs-root, superficial, rw-build-tree,
#     skippable (exit 77 = skipped) are honoured; anything else (e.g.
#     breaks-testbed, isolation-machine) stops with an error;
#   * a clean environment: the standard PATH, empty AUTOPKGTEST_TMP and
#     AUTOPKGTEST_ARTIFACTS directories, cwd = the source tree.
#
# Usage: run-autopkgtests.sh SOURCE_TREE OUTPUT_DIR
# Exit status: 0 if every test passed (or skipped where allowed), else 1.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 SOURCE_TREE OUTPUT_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=$2
control=$src/debian/tests/control
[ -f "$control" ] || { echo "no $control" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One line per test: NAME US DEPENDS US RESTRICTIONS (comma/space lists;
# US = \037, not a tab: read would merge the tabs around an empty field).
# deb822: paragraphs split by blank lines, continuation lines start with
# blanks, # lines are comments.  Anything this runner cannot honour -- a
# line that is no field, a continuation before any field, a field it does
# not know, a paragraph without Tests, Test-Command -- fails the parse: a
# partly understood file must not run a subset of its tests and pass.
parse_control() {
	awk '
	function bad(why) {
		printf "%s:%d: %s\n", FILENAME, FNR, why > "/dev/stderr"
		failed = 1
		exit 1
	}
	function flush() {
		if (!in_para)
			return
		if ("test-command" in fields)
			bad("Test-Command is not supported by this runner")
		if (fields["tests"] ~ /^[ \t,]*$/)
			bad("a paragraph without Tests")
		n = split(fields["tests"], names, /[ \t,]+/)
		for (i = 1; i <= n; i++)
			if (names[i] != "")
				printf "%s\037%s\037%s\n", names[i], fields["depends"], fields["restrictions"]
		delete fields
		in_para = 0
	}
	BEGIN {
		split("tests depends restrictions features classes architecture", k, " ")
		for (i in k)
			known[k[i]] = 1
	}
	/^#/ { next }
	/^[ \t]*$/ { flush(); key = ""; next }
	/^[ \t]/ {
		if (key == "")
			bad("continuation line outside a field")
		fields[key] = fields[key] " " $0
		next
	}
	{
		if (index($0, ":") < 2)
			bad("not a field: " $0)
		key = tolower(substr($0, 1, index($0, ":") - 1))
		if (!(key in known) && key != "test-command")
			bad("field " key " is not supported by this runner")
		fields[key] = substr($0, index($0, ":") + 1)
		in_para = 1
	}
	END { if (!failed) flush() }' "$control"
}

is_installed() {
	dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed
}

# Every dependency (a | b: one of them) installed?  Prints what is missing.
missing_depends() {
	local deps=$1 dep alt ok name
	local -a own
	mapfile -t own < <(sed -n 's/^Package: *//p' "$src/debian/control")
	IFS=, read -ra deps_list <<<"$deps"
	for dep in "${deps_list[@]}"; do
		dep=$(echo "$dep" | sed 's/([^)]*)//g; s/\[[^]]*\]//g; s/<[^>]*>//g; s/^[[:space:]]*//; s/[[:space:]]*$//')
		[ -n "$dep" ] || continue
		if [ "$dep" = "@" ]; then
			for name in "${own[@]}"; do is_installed "$name" || echo "$name"; done
			continue
		fi
		ok=no
		IFS='|' read -ra alts <<<"$dep"
		for alt in "${alts[@]}"; do
			name=$(echo "$alt" | awk '{ print $1 }')
			name=${name%%:*}
			is_installed "$name" && { ok=yes; break; }
		done
		[ "$ok" = yes ] || echo "$dep"
	done
}

# Parsed whole before anything runs (not through a pipe or a process
# substitution, whose failure would go unnoticed).
if ! tests=$(parse_control) || [ -z "$tests" ]; then
	echo "cannot use $control: nothing run" >&2
	exit 1
fi

passed=0 failed=0 skipped=0
while IFS=$'\037' read -r name depends restrictions; do
	echo "=== $name"
	allow_stderr=no skippable=no
	for r in ${restrictions//,/ }; do
		case $r in
		allow-stderr) allow_stderr=yes ;;
		skippable) skippable=yes ;;
		needs-root) [ "$(id -u)" -eq 0 ] || { echo "$name: needs-root, not root" >&2; exit 1; } ;;
		superficial | rw-build-tree) ;;
		*) echo "$name: restriction '$r' is not supported by this runner" >&2; exit 1 ;;
		esac
	done
	missing=$(missing_depends "$depends")
	if [ -n "$missing" ]; then
		echo "FAIL $name: dependencies not installed: ${missing//$'\n'/, }"
		failed=$((failed + 1))
		continue
	fi
	tmp=$out/$name/tmp
	artifacts=$out/$name/artifacts
	rm -rf "${out:?}/$name"
	mkdir -p "$tmp" "$artifacts" "$out/$name/home"
	status=0
	(cd "$src" && env -i PATH="${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}" LANG=C.UTF-8 \
		HOME="$out/$name/home" AUTOPKGTEST_TMP="$tmp" AUTOPKGTEST_ARTIFACTS="$artifacts" \
		timeout 600 "debian/tests/$name") 2>"$out/$name/stderr" </dev/null || status=$?
	if [ -s "$out/$name/stderr" ]; then
		sed 's/^/stderr: /' "$out/$name/stderr"
	fi
	if [ "$status" -eq 77 ] && [ "$skippable" = yes ]; then
		echo "SKIP $name"
		skipped=$((skipped + 1))
	elif [ "$status" -ne 0 ]; then
		echo "FAIL $name: exit status $status"
		failed=$((failed + 1))
	elif [ -s "$out/$name/stderr" ] && [ "$allow_stderr" = no ]; then
		echo "FAIL $name: wrote to stderr (no allow-stderr restriction)"
		failed=$((failed + 1))
	else
		echo "PASS $name"
		passed=$((passed + 1))
	fi
done <<<"$tests"

echo "autopkgtest: $passed passed, $failed failed, $skipped skipped"
[ $((passed + failed + skipped)) -gt 0 ] || { echo "no tests found in $control" >&2; exit 1; }
[ "$failed" -eq 0 ]
