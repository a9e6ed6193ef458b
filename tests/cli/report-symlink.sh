#!/bin/bash
# A symbolic link at the name HPALLOC_REPORT gives (hpctl run --check) is not
# followed: not by a process of the command that outlives hpctl, when
# another user has planted the link at that name after hpctl removed its
# report (here in a shared directory without the sticky bit, where
# fs.protected_symlinks does not help), nor in the writer's own directory.
# Root's appends never reach the link's target.  Both writers: a preloaded
# /bin/true (lib/preload/preload.c) and a Python interpreter activating hpalloc
# (python/hpalloc_activate.py).  A live hpctl run --check still reports.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/report-lib.sh"

can_preload || note_skip other "the preload cases (AddressSanitizer build, or no $PRELOAD_LIB)"
can_python || note_skip other "the Python cases (no Python package in $PYDIR)"

shared=
trap '[ -z "$shared" ] || rm -rf "$shared"; cleanup' EXIT

victim=$tmp/victim
echo untouched >"$victim"
chmod 0600 "$victim"

# writers_do_not_follow REPORT WHAT: both writers leave the victim as it was.
writers_do_not_follow() {
	if can_preload; then
		preloaded_true "$1"
		[ "$rc" = 0 ] || fail "$2: a preloaded /bin/true ended with $rc"
		[ "$(cat "$victim")" = untouched ] ||
			fail "$2: a preloaded /bin/true wrote through the link: $(cat "$victim")"
		ok
	fi
	if can_python; then
		python_numpy "$1"
		[ "$rc" = 0 ] || fail "$2: Python ended with $rc: $(cat "$tmp/py.err")"
		[ "$(cat "$victim")" = untouched ] ||
			fail "$2: Python wrote through the link: $(cat "$victim")"
		ok
	fi
}

# ---- another user plants a link where hpctl's report was -----------------------------
if [ "$(id -u)" = 0 ] && can_be_nobody; then
	shared=$(mktemp -d /tmp/hpalloc-shared.XXXXXX) && chmod 0777 "$shared" || fail "mktemp"
	name=$(report_name "$shared")
	[ -n "$name" ] || fail "hpctl run --check passed no HPALLOC_REPORT"
	[ ! -e "$name" ] || fail "$name is still there after hpctl run --check ended"
	as_nobody sh -c 'mkdir -p "${1%/*}" && ln -s "$2" "$1"' _ "$name" "$victim" ||
		fail "nobody could not plant a link at $name"
	[ -L "$name" ] || fail "no link at $name"
	writers_do_not_follow "$name" "link planted by nobody at $name"
	# A report in a directory of its own: that directory a link instead,
	# to a private directory of root's with a report in it (another
	# run's), is not followed either.
	if [ "${name%/*}" != "$shared" ]; then
		rm -rf "${name%/*}"
		other=$(mktemp -d "$tmp/other.XXXXXX") && chmod 0700 "$other" || fail "mktemp"
		: >"$other/report"
		as_nobody ln -s "$other" "${name%/*}" ||
			fail "nobody could not plant a link at ${name%/*}"
		writers_do_not_follow "$name" "directory link planted by nobody at ${name%/*}"
		[ ! -s "$other/report" ] ||
			fail "a writer followed ${name%/*} into $other: $(cat "$other/report")"
		ok
	fi
else
	note_skip root "planting a link as another user needs root and setpriv (nobody)"
fi

# ---- a link in a private directory of our own -----------------------------------------
own=$(mktemp -d "$tmp/own.XXXXXX") && chmod 0700 "$own" || fail "mktemp"
ln -s "$victim" "$own/report"
writers_do_not_follow "$own/report" "link in our own directory"

check_still_reports
done_ok
