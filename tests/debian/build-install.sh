#!/bin/bash
# build-install.sh — the Debian packages, end to end, on this machine:
#   1. build them with `dpkg-buildpackage -us -uc -b` from a clean copy of the
#      tree (git's tracked and not-ignored files) in a scratch directory, so
#      the tree itself stays clean; the build runs the test suite
#      (dh_auto_test) unless DEB_BUILD_OPTIONS has nocheck;
#   2. lintian: no errors, and every warning must be one debian/README.source
#      lists with its reason;
#   3. install them (`apt-get install ./*.deb` of the four packages) and run
#      the debian/tests (autopkgtest) scripts directly against the installed
#      files, honouring their Depends and Restrictions;
#   4. purge them, and whatever apt pulled in for them.
# The machine is left as found, also on failure: the packages and their new
# dependencies are purged on exit, and the hugetlb pools and hugetlbfs mounts
# are checked to be as before (the test suite changes them only through
# tests/run-test, which restores them).
#
# Usage (root): tests/debian/build-install.sh
# Environment: DEB_BUILD_OPTIONS is passed to the build (nocheck skips the
# test suite); CI_JOBS = parallel jobs (default 2); HPALLOC_DEB_FROM=REV
# builds git commit REV (e.g. HEAD) instead of the working tree as it is;
# HPALLOC_DEB_KEEP=1 keeps the scratch directory (build log, packages).
# Needs: dpkg-dev debhelper dh-python lintian build-essential and
# the build dependencies of debian/control.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${CI_JOBS:-2}
# A build and tests as on a Debian machine: not a python3 from pyenv or a
# venv that happens to come first on the caller's PATH.
std_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
t0=$SECONDS

say() { printf 'build-install: %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }
step() { printf '\n---- %s  [%ds]\n' "$*" $((SECONDS - t0)); }

# ---- preconditions -------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
	say "SKIP: installing and purging packages needs root"
	exit 77
fi
missing=
for tool in dpkg-buildpackage dpkg-parsechangelog dh dh_python3 lintian apt-get flock; do
	command -v "$tool" >/dev/null || missing="$missing $tool"
done
[ -z "$missing" ] || die "missing tools:$missing (Debian: dpkg-dev debhelper dh-python lintian)"

cd "$top"
mapfile -t packages < <(sed -n 's/^Package: *//p' debian/control)
[ ${#packages[@]} -gt 0 ] || die "no Package: paragraphs in debian/control"
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
upstream=${upstream#*:}

# One run at a time on the machine: two runs would install and purge the
# same packages under each other.
exec 8>>/run/lock/hpalloc-debian-build-install.lock
if ! flock -n 8; then
	say "waiting for another build-install.sh run to finish"
	flock 8
fi

# Purging afterwards must not remove someone's real installation.
for pkg in "${packages[@]}"; do
	st=$(dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null || true)
	case $st in
	'' | not-installed) ;;
	*) die "$pkg is already on this machine ($st); this script would purge it: apt-get purge ${packages[*]} first" ;;
	esac
done

# Hugetlb pools and hugetlbfs mounts, read while holding tests/run-test's
# machine-wide lock so no hpalloc test is changing them at that moment.
test_lock=${HPALLOC_TEST_LOCK:-/run/lock/hpalloc-test.lock}
machine_state() {
	(
		exec 9>>"$test_lock" && flock 9
		for f in /proc/sys/vm/nr_hugepages /proc/sys/vm/nr_overcommit_hugepages \
			/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages \
			/sys/kernel/mm/hugepages/hugepages-*/nr_overcommit_hugepages; do
			[ -r "$f" ] && echo "$f $(cat "$f")"
		done
		awk '$3 == "hugetlbfs" { print "hugetlbfs mount", $2 }' /proc/self/mounts
		# root's control directory (hpctl, the library as root).
		[ -e /run/hpalloc ] && echo "/run/hpalloc exists"
		true
	)
}

work=$(mktemp -d /tmp/hpalloc-deb.XXXXXX)
src=$work/hpalloc-$upstream
state_before=$(machine_state)
installed=no
extra_deps=()

purge_packages() {
	local present=() pkg
	for pkg in "${packages[@]}" "${extra_deps[@]}"; do
		dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null | grep -qv '^not-installed$' &&
			present+=("$pkg")
	done
	[ ${#present[@]} -eq 0 ] && return 0
	step "purge ${present[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -o DPkg::Lock::Timeout=600 "${present[@]}"
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM HUP
	if [ "$installed" = yes ]; then
		purge_packages || { say "FAIL: could not purge the packages"; status=1; }
	fi
	if [ "${HPALLOC_DEB_KEEP:-0}" = 1 ]; then
		say "kept $work (build.log, packages)"
	else
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---- 1. build -------------------------------------------------------------
step "copy the tree to $src"
mkdir -p "$src"
if [ -n "${HPALLOC_DEB_FROM:-}" ]; then
	# A commit instead of the working tree (others' unfinished edits).
	git -C "$top" archive --format=tar "$HPALLOC_DEB_FROM" | tar -x -C "$src"
elif git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# Tracked and new files as they are now, without build products.
	git -C "$top" ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		xargs -0 cp --parents -a -t "$src"
else
	cp -a "$top/." "$src"
fi

step "dpkg-buildpackage -us -uc -b -j$jobs (DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS:-}')"
build_start=$SECONDS
if ! (cd "$src" && PATH=$std_path dpkg-buildpackage -us -uc -b -j"$jobs") >"$work/build.log" 2>&1; then
	tail -n 150 "$work/build.log"
	HPALLOC_DEB_KEEP=1
	die "dpkg-buildpackage failed (log above; whole log in $work/build.log)"
fi
say "built in $((SECONDS - build_start)) s"
# The test suite's outcome, and why each skipped test skipped.
if grep -q '^# TOTAL:' "$work/build.log"; then
	grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$work/build.log" || true
	skipped=$(find "$src/debian/build" -name '*.trs' -exec grep -l '^:test-result: SKIP' {} + | sort || true)
	[ -n "$skipped" ] || echo "  no test skipped"
	for trs in $skipped; do
		# The first reason the test printed ("SKIP: ..." / pytest's "SKIPPED [n] ...").
		reason=$(grep -m 1 -E '^(SKIP: |SKIPPED \[)' "${trs%.trs}.log" || true)
		echo "  skipped ${trs#"$src/debian/build/"}: ${reason:-(no reason in its log)}"
	done
else
	echo "test suite not run (DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS:-}')"
fi
changes=$(find "$work" -maxdepth 1 -name "*.changes" | head -n 1)
[ -n "$changes" ] || die "the build made no .changes file"
debs=()
for pkg in "${packages[@]}"; do
	deb=$(find "$work" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
	[ -n "$deb" ] || die "the build made no package $pkg"
	debs+=("$deb")
	echo "${deb##*/}: $(dpkg-deb -f "$deb" Depends)"
done

# The build's test suite ran as this user: if root, the hugepage tests
# reserved pools and mounted hugetlbfs.  They must all be back.
state_now=$(machine_state)
if [ "$state_now" != "$state_before" ]; then
	diff <(echo "$state_before") <(echo "$state_now") >&2 || true
	die "hugetlb pools or hugetlbfs mounts differ from before the build (above: before < > now)"
fi

# ---- 2. lintian -------------------------------------------------------------
step "lintian --pedantic $(basename "$changes")"
lintian_out=$(lintian --pedantic --display-info "$changes" 2>&1 |
	grep -v '^running with root privileges is not recommended' || true)
[ -n "$lintian_out" ] && printf '%s\n' "$lintian_out"
if printf '%s\n' "$lintian_out" | grep -q '^E: '; then
	die "lintian reports errors"
fi
# Warnings are allowed only where debian/README.source says why.
for tag in $(printf '%s\n' "$lintian_out" | sed -n 's/^W: [^ ]*: \([^ ]*\).*/\1/p' | sort -u); do
	grep -qw -- "$tag" debian/README.source ||
		die "lintian warning $tag is not listed (with its reason) in debian/README.source"
done

# ---- 3. install, autopkgtest checks --------------------------------------------
step "apt-get install ${debs[*]##*/}"
# What apt would add besides our packages, so that exactly that is purged.
# ("Inst" also lists upgrades of installed packages: those are not ours.)
for pkg in $(apt-get install -s "${debs[@]}" | awk '$1 == "Inst" { print $2 }'); do
	printf '%s\n' "${packages[@]}" | grep -qxF "$pkg" && continue
	dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed && continue
	extra_deps+=("$pkg")
done
[ ${#extra_deps[@]} -eq 0 ] || say "apt also installs: ${extra_deps[*]}"
installed=yes
DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=600 "${debs[@]}"

step "debian/tests (autopkgtest checks against the installed packages)"
PATH=$std_path bash "$top/tests/debian/run-autopkgtests.sh" "$src" "$work/autopkgtest"

# ---- 4. purge, machine as found ---------------------------------------------------
purge_packages
installed=no
for pkg in "${packages[@]}" "${extra_deps[@]}"; do
	st=$(dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null || true)
	case $st in '' | not-installed) ;; *) die "$pkg is still on the machine ($st)" ;; esac
done
# Nothing the packages shipped (or byte-compiled next to it) is left.
for deb in "${debs[@]}"; do
	dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./|/|p' | grep -v '/$' |
		while IFS= read -r path; do
			[ ! -e "$path" ] && [ ! -L "$path" ] || echo "$path"
		done
done > "$work/left-behind"
[ -d /usr/lib/python3/dist-packages/hpalloc ] && echo /usr/lib/python3/dist-packages/hpalloc >> "$work/left-behind"
if [ -s "$work/left-behind" ]; then
	cat "$work/left-behind" >&2
	die "files of the packages are still on the machine after the purge (above)"
fi
state_now=$(machine_state)
if [ "$state_now" != "$state_before" ]; then
	diff <(echo "$state_before") <(echo "$state_now") >&2 || true
	die "hugetlb pools or hugetlbfs mounts differ from before (above: before < > now)"
fi
step "all passed: packages built, lintian clean, installed, checked, purged"
