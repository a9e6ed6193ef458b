# Shared helpers of the HPALLOC_REPORT tests (sourced after lib.sh).
#
# `hpctl run --check` names a report file in HPALLOC_REPORT, and every
# process of the command inherits the name -- also those that outlive hpctl,
# once hpctl has removed the file and another user may have put something
# at that name.  These helpers run the two kinds of writer with a given
# HPALLOC_REPORT: a program under libhpalloc-preload.so (lib/preload/preload.c) and
# a Python interpreter activating hpalloc (python/hpalloc_activate.py).

PRELOAD_LIB=${HPALLOC_TEST_PRELOAD:-$builddir/lib/.libs/libhpalloc-preload.so}
PYDIR=${abs_top_builddir:-$builddir}/python/inplace
PY=${PYTHON:-}

# The preload tests cannot run under ASan (tests/preload/Makemodule.am).
can_preload() { [ -z "${SANITIZER_FLAGS:-}" ] && [ -f "$PRELOAD_LIB" ]; }
can_python() { [ -n "$PY" ] && [ -f "$PYDIR/hpalloc_activate.py" ]; }

# The name `hpctl run --check` gives its command, with TMPDIR=$1.
report_name() {
	TMPDIR=$1 "$HPCTL" run --check -- sh -c 'printf %s "$HPALLOC_REPORT" >"$0"' "$tmp/name" \
		>/dev/null 2>&1
	cat "$tmp/name"
}

# preloaded_true REPORT: a preloaded /bin/true with HPALLOC_REPORT=REPORT,
# killed after 5 s (timeout itself is not preloaded); status in $rc.
preloaded_true() {
	timeout 5 env LD_PRELOAD="$PRELOAD_LIB${LD_PRELOAD:+ $LD_PRELOAD}" HPALLOC_REPORT="$1" \
		/bin/true
	rc=$?
}

# python_numpy REPORT: an interpreter that activates hpalloc (hpctl run's
# environment) and imports NumPy, so it reports; killed after 30 s.
python_numpy() {
	timeout 30 env HPALLOC_NUMPY=1 PYTHONPATH="$PYDIR/hpalloc/_boot:$PYDIR" \
		HPALLOC_REPORT="$1" "$PY" -c 'import numpy' 2>"$tmp/py.err"
	rc=$?
}

# A live `hpctl run --check` still reports what activated, both ways.
check_still_reports() {
	if can_preload; then
		HPALLOC_PRELOAD_PATH=$PRELOAD_LIB expect 0 "$HPCTL" run --check --preload -- /bin/true
	fi
	if can_python; then
		HPALLOC_PYTHON_DIR=$PYDIR expect 0 "$HPCTL" run --check -- "$PY" -c 'import numpy'
		HPALLOC_PYTHON_DIR=$PYDIR expect 1 "$HPCTL" run --check -- "$PY" -c 'pass'
		contains "$err" "no process of $PY activated hpalloc" "--check without NumPy"
	fi
}
