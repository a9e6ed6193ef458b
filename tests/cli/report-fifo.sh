#!/bin/bash
# A FIFO at the name HPALLOC_REPORT gives (hpctl run --check) hangs no
# process: not one of the command that outlives hpctl, when another user has
# planted the FIFO at that name after hpctl removed its report, nor one that
# meets a FIFO in its own directory; and nothing is written into a FIFO that
# has a reader.  Both writers: a preloaded /bin/true (lib/preload/preload.c) and a
# Python interpreter activating hpalloc (python/hpalloc_activate.py).  A live
# hpctl run --check still reports.
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/report-lib.sh"

can_preload || note_skip other "the preload cases (AddressSanitizer build, or no $PRELOAD_LIB)"
can_python || note_skip other "the Python cases (no Python package in $PYDIR)"

planted=()
trap 'rm -rf "${planted[@]}"; cleanup' EXIT

# writers_do_not_hang REPORT WHAT: both writers finish with REPORT as it is.
writers_do_not_hang() {
	if can_preload; then
		preloaded_true "$1"
		[ "$rc" = 0 ] || fail "$2: a preloaded /bin/true ended with $rc (124: hung 5 s in its constructor)"
		ok
	fi
	if can_python; then
		python_numpy "$1"
		[ "$rc" = 0 ] || fail "$2: Python ended with $rc (124: hung 30 s): $(cat "$tmp/py.err")"
		ok
	fi
}

# ---- another user plants a FIFO where hpctl's report was ------------------------
if [ "$(id -u)" = 0 ] && can_be_nobody; then
	name=$(report_name /tmp)
	[ -n "$name" ] || fail "hpctl run --check passed no HPALLOC_REPORT"
	[ ! -e "$name" ] || fail "$name is still there after hpctl run --check ended"
	parent=${name%/*}
	[ -e "$parent" ] || planted+=("$parent")
	[ "$parent" = /tmp ] && planted+=("$name")
	as_nobody sh -c 'mkdir -p "${1%/*}" && mkfifo "$1"' _ "$name" ||
		fail "nobody could not plant a FIFO at $name"
	[ -p "$name" ] || fail "no FIFO at $name"
	writers_do_not_hang "$name" "FIFO planted by nobody at $name"
else
	note_skip root "planting a FIFO as another user needs root and setpriv (nobody)"
fi

# ---- a FIFO in a private directory of our own ---------------------------------------
own=$(mktemp -d "$tmp/own.XXXXXX") && chmod 0700 "$own" || fail "mktemp"
mkfifo "$own/report"
writers_do_not_hang "$own/report" "FIFO in our own directory"

# With a reader, opening does not block: nothing may be written either.
exec 8<>"$own/report"
writers_do_not_hang "$own/report" "FIFO with a reader"
if read -r -t 0.3 -u 8 line; then
	fail "a writer wrote into the FIFO: $line"
fi
ok
exec 8>&-

check_still_reports
done_ok
