#!/bin/bash
# isolate.sh [--keep-compilers] [--pyenv] HOME BUILDDIR SRCDIR -- CMD...: run as root in a fresh mount
# namespace (tests/wheel/lib.sh: as_fresh_user), this hides from CMD every
# copy of hpalloc but the one under HOME, and every compiler, then runs CMD
# as nobody in an empty environment, as a new user on a machine hpalloc was
# never installed on would be:
#   - /usr/local/bin, /usr/local/lib, /usr/local/include (README's system
#     route, the lead's install) and the build and source trees: empty
#     tmpfs over them;
#   - anything else named *hpalloc* or hpctl under /usr (the Debian
#     packages): an empty file or directory over it;
#   - gcc, g++, cc, c++, cpp, clang (and their versioned and triplet-named
#     links) and gcc's and LLVM's own programs: /dev/null or an empty tmpfs
#     over them, and PATH=$HOME/venv/bin:$HOME/.bin, links to every other
#     program of /usr/bin (not with --keep-compilers, the from-source
#     route: PATH=$HOME/venv/bin:/usr/bin:/bin);
#   - the environment: HOME, PATH, LANG and the machine's pip settings
#     (PIP_*); no XDG_RUNTIME_DIR, no HPALLOC_CONTROL_DIR, no HPALLOC_*, no
#     PYTHON*;
#   - with --pyenv, pyenv's Pythons (/root/.pyenv, read-only) at their own
#     paths, which their programs name (libpython's run path): /root
#     becomes an empty directory anyone may enter, holding only them.
# Only mounts of this namespace change: nothing outside it sees them.
set -eu
compilers=hide pyenv=no
while :; do
	case $1 in
	--keep-compilers) compilers=keep ;;
	--pyenv) pyenv=yes ;;
	*) break ;;
	esac
	shift
done
home=$1 builddir=$2 srcdir=$3
shift 3
[ "${1-}" = -- ] && shift

empty_dir() { mount -t tmpfs -o size=1M,mode=0755 hpalloc-hidden "$1"; }
hide() {
	if [ -d "$1" ] && [ ! -L "$1" ]; then
		empty_dir "$1"
	elif [ -e "$1" ]; then
		mount --bind /dev/null "$1"
	fi
}

for d in /usr/local/bin /usr/local/lib /usr/local/include "$builddir" "$srcdir"; do
	[ -d "$d" ] && empty_dir "$d"
done
while IFS= read -r -d '' path; do
	hide "$path"
done < <(find /usr/bin /usr/sbin /usr/lib /usr/include /usr/share/pkgconfig -maxdepth 5 \
	\( -name '*hpalloc*' -o -name 'hpctl' \) -print0 2>/dev/null)
compiler='.*/((x86_64|aarch64)-linux-gnu-)?(gcc|g\+\+|cc|c\+\+|cpp|clang|clang\+\+|tcc)(-[0-9.]+)?'
path=/usr/bin:/bin
if [ "$compilers" = hide ]; then
	while IFS= read -r -d '' p; do
		hide "$p"
	done < <(find /usr/bin -maxdepth 1 -regextype posix-extended -regex "$compiler" -print0)
	for d in /usr/lib/gcc /usr/libexec/gcc /usr/lib/llvm-*; do
		[ -d "$d" ] && empty_dir "$d"
	done
	# PATH: every program of /usr/bin but the compilers (a hidden file is
	# still "found" by a shell, which would then say permission denied)
	path=$home/.bin
	rm -rf "$path"
	mkdir -m 0755 "$path"
	find /usr/bin -maxdepth 1 -mindepth 1 -regextype posix-extended ! -regex "$compiler" \
		-exec ln -s {} "$path/" \;
fi

if [ "$pyenv" = yes ] && [ -d /root/.pyenv ]; then
	stage=$(mktemp -d /tmp/isolate-pyenv.XXXXXX)
	mount --bind /root/.pyenv "$stage"
	mount -t tmpfs -o size=1M,mode=0755 hpalloc-root /root
	mkdir /root/.pyenv
	mount --bind "$stage" /root/.pyenv
	mount -o remount,bind,ro /root/.pyenv
	umount "$stage"
	rmdir "$stage"
fi

# The machine's pip settings (PIP_*: where packages come from, its
# certificates) stay: they are the machine's, not hpalloc's.
pip_env=()
while IFS= read -r var; do
	pip_env+=("$var=${!var}")
done < <(compgen -e | grep '^PIP_')
exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
	env -i HOME="$home" PATH="$home/venv/bin:$path" LANG=C.UTF-8 "${pip_env[@]}" "$@"
