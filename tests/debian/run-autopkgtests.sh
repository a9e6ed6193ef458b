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

# One line per test: NAME<TAB>DEPENDS<TAB>RESTRICTIONS (comma/space lists).
# deb822: paragraphs split by blank lines, continuation lines start with
# blanks, # lines are comments.
parse_control() {
	awk '
	function flush() {
		if (fields["test-command"] != "") {
			print "Test-Command is not supported here" > "/dev/stderr"; exit 1
		}
		n = split(fields["tests"], names, /[ ,]+/)
		for (i = 1; i <= n; i++)
			if (names[i] != "")
				printf "%s\t%s\t%s\n", names[i], fields["depends"], fields["restrictions"]
		delete fields
	}
	/^#/ { next }
	/^[ \t]*$/ { flush(); key = ""; next }
	/^[ \t]/ { fields[key] = fields[key] " " $0; next }
	{
		key = tolower(substr($0, 1, index($0, ":") - 1))
		fields[key] = substr($0, index($0, ":") + 1)
	}
	END { flush() }' "$control"
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

passed=0 failed=0 skipped=0
while IFS=$'\t' read -r name depends restrictions; do
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
done < <(parse_control)

echo "autopkgtest: $passed passed, $failed failed, $skipped skipped"
[ $((passed + failed + skipped)) -gt 0 ] || { echo "no tests found in $control" >&2; exit 1; }
[ "$failed" -eq 0 ]
