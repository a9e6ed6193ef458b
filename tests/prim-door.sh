#!/bin/bash
# lib/door/prim.c is the only door to the kernel (lib/door/prim.h says what passes
# through it): in the code of lib/ and tools/ (*.c, *.h) but prim.c/.h and
# in the Python extension's C files (python/hpalloc/**/*.c) -- comments
# aside --
#   - no string literal names a path of /proc or /sys;
#   - nothing calls a memory system call (mmap, munmap, mremap, madvise,
#     mprotect, mbind, mincore, the mempolicy calls, memfd_create, ...),
#     its io_uring form (io_uring_prep_madvise) or syscall(2) itself;
#   - no path a prim_*path* helper built is opened, read or looked at
#     (open, openat, fopen, opendir, readlink, access, stat, ...), and
#     prim_pool_path, which handed hpctl the pool file to write, is not
#     used at all (prim_pool_write writes it);
#   - nothing includes <numa.h> or calls libnuma (numa_available,
#     numa_max_node, numa_nodes_ptr, numa_bitmask_*, numa_node_to_cpus,
#     ...): libnuma reads /sys behind the door (prim_node_ids and
#     prim_node_read do, so a staged sysfs stands in for them).
# The Python modules (python/hpalloc/**/*.py) hold no string literal that
# starts with /proc or /sys: the library's functions read the kernel.
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
# What opens or looks at a path (rule 3).
fscalls='open|open64|openat|openat64|fopen|fopen64|freopen|opendir|readlink|readlinkat|access'
fscalls+='|faccessat|euidaccess|stat|stat64|lstat|lstat64|fstatat|statx|statfs|statvfs|truncate|creat'
# libnuma's API (<numa.h>), not the library's own numa_* (numa.c's).
libnuma='available|max_node|max_possible_node|num_[a-z_]+|[a-z_]+_ptr|bitmask_[a-z_]+'
libnuma+='|allocate_(cpu|node)mask|free_(cpu|node)mask|free|alloc|alloc_[a-z_]+|realloc'
libnuma+='|node_to_cpus|node_to_cpu_update|node_of_cpu|node_size|node_size64|preferred'
libnuma+='|preferred_many|has_preferred_many|set_[a-z_]+|get_[a-z_]+|interleave_memory'
libnuma+='|tonode_memory|tonodemask_memory|setlocal_memory|police_memory|distance'
libnuma+='|run_on_node|run_on_node_mask|parse_[a-z_]+|sched_getaffinity|sched_setaffinity'
libnuma+='|bind|migrate_pages|move_pages|error|warn|exit_on_error|pagesize|init'

# One file, comments stripped: "file:line: what" for each offence.
scan() {
	local f=$1
	$cc -fpreprocessed -dD -E -x c "$f" |
	awk -v file="$f" -v calls="$calls" -v fscalls="$fscalls" -v libnuma="$libnuma" '
		# The text of the parenthesis that opens at pos of text, without it.
		function inside(text, pos,   depth, j, c, out) {
			depth = 0
			for (j = pos; j <= length(text); j++) {
				c = substr(text, j, 1)
				if (c == ")" && --depth == 0)
					return out
				if (depth > 0)
					out = out c
				if (c == "(")
					depth++
			}
			return out
		}
		# Each call of a name matching re on line i (it may go on over the
		# next lines) to found(): name in callee, its arguments in args.
		function calls_on(i, re,   rest, text, k, off, n) {
			n = 0
			text = lines[i]
			for (k = 1; k <= 4 && i + k <= nl; k++)
				text = text " " lines[i + k]
			rest = lines[i]
			off = 0
			while (match(rest, "(^|[^A-Za-z0-9_.>])(" re ")[ \t]*\\(")) {
				n++
				callee[n] = substr(rest, RSTART, RLENGTH)
				sub(/^[^A-Za-z_]/, "", callee[n])
				sub(/[ \t]*\($/, "", callee[n])
				args[n] = inside(text, off + RSTART + RLENGTH - 1)
				off += RSTART + RLENGTH - 1
				rest = substr(rest, RSTART + RLENGTH)
			}
			return n
		}
		/^# [0-9]+ "/ { line = $2 - 1; next }
		{ line++ }
		/^[ \t]*#[ \t]*include[ \t]*<numa\.h>/ {
			printf "%s:%d: libnuma <numa.h>\n", file, line
			next
		}
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
			rest = code
			re = "(^|[^A-Za-z0-9_])numa_(" libnuma ")([^A-Za-z0-9_]|$)"
			while (match(rest, re)) {
				what = substr(rest, RSTART, RLENGTH)
				sub(/^[^A-Za-z_]/, "", what)
				sub(/[^A-Za-z0-9_]$/, "", what)
				printf "%s:%d: libnuma %s\n", file, line, what
				rest = substr(rest, RSTART + RLENGTH)
			}
			if (match(code, /(^|[^A-Za-z0-9_])prim_pool_path([^A-Za-z0-9_]|$)/))
				printf "%s:%d: prim_pool_path (prim_pool_write writes the pool)\n", file, line
			nl++
			lines[nl] = code
			at[nl] = line
		}
		# A path a prim_*path* helper built (a bare name among its
		# arguments: the buffer) opened or looked at here.
		END {
			for (i = 1; i <= nl; i++)
				for (c = calls_on(i, "prim_[A-Za-z0-9_]*path[A-Za-z0-9_]*"); c > 0; c--) {
					na = split(args[c], arg, ",")
					for (a = 1; a <= na; a++) {
						w = arg[a]
						gsub(/^[ \t&]+|[ \t]+$/, "", w)
						if (w ~ /^[A-Za-z_][A-Za-z0-9_]*$/ && w != "NULL")
							built[w] = callee[c]
					}
				}
			for (i = 1; i <= nl; i++)
				for (c = calls_on(i, fscalls); c > 0; c--) {
					nw = split(args[c], word, /[^A-Za-z0-9_]+/)
					for (k = 1; k <= nw; k++)
						if (word[k] in built) {
							printf "%s:%d: %s() of %s, a path %s() built\n", file, at[i], callee[c], word[k], built[word[k]]
							break
						}
				}
		}'
}

# One Python module: "file:line: kernel path ..." for each string literal
# (any prefix: r, b, f) that starts with /proc or /sys; comment lines aside.
# None is excused: hpalloc.ray finds its workers through hp_proc_marked
# (issue 48).
scan_py() {
	local f=$1
	awk -v file="$f" '
		/^[ \t]*#/ { next }
		{
			rest = $0
			while (match(rest, /[\047"]\/(proc|sys)(\/[^\047"]*)?[\047"%{]/)) {
				printf "%s:%d: kernel path %s\n", file, NR, substr(rest, RSTART, RLENGTH)
				rest = substr(rest, RSTART + RLENGTH)
			}
		}' "$f"
}

# The scanner must see what it looks for, or a passing run proves nothing:
# one sample of each kind of offence, and what passes.
selftest=$(mktemp)
selftest_py=$(mktemp)
trap 'rm -f "$selftest" "$selftest_py"' EXIT
cat >"$selftest" <<'EOF'
/* "/proc/self/maps" and mmap(0) in a comment pass */
static const char *ok = "%s/proc/%s";
int f(void) { return open("/proc/self/statm", 0) + madvise(0, 0, 4) + syscall(SYS_mbind); }
// munmap(p) here too
const char *s = "mprotect(";
#include <numa.h>
int g(int n, const char *other) { char path[64]; prim_pool_path(n, 2097152, "nr_hugepages", path,
		sizeof(path)); return access(other, 0) + numa_parse(0) + numa_node_next(-1) +
	numa_max_node() + open(path, 1); }
EOF
cat >"$selftest_py" <<'EOF'
# os.listdir("/proc") in a comment passes
names = os.listdir("/proc")
with open(f"/proc/{pid}/environ", "rb") as f:
    ok = "%s/proc/%s" % (d, p), '/system', "see /proc"
    f = open('/sys/kernel/mm/transparent_hugepage/enabled')
EOF
got=$(scan "$selftest" | sed "s|^$selftest|t|"; scan_py "$selftest_py" | sed "s|^$selftest_py|p|")
want='t:3: kernel path "/proc/self/statm"
t:3: system call madvise()
t:3: system call syscall()
t:3: system call number (SYS_mbind
t:6: libnuma <numa.h>
t:7: prim_pool_path (prim_pool_write writes the pool)
t:9: libnuma numa_max_node
t:9: open() of path, a path prim_pool_path() built
p:2: kernel path "/proc"
p:3: kernel path "/proc/{pid}/environ"
p:5: kernel path '\''/sys/kernel/mm/transparent_hugepage/enabled'\'''
if [ "$got" != "$want" ]; then
	printf 'the scanner is broken: it found\n%s\ninstead of\n%s\n' "$got" "$want" >&2
	exit 99
fi

status=0
for f in lib/*/*.[ch] tools/*.[ch] $(find python/hpalloc -name '*.c' | sort); do
	case $f in lib/door/prim.[ch]) continue ;; esac
	out=$(scan "$f")
	if [ -n "$out" ]; then
		echo "$out" >&2
		status=1
	fi
done
for f in $(find python/hpalloc -name '*.py' | sort); do
	out=$(scan_py "$f")
	if [ -n "$out" ]; then
		echo "$out" >&2
		status=1
	fi
done
if [ $status -ne 0 ]; then
	echo "the kernel is reached outside lib/door/prim.c: add a prim_* function (lib/door/prim.h; lib/core/private.h for hpctl) and call it; Python asks the library (hpalloc._hpalloc)" >&2
	exit 1
fi
echo "lib/, tools/ and python/hpalloc/ reach /proc, /sys, libnuma and the memory system calls only through lib/door/prim.c"
