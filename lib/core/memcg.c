/* The process's memory cgroup, measured: which one, the limit that binds,
 * its working set, and what is free under the limit (issue 25) -- and the
 * one answer to what the process may still take under every bound on its
 * memory (memcg_room, memcg_bounded: the cgroup's limit, and the resident
 * bound a monitor holds it to).  Measures only: what the cache may keep of
 * them is cache.c's rule (its "memory cgroup" section: the share of the
 * headroom, and libc's free memory given back before a fresh block), what
 * the populate workers may fault ahead within memcg_room is populate.c's.
 *
 * A container, a systemd unit, a Kubernetes pod, a Dask worker: each is a
 * memory cgroup with a limit, and what hpalloc's cache keeps stays charged
 * to it (cache.c says why that needs a bound).
 *
 * Which cgroup, which limit.  /proc/self/cgroup names the process's cgroup
 * (v1: the line of the memory controller; v2: the "0::" line), mountinfo
 * where that hierarchy is mounted and from which root (a container sees
 * its own cgroup as the root).  Every level from the process's cgroup up
 * to the mount has a limit (v1 memory.limit_in_bytes; v2 the lower of
 * memory.max and memory.high, above which v2 throttles; "max" or 2^62 and
 * more: none) and a usage (memory.usage_in_bytes, memory.current), of which
 * the working set counts (below: page cache is free); the level with the
 * least free under its limit binds (a pod's limit above a
 * container's, a systemd slice above its services).
 *
 * Who reads what, when:
 *   - the first huge mapping of a process, in that thread, once per process
 *     and fork generation (memcg_headroom() before a THP block is mapped,
 *     else janitor_start()): the cgroup, its levels -- a first block
 *     mapped before the survey met no limit (tests/c/memcg_libc_hole.c);
 *   - the janitor, every round (memcg_follow, from cache.c's cache_watch):
 *     all of it again, so a process moved to another cgroup, a limit
 *     changed, a cgroup removed are followed within a round;
 *   - cache.c, when a THP block is about to be cached and before a fresh
 *     THP mapping, with its bound on: the binding level's usage (open,
 *     read, close: ~3 us here), through memcg_headroom, unless a reading
 *     young enough for it serves;
 *   - the populate workers, while they fault a block in: what is free
 *     (memcg_headroom: the usage, and the limit where it was lowered since
 *     the survey), from a reading at most a millisecond old -- their
 *     faults get no ENOMEM at the limit, the OOM killer kills the process
 *     (populate.c's rule keeps them within a share of it).
 * The cache_memcg knob is cache.c's (its bound on or off), not this file's:
 * the cgroup and its limit are followed whatever it says
 * (memcg_limit_bytes).  Between two readings, what the cache hands to
 * release.c counts as free already (memcg_releasing): else each block
 * given back would shrink the headroom as the next evaluation sees it --
 * the cached bytes less, the usage not yet -- and the cache would give
 * back more and more; and a fresh block about to be charged counts as used
 * already (memcg_charging: a second one before the next reading sees what
 * the first leaves).  Without a limited cgroup memcg_headroom is two
 * relaxed loads; the small path never asks.  A file that cannot be read or
 * says something else than a number (garbage, a cgroup removed meanwhile)
 * is no limit: SIZE_MAX, and nothing is lost.
 *
 * Threads: a survey (where the process is, its binding level) is made under
 * survey_lock, by the janitor and by the process's first mapping; the
 * binding level it writes is read by any thread: its numbers are atomics,
 * its directory is copied under memcg_lock, a leaf lock held for the copy
 * alone.  Nothing is allocated (paths live on the stack):
 * this runs inside the malloc of an interposer. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* A limit this large is none (v1 writes "no limit" as 2^63 - 4096). */
#define NO_LIMIT ((size_t)1 << 62)

enum { V1 = 1, V2 = 2 };

/* ---- the binding level, as every thread sees it --------------------------------- */

static pthread_mutex_t memcg_lock = PTHREAD_MUTEX_INITIALIZER;
static char bind_dir[PRIM_MEMCG_PATH_MAX]; /* under memcg_lock */
static int bind_version;                   /* under memcg_lock */
static _Atomic bool limited;               /* a binding level is known */
static _Atomic size_t bind_limit;
static _Atomic size_t free_now = SIZE_MAX;  /* limit - working set at the last reading; SIZE_MAX: no bound */
static _Atomic uint64_t read_at_ms;
static _Atomic bool surveyed;              /* in this process (fork generation) */

/* What was free under the limit at the last reading (or since counted by
 * memcg_charging and memcg_releasing): no system call, so cache.c reads it
 * under hp_heap_lock.  SIZE_MAX: no bound (no limit, or unknown). */
size_t memcg_headroom_last(void)
{
	return atomic_load_explicit(&free_now, memory_order_relaxed);
}

static void unbind(void)
{
	atomic_store_explicit(&limited, false, memory_order_relaxed);
	atomic_store_explicit(&free_now, SIZE_MAX, memory_order_relaxed);
	atomic_store_explicit(&hp_counters[HP_STAT_MEMCG_LIMIT_BYTES], 0, memory_order_relaxed);
}

/* ---- what the files say ------------------------------------------------------------ */

/* A decimal number and nothing else (a newline was cut by prim). */
static bool parse_bytes(const char *s, size_t *out)
{
	size_t v = 0;
	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (SIZE_MAX - (size_t)(*s - '0')) / 10)
			return false;
		v = v * 10 + (size_t)(*s - '0');
	}
	*out = v;
	return *s == '\0';
}

/* A limit file: 1 and the limit, 0 for none ("max", or 2^62 and more), -1
 * if it cannot be read or holds something else. */
static int read_limit(const char *dir, const char *file, size_t *out)
{
	char buf[64];
	if (prim_memcg_read(dir, file, buf, sizeof(buf)) < 0)
		return -1;
	if (strcmp(buf, "max") == 0)
		return 0;
	if (!parse_bytes(buf, out))
		return -1;
	return *out < NO_LIMIT;
}

/* The level's limit as read_limit() says it: v1's, or v2's lower of
 * memory.max and memory.high. */
static int level_limit(int version, const char *dir, size_t *out)
{
	if (version == V1)
		return read_limit(dir, "memory.limit_in_bytes", out);
	size_t high;
	int max = read_limit(dir, "memory.max", out), hi = read_limit(dir, "memory.high", &high);
	if (hi == 1 && (max != 1 || high < *out)) {
		*out = high;
		return 1;
	}
	return max == 1 ? 1 : max == 0 || hi == 0 ? 0 : -1;
}

static bool level_usage(int version, const char *dir, size_t *out)
{
	char buf[64];
	const char *file = version == V1 ? "memory.usage_in_bytes" : "memory.current";
	return prim_memcg_read(dir, file, buf, sizeof(buf)) == 0 && parse_bytes(buf, out);
}

/* ---- the working set ---------------------------------------------------------------
 * The usage counts the file page cache, which the kernel drops at will and
 * before it reclaims anything of the program's: a worker that read a
 * parquet or CSV file sits at its limit with it, and the headroom would be
 * nothing.  So memory is counted as the kernel's and kubelet's working set
 * is: the usage less the inactive file pages (memory.stat: v1
 * total_inactive_file, v2 inactive_file, both counting the levels below).
 * Two corrections, each on the safe side:
 *   - pages given MADV_FREE sit on that list too, and stay there once
 *     written again (a cached block reused: measured on 6.18), though the
 *     kernel cannot drop those: this process's own (memcg_lazy_add, what
 *     cache.c offered and release.c has not unmapped yet) are taken off it;
 *   - what is left is at most the page cache there is (v1 total_cache, v2
 *     file), which another allocator's lazy pages are not part of.
 * A memory.stat that cannot be read, or lacks a key, counts nothing off:
 * the usage, as before. */
static _Atomic size_t lazy_bytes; /* this process's pages given MADV_FREE, still mapped */

void memcg_lazy_add(size_t bytes)
{
	atomic_fetch_add_explicit(&lazy_bytes, bytes, memory_order_relaxed);
}

void memcg_lazy_sub(size_t bytes)
{
	size_t was = atomic_load_explicit(&lazy_bytes, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&lazy_bytes, &was, was > bytes ? was - bytes : 0,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

struct stat_keys {
	const char *inactive_key, *file_key;
	size_t inactive, file;
	int found; /* bit 0: inactive, bit 1: file */
};

/* "key value" */
static int stat_line(char *line, void *arg)
{
	struct stat_keys *k = arg;
	char *space = strchr(line, ' ');
	if (!space)
		return 0;
	*space = '\0';
	if (strcmp(line, k->inactive_key) == 0 && parse_bytes(space + 1, &k->inactive))
		k->found |= 1;
	else if (strcmp(line, k->file_key) == 0 && parse_bytes(space + 1, &k->file))
		k->found |= 2;
	return k->found == 3;
}

/* Of the level's usage, what the kernel drops before anything else (see
 * above); 0 if unknown. */
static size_t level_reclaimable(int version, const char *dir)
{
	struct stat_keys k = {.inactive_key = version == V1 ? "total_inactive_file" : "inactive_file",
			      .file_key = version == V1 ? "total_cache" : "file"};
	if (prim_memcg_lines(dir, "memory.stat", stat_line, &k) < 0 || k.found != 3)
		return 0;
	size_t lazy = atomic_load_explicit(&lazy_bytes, memory_order_relaxed);
	size_t inactive = k.inactive > lazy ? k.inactive - lazy : 0;
	return inactive < k.file ? inactive : k.file;
}

/* The level's working set: its usage less what level_reclaimable() says. */
static bool level_working_set(int version, const char *dir, size_t *out)
{
	size_t usage;
	if (!level_usage(version, dir, &usage))
		return false;
	size_t drop = level_reclaimable(version, dir);
	*out = usage > drop ? usage - drop : 0;
	return true;
}

/* ---- which cgroup (the janitor's, or the first mapping's before it) -------------- */

struct self_cgroup {
	int version;                      /* 0: none found */
	char path[PRIM_MEMCG_PATH_MAX];   /* as /proc/self/cgroup says it */
};

/* Whether word is one of the comma-separated list [s, s + len). */
static bool has_word(const char *s, size_t len, const char *word)
{
	size_t w = strlen(word);
	for (const char *end = s + len; s < end;) {
		const char *comma = memchr(s, ',', (size_t)(end - s));
		size_t n = comma ? (size_t)(comma - s) : (size_t)(end - s);
		if (n == w && strncmp(s, word, w) == 0)
			return true;
		s += n + 1;
	}
	return false;
}

static void set_path(struct self_cgroup *c, int version, const char *path)
{
	size_t n = strlen(path);
	if (n >= sizeof(c->path)) {
		c->version = 0; /* too long to read below: no bound */
		return;
	}
	memcpy(c->path, path, n + 1);
	c->version = version;
}

/* "hierarchy-ID:controllers:path": v1's memory line wins over v2's "0::". */
static int cgroup_line(char *line, void *arg)
{
	struct self_cgroup *c = arg;
	const char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;

	if (!b || b[1] != '/')
		return 0;
	if (has_word(a + 1, (size_t)(b - a - 1), "memory")) {
		set_path(c, V1, b + 1);
		return 1;
	}
	if (b == a + 1 && a == line + 1 && line[0] == '0')
		set_path(c, V2, b + 1);
	return 0;
}

/* mountinfo's octal escapes (\040 a space, \134 a backslash), in place. */
static void unescape(char *s)
{
	char *out = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

struct mount_search {
	const struct self_cgroup *self;
	char dir[PRIM_MEMCG_PATH_MAX];    /* the cgroup's directory; "" until found */
	char point[PRIM_MEMCG_PATH_MAX];  /* its hierarchy's mount point */
};

/* Below a mount root, path's part that follows it; NULL if not below it. */
static const char *below(const char *path, const char *root)
{
	size_t n = strlen(root);
	if (strcmp(root, "/") == 0)
		return path;
	if (strncmp(path, root, n) != 0 || (path[n] != '/' && path[n] != '\0'))
		return NULL;
	return path + n;
}

/* "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER":
 * the first mount of the process's hierarchy whose root holds its cgroup. */
static int mount_line(char *line, void *arg)
{
	struct mount_search *m = arg;
	char *field[16], *save = NULL;
	int n = 0;

	for (char *t = strtok_r(line, " ", &save); t && n < 16; t = strtok_r(NULL, " ", &save))
		field[n++] = t;
	int dash = 6; /* optional fields between OPTIONS and "-" */
	while (dash < n && strcmp(field[dash], "-") != 0)
		dash++;
	if (dash + 1 >= n)
		return 0;
	const char *fstype = field[dash + 1], *super = dash + 3 < n ? field[dash + 3] : "";
	bool match = m->self->version == V1
			     ? strcmp(fstype, "cgroup") == 0 && has_word(super, strlen(super), "memory")
			     : strcmp(fstype, "cgroup2") == 0;
	if (!match)
		return 0;
	unescape(field[3]);
	unescape(field[4]);
	const char *rel = below(m->self->path, field[3]);
	if (!rel)
		return 0;
	if (strcmp(rel, "/") == 0)
		rel = "";
	int len = snprintf(m->dir, sizeof(m->dir), "%s%s", field[4], rel);
	if (len < 0 || (size_t)len >= sizeof(m->dir) || strlen(field[4]) >= sizeof(m->point)) {
		m->dir[0] = '\0';
		return 1; /* too long: no bound */
	}
	snprintf(m->point, sizeof(m->point), "%s", field[4]);
	return 1;
}

/* Where the process is, as the last survey found it.  mountinfo can be
 * long (a host with many containers): it is read again only when
 * /proc/self/cgroup changes (a move) or when no level's limit could be read
 * (unmounted).  Looked at by the janitor every round and by the process's
 * first huge mapping, which several threads may make at once: under
 * survey_lock, one survey at a time (tests/c/tsan.sh's workers start
 * together; before the lock they wrote this record at once). */
static pthread_mutex_t survey_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct self_cgroup self;
	struct mount_search mount;
	bool found;
} where;

static bool locate(void)
{
	struct self_cgroup now = {0};

	if (prim_proc_self_lines("cgroup", cgroup_line, &now) < 0 || !now.version) {
		where.found = false;
		return false;
	}
	if (where.found && now.version == where.self.version && strcmp(now.path, where.self.path) == 0)
		return true;
	where.self = now;
	where.mount = (struct mount_search){.self = &where.self};
	where.found = prim_proc_self_lines("mountinfo", mount_line, &where.mount) > 0 && where.mount.dir[0];
	return where.found;
}

/* ---- the binding level ------------------------------------------------------------ */

struct level {
	char dir[PRIM_MEMCG_PATH_MAX];
	size_t limit, free;
};

/* Every level from the cgroup up to its mount: 1 and the one with the
 * least free under its limit; 0 if no level has a limit; -1 if no level's
 * limit could be read (the mount is gone, or elsewhere now). */
static int binding_level(struct level *best)
{
	char dir[PRIM_MEMCG_PATH_MAX];
	size_t point_len = strlen(where.mount.point);
	int found = -1;

	snprintf(dir, sizeof(dir), "%s", where.mount.dir);
	for (;;) {
		size_t limit, usage;
		int has = level_limit(where.self.version, dir, &limit);
		if (has == 0 && found < 0)
			found = 0;
		if (has == 1 && level_working_set(where.self.version, dir, &usage)) {
			size_t free = usage < limit ? limit - usage : 0;
			if (found < 1 || free < best->free) {
				snprintf(best->dir, sizeof(best->dir), "%s", dir);
				best->limit = limit;
				best->free = free;
				found = 1;
			}
		}
		char *slash = strrchr(dir, '/');
		if (strlen(dir) <= point_len || !slash || (size_t)(slash - dir) < point_len)
			break;
		*slash = '\0';
	}
	return found;
}

static void bind(const struct level *l)
{
	pthread_mutex_lock(&memcg_lock);
	memcpy(bind_dir, l->dir, sizeof(bind_dir));
	bind_version = where.self.version;
	pthread_mutex_unlock(&memcg_lock);
	atomic_store_explicit(&bind_limit, l->limit, memory_order_relaxed);
	atomic_store_explicit(&free_now, l->free, memory_order_relaxed);
	atomic_store_explicit(&read_at_ms, hp_now_ms(), memory_order_relaxed);
	atomic_store_explicit(&hp_counters[HP_STAT_MEMCG_LIMIT_BYTES], l->limit, memory_order_relaxed);
	atomic_store_explicit(&limited, true, memory_order_relaxed);
}

/* Where the process is, its binding level: bound, or no bound.  Whether
 * the cache_memcg knob is on or off: the knob is the cache's (cache.c),
 * and the populate workers ask what is free under the limit all the same. */
static bool survey_locked(void)
{
	struct level l;
	if (!locate()) {
		unbind();
		return false;
	}
	int found = binding_level(&l);
	if (found < 0)
		where.found = false; /* unmounted, moved: mountinfo again next time */
	if (found <= 0) {
		unbind();
		return false;
	}
	bind(&l);
	return true;
}

/* The process's first survey, made once: a thread that finds it made sees
 * what it bound (the release pairs with the acquire), and a thread that
 * comes while it is being made waits for it -- its block is mapped on a
 * binding level, not before there is one. */
void memcg_start(void)
{
	if (atomic_load_explicit(&surveyed, memory_order_acquire))
		return;
	pthread_mutex_lock(&survey_lock);
	if (!atomic_load_explicit(&surveyed, memory_order_relaxed)) {
		survey_locked();
		atomic_store_explicit(&surveyed, true, memory_order_release);
	}
	pthread_mutex_unlock(&survey_lock);
}

bool memcg_follow(void)
{
	pthread_mutex_lock(&survey_lock);
	bool bound = survey_locked();
	pthread_mutex_unlock(&survey_lock);
	return bound;
}

/* The binding level's usage again, unless a reading younger than
 * max_age_ms serves; an unreadable one: no bound until the janitor finds
 * one again. */
static void refresh(uint64_t max_age_ms)
{
	char dir[PRIM_MEMCG_PATH_MAX];
	size_t usage;
	uint64_t now = hp_now_ms();

	if (now - atomic_load_explicit(&read_at_ms, memory_order_relaxed) < max_age_ms)
		return;
	pthread_mutex_lock(&memcg_lock);
	memcpy(dir, bind_dir, sizeof(dir));
	int version = bind_version;
	pthread_mutex_unlock(&memcg_lock);
	size_t limit = atomic_load_explicit(&bind_limit, memory_order_relaxed), now_limit;
	/* A limit lowered since the janitor's survey binds from this reading on:
	 * the populate workers fault by it, and a survey up to a round late let
	 * them fault ahead by the old limit into an OOM kill.  A raised one
	 * waits for the survey (which also finds whether another level binds
	 * then); bind_limit stays the survey's. */
	if (level_limit(version, dir, &now_limit) == 1 && now_limit < limit)
		limit = now_limit;
	if (!level_working_set(version, dir, &usage)) {
		atomic_store_explicit(&free_now, SIZE_MAX, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&free_now, usage < limit ? limit - usage : 0, memory_order_relaxed);
	atomic_store_explicit(&read_at_ms, now, memory_order_relaxed);
}

void memcg_releasing(size_t bytes)
{
	size_t free = atomic_load_explicit(&free_now, memory_order_relaxed), more;
	do {
		if (free == SIZE_MAX)
			return; /* no bound */
		more = free < SIZE_MAX - 1 - bytes ? free + bytes : SIZE_MAX - 1;
	} while (!atomic_compare_exchange_weak_explicit(&free_now, &free, more, memory_order_relaxed,
							memory_order_relaxed));
}

bool memcg_limited(void)
{
	return atomic_load_explicit(&limited, memory_order_relaxed);
}

size_t memcg_headroom(unsigned max_age_ms)
{
	memcg_start(); /* the process's first block: its cgroup before it is mapped */
	if (!atomic_load_explicit(&limited, memory_order_relaxed))
		return SIZE_MAX;
	refresh(max_age_ms);
	return atomic_load_explicit(&free_now, memory_order_relaxed);
}

/* ---- the bounds on the process's memory -------------------------------------------
 * Two bounds hold a process's memory: its memory cgroup's limit (above;
 * past it, the OOM killer) and the one a monitor of its resident memory
 * holds it to (cache_rss_max: as ps and Dask's memory manager count it,
 * set by hpalloc.dask to a worker's target; past it, the monitor spills,
 * pauses or restarts the worker).  What neither may be taken over by is
 * asked here, not of the knobs: memcg_bounded() whether a bound holds,
 * memcg_room() what is free under the tighter.  The cache applies each
 * bound its own way (cache.c: a share of the cgroup's headroom, the excess
 * over the resident bound given back); the populate workers fault nothing
 * ahead while either holds, and collapse within memcg_room (populate.c). */
static size_t rss_bound(void)
{
	return (size_t)hp_knob(KNOB_CACHE_RSS_MAX);
}

bool memcg_bounded(void)
{
	return memcg_limited() || rss_bound() != 0;
}

size_t memcg_room(unsigned max_age_ms)
{
	size_t free = memcg_headroom(max_age_ms);
	size_t max = rss_bound();
	if (max) {
		size_t rss = hp_self_rss(); /* 0: unreadable, no bound */
		size_t left = rss < max ? max - rss : 0;
		if (rss && left < free)
			free = left;
	}
	return free;
}

void memcg_charging(size_t bytes)
{
	size_t free = atomic_load_explicit(&free_now, memory_order_relaxed);
	do {
		if (free == SIZE_MAX)
			return; /* no bound */
	} while (!atomic_compare_exchange_weak_explicit(&free_now, &free, free > bytes ? free - bytes : 0,
							memory_order_relaxed, memory_order_relaxed));
}

/* The child keeps the binding level its parent knew until its own first
 * huge mapping surveys again; the locks may have been held by a thread the
 * child does not have. */
void memcg_fork(int phase)
{
	fork_mutex(&survey_lock, phase); /* survey_lock, then memcg_lock (bind) */
	fork_mutex(&memcg_lock, phase);
	if (phase == FORK_CHILD) {
		where.found = false; /* the child's first survey reads mountinfo afresh */
		atomic_store_explicit(&surveyed, false, memory_order_relaxed);
	}
}
