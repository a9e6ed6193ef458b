#!/bin/bash
# Every counter the library has is a row of `hpctl metrics`, under a family
# of the right type, in plain `make check` (issue 45: a row deleted from
# lib/control/metrics.c's table went unnoticed wherever prometheus_client, which
# tests/python/test_prometheus.py needs, is not installed).  Driven by the
# library's own list: the stat lines a running process publishes (publish.c
# writes one per hp_stat_name), never a copy written here.  A copy of that
# entry in a staged control directory gives every counter a value no other
# has, so each row found says whose it is:
#   - each counter is exactly one sample, in its base unit (a family in
#     seconds divides milliseconds or microseconds, any other none);
#   - a family is a counter if and only if its name ends in _total
#     (Prometheus' rule, lib/control/metrics.c's first comment), else a gauge;
#   - no sample of the process is left that is no counter's (but the
#     knobs' hpalloc_knob_info).
# Needs python3 alone (its standard library).
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

start_holder 8M
wait_for "$CTL/proc/$holder_pid/stats" . 5 || fail "the holder never published"
entry=$(published "$holder_pid")
nstats=$(grep -c '^stat ' <<<"$entry")
[ "$nstats" -gt 40 ] || fail "only $nstats stat lines published: $entry"
ok

# The same entry, the k-th counter's value (k + 1) * 10^12: whole in every
# unit a family divides by.
staged=$tmp/staged
mkdir -m 0755 "$staged" "$staged/proc" "$staged/proc/$holder_pid"
awk '/^stat / { $3 = sprintf("%d000000000000", ++k) } { print }' <<<"$entry" \
	>"$staged/proc/$holder_pid/stats"
chmod 0644 "$staged/proc/$holder_pid/stats"
run env HPALLOC_CONTROL_DIR="$staged" "$HPCTL" metrics "$holder_pid"
[ "$rc" = 0 ] || fail "hpctl metrics of the staged entry: $rc $err"
ok
printf '%s\n' "$out" >"$tmp/metrics.txt"
run python3 - "$staged/proc/$holder_pid/stats" "$tmp/metrics.txt" "$holder_pid" <<'EOF'
import re, sys
entry, text, pid = sys.argv[1], sys.argv[2], sys.argv[3]
stats = {}
for line in open(entry):
    if line.startswith("stat "):
        _, name, value = line.split()
        stats[name] = int(value)
types, samples = {}, []
sample_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
for line in open(text):
    line = line.rstrip("\n")
    if line.startswith("# TYPE "):
        _, _, family, kind = line.split(" ")
        if family in types:
            print("FAIL: family %s typed twice" % family)
        types[family] = kind
        continue
    if not line or line.startswith("#"):
        continue
    m = sample_re.match(line)
    if not m:
        print("FAIL: not a sample line: %r" % line)
        continue
    labels = dict(label_re.findall(m.group(2)))
    if labels.get("pid") == pid and m.group(1) != "hpalloc_knob_info":
        samples.append((m.group(1), labels, float(m.group(3)), line))
bad = 0
used = set()
for name, value in stats.items():
    rows = [(i, s, d) for i, s in enumerate(samples) for d in (1, 1000, 1000000)
            if round(s[2] * d) == value]
    if len(rows) != 1:
        print("FAIL: stat %s (value %d) is %d rows of hpctl metrics: %s"
              % (name, value, len(rows), [r[1][3] for r in rows]))
        bad += 1
        continue
    i, (family, labels, v, line), d = rows[0]
    used.add(i)
    kind = types.get(family)
    want = "counter" if family.endswith("_total") else "gauge"
    if kind != want:
        print("FAIL: stat %s: family %s is typed %s, its name says %s" % (name, family, kind, want))
        bad += 1
    if (d != 1) != ("_seconds" in family):
        print("FAIL: stat %s: %s divides by %d" % (name, line, d))
        bad += 1
for i, s in enumerate(samples):
    if i not in used:
        print("FAIL: a sample no counter's: %s" % s[3])
        bad += 1
print("%d counters, %d samples, %d bad" % (len(stats), len(samples), bad))
sys.exit(1 if bad else 0)
EOF
[ "$rc" = 0 ] || fail "the rows of hpctl metrics: $(grep -v '^ok ' <<<"$out") $err"
contains "$out" "$nstats counters, $nstats samples, 0 bad" "every counter a row"
echo "$out" | tail -1
done_ok
