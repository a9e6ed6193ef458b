/* hpctl run --preload: COMMAND with libhpalloc-preload.so in LD_PRELOAD, so
 * the large allocations of any dynamically linked program (and of what it
 * starts) go to hpalloc, unmodified.
 *
 * The library is, in order: $HPALLOC_PRELOAD_PATH (the build tree's tests
 * set it), the one at the same place relative to this executable as
 * configure's libdir is to bindir (a relocated or DESTDIR install), the one
 * in configure's libdir.  It is appended to an existing LD_PRELOAD (a
 * sanitizer runtime or another tool there must stay first), once.
 *
 * Where LD_PRELOAD cannot work, hpctl says so and runs nothing: a
 * statically linked program (no PT_INTERP: no dynamic linker ever reads
 * LD_PRELOAD), a program that would run in secure-execution mode (setuid,
 * setgid, file capabilities: the dynamic linker ignores LD_PRELOAD
 * there), a program of another ELF class or machine than the library, and
 * an LD_PRELOAD that already holds another malloc (tcmalloc, jemalloc, a
 * sanitizer runtime: whichever comes first serves every allocation).  A
 * "#!" script is judged by its interpreter. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "hpctl.h"
#include "private.h" /* prim_proc_read */

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PRELOAD_NAME "libhpalloc-preload.so"

static bool regular_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The preload library's path into buf, or NULL after saying where it looked. */
static const char *locate_library(char *buf, size_t len)
{
	const char *env = getenv("HPALLOC_PRELOAD_PATH");
	char dir[PATH_MAX];

	if (env && *env) {
		if (regular_file(env))
			return env;
		warnx("run --preload: HPALLOC_PRELOAD_PATH=%s is not a file", env);
		return NULL;
	}
#ifdef HPCTL_LIBDIR
	if (relocated_dir(HPCTL_LIBDIR, dir, sizeof(dir)) &&
	    snprintf(buf, len, "%s/%s", dir, PRELOAD_NAME) < (int)len && regular_file(buf))
		return buf;
	if (snprintf(buf, len, "%s/%s", HPCTL_LIBDIR, PRELOAD_NAME) < (int)len && regular_file(buf))
		return buf;
	warnx("run --preload: %s is not installed next to hpctl (looked in %s)", PRELOAD_NAME,
	      HPCTL_LIBDIR);
#else
	(void)dir;
	warnx("run --preload: this hpctl was built without a libdir to find %s in", PRELOAD_NAME);
#endif
	return NULL;
}

/* ---- the target ------------------------------------------------------------------- */

/* argv[0] resolved as execvp() would; false if not found (execvp says so). */
static bool resolve_command(const char *cmd, char *buf, size_t len)
{
	if (strchr(cmd, '/'))
		return snprintf(buf, len, "%s", cmd) < (int)len && access(buf, X_OK) == 0;
	const char *path = getenv("PATH");
	for (const char *p = path && *path ? path : "/bin:/usr/bin"; ; p++) {
		size_t n = strcspn(p, ":");
		if (snprintf(buf, len, "%.*s%s%s", (int)n, p, n ? "/" : "", cmd) < (int)len &&
		    regular_file(buf) && access(buf, X_OK) == 0)
			return true;
		p += n;
		if (!*p)
			return false;
	}
}

/* Running path would switch credentials: the dynamic linker then ignores
 * LD_PRELOAD (secure execution, AT_SECURE). */
static const char *secure_exec_reason(const char *path, const struct stat *st)
{
	struct statvfs vfs;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return NULL; /* the kernel ignores the bits there */
	if ((st->st_mode & S_ISUID) && st->st_uid != getuid())
		return "setuid";
	if ((st->st_mode & S_ISGID) && st->st_gid != getgid())
		return "setgid";
	if (getuid() != 0 && getxattr(path, "security.capability", NULL, 0) > 0)
		return "given file capabilities";
	return NULL;
}

/* The ELF class and machine of this very program, which the library shares. */
static bool own_elf(Elf64_Ehdr *out)
{
	char buf[sizeof(*out) + 1];

	if (prim_proc_read("self/exe", buf, sizeof(buf)) != (ssize_t)sizeof(*out))
		return false;
	memcpy(out, buf, sizeof(*out));
	return true;
}

/* Why LD_PRELOAD cannot reach an ELF program, or NULL. */
static const char *elf_reason(int fd, const Elf64_Ehdr *eh)
{
	Elf64_Ehdr self;

	if (eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    (own_elf(&self) && eh->e_machine != self.e_machine))
		return "built for another machine or word size than " PRELOAD_NAME;
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0)
		return NULL; /* not a program we can judge: let it run */
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		Elf64_Phdr ph;
		off_t off = (off_t)eh->e_phoff + (off_t)i * (off_t)sizeof(ph);
		if (pread(fd, &ph, sizeof(ph), off) != (ssize_t)sizeof(ph))
			return NULL;
		if (ph.p_type == PT_INTERP)
			return NULL; /* a dynamic linker will run, and read LD_PRELOAD */
	}
	return "statically linked: no dynamic linker runs for it, so LD_PRELOAD never takes effect";
}

/* 0 if LD_PRELOAD can take effect for the program at path, else exit 1
 * after saying why.  depth: "#!" interpreters followed. */
static int check_target(const char *cmd, const char *path, int depth)
{
	struct stat st;
	unsigned char head[sizeof(Elf64_Ehdr)];
	const char *why = NULL;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return 0; /* execvp will say what is wrong */
	}
	ssize_t n = read(fd, head, sizeof(head));
	bool script = n > 2 && head[0] == '#' && head[1] == '!';
	if (!script) /* the kernel ignores set-id bits of scripts */
		why = secure_exec_reason(path, &st);
	if (!why && n == (ssize_t)sizeof(head) && !memcmp(head, ELFMAG, SELFMAG))
		why = elf_reason(fd, (const Elf64_Ehdr *)head);
	close(fd);
	if (why) {
		warnx("run --preload: %s%s%s is %s; %s cannot help it (run it without --preload)",
		      cmd, strcmp(cmd, path) ? " -> " : "", strcmp(cmd, path) ? path : "", why,
		      PRELOAD_NAME);
		return EXIT_RUNTIME;
	}
	if (script && depth < 4) {
		char line[PATH_MAX + 3] = "", interp[PATH_MAX];
		int lf = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t m = lf >= 0 ? read(lf, line, sizeof(line) - 1) : -1;
		if (lf >= 0)
			close(lf);
		if (m > 2 && sscanf(line + 2, " %4095s", interp) == 1)
			return check_target(cmd, interp, depth + 1);
	}
	return 0;
}

/* ---- LD_PRELOAD -------------------------------------------------------------------- */

/* The shared object at path defines malloc itself (its dynamic symbol
 * table says so): preloaded before us, it would serve every allocation. */
static bool defines_malloc(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf64_Ehdr eh;
	bool found = false;

	if (fd < 0)
		return false;
	if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr))
		goto out;
	for (unsigned i = 0; i < eh.e_shnum && !found; i++) {
		Elf64_Shdr sh, str;
		if (pread(fd, &sh, sizeof(sh), (off_t)(eh.e_shoff + i * sizeof(sh))) != (ssize_t)sizeof(sh))
			goto out;
		if (sh.sh_type != SHT_DYNSYM || sh.sh_entsize != sizeof(Elf64_Sym) ||
		    pread(fd, &str, sizeof(str), (off_t)(eh.e_shoff + sh.sh_link * sizeof(str))) !=
			    (ssize_t)sizeof(str))
			continue;
		for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym) && !found; k++) {
			Elf64_Sym sym;
			char name[8];
			if (pread(fd, &sym, sizeof(sym), (off_t)(sh.sh_offset + k * sizeof(sym))) !=
			    (ssize_t)sizeof(sym))
				break;
			found = sym.st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym.st_info) == STT_FUNC &&
				sym.st_name < str.sh_size &&
				pread(fd, name, sizeof(name), (off_t)(str.sh_offset + sym.st_name)) > 6 &&
				!memcmp(name, "malloc", 7);
		}
	}
out:
	close(fd);
	return found;
}

/* Another malloc preloaded before ours would take every allocation. */
static int check_preloaded(const char *list, const char *lib)
{
	char *copy = strdup(list), *save = NULL;
	int rc = 0;

	for (char *w = copy ? strtok_r(copy, " :", &save) : NULL; w && !rc;
	     w = strtok_r(NULL, " :", &save)) {
		if (strcmp(w, lib) && strchr(w, '/') && defines_malloc(w)) {
			warnx("run --preload: %s, already in LD_PRELOAD, replaces malloc itself and "
			      "would serve every allocation (none would reach %s): remove it", w,
			      PRELOAD_NAME);
			rc = EXIT_RUNTIME;
		}
	}
	free(copy);
	return rc;
}

static bool already_listed(const char *list, const char *lib)
{
	char *copy = strdup(list), *save = NULL;
	bool found = false;

	for (char *w = copy ? strtok_r(copy, " :", &save) : NULL; w && !found;
	     w = strtok_r(NULL, " :", &save))
		found = !strcmp(w, lib);
	free(copy);
	return found;
}

static int append_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	if (old && *old && check_preloaded(old, lib))
		return EXIT_RUNTIME;
	if (old && *old && already_listed(old, lib))
		return 0;
	size_t n = strlen(lib) + (old ? strlen(old) : 0) + 2;
	char *val = malloc(n);
	if (!val) {
		warnx("out of memory");
		return EXIT_RUNTIME;
	}
	snprintf(val, n, "%s%s%s", old && *old ? old : "", old && *old ? " " : "", lib);
	setenv("LD_PRELOAD", val, 1);
	free(val);
	return 0;
}

int preload_prepare(struct hpctl *c)
{
	char lib[PATH_MAX], path[PATH_MAX];
	const char *found = locate_library(lib, sizeof(lib));

	if (!found)
		return EXIT_RUNTIME;
	if (resolve_command(c->cmd_argv[0], path, sizeof(path))) {
		int rc = check_target(c->cmd_argv[0], path, 0);
		if (rc)
			return rc;
	}
	/* pyarrow's default pool is the jemalloc or mimalloc inside its wheel,
	 * which the preload library never sees; its system pool is malloc.  A
	 * choice the user made stays. */
	setenv("ARROW_DEFAULT_MEMORY_POOL", "system", 0);
	return append_preload(found);
}
