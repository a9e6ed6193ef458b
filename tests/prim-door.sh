#!/bin/bash
# lib/prim.c is the only door to the kernel (lib/prim.h says what passes
# through it): in the code of lib/ and tools/ (*.c, *.h) but prim.c/.h --
# comments aside -- no string literal names a path of /proc or /sys, and
# nothing calls a memory system call (mmap, munmap, mremap, madvise,
# mprotect, mbind, mincore, the mempolicy calls, memfd_create, ...), its
# io_uring form (io_uring_prep_madvise) or syscall(2) itself.
#
# A kernel path is a literal that starts with it ("/proc/self/smaps",
# "/proc/%ld/stat", "/sys"); a literal that merely contains the words, as
# "%s/proc/%s" (a control directory's proc/ entries) or a message naming a
# file for the user, opens nothing and passes.  The compiler's
# preprocessor strips the comments (-fpreprocessed: no header is read, no
# macro expanded; its line markers keep the line numbers true).
# Each offence is named as file:line: what.
set -euo pipefail

src=${abs_top_srcdir:-${top_srcdir:-.}}
cc=${CC:-cc}
cd "$src"

calls='mmap|mmap64|munmap|mremap|madvise|posix_madvise|process_madvise|mprotect|pkey_mprotect'
calls+='|mbind|mincore|get_mempolicy|set_mempolicy|set_mempolicy_home_node|move_pages'
calls+='|migrate_pages|memfd_create|mlock|mlock2|munlock|mlockall|munlockall|msync|brk|sbrk'
calls+='|io_uring_prep_madvise|syscall'

# One file, comments stripped: "file:line: what" for each offence.
scan() {
	local f=$1
	$cc -fpreprocessed -dD -E -x c "$f" | awk -v file="$f" -v calls="$calls" '
		/^# [0-9]+ "/ { line = $2 - 1; next }
		{ line++ }
		{
			code = $0
			rest = code
			while (match(rest, /"\/(proc|sys)(\/[^"]*)?"/)) {
				printf "%s:%d: kernel path %s\n", file, line, substr(rest, RSTART, RLENGTH)
				rest = substr(rest, RSTART + RLENGTH)
			}
			gsub(/\\./, "", code)           # escapes, so that quotes pair up
			gsub(/"[^"]*"/, "\"\"", code)   # string literals: words, not calls
			gsub(/\047[^\047]*\047/, "0", code) # character literals
			rest = code
			re = "(^|[^A-Za-z0-9_.>])(" calls ")[ \t]*\\("
			while (match(rest, re)) {
				what = substr(rest, RSTART, RLENGTH)
				sub(/^[^A-Za-z_]/, "", what)
				sub(/[ \t]*\($/, "", what)
				printf "%s:%d: system call %s()\n", file, line, what
				rest = substr(rest, RSTART + RLENGTH)
			}
			if (match(code, /(^|[^A-Za-z0-9_])(SYS|__NR)_[a-z0-9_]+/))
				printf "%s:%d: system call number %s\n", file, line, substr(code, RSTART, RLENGTH)
		}'
}

# The scanner must see what it looks for, or a passing run proves nothing.
selftest=$(mktemp)
trap 'rm -f "$selftest"' EXIT
cat >"$selftest" <<'EOF'
/* "/proc/self/maps" and mmap(0) in a comment pass */
static const char *ok = "%s/proc/%s";
int f(void) { return open("/proc/self/statm", 0) + madvise(0, 0, 4) + syscall(SYS_mbind); }
// munmap(p) here too
const char *s = "mprotect(";
EOF
got=$(scan "$selftest" | sed "s|^$selftest|t|")
want='t:3: kernel path "/proc/self/statm"
t:3: system call madvise()
t:3: system call syscall()
t:3: system call number (SYS_mbind'
if [ "$got" != "$want" ]; then
	printf 'the scanner is broken: it found\n%s\ninstead of\n%s\n' "$got" "$want" >&2
	exit 99
fi

status=0
for f in lib/*.[ch] tools/*.[ch]; do
	case $f in lib/prim.[ch]) continue ;; esac
	out=$(scan "$f")
	if [ -n "$out" ]; then
		echo "$out" >&2
		status=1
	fi
done
if [ $status -ne 0 ]; then
	echo "the kernel is reached outside lib/prim.c: add a prim_* function (lib/prim.h; lib/private.h for hpctl) and call it" >&2
	exit 1
fi
echo "lib/ and tools/ reach /proc, /sys and the memory system calls only through lib/prim.c"
