#!/bin/bash
# hpctl metrics: the stats in Prometheus' text format on standard output,
# into a file for node_exporter's textfile collector (replaced atomically,
# nothing changed when it cannot be written), and served over HTTP on a
# port the user gives (loopback by default).  Bad input is a clear error
# that changes nothing.  (tests/python/test_prometheus.py parses the text
# with prometheus_client's own parser and compares it with --json stats.)
. "${srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"

# fetch URL [METHOD]: "STATUS\nHEADERS\n\nBODY" of one request (Python's
# http.client: no curl needed)
fetch() {
	python3 - "$@" <<'EOF'
import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
c.request(sys.argv[2] if len(sys.argv) > 2 else "GET", u.path or "/")
r = c.getresponse()
print(r.status)
for k, v in r.getheaders():
    print("%s: %s" % (k, v))
print()
sys.stdout.write(r.read().decode())
EOF
}

# ---- standard output ----------------------------------------------------------
expect 0 "$HPCTL" metrics
contains "$out" "# TYPE hpalloc_live_bytes gauge" "metrics with nobody publishing"
[ -z "$(grep -v '^#' <<<"$out")" ] || fail "samples with nobody publishing: $out"
ok
start_holder 8M; a=$holder_pid
start_holder 4M; b=$holder_pid
wait_for "$CTL/proc/$a/stats" . 5 && wait_for "$CTL/proc/$b/stats" . 5 || fail "holders never published"
expect 0 "$HPCTL" metrics
for p in $a $b; do
	contains "$out" "hpalloc_live_blocks{pid=\"$p\",comm=\"holder\",backend=\"small\"} 0" "samples of $p"
	contains "$out" "hpalloc_knob_info{pid=\"$p\",comm=\"holder\",knob=\"threshold\"," "knobs of $p"
done
contains "$out" "# TYPE hpalloc_cache_hits_total counter" "a counter"
expect 0 "$HPCTL" metrics "$a"
grep -q "pid=\"$b\"" <<<"$out" && fail "metrics $a shows $b too"
ok
expect 1 "$HPCTL" metrics "$a" 999999
contains "$err" "999999" "a PID that does not publish"
expect 2 "$HPCTL" --json metrics
contains "$err" "metrics has no --json" "--json"
expect 2 "$HPCTL" metrics --bogus
expect 2 "$HPCTL" metrics --textfile "$tmp/x.prom" --listen 0
contains "$err" "not both" "--textfile and --listen"
expect 2 "$HPCTL" metrics --listen 0 "$a"
contains "$err" "no PID arguments" "--listen with PIDs"

# ---- --textfile: atomic, complete, nothing changed on failure -----------------------
mkdir "$tmp/textfile"
expect 0 "$HPCTL" metrics --textfile "$tmp/textfile/hpalloc.prom"
[ -z "$out" ] || fail "--textfile printed: $out"
body=$(cat "$tmp/textfile/hpalloc.prom")
contains "$body" "hpalloc_live_blocks{pid=\"$a\",comm=\"holder\",backend=\"thp\"} " "textfile content"
[ "$(stat -c %a "$tmp/textfile/hpalloc.prom")" = 644 ] || fail "mode $(stat -c %a "$tmp/textfile/hpalloc.prom")"
[ "$(ls -A "$tmp/textfile")" = hpalloc.prom ] || fail "left behind: $(ls -A "$tmp/textfile")"
ok
# relative to the working directory, and with --textfile=FILE
expect 0 bash -c "cd '$tmp/textfile' && '$(realpath "$HPCTL")' metrics --textfile=rel.prom $b"
grep -q "pid=\"$b\"" "$tmp/textfile/rel.prom" && ! grep -q "pid=\"$a\"" "$tmp/textfile/rel.prom" ||
	fail "rel.prom: $(cat "$tmp/textfile/rel.prom")"
ok
# a reader never sees a partial file: the inode is replaced, not rewritten
ino=$(stat -c %i "$tmp/textfile/hpalloc.prom")
expect 0 "$HPCTL" metrics --textfile "$tmp/textfile/hpalloc.prom"
[ "$(stat -c %i "$tmp/textfile/hpalloc.prom")" != "$ino" ] || fail "rewritten in place"
ok
cp "$tmp/textfile/hpalloc.prom" "$tmp/before"
# refused: a PID that does not publish leaves the file as it was
expect 1 "$HPCTL" metrics --textfile "$tmp/textfile/hpalloc.prom" 999999
cmp -s "$tmp/before" "$tmp/textfile/hpalloc.prom" || fail "a refused PID changed the file"
ok
expect 1 "$HPCTL" metrics --textfile "$tmp/missing/hpalloc.prom"
contains "$err" "cannot open directory $tmp/missing" "missing directory"
[ ! -e "$tmp/missing" ] || fail "made $tmp/missing"
ok
mkdir "$tmp/textfile/dir.prom"
expect 1 "$HPCTL" metrics --textfile "$tmp/textfile/dir.prom"
contains "$err" "cannot write $tmp/textfile/dir.prom" "FILE is a directory"
[ -d "$tmp/textfile/dir.prom" ] && [ -z "$(ls -A "$tmp/textfile/dir.prom")" ] || fail "the directory changed"
ok
expect 2 "$HPCTL" metrics --textfile "$tmp/textfile/"
contains "$err" "names no file" "FILE ending in /"
[ "$(ls -A "$tmp/textfile" | sort | tr '\n' ' ')" = "dir.prom hpalloc.prom rel.prom " ] ||
	fail "left behind: $(ls -A "$tmp/textfile")"
ok
# unwritable: another user's directory (as nobody; root writes anywhere)
if can_be_nobody; then
	nobody_stage "$HPCTL"
	cp "$HPCTL" "$staged" && chmod 0755 "$staged"
	ro=$nobody_dir/ro
	mkdir "$ro" && chmod 0755 "$ro" && cp "$tmp/before" "$ro/hpalloc.prom"
	run as_nobody env HPALLOC_CONTROL_DIR="$nobody_dir/none" "$staged" metrics --textfile "$ro/hpalloc.prom"
	[ "$rc" = 1 ] || fail "unwritable directory: exit $rc: $err"
	contains "$err" "cannot write $ro/hpalloc.prom: Permission denied (left as it was)" "unwritable"
	cmp -s "$tmp/before" "$ro/hpalloc.prom" && [ "$(ls -A "$ro")" = hpalloc.prom ] ||
		fail "an unwritable directory changed: $(ls -A "$ro")"
	ok
else
	note_skip nonroot "cannot switch to nobody: an unwritable directory not tried"
fi

# a full file system (root: a 12 KiB tmpfs holding the old file): the
# write fails part way, the old file stays whole and no temporary is left
if [ "$(id -u)" = 0 ] && mkdir "$tmp/full" && mount -t tmpfs -o size=12k tmpfs "$tmp/full"; then
	head -c 2048 "$tmp/before" >"$tmp/full/hpalloc.prom"
	head -c 2048 "$tmp/before" >"$tmp/small"
	run "$HPCTL" metrics --textfile "$tmp/full/hpalloc.prom"
	same=no
	cmp -s "$tmp/small" "$tmp/full/hpalloc.prom" && same=yes
	left=$(ls -A "$tmp/full")
	umount "$tmp/full" # before any failure: the scratch directory must go
	[ "$rc" = 1 ] || fail "a full file system: exit $rc: $err"
	contains "$err" "No space left on device (left as it was)" "a full file system"
	[ "$same" = yes ] && [ "$left" = hpalloc.prom ] || fail "a full file system changed: $left"
	ok
else
	note_skip root "cannot mount a tmpfs: a full file system not tried"
fi

# ---- --listen: bad input --------------------------------------------------------------
for bad in 65536 -1 x 80x '' 1.5 :9 '[::1]9'; do
	expect 2 "$HPCTL" metrics --listen "$bad"
	case $err in *"invalid port"*|*"invalid --listen"*) ok ;; *) fail "--listen '$bad': $err" ;; esac
done
expect 2 "$HPCTL" metrics --listen no.such.host.invalid:9
contains "$err" "invalid address 'no.such.host.invalid'" "unresolvable address"
expect 2 "$HPCTL" metrics --listen
contains "$err" "--listen needs a value" "--listen without value"

# ---- --listen: serving ------------------------------------------------------------------
# serve [SPEC]: hpctl metrics --listen SPEC (default 0: a free port on
# loopback) in the background; its pid in $srv, its URL in $url.
serve() {
	"$HPCTL" metrics --listen "${1:-0}" >"$tmp/srv.out" 2>"$tmp/srv.err" &
	srv=$!
	bg_pids+=("$srv")
	wait_for "$tmp/srv.err" 'serving metrics on' 5 || fail "server did not start: $(cat "$tmp/srv.err")"
	url=$(sed -n 's/^hpctl: serving metrics on \(http:[^ ]*\)\/metrics$/\1/p' "$tmp/srv.err")
}
serve
case $url in http://127.0.0.1:[1-9]*) ok ;; *) fail "default address: $(cat "$tmp/srv.err")" ;; esac
port=${url##*:}
resp=$(fetch "$url/metrics") || fail "GET /metrics"
[ "$(head -n1 <<<"$resp")" = 200 ] || fail "GET /metrics: $resp"
contains "$resp" "Content-Type: text/plain; version=0.0.4; charset=utf-8" "content type"
contains "$resp" "hpalloc_live_blocks{pid=\"$a\",comm=\"holder\",backend=\"thp\"} " "served samples"
# each scrape reads anew: a process that exits is gone from the next one
kill -TERM "$b"
for i in $(seq 50); do
	resp=$(fetch "$url/metrics")
	grep -q "pid=\"$b\"" <<<"$resp" || break
	sleep 0.1
done
grep -q "pid=\"$b\"" <<<"$resp" && fail "$b still served after it exited"
ok
resp=$(fetch "$url/metrics?x=1" HEAD)
[ "$(head -n1 <<<"$resp")" = 200 ] && ! grep -q '^hpalloc_' <<<"$resp" || fail "HEAD: $resp"
ok
[ "$(fetch "$url/nope" | sed -n 1p)" = 404 ] || fail "404"
ok
[ "$(fetch "$url/metrics" POST | sed -n 1p)" = 405 ] || fail "405"
ok
[ "$(fetch "$url/" | sed -n 1p)" = 200 ] || fail "index"
ok
# garbage, and a client that connects and says nothing: the next request is
# still answered (at once: clients are served side by side,
# tests/cli/metrics-serve.sh has the slow, malformed and many)
python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.sendall(b"\x00\xff garbage\r\n\r\n"); print(s.recv(100).split(b"\r\n")[0].decode())' "$port" >"$tmp/garbage" ||
	fail "garbage request"
grep -q "400 Bad Request" "$tmp/garbage" || fail "garbage: $(cat "$tmp/garbage")"
ok
python3 -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(30)' "$port" &
staller=$!
bg_pids+=("$staller")
sleep 0.3
t0=$(date +%s%N)
[ "$(fetch "$url/metrics" | sed -n 1p)" = 200 ] || fail "request after a stalled client"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -lt 9000 ] || fail "a stalled client held the server for $ms ms"
ok
kill "$staller" 2>/dev/null
# an address in use: a clear error, exit 1, nothing served
expect 1 "$HPCTL" metrics --listen "127.0.0.1:$port"
contains "$err" "cannot listen on 127.0.0.1 port $port: Address already in use" "port in use"
# SIGTERM ends it promptly, exit 0
t0=$(date +%s%N)
kill -TERM "$srv"
wait "$srv"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 0 ] && [ "$ms" -lt 3000 ] || fail "server after SIGTERM: exit $rc after $ms ms"
ok
# IPv6 loopback, where the machine has it
if python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
	serve '[::1]:0'
	case $url in "http://[::1]:"[1-9]*) ok ;; *) fail "IPv6: $(cat "$tmp/srv.err")" ;; esac
	kill -TERM "$srv"; wait "$srv"
else
	note_skip other "no IPv6 loopback here"
fi

done_ok
