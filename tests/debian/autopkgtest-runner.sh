#!/bin/bash
# tests/debian/run-autopkgtests.sh, on small fake source trees: a control
# file it understands runs every test; one it understands only in part (a
# Test-Command paragraph, a line that is no field, an unknown field, a
# paragraph without Tests) fails before running anything -- it used to run
# the tests parsed before the bad paragraph and pass.
set -u
srcdir=${srcdir:-$(dirname "$0")/../..}
runner=$srcdir/tests/debian/run-autopkgtests.sh
tmp=$(mktemp -d "${HPALLOC_TEST_TMPDIR:-${TMPDIR:-/tmp}}/autopkgtest-runner.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
checks=0
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); }

# tree NAME CONTROL: a source tree with two tests, "first" and "second",
# that leave a mark when they run.
tree() {
	local t=$tmp/$1
	mkdir -p "$t/debian/tests"
	printf 'Source: fake\n\nPackage: fake-bin\nArchitecture: any\n' >"$t/debian/control"
	printf '%s' "$2" >"$t/debian/tests/control"
	for name in first second; do
		printf '#!/bin/sh\ntouch "%s/ran-%s"\n' "$t" "$name" >"$t/debian/tests/$name"
		chmod +x "$t/debian/tests/$name"
	done
	echo "$t"
}

# runs TREE: run the runner; status in $rc, output in $out.
runs() {
	out=$(bash "$runner" "$1" "$1/out" 2>&1)
	rc=$?
}

good=$(tree good $'# comment\nTests: first\nDepends:\n\nTests: second\nRestrictions:\n superficial\n')
runs "$good"
[ "$rc" = 0 ] || fail "a good control file: exit $rc: $out"
[ -e "$good/ran-first" ] && [ -e "$good/ran-second" ] || fail "not every test ran: $out"
ok

for bad in \
	$'Tests: first\n\nTest-Command: true\n' \
	$'Tests: first\n\nTests: second\nthis is no field\n' \
	$'Tests: first\n\nTests: second\nFlavour: strawberry\n' \
	$'Tests: first\n\nDepends: gcc\n' \
	$' continued: before any field\nTests: first\n'; do
	t=$(tree "bad$checks" "$bad")
	runs "$t"
	[ "$rc" != 0 ] || fail "a control file it cannot fully read passed: $(printf '%q' "$bad"): $out"
	[ -e "$t/ran-first" ] && fail "tests ran from a control file it cannot fully read: $(printf '%q' "$bad")"
	ok
done

echo "PASS: $checks checks"
