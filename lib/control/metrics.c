/* The per-process entries (struct hp_proc: hp_proc_list, hp_proc_get,
 * hp_proc_self) in Prometheus' text exposition format, version 0.0.4:
 * hp_proc_prometheus().  The one formatter: `hpctl metrics` (a file for
 * node_exporter's textfile collector, or served over HTTP) and the Python
 * package's collector both print this text.
 *
 * Names follow Prometheus' conventions: prefix hpalloc_, base units
 * (_bytes, _seconds), counters end in _total, one family per quantity with
 * a label where the stats split it (backend, origin, path, how), and every
 * sample carries pid and comm labels.  The table below is the mapping from
 * enum hp_stat; its names are an interface (dashboards and alerts use them),
 * so a counter added to enum hp_stat needs a row here
 * (tests/cli/metrics-rows.sh checks every counter is a row of the type its
 * name says, in plain make check; tests/python/test_prometheus.py, where
 * prometheus_client is installed, checks every published counter against
 * the metric written out there).
 *
 * Pure formatting: no lock, no global state, thread-safe.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "../core/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metric {
	const char *family;   /* without the hpalloc_ prefix */
	const char *type;     /* "gauge" or "counter" */
	const char *label;    /* a label splitting the family, or NULL */
	const char *value;    /* that label's value for this counter */
	unsigned divisor;     /* the counter's unit per base unit (1000: ms) */
	const char *help;     /* the family's, on its first row */
};

#define G "gauge"
#define C "counter"
static const struct metric metrics[HP_STAT_COUNT] = {
	[HP_STAT_SMALL_LIVE_BYTES] = { "live_bytes", G, "backend", "small", 1,
		"Bytes of live blocks by backend (small: libc's memory below the threshold)" },
	[HP_STAT_THP_LIVE_BYTES] = { "live_bytes", G, "backend", "thp", 1, NULL },
	[HP_STAT_HUGETLB_LIVE_BYTES] = { "live_bytes", G, "backend", "hugetlb", 1, NULL },
	[HP_STAT_SMALL_LIVE_BLOCKS] = { "live_blocks", G, "backend", "small", 1,
		"Live blocks by backend" },
	[HP_STAT_THP_LIVE_BLOCKS] = { "live_blocks", G, "backend", "thp", 1, NULL },
	[HP_STAT_HUGETLB_LIVE_BLOCKS] = { "live_blocks", G, "backend", "hugetlb", 1, NULL },
	[HP_STAT_MAPPED_BYTES] = { "mapped_bytes", G, NULL, NULL, 1,
		"Bytes of huge mappings, cached ones included" },
	[HP_STAT_CACHED_BYTES] = { "cached_bytes", G, NULL, NULL, 1,
		"Bytes of huge blocks kept in the reuse cache" },
	[HP_STAT_CACHED_BLOCKS] = { "cached_blocks", G, NULL, NULL, 1,
		"Huge blocks kept in the reuse cache" },
	[HP_STAT_CACHED_RECLAIMABLE_BYTES] = { "cached_reclaimable_bytes", G, NULL, NULL, 1,
		"Of the cached bytes, those the kernel may take back under memory pressure" },
	[HP_STAT_CACHE_HITS] = { "cache_hits_total", C, NULL, NULL, 1,
		"Huge allocations served from the reuse cache" },
	[HP_STAT_CACHE_MISSES] = { "cache_misses_total", C, NULL, NULL, 1,
		"Huge allocations the reuse cache could not serve" },
	[HP_STAT_CACHE_EVICTIONS] = { "cache_evictions_total", C, NULL, NULL, 1,
		"Cached blocks released before their decay (cache bounds, flushes, forks)" },
	[HP_STAT_CACHE_DECAYS] = { "cache_decays_total", C, NULL, NULL, 1,
		"Cached blocks released after staying idle for the decay" },
	[HP_STAT_CACHE_CUTS] = { "cache_cuts_total", C, NULL, NULL, 1,
		"Cached blocks cut to serve a smaller request" },
	[HP_STAT_CACHE_JOINS] = { "cache_joins_total", C, NULL, NULL, 1,
		"Cached pieces joined to serve a larger request" },
	[HP_STAT_CACHE_DECAY_MS] = { "cache_decay_seconds", G, NULL, NULL, 1000,
		"The cache decay in force (the cache_decay_ms knob or more, learnt)" },
	[HP_STAT_FALLBACKS] = { "fallbacks_total", C, NULL, NULL, 1,
		"Hugetlb allocations that fell back (the fallback knob)" },
	[HP_STAT_FAILURES] = { "failures_total", C, NULL, NULL, 1,
		"Allocations that returned NULL" },
	[HP_STAT_RELEASED_BYTES] = { "released_bytes_total", C, NULL, NULL, 1,
		"Bytes returned to the kernel" },
	[HP_STAT_URING_RELEASES] = { "releases_total", C, "path", "uring", 1,
		"Page releases by path (uring: submitted to io_uring; sync: in the calling thread)" },
	[HP_STAT_SYNC_RELEASES] = { "releases_total", C, "path", "sync", 1, NULL },
	[HP_STAT_REALLOC_INPLACE] = { "reallocs_total", C, "how", "inplace", 1,
		"Reallocations of huge blocks by how (inplace: without copying)" },
	[HP_STAT_REALLOC_COPIES] = { "reallocs_total", C, "how", "copy", 1, NULL },
	[HP_STAT_CONFIG_GENERATION] = { "config_changes_total", C, NULL, NULL, 1,
		"Changes of the effective knob values" },
	[HP_STAT_CONFIG_REJECTS] = { "config_rejects_total", C, NULL, NULL, 1,
		"Knob values and control files refused" },
	[HP_STAT_API_HUGE_BYTES] = { "huge_bytes", G, "origin", "api", 1,
		"Live huge (THP and hugetlb) bytes by who asked for them" },
	[HP_STAT_NUMPY_HUGE_BYTES] = { "huge_bytes", G, "origin", "numpy", 1, NULL },
	[HP_STAT_PYTHON_HUGE_BYTES] = { "huge_bytes", G, "origin", "python", 1, NULL },
	[HP_STAT_TORCH_HUGE_BYTES] = { "huge_bytes", G, "origin", "torch", 1, NULL },
	[HP_STAT_NUMBA_HUGE_BYTES] = { "huge_bytes", G, "origin", "numba", 1, NULL },
	[HP_STAT_PRELOAD_HUGE_BYTES] = { "huge_bytes", G, "origin", "preload", 1, NULL },
	[HP_STAT_SHARED_LIVE_BYTES] = { "shared_live_bytes", G, NULL, NULL, 1,
		"Bytes of shared (memfd) blocks mapped by the process" },
	[HP_STAT_SHARED_LIVE_BLOCKS] = { "shared_live_blocks", G, NULL, NULL, 1,
		"Shared (memfd) blocks mapped by the process" },
	[HP_STAT_SHARED_FALLBACKS] = { "shared_fallbacks_total", C, NULL, NULL, 1,
		"Shared blocks not on hugetlb pages: the pool was short" },
	[HP_STAT_URING_ACTIVE] = { "uring_active", G, NULL, NULL, 1,
		"1 while releases go through io_uring" },
	[HP_STAT_JANITOR_ACTIVE] = { "janitor_active", G, NULL, NULL, 1,
		"1 while the background (janitor) thread runs" },
	[HP_STAT_NUMA_REFUSED] = { "numa_refused_total", C, NULL, NULL, 1,
		"Blocks unmapped because their NUMA placement could not be applied" },
	[HP_STAT_POPULATE_AHEAD_BYTES] = { "populate_ahead_bytes_total", C, NULL, NULL, 1,
		"Bytes the populate workers faulted in ahead of the program" },
	[HP_STAT_POPULATE_SAVED_US] = { "populate_saved_seconds_total", C, NULL, NULL, 1000000,
		"Estimated time the populate workers saved the program" },
	[HP_STAT_POPULATE_THREADS] = { "populate_threads", G, NULL, NULL, 1,
		"Populate workers running" },
	[HP_STAT_POPULATE_SMALL_FIRST] = { "populate_small_first_total", C, NULL, NULL, 1,
		"Fresh blocks the populate workers faulted at 4 KiB first, to collapse behind the program" },
	[HP_STAT_POPULATE_COLLAPSED_BYTES] = { "populate_collapsed_bytes_total", C, NULL, NULL, 1,
		"Bytes the populate workers collapsed to 2 MiB pages behind the program" },
	[HP_STAT_POPULATE_SMALL_DROPPED_BYTES] = { "populate_small_dropped_bytes_total", C, NULL, NULL, 1,
		"Bytes of blocks freed before their collapse whose 4 KiB pages the cache dropped" },
	[HP_STAT_POPULATE_CPU_US] = { "populate_cpu_seconds_total", C, NULL, NULL, 1000000,
		"CPU time the populate workers spent (faults ahead, looks, collapses): what populating cost" },
	[HP_STAT_POPULATE_BUSY] = { "populate_busy_total", C, NULL, NULL, 1,
		"Times the populate workers stood back because no CPU was free for them" },
	[HP_STAT_POPULATE_2M_US] = { "populate_fault_seconds", G, "pages", "2M", 1000000,
		"A worker's CPU time to fault 2 MiB in, by the pages it was faulted on, as last measured (0: not yet)" },
	[HP_STAT_POPULATE_4K_US] = { "populate_fault_seconds", G, "pages", "4K", 1000000, NULL },
	[HP_STAT_POPULATE_START] = { "populate_start", G, NULL, NULL, 1,
		"How populate_pages=measured starts the next fresh block: 0 not measured yet, 1 huge pages, 2 4 KiB pages first" },
	[HP_STAT_MEMCG_LIMIT_BYTES] = { "memcg_limit_bytes", G, NULL, NULL, 1,
		"The memory cgroup limit that binds the process, 0 if none" },
	[HP_STAT_MEMCG_CACHE_BOUND] = { "memcg_cache_bound_bytes", G, NULL, NULL, 1,
		"What the cache may keep under that limit, as last worked out" },
	[HP_STAT_MEMCG_RELEASED_BYTES] = { "memcg_released_bytes_total", C, NULL, NULL, 1,
		"Cached or freed THP bytes given back to stay under that bound" },
	[HP_STAT_LIBC_TRIMS] = { "libc_trims_total", C, NULL, NULL, 1,
		"Times libc gave back its free memory before a block that did not fit under the limit" },
	[HP_STAT_THP_SPLITS_SEEN] = { "thp_splits_seen_total", C, NULL, NULL, 1,
		"Huge pages the kernel split, machine-wide, while this process had THP blocks" },
	[HP_STAT_THP_UNDERUSED_SPLITS_SEEN] = { "thp_underused_splits_seen_total", C, NULL, NULL, 1,
		"Of those, split as under-used (pages of zeros)" },
	[HP_STAT_MEMCG_LIBC_BLOCKS] = { "memcg_libc_blocks_total", C, NULL, NULL, 1,
		"Requests that did not fit under the limit, served from libc's free memory" },
	[HP_STAT_STRANDED_RESERVATIONS] = { "stranded_reservations_total", C, NULL, NULL, 1,
		"Reservations a move the kernel refused left mapped for good (address space, no memory)" },
};
#undef G
#undef C

/* ---- a growing text --------------------------------------------------------- */

struct text {
	char *buf;
	size_t len, cap;
	bool failed;
};

static void text_add(struct text *t, const char *s, size_t n)
{
	if (t->failed)
		return;
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;
		while (cap < t->len + n + 1)
			cap *= 2;
		char *nb = realloc(t->buf, cap);
		if (!nb) {
			t->failed = true;
			return;
		}
		t->buf = nb;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = '\0';
}

__attribute__((format(printf, 2, 3)))
static void text_printf(struct text *t, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		t->failed = true;
		return;
	}
	if ((size_t)n < sizeof(small)) {
		text_add(t, small, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		t->failed = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	text_add(t, big, (size_t)n);
	free(big);
}

/* A label value: backslash, double quote and line feed escaped, as the
 * format asks (comm and knob values come from other processes). */
static void text_label_value(struct text *t, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			text_add(t, "\\\\", 2);
		else if (*s == '"')
			text_add(t, "\\\"", 2);
		else if (*s == '\n')
			text_add(t, "\\n", 2);
		else
			text_add(t, s, 1);
	}
}

/* ---- the exposition ----------------------------------------------------------- */

/* {pid="..",comm=".." -- the labels of every sample; the caller adds its
 * own (label()) and closes the set. */
static void labels_open(struct text *t, const struct hp_proc *p)
{
	text_printf(t, "{pid=\"%ld\",comm=\"", p->pid);
	text_label_value(t, p->comm);
	text_add(t, "\"", 1);
}

static void label(struct text *t, const char *name, const char *value)
{
	text_printf(t, ",%s=\"", name);
	text_label_value(t, value);
	text_add(t, "\"", 1);
}

static void sample(struct text *t, const char *family, const struct hp_proc *p,
		   const struct metric *m, uint64_t v)
{
	text_printf(t, "hpalloc_%s", family);
	labels_open(t, p);
	if (m->label)
		label(t, m->label, m->value);
	text_add(t, "} ", 2);
	if (m->divisor > 1) /* %.17g: the double the reader computes, exactly */
		text_printf(t, "%.17g\n", (double)v / m->divisor);
	else
		text_printf(t, "%llu\n", (unsigned long long)v);
}

/* Every sample of the family whose first counter is `first`. */
static void family(struct text *t, int first, const struct hp_proc *procs,
		   size_t count)
{
	const struct metric *m = &metrics[first];

	text_printf(t, "# HELP hpalloc_%s %s\n# TYPE hpalloc_%s %s\n", m->family,
		    m->help ? m->help : "", m->family, m->type);
	for (size_t i = 0; i < count; i++)
		for (int s = first; s < HP_STAT_COUNT; s++)
			if (metrics[s].family && !strcmp(metrics[s].family, m->family) &&
			    (procs[i].stat_mask & ((uint64_t)1 << s)))
				sample(t, m->family, &procs[i], &metrics[s],
				       procs[i].stats.v[s]);
}

/* The first counter of its family (families are printed once, there). */
static bool first_of_family(int s)
{
	for (int e = 0; e < s; e++)
		if (metrics[e].family && !strcmp(metrics[e].family, metrics[s].family))
			return false;
	return true;
}

#define KNOB_HEAD "# HELP hpalloc_knob_info Effective knob values (value) and where " \
	"each comes from (source)\n# TYPE hpalloc_knob_info gauge\n"

static void knobs(struct text *t, const struct hp_proc *procs, size_t count)
{
	text_add(t, KNOB_HEAD, strlen(KNOB_HEAD));
	for (size_t i = 0; i < count; i++)
		for (int k = 0; k < procs[i].nknobs; k++) {
			const struct hp_proc_knob *kn = &procs[i].knobs[k];
			const char *source = hp_source_name(kn->source);

			text_add(t, "hpalloc_knob_info", strlen("hpalloc_knob_info"));
			labels_open(t, &procs[i]);
			label(t, "knob", kn->name);
			label(t, "value", kn->value);
			label(t, "source", source ? source : "unknown");
			text_add(t, "} 1\n", 4);
		}
}

char *hp_proc_prometheus(const struct hp_proc *procs, size_t count, size_t *len)
{
	struct text t = { 0 };
	int saved = errno;

	if (!procs && count) {
		errno = EINVAL;
		return NULL;
	}
	text_add(&t, "", 0);
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if (metrics[s].family && first_of_family(s))
			family(&t, s, procs, count);
	knobs(&t, procs, count);
	if (t.failed) {
		free(t.buf);
		errno = ENOMEM;
		return NULL;
	}
	if (len)
		*len = t.len;
	errno = saved;
	return t.buf;
}
