/* The knob table: every knob defined once (name, type, default, bounds,
 * parser, canonical printer, help), serving the environment, the control
 * directory, hpctl and Python.  Values live in layers, lowest first:
 * default < control < env < process; the effective value is the highest set
 * layer, stored for lock-free reads on the allocation path.
 *
 * Each row says its default; the comment above it says why (see bench/ for
 * the measurements).  The effective values live in hp_knob_values[] (the
 * row's own encoding), read through hp_knob().
 *
 * A knob is two places: its entry in enum hp_knob_id (internal.h) and its
 * row here; the environment, the control directory, hpctl, Python and the
 * per-process entries follow the table (tests/cli/knob-two-places.sh adds
 * one in a test-only build and finds it in each).  hpalloc(7) documents it
 * (tests/cli/manpages.sh).
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Atomic uint64_t hp_knob_values[KNOB_COUNT];

struct knob_desc;
/* A parser may say why it refused a word (why is then "" or a reason). */
typedef int (*knob_parse_fn)(const struct knob_desc *, const char *word, uint64_t *out,
			     char *why, size_t why_len);
typedef void (*knob_format_fn)(const struct knob_desc *, uint64_t v, char *buf, size_t len);

struct knob_desc {
	const char *name;
	const char *type;
	const char *help;
	const char *accepted;
	const char *choices; /* space separated, index = value; NULL if none */
	const char *default_text;
	uint64_t min, max;
	knob_parse_fn parse;
	knob_format_fn format;
};

static int parse_choice(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static int parse_size_knob(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static int parse_integer(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static int parse_pagesize(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static int parse_numa(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static int parse_populate(const struct knob_desc *, const char *, uint64_t *, char *, size_t);
static void format_choice(const struct knob_desc *, uint64_t, char *, size_t);
static void format_size(const struct knob_desc *, uint64_t, char *, size_t);
static void format_integer(const struct knob_desc *, uint64_t, char *, size_t);
static void format_pagesize(const struct knob_desc *, uint64_t, char *, size_t);
static void format_numa(const struct knob_desc *, uint64_t, char *, size_t);
static void format_populate(const struct knob_desc *, uint64_t, char *, size_t);

#define TIB ((uint64_t)1 << 40)

static const struct knob_desc knobs[KNOB_COUNT] = {
	/* auto: hugetlb when an admin reserved a pool, else THP: no setup needed,
	 * and a reserved pool is used without asking. */
	[KNOB_MODE] = {"mode", "choice",
		"where blocks >= threshold live: hugetlb pool, THP, auto (hugetlb if the pool can hold the block and keep room for fork's copies, else thp), off (libc)",
		"one of: auto hugetlb thp off", "auto hugetlb thp off", "auto",
		0, 3, parse_choice, format_choice},
	/* 1M: below it THP cannot help and libc is as fast; at 1 MiB the cache
	 * already beats glibc's mmap/munmap round trips. */
	[KNOB_THRESHOLD] = {"threshold", "size",
		"allocations of at least this many bytes take the huge-page path",
		"a size in bytes with optional K/M/G/T suffix, 4K..1T", NULL, "1M",
		4096, TIB, parse_size_knob, format_size},
	/* auto: the largest pool page that fits the request. */
	[KNOB_PAGESIZE] = {"pagesize", "choice",
		"largest hugetlb page size to use: 2M, 1G, or auto (largest whose pool can hold the block); a block that would waste over 1/" HP_STRINGIFY(POLICY_WASTE_DIVISOR) " in rounding takes the next smaller size",
		"one of: auto 2M 1G", "auto 2M 1G", "auto",
		0, 0, parse_pagesize, format_pagesize},
	/* thp: a short pool still gets huge pages where possible. */
	[KNOB_FALLBACK] = {"fallback", "choice",
		"what to do when the hugetlb pool cannot serve a block: thp, small (libc) or fail (NULL, ENOMEM)",
		"one of: thp small fail", "thp small fail", "thp",
		0, 2, parse_choice, format_choice},
	/* 1G: holds a few NumPy temporaries of the sizes that matter. */
	[KNOB_CACHE_MAX] = {"cache_max", "size",
		"bytes of freed huge blocks kept for reuse (0 disables the cache); the kernel may take their THP pages back under memory pressure, but for what glibc would have kept itself (at most 64 MiB)",
		"a size in bytes with optional K/M/G/T suffix, 0..1T", NULL, "1G",
		0, TIB, parse_size_knob, format_size},
	/* 1000: idle memory goes back within a second or two, or up to
	 * CACHE_DECAY_GROWTH times later while the program keeps mapping fresh
	 * memory soon after a release (cache.c). */
	[KNOB_CACHE_DECAY_MS] = {"cache_decay_ms", "integer",
		"cached blocks idle longer than this many milliseconds are released (up to " HP_STRINGIFY(CACHE_DECAY_GROWTH) " times longer while the program keeps mapping fresh memory soon after a release)",
		"an integer number of milliseconds, 0..3600000", NULL, "1000",
		0, 3600000, parse_integer, format_integer},
	[KNOB_URING] = {"uring", "choice",
		"release pages through io_uring so freeing threads do not wait (synchronous if unavailable, and in a memory cgroup with a limit: memory in flight stays charged)",
		"one of: off on", "off on", "on",
		0, 1, parse_choice, format_choice},
	[KNOB_VERBOSE] = {"verbose", "integer",
		"log to stderr: 0 silent, 1 rejected input and fallbacks, 2 every mapping",
		"an integer 0..2", NULL, "0",
		0, 2, parse_integer, format_integer},
	/* default: placement is the kernel's unless asked: no mbind, no work. */
	[KNOB_NUMA] = {"numa", "policy",
		"NUMA placement of huge blocks, set before their first touch: default (the kernel's policy), local, interleave (every allowed node), interleave:NODES, bind:NODES or preferred:NODE",
		"default local interleave interleave:NODES bind:NODES preferred:NODE, NODES like 0,2-3 (nodes 0..31)",
		NULL, "default", 0, 0, parse_numa, format_numa},
	[KNOB_CACHE_RSS_MAX] = {"cache_rss_max", "size",
		"while the process's resident memory (as ps and Dask's memory manager count it) exceeds this, the cache gives blocks back, oldest first, and keeps no new ones; 0 for no such bound (hpalloc.dask sets it to a worker's target fraction of its memory limit)",
		"a size in bytes with optional K/M/G/T suffix, 0..1T", NULL, "0",
		0, TIB, parse_size_knob, format_size},
	/* auto: one worker per two CPUs the process may run on, at most 8, none
	 * on one CPU: first touch of a fresh block at up to that many times one
	 * thread's rate (populate.c). */
	[KNOB_POPULATE] = {"populate", "threads",
		"worker threads that fault in a fresh huge block ahead of a program touching it from its start, like readahead (never a block touched sparsely or elsewhere, never under a memory cgroup's limit or cache_rss_max); auto: one per two CPUs, at most 8, none on one CPU, faulting ahead only while a CPU is free for them; a number: that many, always working; off (or 0) switches it off",
		"auto, off, or a number of threads 0.." HP_STRINGIFY(HP_POPULATE_MAX), NULL, "auto",
		0, HP_POPULATE_MAX, parse_populate, format_populate},
	/* on: in a memory-limited cgroup (a container) the cache keeps at most
	 * a quarter of the headroom (cache.c): the cgroup peaks as under the peers
	 * instead of at its limit, where the kernel reclaims on every charge
	 * (bench/results/pressure). */
	[KNOB_CACHE_MEMCG] = {"cache_memcg", "choice",
		"in a memory cgroup with a limit (a container, a systemd unit), cached THP blocks stay within " HP_STRINGIFY(MEMCG_CACHE_SHARE_PCT) "% of the headroom (limit - working set + cached; the working set: usage less inactive page cache), given back oldest first as it shrinks; off: only cache_max bounds the cache",
		"one of: off on", "off on", "on",
		0, 1, parse_choice, format_choice},
	/* read: reads past the end of a block do not fault, and the guard
	 * reads as zeros: OpenBLAS's complex kernels read past matrices,
	 * harmlessly under glibc (os.c; tests/c/read_past_end). */
	[KNOB_GUARD] = {"guard", "choice",
		"the guard after each new huge block (at least 2 MiB past its mapping): read (reads past the end do not fault, as code that reads a little past its data expects of glibc's memory: the guard reads as zeros, a reused block's bytes between the request and its mapping's end as its last user left them; writes to the guard fault) or fault (any access to the guard faults, to find overruns)",
		"one of: read fault", "read fault", "read",
		0, 1, parse_choice, format_choice},
	/* measured: where a VM hands its free memory back to its host, a fresh
	 * 2 MiB page is a cold block the host must back again (several ms),
	 * while 4 KiB faults take warm fragments; elsewhere (bare metal, a
	 * process reusing what it freed) huge pages are the cheaper first touch
	 * and need no collapse.  Which holds is the machine's and the moment's:
	 * the workers' own fault-ins measure it (populate.c). */
	[KNOB_POPULATE_PAGES] = {"populate_pages", "choice",
		"pages of the first touch of a fresh THP block that populate workers follow: measured (huge pages where the workers last measured a 2 MiB fault no dearer than 2 MiB of 4 KiB faults, else 4 KiB first; each block's own samples revise it), 2M (huge pages from the first fault), 4K (4 KiB pages first, the workers collapse them to 2 MiB behind the program), auto (4 KiB first, then as the block's own samples say)",
		"one of: auto 2M 4K measured", "auto 2M 4K measured", "measured",
		0, 3, parse_choice, format_choice},
#ifdef HP_TEST_KNOB
	/* A knob is its enum entry (internal.h) and its row here: the test-only
	 * build adds this one and tests/cli/knob-two-places.sh finds it in hpctl
	 * show, the environment and the control directory. */
	[KNOB_TEST] = {"test_knob", "integer",
		"a knob of the test-only build, which nothing reads",
		"an integer 0..99", NULL, "7",
		0, 99, parse_integer, format_integer},
#endif
};
/* Each process publishes every knob (struct hp_proc, hpctl -p PID get): a
 * table that outgrew it would lose knobs there without a word. */
_Static_assert(KNOB_COUNT <= HP_PROC_KNOBS_MAX,
	       "the knobs outgrew struct hp_proc: raise HP_PROC_KNOBS_MAX (hpalloc.h, an ABI change)");

struct layer {
	bool set;
	uint64_t value;
};
static pthread_mutex_t knob_lock = PTHREAD_MUTEX_INITIALIZER;
static struct layer layers[KNOB_COUNT][HP_SOURCE_COUNT];
static char rejected[KNOB_COUNT][HP_KNOB_ERROR_MAX];

/* ---- sizes ---------------------------------------------------------------- */

int hp_parse_size(const char *text, uint64_t *out)
{
	const char *p = text;
	uint64_t v = 0;

	if (!text || !out || !isdigit((unsigned char)*p))
		goto invalid;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			goto invalid;
		v = v * 10 + d;
	}
	unsigned shift = 0;
	switch (*p) {
	case '\0': break;
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	default: goto invalid;
	}
	if (shift && *++p != '\0')
		goto invalid;
	if (shift && v > (UINT64_MAX >> shift))
		goto invalid;
	*out = v << shift;
	return 0;
invalid:
	errno = EINVAL;
	return -1;
}

int hp_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char suffix[] = "TGMK";
	int n;

	for (int i = 0; i < 4; i++) {
		unsigned shift = 40 - 10 * (unsigned)i;
		uint64_t unit = (uint64_t)1 << shift;
		if (bytes >= unit && bytes % unit == 0) {
			n = snprintf(buf, len, "%llu%c", (unsigned long long)(bytes >> shift), suffix[i]);
			goto done;
		}
	}
	n = snprintf(buf, len, "%llu", (unsigned long long)bytes);
done:
	if (n < 0 || (size_t)n >= len) {
		errno = ERANGE;
		return -1;
	}
	return 0;
}

/* ---- per-type parsers and printers (input is one trimmed word) ---------- */

/* Index of word in a space separated list, or -1. */
static int choice_index(const char *choices, const char *word)
{
	size_t wlen = strlen(word);
	int i = 0;

	for (const char *p = choices; *p; i++) {
		size_t n = strcspn(p, " ");
		if (n == wlen && strncmp(p, word, n) == 0)
			return i;
		p += n;
		p += (*p == ' ');
	}
	return -1;
}

/* Copy the index-th word of a space separated list. */
static void choice_word(const char *choices, uint64_t index, char *buf, size_t len)
{
	const char *p = choices;
	for (uint64_t i = 0; i < index && *p; i++) {
		p += strcspn(p, " ");
		p += (*p == ' ');
	}
	size_t n = strcspn(p, " ");
	snprintf(buf, len, "%.*s", (int)n, p);
}

static int parse_choice(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	(void)why, (void)wl;
	int i = choice_index(k->choices, word);
	if (i < 0)
		return -1;
	*out = (uint64_t)i;
	return 0;
}

static void format_choice(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	choice_word(k->choices, v, buf, len);
}

static int parse_size_knob(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	(void)why, (void)wl;
	uint64_t v;
	if (hp_parse_size(word, &v) < 0 || v < k->min || v > k->max)
		return -1;
	*out = v;
	return 0;
}

static void format_size(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	(void)k;
	hp_format_size(v, buf, len);
}

static int parse_integer(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	(void)why, (void)wl;
	uint64_t v;
	/* plain digits only: reuse the size grammar, then refuse suffixes */
	if (word[strspn(word, "0123456789")] != '\0' || hp_parse_size(word, &v) < 0)
		return -1;
	if (v < k->min || v > k->max)
		return -1;
	*out = v;
	return 0;
}

static void format_integer(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	(void)k;
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* pagesize: "auto" (0) or a size equal to 2M or 1G, stored in bytes. */
static int parse_pagesize(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	uint64_t v;
	(void)k, (void)why, (void)wl;
	if (strcmp(word, "auto") == 0) {
		*out = 0;
		return 0;
	}
	if (hp_parse_size(word, &v) < 0 || (v != 2 * HP_MiB && v != HP_GiB))
		return -1;
	*out = v;
	return 0;
}

static void format_pagesize(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	(void)k;
	if (v == 0)
		snprintf(buf, len, "auto");
	else
		hp_format_size(v, buf, len);
}

/* numa: a placement policy (lib/core/numa.c owns the grammar). */
static int parse_numa(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	(void)k;
	return numa_parse(word, out, why, wl);
}

static void format_numa(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	(void)k;
	numa_format(v, buf, len);
}

/* populate: "auto", "off", or a thread count (0 is off). */
static int parse_populate(const struct knob_desc *k, const char *word, uint64_t *out, char *why, size_t wl)
{
	if (strcmp(word, "auto") == 0) {
		*out = HP_POPULATE_AUTO;
		return 0;
	}
	if (strcmp(word, "off") == 0) {
		*out = 0;
		return 0;
	}
	return parse_integer(k, word, out, why, wl);
}

static void format_populate(const struct knob_desc *k, uint64_t v, char *buf, size_t len)
{
	if (v == HP_POPULATE_AUTO)
		snprintf(buf, len, "auto");
	else if (v == 0)
		snprintf(buf, len, "off");
	else
		format_integer(k, v, buf, len);
}

/* ---- text in: one word, surrounding whitespace allowed (files end in \n) - */

/* Trim into buf; -1 if empty, too long, or more than one word. */
static int one_word(const char *text, char *buf, size_t len)
{
	while (isspace((unsigned char)*text))
		text++;
	size_t n = strcspn(text, " \t\r\n\v\f");
	const char *rest = text + n;
	while (isspace((unsigned char)*rest))
		rest++;
	if (n == 0 || n >= len || *rest != '\0')
		return -1;
	memcpy(buf, text, n);
	buf[n] = '\0';
	return 0;
}

/* Printable, bounded copy of user input for messages. */
static void quote_input(const char *text, char *buf, size_t len)
{
	size_t j = 0;
	for (size_t i = 0; text[i] && j + 5 < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if (i >= 40) {
			j += (size_t)snprintf(buf + j, len - j, "...");
			break;
		}
		if (isprint(c))
			buf[j++] = (char)c;
		else
			j += (size_t)snprintf(buf + j, len - j, "\\x%02x", c);
	}
	buf[j] = '\0';
}

static int parse_value(int knob, const char *text, uint64_t *out, char *err, size_t err_len)
{
	const struct knob_desc *k = &knobs[knob];
	char word[HP_KNOB_VALUE_MAX], why[128] = "";

	if (text && one_word(text, word, sizeof(word)) == 0 && k->parse(k, word, out, why, sizeof(why)) == 0)
		return 0;
	if (err && err_len) {
		char shown[64];
		quote_input(text ? text : "", shown, sizeof(shown));
		snprintf(err, err_len, "%s: invalid value '%s'%s%s (accepted: %s)", k->name, shown,
			 why[0] ? ": " : "", why, k->accepted);
	}
	errno = EINVAL;
	return -1;
}

/* Every knob's name, space separated, from the table. */
static void knob_names(char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int k = 0; k < KNOB_COUNT && used < len; k++) {
		int n = snprintf(buf + used, len - used, "%s%s", k ? " " : "", knobs[k].name);
		if (n < 0)
			break;
		used += (size_t)n;
	}
}

static int knob_lookup(const char *name, char *err, size_t err_len)
{
	int i = hp_knob_index(name);
	if (i < 0 && err && err_len) {
		char shown[64], names[256];
		quote_input(name ? name : "", shown, sizeof(shown));
		knob_names(names, sizeof(names));
		snprintf(err, err_len, "unknown knob '%s' (knobs: %s)", shown, names);
	}
	return i;
}

/* ---- effective values -------------------------------------------------- */

static int effective_source(int knob)
{
	for (int s = HP_SOURCE_COUNT - 1; s > HP_SOURCE_DEFAULT; s--)
		if (layers[knob][s].set)
			return s;
	return HP_SOURCE_DEFAULT;
}

/* Called with knob_lock held: store the effective value, note a change. */
static void refresh(int knob, uint64_t before)
{
	uint64_t now = layers[knob][effective_source(knob)].value;
	atomic_store(&hp_knob_values[knob], now);
	if (now != before) {
		stat_add(HP_STAT_CONFIG_GENERATION, 1);
		background_wake();
	}
}

int knobs_set_layer(int knob, int source, const char *canon)
{
	uint64_t v = 0;

	if (knob < 0 || knob >= KNOB_COUNT || source <= HP_SOURCE_DEFAULT || source >= HP_SOURCE_COUNT ||
	    (canon && parse_value(knob, canon, &v, NULL, 0) < 0)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&knob_lock);
	uint64_t before = layers[knob][effective_source(knob)].value;
	layers[knob][source] = (struct layer){.set = canon != NULL, .value = v};
	refresh(knob, before);
	pthread_mutex_unlock(&knob_lock);
	return 0;
}

void knobs_clear_source(int source)
{
	for (int k = 0; k < KNOB_COUNT; k++)
		knobs_set_layer(k, source, NULL);
}

void knobs_note_reject(int knob, const char *why)
{
	if (knob < 0 || knob >= KNOB_COUNT)
		return;
	pthread_mutex_lock(&knob_lock);
	size_t n = strnlen(why, sizeof(rejected[knob]) - 1); /* truncation is fine */
	memcpy(rejected[knob], why, n);
	rejected[knob][n] = '\0';
	pthread_mutex_unlock(&knob_lock);
	stat_add(HP_STAT_CONFIG_REJECTS, 1);
	hp_log(1, "%s", why);
}

int knobs_parse(int knob, const char *text, uint64_t *out, char *err, size_t err_len)
{
	if (knob < 0 || knob >= KNOB_COUNT) {
		errno = EINVAL;
		return -1;
	}
	return parse_value(knob, text, out, err, err_len);
}

void knobs_fork(int phase)
{
	fork_mutex(&knob_lock, phase);
}

const char *knob_name(int knob)
{
	return knob >= 0 && knob < KNOB_COUNT ? knobs[knob].name : NULL;
}

int knob_env_name(int knob, char *buf, size_t len)
{
	if (knob < 0 || knob >= KNOB_COUNT) {
		errno = EINVAL;
		return -1;
	}
	int n = snprintf(buf, len, "HPALLOC_%s", knobs[knob].name);
	if (n < 0 || (size_t)n >= len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *c = buf; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	return 0;
}

/* Beside the table: the Python activation's own variables (private.h).
 * Their grammar is python/hpalloc_activate.py's (main(), parse_adapters());
 * tests/cli/basic.sh holds what is said here to what it accepts. */
static const struct knob_env_extra env_extras[] = {
	{"HPALLOC_NUMPY",
	 "activate hpalloc's Python adapters at interpreter start-up (hpctl run sets it to 1)",
	 "1 yes on true (activate); 0 no off false or empty (do not); case ignored",
	 "unset"},
	{"HPALLOC_ADAPTERS",
	 "the adapters HPALLOC_NUMPY activates, each when the program imports its library (python: CPython's raw memory domain, at start-up); an invalid value is said on stderr and ignored",
	 "comma-separated names among python numpy numba torch arrow, or all",
	 "numpy,numba,torch,arrow"},
};

const struct knob_env_extra *knob_env_extra(int i)
{
	return i >= 0 && (size_t)i < sizeof(env_extras) / sizeof(env_extras[0]) ? &env_extras[i] : NULL;
}

/* Defaults, then HPALLOC_<KNOB> unless this is a secure-execution process
 * (or hpctl, whose own environment says nothing about other processes). */
void knobs_init(bool with_env)
{
	for (int k = 0; k < KNOB_COUNT; k++) {
		uint64_t v = 0;
		parse_value(k, knobs[k].default_text, &v, NULL, 0);
		layers[k][HP_SOURCE_DEFAULT] = (struct layer){.set = true, .value = v};
		atomic_store(&hp_knob_values[k], v);
	}
	if (!with_env || hp_secure_exec())
		return;
	/* verbose first, so that it already applies to the other knobs' rejects */
	for (int i = 0; i < KNOB_COUNT; i++) {
		int k = i == 0 ? KNOB_VERBOSE : (i == KNOB_VERBOSE ? 0 : i);
		char var[64], canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX], why[HP_KNOB_ERROR_MAX + 96];
		const char *text = knob_env_name(k, var, sizeof(var)) == 0 ? getenv(var) : NULL;
		if (!text)
			continue;
		if (hp_knob_parse(knobs[k].name, text, canon, sizeof(canon), err, sizeof(err)) == 0) {
			knobs_set_layer(k, HP_SOURCE_ENV, canon);
		} else {
			snprintf(why, sizeof(why), "%s ignored: %s", var, err);
			knobs_note_reject(k, why);
		}
	}
}

/* ---- public API ------------------------------------------------------------ */

int hp_knob_count(void)
{
	return KNOB_COUNT;
}

int hp_knob_index(const char *name)
{
	for (int k = 0; name && k < KNOB_COUNT; k++)
		if (strcmp(knobs[k].name, name) == 0)
			return k;
	errno = ENOENT;
	return -1;
}

int hp_knob_info(int index, struct hp_knob_info *out)
{
	if (index < 0 || index >= KNOB_COUNT || !out) {
		errno = EINVAL;
		return -1;
	}
	hp_init();
	const struct knob_desc *k = &knobs[index];
	*out = (struct hp_knob_info){.name = k->name, .type = k->type, .help = k->help,
				     .accepted = k->accepted, .choices = k->choices};
	pthread_mutex_lock(&knob_lock);
	int src = effective_source(index);
	k->format(k, layers[index][HP_SOURCE_DEFAULT].value, out->default_value, sizeof(out->default_value));
	k->format(k, layers[index][src].value, out->value, sizeof(out->value));
	out->source = src;
	snprintf(out->rejected, sizeof(out->rejected), "%s", rejected[index]);
	pthread_mutex_unlock(&knob_lock);
	return 0;
}

int hp_knob_parse(const char *name, const char *text, char *canon, size_t canon_len, char *err, size_t err_len)
{
	uint64_t v;
	int k = knob_lookup(name, err, err_len);

	if (k < 0) {
		errno = EINVAL;
		return -1;
	}
	if (parse_value(k, text, &v, err, err_len) < 0)
		return -1;
	if (canon && canon_len)
		knobs[k].format(&knobs[k], v, canon, canon_len);
	return 0;
}

int hp_knob_parse_assignment(const char *word, char *canon, size_t canon_len, char *err,
			     size_t err_len)
{
	const char *eq = word ? strchr(word, '=') : NULL;
	char name[64];
	size_t n = eq ? (size_t)(eq - word) : 0;

	if (!eq || n == 0) {
		if (err && err_len) {
			char shown[64];
			quote_input(word ? word : "", shown, sizeof(shown));
			snprintf(err, err_len, "expected KNOB=VALUE, got '%s'", shown);
		}
		errno = EINVAL;
		return -1;
	}
	/* No knob name is that long: the lookup below refuses the cut name. */
	n = n < sizeof(name) ? n : sizeof(name) - 1;
	memcpy(name, word, n);
	name[n] = '\0';
	if (hp_knob_parse(name, eq + 1, canon, canon_len, err, err_len) != 0)
		return -1;
	return hp_knob_index(name);
}

int hp_knob_render(const char *name, const char *canon, char *buf, size_t buf_len)
{
	char value[HP_KNOB_VALUE_MAX];
	int k = hp_knob_index(name);
	int n;

	if (k < 0 || hp_knob_parse(name, canon, value, sizeof(value), NULL, 0) < 0) {
		errno = EINVAL;
		return -1;
	}
	const char *choices = knobs[k].choices;
	if (!choices) {
		n = snprintf(buf, buf_len, "%s\n", value);
	} else {
		/* every choice, the current one in brackets, as the kernel's THP
		 * files; composed in a local buffer (choice lists are short) */
		char line[256] = "";
		size_t used = 0;
		for (const char *p = choices; *p;) {
			size_t w = strcspn(p, " ");
			bool cur = strlen(value) == w && strncmp(p, value, w) == 0;
			int m = snprintf(line + used, sizeof(line) - used, "%s%s%.*s%s", used ? " " : "",
					 cur ? "[" : "", (int)w, p, cur ? "]" : "");
			if (m < 0 || (size_t)m >= sizeof(line) - used) {
				errno = ERANGE;
				return -1;
			}
			used += (size_t)m;
			p += w;
			p += (*p == ' ');
		}
		n = snprintf(buf, buf_len, "%s\n", line);
	}
	if (n < 0 || (size_t)n >= buf_len) {
		errno = ERANGE;
		return -1;
	}
	return 0;
}

/* A control file holds either one word, or the rendered choice list with
 * exactly one bracketed word (so `cat` output written back is accepted). */
int hp_knob_parse_file(const char *name, const char *body, char *canon, size_t canon_len, char *err, size_t err_len)
{
	const char *open = body ? strchr(body, '[') : NULL;
	int k = knob_lookup(name, err, err_len);

	if (k < 0) {
		errno = EINVAL;
		return -1;
	}
	if (!open || !knobs[k].choices)
		return hp_knob_parse(name, body, canon, canon_len, err, err_len);

	const char *close = strchr(open, ']');
	char word[HP_KNOB_VALUE_MAX], rendered[256];
	size_t n = close ? (size_t)(close - open - 1) : 0;
	if (!close || n == 0 || n >= sizeof(word) || strchr(close, '['))
		goto bad;
	memcpy(word, open + 1, n);
	word[n] = '\0';
	/* the list around the brackets must be exactly what we would render */
	if (hp_knob_render(name, word, rendered, sizeof(rendered)) < 0)
		goto bad;
	size_t blen = strlen(body), rlen = strlen(rendered);
	while (blen && isspace((unsigned char)body[blen - 1]))
		blen--;
	if (blen != rlen - 1 || strncmp(body, rendered, blen) != 0)
		goto bad;
	return hp_knob_parse(name, word, canon, canon_len, err, err_len);
bad:
	if (err && err_len) {
		char shown[64];
		quote_input(body, shown, sizeof(shown));
		snprintf(err, err_len, "%s: invalid value '%s' (accepted: %s)", knobs[k].name, shown, knobs[k].accepted);
	}
	errno = EINVAL;
	return -1;
}

static int knob_set(const char *name, const char *text)
{
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX];
	HP_ERRNO_SAVE;

	hp_init();
	if (hp_knob_parse(name, text, canon, sizeof(canon), err, sizeof(err)) < 0) {
		knobs_note_reject(hp_knob_index(name), err); /* unknown names: nothing to note on */
		errno = EINVAL;
		return -1;
	}
	int rc = knobs_set_layer(hp_knob_index(name), HP_SOURCE_PROCESS, canon);
	if (rc == 0)
		HP_ERRNO_RESTORE; /* waking the janitor is no error of the caller's */
	return rc;
}

/* A refused value is logged: no cancellation point (see HP_NOCANCEL_BEGIN). */
int hp_knob_set(const char *name, const char *text)
{
	HP_NOCANCEL_BEGIN;
	int rc = knob_set(name, text);
	HP_NOCANCEL_END;
	return rc;
}

int hp_knob_unset(const char *name)
{
	hp_init();
	if (!name) {
		HP_ERRNO_SAVE;
		knobs_clear_source(HP_SOURCE_PROCESS);
		HP_ERRNO_RESTORE;
		return 0;
	}
	int k = hp_knob_index(name);
	if (k < 0) {
		errno = EINVAL;
		return -1;
	}
	HP_ERRNO_SAVE;
	int rc = knobs_set_layer(k, HP_SOURCE_PROCESS, NULL);
	if (rc == 0)
		HP_ERRNO_RESTORE;
	return rc;
}

int hp_knob_get(const char *name, char *buf, size_t len)
{
	struct hp_knob_info info;
	int k = hp_knob_index(name);

	if (k < 0 || !buf || hp_knob_info(k, &info) < 0) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)snprintf(buf, len, "%s", info.value) >= len) {
		errno = ERANGE;
		return -1;
	}
	return info.source;
}

const char *hp_source_name(int source)
{
	static const char *const names[HP_SOURCE_COUNT] = {"default", "control", "env", "process"};
	return source >= 0 && source < HP_SOURCE_COUNT ? names[source] : NULL;
}

/* ---- logging: silent unless `verbose` asks ---------------------------------- */

void hp_log(int level, const char *fmt, ...)
{
	if ((int)hp_knob(KNOB_VERBOSE) < level)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "hpalloc[%d]: %s\n", (int)getpid(), line);
}
