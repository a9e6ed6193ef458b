#!/bin/bash
# The shared library's ABI: SONAME libhpalloc.so.1, every dynamic symbol it
# defines is public (hp_*), and every function include/hpalloc.h declares
# is exported.  Internals must stay hidden (-fvisibility=hidden), so that
# programs cannot come to depend on them.
set -euo pipefail

so=$(ls "$abs_top_builddir"/lib/.libs/libhpalloc.so.*.*.* 2>/dev/null | head -n1)
if [ -z "$so" ]; then
	echo "no built lib/.libs/libhpalloc.so.*: shared library disabled?" >&2
	exit 1
fi
status=0

soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME: $soname"
if [ "$soname" != libhpalloc.so.1 ]; then
	echo "SONAME should be libhpalloc.so.1 (-version-info 1:0:0)" >&2
	status=1
fi

# Defined dynamic symbols; the linker's own markers are not ours.
exported=$(nm -D --defined-only "$so" | awk '{print $NF}' |
	grep -vxE '_init|_fini|_edata|_end|__bss_start' | sort -u)
stray=$(grep -v '^hp_' <<<"$exported" || true)
if [ -n "$stray" ]; then
	echo "exported symbols outside the public hp_ namespace:" >&2
	echo "$stray" >&2
	status=1
fi

declared=$(sed -n 's/^HP_API[^(]*[ *]\(hp_[a-z0-9_]*\)(.*/\1/p' \
	"$abs_top_srcdir/include/hpalloc.h" | sort -u)
if [ -z "$declared" ]; then
	echo "found no HP_API declarations in include/hpalloc.h" >&2
	exit 1
fi
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
	echo "declared in hpalloc.h but not exported:" >&2
	echo "$missing" >&2
	status=1
fi
extra=$(comm -13 <(echo "$declared") <(grep '^hp_' <<<"$exported" || true))
if [ -n "$extra" ]; then
	echo "exported but not declared in hpalloc.h:" >&2
	echo "$extra" >&2
	status=1
fi
echo "$(wc -l <<<"$exported") exported symbols checked against $(wc -l <<<"$declared") declarations"

# debian/libhpalloc1.symbols lists the same symbols: a new function missing
# there is a package that does not say which version brings it.
symfile=$abs_top_srcdir/debian/libhpalloc1.symbols
if [ -r "$symfile" ]; then
	listed=$(sed -n 's/^ \(hp_[a-z0-9_]*\)@Base .*/\1/p' "$symfile" | sort -u)
	unlisted=$(comm -23 <(grep '^hp_' <<<"$exported" || true) <(echo "$listed"))
	gone=$(comm -13 <(grep '^hp_' <<<"$exported" || true) <(echo "$listed"))
	if [ -n "$unlisted$gone" ]; then
		[ -n "$unlisted" ] && { echo "exported but not in debian/libhpalloc1.symbols:" >&2; echo "$unlisted" >&2; }
		[ -n "$gone" ] && { echo "in debian/libhpalloc1.symbols but not exported:" >&2; echo "$gone" >&2; }
		status=1
	else
		echo "debian/libhpalloc1.symbols lists them all"
	fi
fi

# libhpalloc-preload.so is on the public API alone and decides nothing the
# library owns: secure execution is libhpalloc's one test (hp_secure_exec,
# reached through hp_report_activation), so the preload object never asks
# the kernel's auxiliary vector itself.
preload=$abs_top_builddir/lib/.libs/libhpalloc-preload.so
if [ -e "$preload" ]; then
	own=$(nm -D --undefined-only "$preload" | awk '{print $NF}' | grep -E '^getauxval(@|$)' || true)
	if [ -n "$own" ]; then
		echo "libhpalloc-preload.so tests secure execution itself ($own): the library's hp_secure_exec decides" >&2
		status=1
	else
		echo "libhpalloc-preload.so: no secure-execution test of its own"
	fi
fi
exit $status
