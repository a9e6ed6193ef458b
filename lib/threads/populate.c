/* Populate ahead: worker threads fault in a fresh huge block ahead of a
 * program that touches it from its start -- readahead, for the first touch
 * of anonymous memory.
 *
 * Why.  The first touch of a fresh block is the kernel zeroing every page
 * (and, in a VM whose free pages were handed back to the host, the host
 * backing them again): one thread does it at one thread's rate, however
 * many cores sit idle -- 1 GiB of 2 MiB pages in 0.3-1.5 s on this
 * project's 2-core VM, 12.3 GB/s per thread on bare metal (the kernel's
 * `perf bench mem mmap`), while memory bandwidth takes several times that.
 * QEMU's prealloc-threads fault guest memory in that way.
 *
 * Pages (knob populate_pages, issues 35, 44).  Where the VM hands free
 * memory back to its host, every fresh 2 MiB page is a reported, cold block
 * the host backs again, while 4 KiB pages come from fragments first: a cold
 * first touch at 4 KiB was measured 2-7 times cheaper per byte.  So a
 * fresh THP block with a job may be faulted at 4 KiB first (MADV_NOHUGEPAGE
 * past the program's start; the workers populate ahead at 4 KiB) and,
 * once the program reached its end or stopped touching it, collapsed to
 * 2 MiB pages by a worker (MADV_COLLAPSE, a chunk at a time, after any
 * faulting ahead and within the memory bound below: a collapse charges its
 * fresh huge page while the 4 KiB ones are still charged).  Not behind the
 * program while it fills the block: a collapse takes the mmap lock the
 * program's faults need, and slowed a cold 1 GiB first touch from 0.26-0.47
 * s to 0.53-0.65 s here, its huge pages coming later, not sooner (0.5-1.6 s
 * after the last write, against 0.2-2.5).  The collapse costs CPU time on a
 * worker instead of the program's first touch.  Where huge pages are not
 * dearer (bare metal, memory a process freed a moment ago) they need no
 * collapse: measured (the default) starts a block on them where the
 * workers' own fault-ins last found them no dearer than 4 KiB ones ("what a
 * first touch costs here" below), auto samples per block, off the
 * program's path: the worker times 2 MiB samples against its 4 KiB chunks
 * (enum phase).  The block goes with its huge-page advice back whenever
 * its job ends or is forgotten, so the cache, a resize or a join of pieces
 * sees a THP block as ever.
 *
 * What is populated -- never memory the program does not touch:
 *   - A fresh block of at least POP_MIN_BLOCK gets a job before heap.c
 *     makes it live.  Nothing is faulted until the program shows that it
 *     touches the block from its start: chunks 0 and 1 resident (mincore).
 *     A block touched sparsely, from elsewhere or not at all is never
 *     populated; its job is dropped after POP_IDLE_MS without progress.
 *   - The block is cut in chunks (2 MiB, or its hugetlb page size) and the
 *     chunks in groups of GROUP.  The first chunk of each group, its
 *     sentinel, is left to the program: once it is resident the program
 *     has come that far (readahead's PG_readahead marker).  Workers fault
 *     the other chunks (MADV_POPULATE_WRITE) up to a ceiling beyond what
 *     the program is known to have reached -- readahead's ramp: ahead by
 *     no more than it has touched, MAX_WINDOW chunks (64 MiB) at most --
 *     in batches, each from its end back, so a program faster than the
 *     workers meets them once per batch instead of faulting the same chunk
 *     as they do, chunk after chunk.  The last chunk of the block is a
 *     sentinel too.  So what the program never touches is at most as much
 *     as it touched, and 64 MiB, per block (4 MiB touched: 8 resident).
 *
 * Memory.  Readahead never costs a process its life, and neither may this.
 * A page a worker faults ahead is charged to the program at once, and
 * nothing can make it the kernel's to take back until the program writes
 * it: MADV_FREE after the fault-in, or a drop once the fill stops, would
 * lose a write of the program's that came between the worker's look and
 * its call (the kernel keeps a lazily freed page only if it is written
 * after the MADV_FREE).  Over a memory cgroup's limit nobody's fault gets
 * ENOMEM: the OOM killer kills the whole process -- for pages it may never
 * have touched, after it stopped filling and went on to allocate elsewhere
 * (issue 45: a program at 297 of its 300 MiB, killed with the workers
 * 38 MiB ahead).  So where a bound on the process's memory holds --
 * memcg.c's memcg_bounded(): a memory cgroup's limit, or the resident
 * bound a monitor such as Dask's holds it to -- the workers fault nothing
 * ahead: no job is made for a block mapped under one, and a bound that
 * comes later (a limit
 * set, seen by the janitor's next look) stops every claim from the
 * workers' next reading (every FREE_FRESH_MS while a job populates); what
 * they had ahead by then stays the program's.  A collapse (4 KiB first)
 * faults nothing the program did not write but charges its fresh huge page
 * while the 4 KiB ones it copies still are: it runs while POP_HEADROOM_PCT
 * of what is free holds a chunk (a costly-order charge never invokes the
 * OOM killer: short of room, MADV_COLLAPSE fails with ENOMEM, and the rest
 * stays on 4 KiB pages for khugepaged).  What is free is memcg.c's answer
 * (memcg_room); an unreadable bound is no bound.
 *
 * Thread rules:
 *   - Workers start with the first job (no thread before there is work):
 *     as many as the populate knob says, all signals blocked, named
 *     hpalloc-ahead, hpalloc's own code throughout (hp_inside).  One that
 *     cannot be created is not tried again in this process (or fork
 *     generation); without any, no job is made and the program faults its
 *     pages itself, as without this file.  A kernel without
 *     MADV_POPULATE_WRITE (before 5.14: EINVAL) ends every job the same way.
 *   - A worker touches a block only while its job is here, and the job
 *     exists only while the block is live or still its allocating
 *     thread's: populate_forget(), called by whichever thread takes the
 *     block out of the registry (heap.c: hp_free, a resize) before it does,
 *     ends the job and waits until no worker is inside it (at most one
 *     chunk's fault-in or collapse, or one mincore; a block on 4 KiB pages
 *     first gets its huge-page advice back there, from the caller).  So no
 *     block is cached, released, moved or unmapped under a worker.
 *   - The caller never waits for a worker but in populate_forget(), which
 *     runs with cancellation disabled (hp_free's, resize's), and
 *     populate_fresh() takes pop_lock only to fill a slot: nothing here is
 *     a cancellation point for the program.  pop_lock is held by no one
 *     who takes another lock, and no other lock is held while taking it: a
 *     worker drops it to read what is free (memcg.c, /proc/self/statm).
 *   - Fork: pop_lock is taken around it (lifecycle.c's table), and fork
 *     waits until no worker is inside a job: a worker looks at a chunk
 *     (mincore) before it faults it in, and a fault-in after a fork that
 *     came between the two -- the program having touched the chunk
 *     meanwhile -- is a write to a page the child now shares: it copies the
 *     page and splits the parent's huge page (seen: tests/preload/fork's
 *     parent left with part of its block on 4 KiB pages).  The wait is
 *     one chunk's fault at most, which the kernel mostly makes a fork wait
 *     for anyway (the fault holds mmap_lock).  The child has no workers
 *     and no jobs (its first fresh block starts its own workers).
 *   - NUMA: the block is placed (mbind, heap.c) before its job exists, so a
 *     bind, interleave or preferred block gets its pages where its policy
 *     says whoever faults; for default and local blocks the worker takes
 *     on the allocating thread's policy and node first (numa.c). */
#include "../core/internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define POP_MIN_BLOCK (32 * HP_MiB) /* smaller: over before a worker could help */
#define GROUP 8                      /* chunks per group, the first one the program's */
#define MAX_AHEAD 4                  /* groups beyond what the program reached, at most */
#define MAX_WINDOW (MAX_AHEAD * GROUP) /* chunks beyond it, at most */
#define RING (MAX_AHEAD + 2)         /* per-group times kept until credited */
#define MAX_JOBS 16
#define POP_IDLE_MS 1000             /* a job without progress this long is dropped */
#define POLL_MIN_US 250              /* sentinels looked at this often while it moves */
#define POLL_MAX_US 16000
#define SCAN_MAX 64                  /* sentinels looked at per check */
#define AUTO_MAX 8
/* Under a memory bound, what a collapse may charge for a moment: this share
 * of what is free (see "Memory" above). */
#define POP_HEADROOM_PCT 50
#define FREE_FRESH_MS 1              /* a reading of what is free serves this long */
#define NAME "hpalloc-ahead"         /* at most 15 characters */

struct job {
	bool used;       /* slot taken */
	bool dead;       /* forgotten: no new work, freed once inflight is 0 */
	bool watching;   /* chunks 0 and 1 not seen resident yet */
	bool checking;   /* a worker is looking at its sentinels */
	char *addr;
	size_t len;      /* the block's bytes */
	size_t chunk;    /* bytes per chunk */
	size_t n;        /* chunks */
	size_t pos;      /* the last group whose sentinel the program reached */
	size_t lo, top;  /* the batch being claimed: [lo, top) not claimed yet, from top down */
	size_t hi;       /* the batch's end: chunks below it were claimed or are the program's */
	int inflight;    /* workers inside it (a fault-in or a check) */
	uint64_t group_ns[RING]; /* the workers' time per group, until credited */
	uint64_t progress_ms;    /* made, or seen to move, last */
	uint64_t check_at_us;    /* when its sentinels are looked at next */
	unsigned poll_us;
	unsigned gen;            /* tells a worker's last job from a new one in the slot */
	struct numa_home origin;
	bool thp;        /* a THP block: its fault-ins are first-touch figures */
	/* 4 KiB first ("Pages" above) */
	bool small;      /* may be on 4 KiB pages: collapsed once the program is done */
	bool nh_pending; /* 4 KiB first, the advice to come once the program started */
	size_t base_from; /* the first chunk that may be on 4 KiB pages */
	size_t base_end; /* bytes [0, base_end) may be on 4 KiB pages (auto: HUGE since) */
	bool advised;    /* MADV_HUGEPAGE given back to the whole block */
	int phase;       /* auto's (enum phase) */
	int run;         /* 2 MiB samples in a row that point to the other phase */
	bool sampling;   /* a 2 MiB sample is being taken (one at a time) */
	uint64_t base_ns, base_n; /* CPU time and number of its 4 KiB fault-ins */
	bool collapsing; /* the program is done: chunks [cnext, cend) to collapse */
	bool collapse_busy;
	unsigned again; /* collapses retried (EAGAIN) */
	uint64_t again_at_us; /* and not before then */
	size_t cnext, cend; /* chunks below cnext are collapsed (or on huge pages) */
};

/* auto, per block: 4 KiB pages first (SAMPLING: after the first 4 KiB
 * chunk, each worker fault-in is a 2 MiB sample); RUN samples in a row no
 * dearer than the block's 4 KiB chunks put the rest of it on huge pages
 * (HUGE, where every fault-in is a sample), one dearer keeps it on 4 KiB
 * pages (SMALL, final); in HUGE, RUN dearer ones in a row put the rest back
 * on 4 KiB pages (SMALL).  What one 2 MiB fault costs depends on which
 * block the kernel hands out: freshly freed ones first (warm), then the
 * reported, cold ones -- measured here, cold: 0.2 ms for the first few,
 * then 7-11 ms each; 4 KiB faults 0.6-1 ms per 2 MiB throughout.  So a
 * verdict is never final while the block is on huge pages. */
enum phase { FIXED, SAMPLING, HUGE, SMALL };
#define RUN 3

static pthread_mutex_t pop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER; /* a job, or a job's news */
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER; /* a job's inflight fell to 0 */
static struct job jobs[MAX_JOBS];
static unsigned job_gen;
static _Atomic int njobs;        /* slots in use: hp_free's lock-free look */
static int started;              /* workers created (pop_lock) */
static bool forking;             /* a fork waits for the workers to leave their jobs (pop_lock) */
static bool create_failed;       /* one could not be: not tried again */
static _Atomic bool unsupported; /* no MADV_POPULATE_WRITE in this kernel */
static _Atomic bool no_collapse; /* no MADV_COLLAPSE in this kernel: never 4 KiB first */

static uint64_t clock_us(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static uint64_t now_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

/* ---- what a first touch costs here (issue 44) ------------------------------------
 * The workers' fault-ins are the measurements: each one's CPU time (a VM's
 * host backing a cold page stalls the vCPU, and counts) for a 2 MiB chunk,
 * faulted as a huge page or as 4 KiB pages, folded into a moving estimate
 * per kind (the last FIG_WEIGHT fault-ins weigh most).  populate_pages=
 * measured starts a fresh block on huge pages where they were no dearer at
 * the last fault-ins, else at 4 KiB first, sampling huge pages; either
 * way the block's own samples revise it (enum phase), and move the figures
 * on: a process that freed huge pages a moment ago meets warm ones (a
 * fraction of a millisecond each), a VM that handed its free memory to the
 * host cold ones (several); bare metal zeroes either at memory speed.
 * Where the workers fault nothing (a busy machine) or not both kinds, a
 * worker probes: 2 MiB faulted each way in a mapping of its own, once a
 * job exists and the last probe is PROBE_EVERY_MS old (a few ms of a
 * worker's time, 4 MiB for that moment).  No figures yet (a process's
 * first block): the allocating thread probes first (probe_first()); a
 * probe under way elsewhere, the block starts at 4 KiB, sampling, which
 * measures both.  pop_lock. */
#define FIG_WEIGHT 4
#define PROBE_EVERY_MS 5000
enum { FIG_HUGE, FIG_SMALL };
static uint64_t fig_ns[2]; /* 0: not measured yet */
static uint64_t probed_ms;  /* the last probe began; 0: none */
static bool probing;        /* a worker is in probe(): a fork waits for it */

/* The start of a fresh block under populate_pages=measured: HUGE, or
 * SAMPLING (4 KiB first) where huge pages were dearer or are not measured. */
static int measured_start(const uint64_t figs[2])
{
	return figs[FIG_HUGE] && figs[FIG_SMALL] && figs[FIG_HUGE] <= figs[FIG_SMALL] ? HUGE : SAMPLING;
}

static void figures_publish(void)
{
	int start = !fig_ns[FIG_HUGE] || !fig_ns[FIG_SMALL] ? 0 : measured_start(fig_ns) == HUGE ? 1 : 2;
	atomic_store_explicit(&hp_counters[HP_STAT_POPULATE_2M_US], fig_ns[FIG_HUGE] / 1000, memory_order_relaxed);
	atomic_store_explicit(&hp_counters[HP_STAT_POPULATE_4K_US], fig_ns[FIG_SMALL] / 1000, memory_order_relaxed);
	atomic_store_explicit(&hp_counters[HP_STAT_POPULATE_START], (uint64_t)start, memory_order_relaxed);
}

/* pop_lock held: a fault-in of a 2 MiB chunk of kind took ns. */
static void figure(int kind, uint64_t ns)
{
	uint64_t *f = &fig_ns[kind];
	*f = *f ? (*f * (FIG_WEIGHT - 1) + ns) / FIG_WEIGHT : (ns ? ns : 1);
	figures_publish();
}

void populate_figures_stage(uint64_t huge_ns, uint64_t base_ns)
{
	pthread_mutex_lock(&pop_lock);
	fig_ns[FIG_HUGE] = huge_ns;
	fig_ns[FIG_SMALL] = base_ns;
	/* staged, as good as measured; zeros: not measured, as a fresh process */
	probed_ms = huge_ns || base_ns ? hp_now_ms() : 0;
	figures_publish();
	pthread_mutex_unlock(&pop_lock);
}

/* pop_lock held: whether a worker should probe now (and it is claimed). */
static bool probe_due(void)
{
	uint64_t now = hp_now_ms();
	if (probed_ms && now - probed_ms < PROBE_EVERY_MS)
		return false;
	probed_ms = now ? now : 1;
	return true;
}

/* The CPU time (ns) of the first touch of 2 MiB at p, a store per 4 KiB
 * (the worker's own mapping: no MADV_POPULATE_WRITE needed). */
static uint64_t timed_touch(char *p)
{
	uint64_t t0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
	for (size_t off = 0; off < HP_THP_SIZE; off += HP_BASE_PAGE)
		((volatile char *)p)[off] = 1;
	uint64_t us = clock_us(CLOCK_THREAD_CPUTIME_ID) - t0;
	return us ? us * 1000 : 1;
}

/* Unlocked: 2 MiB faulted as a huge page and 2 MiB as 4 KiB pages, in a
 * THP mapping of the worker's own (os.c: aligned, advised), timed; the
 * figures take both.  A mapping or advice refused measures nothing. */
static void probe(void)
{
	struct hp_map m;
	uint64_t ns[2] = {0, 0};

	if (os_map_thp(2 * HP_THP_SIZE, &m) < 0)
		return;
	char *small = (char *)m.addr + HP_THP_SIZE;
	if (prim_advise(small, HP_THP_SIZE, MADV_NOHUGEPAGE) == 0) {
		ns[FIG_HUGE] = timed_touch(m.addr);
		ns[FIG_SMALL] = timed_touch(small);
	}
	os_unmap(&m);
	pthread_mutex_lock(&pop_lock);
	for (int kind = FIG_HUGE; kind <= FIG_SMALL; kind++)
		if (ns[kind])
			figure(kind, ns[kind]);
	pthread_mutex_unlock(&pop_lock);
}

/* populate_pages=measured and nothing measured yet (a process's first
 * block): a probe now, in the allocating thread, before the block's start is
 * chosen -- a few milliseconds once per process (warm: a fraction of one),
 * so that its first block starts as the machine is at that moment, which
 * is what decides (a process freed huge pages a moment ago, or the VM gave
 * them to its host).  A probe under way in a worker (or a staged figure)
 * serves instead; one that measured nothing (its mapping or advice
 * refused) is not tried again before PROBE_EVERY_MS: meanwhile blocks start
 * at 4 KiB, sampling, as without figures. */
static void probe_first(void)
{
	uint64_t now = hp_now_ms();
	pthread_mutex_lock(&pop_lock);
	bool due = !probing && !forking && (!fig_ns[FIG_HUGE] || !fig_ns[FIG_SMALL]) &&
		   (!probed_ms || now - probed_ms >= PROBE_EVERY_MS);
	if (due) {
		probing = true;
		probed_ms = now;
	}
	pthread_mutex_unlock(&pop_lock);
	if (!due)
		return;
	probe();
	pthread_mutex_lock(&pop_lock);
	probing = false;
	pthread_cond_broadcast(&idle_cond);
	pthread_mutex_unlock(&pop_lock);
}

/* ---- how many workers ------------------------------------------------------------ */

/* The CPUs this process may run on, read once. */
static int allowed_cpus(void)
{
	static _Atomic int cpus;
	int n = atomic_load_explicit(&cpus, memory_order_relaxed);
	if (!n) {
		cpu_set_t set;
		n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
		atomic_store_explicit(&cpus, n, memory_order_relaxed);
	}
	return n;
}

/* auto: one per two CPUs this process may run on, at most AUTO_MAX, and none
 * on one CPU, where a worker could only take the program's own turn. */
static int auto_threads(void)
{
	int n = allowed_cpus() / 2;
	return n > AUTO_MAX ? AUTO_MAX : n;
}

static int wanted_threads(void)
{
	int v = (int)hp_knob(KNOB_POPULATE);
	static _Atomic int auto_n = -1;

	if (v != HP_POPULATE_AUTO)
		return v;
	int n = atomic_load_explicit(&auto_n, memory_order_relaxed);
	if (n < 0) {
		n = auto_threads();
		atomic_store_explicit(&auto_n, n, memory_order_relaxed);
	}
	return n;
}

/* ---- one job ----------------------------------------------------------------------- */

static size_t ngroups(const struct job *j)
{
	return (j->n + GROUP - 1) / GROUP;
}

/* Chunks the program is known to have reached: 0 and 1, then each
 * sentinel it is seen at. */
static size_t reached(const struct job *j)
{
	return j->pos ? j->pos * GROUP + 1 : 2;
}

/* How far the workers may go: readahead's ramp -- ahead of the program by
 * no more than it has touched, MAX_WINDOW at most -- and never the block's
 * last chunk (the program's: it ends the job). */
static size_t ceiling(const struct job *j)
{
	size_t r = reached(j), c = r + (r < MAX_WINDOW ? r : MAX_WINDOW);
	return c < j->n - 1 ? c : j->n - 1;
}

/* pop_lock held: the next chunk a worker may fault, or false.  pick() asks
 * only where no memory bound holds ("Memory" above).  Claims come in
 * batches from where the last one ended up to the ceiling, each from its
 * end back, so that a program faster than the workers meets them once per
 * batch instead of faulting the same chunk as they do, chunk after chunk. */
static bool claim(struct job *j, size_t *chunk)
{
	if (j->dead || j->watching || j->collapsing || j->nh_pending)
		return false;
	size_t r = reached(j);
	if (j->hi < r) /* the program is past the batch: what is left is behind it */
		j->lo = j->top = j->hi = r;
	for (;;) {
		while (j->top > j->lo) {
			size_t c = --j->top;
			if (c % GROUP == 0 || c < r)
				continue; /* a sentinel (the program's), or passed meanwhile */
			*chunk = c;
			return true;
		}
		size_t end = ceiling(j);
		if (j->hi >= end)
			return false;
		j->lo = j->hi;
		j->top = j->hi = end;
	}
}

/* pop_lock held: the program went past groups [from, to): what the workers
 * spent on them is what its own faults would have cost (an estimate: their
 * fault-ins of the same chunks, which the program then found resident). */
static void credit(struct job *j, size_t from, size_t to)
{
	uint64_t ns = 0;
	for (size_t g = from; g < to && g < from + RING; g++) {
		ns += j->group_ns[g % RING];
		j->group_ns[g % RING] = 0;
	}
	stat_add(HP_STAT_POPULATE_SAVED_US, ns / 1000);
}

static void job_free_locked(struct job *j)
{
	j->used = false;
	atomic_fetch_sub_explicit(&njobs, 1, memory_order_relaxed);
}

/* pop_lock held: a job that is over goes once no worker is inside it. */
static void job_end_locked(struct job *j)
{
	j->dead = true;
	if (j->inflight == 0)
		job_free_locked(j);
}

/* pop_lock held: the program is done with the block (upto: the chunks it
 * or the workers faulted), or the job cannot go on (upto: what the program
 * is known to have reached).  A block that may be on 4 KiB pages is not
 * done with yet: its advice is given back and chunks [cnext, upto)
 * collapsed, one worker step at a time (collapse_step()) -- the advice in
 * any case, or the rest of it would fault on 4 KiB pages for good. */
static void job_over_locked(struct job *j, size_t upto)
{
	if (!j->small || j->dead) {
		job_end_locked(j);
		return;
	}
	if (j->collapsing)
		return;
	if (j->cnext < j->base_from)
		j->cnext = j->base_from;
	j->cend = upto < j->n ? upto : j->n;
	if (atomic_load_explicit(&no_collapse, memory_order_relaxed))
		j->cend = j->cnext; /* the advice back, nothing to collapse */
	if (j->cnext >= j->cend && j->advised) { /* all on huge pages */
		job_end_locked(j);
		return;
	}
	j->collapsing = true;
}

/* What a look at the sentinels found (unlocked, the job pinned by inflight). */
struct sighting {
	bool started;   /* watching: chunks 0 and 1 resident */
	size_t pos;     /* the last sentinel resident, scanning up from the job's pos */
	bool finished;  /* the block's last chunk resident */
};

static bool resident(const struct job *j, size_t c)
{
	return prim_resident(j->addr + c * j->chunk) == 1;
}

static void look(const struct job *j, size_t pos, bool watching, struct sighting *s)
{
	s->started = false;
	s->pos = pos;
	s->finished = false;
	if (watching) {
		s->started = resident(j, 0) && resident(j, 1);
		if (!s->started)
			return;
		pos = 0; /* and how far it is already */
	}
	for (size_t g = pos + 1, k = 0; g < ngroups(j) && k < SCAN_MAX; g++, k++) {
		if (!resident(j, g * GROUP))
			break;
		s->pos = g;
	}
	s->finished = resident(j, j->n - 1);
}

/* pop_lock held: what a look found, applied. */
static void apply(struct job *j, const struct sighting *s, uint64_t now)
{
	bool moved = s->started || s->pos > j->pos || s->finished;

	if (s->started) {
		j->watching = false;
		j->pos = 0;
		j->lo = j->top = j->hi = reached(j);
	}
	if (s->pos > j->pos) {
		credit(j, j->pos, s->pos);
		j->pos = s->pos;
	}
	if (s->finished) { /* the program reached the end: the rest was used */
		credit(j, j->pos, ngroups(j));
		job_over_locked(j, j->n);
		return;
	}
	if (moved) {
		j->progress_ms = now / 1000;
		j->poll_us = POLL_MIN_US;
	} else if (now / 1000 - j->progress_ms > POP_IDLE_MS) {
		/* sparse, elsewhere, or not yet: not ours to guess; what the
		 * program and the workers faulted, it has stopped touching */
		size_t r = j->watching ? 0 : reached(j);
		job_over_locked(j, j->hi > r ? j->hi : r);
		return;
	} else {
		j->poll_us = j->poll_us * 2 < POLL_MAX_US ? j->poll_us * 2 : POLL_MAX_US;
	}
	j->check_at_us = now + j->poll_us;
}

/* ---- memory ----------------------------------------------------------------------- */

static size_t mem_free = SIZE_MAX; /* free under the bounds at the last reading (pop_lock) */
static uint64_t mem_read_ms;       /* when (pop_lock); 0: never */

/* ---- a CPU for the workers (issue 49) ------------------------------------------------
 * A fault-in ahead saves the program time only on a CPU nobody else wanted:
 * where every CPU is busy -- two Dask worker processes on two cores, each
 * with its own populate worker -- it takes another thread's turn, and the
 * faults it saves cost as much as they would have (a merge ran 1.18x
 * slower).  So under populate=auto a worker faults ahead only while the
 * machine's runnable tasks, itself aside (/proc/loadavg's count, read
 * with what is free, averaged over the last BUSY_WEIGHT readings or so: a
 * kernel thread runnable for a moment is no busy machine), are fewer than
 * the CPUs this process may run on; else it stands back (populate_busy
 * counts the times) and the program faults its pages itself, as without
 * workers.  Looks and collapses go on.  A number of workers the user set
 * is theirs: they always work.  An unreadable count is an idle machine. */
#define BUSY_WEIGHT 8
#define BUSY_STALE_MS 100 /* an average older than this starts again */
static bool cpus_busy;        /* at the last reading (pop_lock) */
static uint64_t others_avg;   /* runnable tasks but the reader, x 256 (pop_lock) */

/* The machine's runnable tasks but the caller's thread, -1 if unknown. */
static long read_others(void)
{
	char buf[128];
	if ((int)hp_knob(KNOB_POPULATE) != HP_POPULATE_AUTO || prim_proc_read("loadavg", buf, sizeof(buf)) < 0)
		return -1;
	const char *p = buf;
	for (int field = 0; field < 3 && p; field++) /* "0.52 0.58 0.59 3/512 12345" */
		if ((p = strchr(p, ' ')))
			p++;
	long runnable = p ? strtol(p, NULL, 10) : 0;
	return runnable > 0 ? runnable - 1 : 0;
}

/* pop_lock held: a reading of the runnable tasks, at now, folded into the
 * average (which starts again from it after BUSY_STALE_MS without one:
 * readings long ago say nothing of now); whether every CPU is busy by it. */
static bool busy_by(long others, uint64_t now)
{
	static uint64_t read_ms; /* the last reading that counted */
	if (others < 0)
		return false;
	if (!read_ms || now - read_ms > BUSY_STALE_MS)
		others_avg = (uint64_t)others * 256;
	read_ms = now;
	/* (rounded up: an average that settles at the CPUs' count from below
	 * reaches it) */
	others_avg = (others_avg * (BUSY_WEIGHT - 1) + (uint64_t)others * 256 + BUSY_WEIGHT - 1) / BUSY_WEIGHT;
	return others_avg + 32 >= (uint64_t)allowed_cpus() * 256;
}

/* pop_lock held: some job is past watching (a reading can matter). */
static bool populating(void)
{
	for (int i = 0; i < MAX_JOBS; i++)
		if (jobs[i].used && !jobs[i].dead && (!jobs[i].watching || jobs[i].collapsing))
			return true;
	return false;
}

/* pop_lock held on entry and exit, dropped for a reading older than
 * FREE_FRESH_MS while some job populates. */
static void refresh_free(void)
{
	uint64_t now = hp_now_ms();
	if ((mem_read_ms && now - mem_read_ms < FREE_FRESH_MS) || forking || !populating())
		return;
	mem_read_ms = now;
	pthread_mutex_unlock(&pop_lock);
	size_t free = memcg_room(FREE_FRESH_MS); /* files are read: no lock held */
	long others = read_others();
	pthread_mutex_lock(&pop_lock);
	mem_free = free;
	bool busy = busy_by(others, now);
	if (busy && !cpus_busy)
		stat_add(HP_STAT_POPULATE_BUSY, 1);
	cpus_busy = busy;
}

/* pop_lock held: whether a memory bound held at the last reading. */
static bool bound_held(void)
{
	return mem_free != SIZE_MAX;
}

/* pop_lock held: the bytes a collapse may charge for a moment under the
 * bounds: POP_HEADROOM_PCT of what is free (SIZE_MAX: no bound). */
static size_t room_left(void)
{
	return bound_held() ? mem_free / 100 * POP_HEADROOM_PCT : SIZE_MAX;
}


/* ---- the workers ------------------------------------------------------------------ */

enum { NOTHING, FAULT, LOOK, COLLAPSE };
#define ADVISE_STEP SIZE_MAX /* a collapse step that gives the block its advice back */

/* pop_lock held: a collapsing job's next step, if it has one now; a job
 * whose steps are over, or for which the memory bound leaves no room for
 * a collapse's fresh huge page (charged while the 4 KiB pages it copies
 * still are), ends -- khugepaged may collapse the rest, as it would
 * without workers. */
static bool collapse_step(struct job *j, size_t *chunk, size_t room, uint64_t now, uint64_t *soonest)
{
	if (!j->collapsing || j->collapse_busy)
		return false;
	if (now < j->again_at_us) {
		if (j->again_at_us < *soonest)
			*soonest = j->again_at_us;
		return false;
	}
	if (!j->advised) {
		*chunk = ADVISE_STEP;
		return true;
	}
	if (j->cnext >= j->cend || room < j->chunk) {
		job_end_locked(j);
		return false;
	}
	*chunk = j->cnext++;
	return true;
}

/* pop_lock held: work for a worker, or how long (µs) until there may be.
 * Faulting ahead of a program first, then looking where it is; a collapse
 * behind it only when neither waits. */
static int pick(struct job **out, size_t *chunk, uint64_t *wait_us)
{
	uint64_t now = now_us(), soonest = UINT64_MAX;
	bool behind = false;

	*wait_us = 0;
	if (forking)
		return NOTHING; /* until populate_fork's parent phase wakes us */
	bool hold = bound_held() || cpus_busy;
	for (int i = 0; i < MAX_JOBS; i++) {
		struct job *j = &jobs[i];
		if (!j->used || j->dead)
			continue;
		if (j->collapsing) {
			behind = true;
			continue;
		}
		if (!hold && claim(j, chunk)) {
			*out = j;
			return FAULT;
		}
		if (j->checking)
			continue;
		if (j->check_at_us <= now) {
			*out = j;
			return LOOK;
		}
		if (j->check_at_us < soonest)
			soonest = j->check_at_us;
	}
	size_t room = behind ? room_left() : 0;
	for (int i = 0; behind && i < MAX_JOBS; i++) {
		struct job *j = &jobs[i];
		if (j->used && !j->dead && collapse_step(j, chunk, room, now, &soonest)) {
			*out = j;
			return COLLAPSE;
		}
	}
	*wait_us = soonest == UINT64_MAX ? 0 : soonest - now;
	return NOTHING;
}

static void timed_wait(uint64_t wait_us)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + wait_us * 1000;
	ts.tv_sec += (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	pthread_cond_timedwait(&work_cond, &pop_lock, &ts);
}

/* Unlocked, the job pinned: the placement the program's own faults would
 * have (numa.c), which this worker takes on when its job changes.  */
static int follow(struct job *j, unsigned gen, unsigned *last_gen)
{
	if (gen == *last_gen)
		return 0;
	if (numa_home_follow(&j->origin) < 0)
		return EXDEV; /* cannot fault where the program would: leave it */
	*last_gen = gen;
	return 0;
}

/* Unlocked, the job pinned: one chunk faulted in -- as a huge page for
 * the auto probe's 2 MiB measurement (probe), which gives the chunk its
 * own advice.  0, or an errno. */
static int fault_in(struct job *j, size_t c, bool probe, unsigned gen, unsigned *last_gen, uint64_t *ns)
{
	int err = follow(j, gen, last_gen);
	if (err)
		return err;
	if (resident(j, c))
		return EEXIST; /* the program is there already */
	char *at = j->addr + c * j->chunk;
	if (probe)
		prim_advise(at, j->chunk, MADV_HUGEPAGE);
	/* the worker's CPU time, not the wall clock: on a busy machine a worker
	 * waiting for a CPU saves the program nothing (and a VM's host backing
	 * a cold page stalls the vCPU: counted) */
	uint64_t t0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
	int rc = prim_advise(at, j->chunk, MADV_POPULATE_WRITE);
	*ns = (clock_us(CLOCK_THREAD_CPUTIME_ID) - t0) * 1000;
	return rc < 0 ? errno : 0;
}

/* Unlocked, the job pinned: auto's next phase after a 2 MiB sample of ns
 * against the block's 4 KiB chunks so far (mean_4k), in phase with run
 * samples in a row already pointing away; from: the first chunk no worker
 * claimed yet.  The block's advice changes here: the phase stays if it
 * cannot. */
static int judge(struct job *j, int phase, int run, uint64_t mean_4k, uint64_t ns, size_t from, bool *away)
{
	bool dear = ns > mean_4k;
	*away = phase == SAMPLING ? true : dear;
	if (phase == SAMPLING && dear)
		return SMALL;
	if (!*away || run + 1 < RUN)
		return phase;
	int to = phase == SAMPLING ? HUGE : SMALL;
	hp_log(2, "populate %p: a 2 MiB fault %llu us, 2 MiB of 4 KiB faults %llu us: %s from chunk %zu",
	       (void *)j->addr, (unsigned long long)(ns / 1000), (unsigned long long)(mean_4k / 1000),
	       to == HUGE ? "huge pages" : "4 KiB pages", to == HUGE ? (size_t)0 : from);
	if (to == HUGE)
		return prim_advise(j->addr, j->len, MADV_HUGEPAGE) == 0 ? HUGE : phase;
	size_t off = from * j->chunk;
	return off >= j->len || prim_advise(j->addr + off, j->len - off, MADV_NOHUGEPAGE) == 0 ? SMALL : phase;
}

/* pop_lock held: auto's verdict turned HUGE after sample chunk c, its
 * advice given back to the whole block: the chunks faulted before it, the
 * program's (at most a group beyond the sentinel it was seen at) and the
 * workers', may be on 4 KiB pages; everything after faults on huge ones. */
static size_t base_upto(const struct job *j, size_t c)
{
	size_t upto = (j->pos + 2) * GROUP;
	if (upto < j->hi)
		upto = j->hi;
	if (upto < c + 1)
		upto = c + 1;
	return upto < j->n ? upto : j->n;
}

/* pop_lock held: a fault-in done (err 0) or failed; sample: whether it was
 * a 2 MiB sample, and then the phase judge() found and whether it pointed
 * away from the one the job is in; from: the first chunk no worker had
 * claimed as it began (where a block on huge pages goes on at 4 KiB). */
static void fault_done(struct job *j, size_t c, int err, uint64_t ns, bool sample, int phase, bool away,
		       size_t from)
{
	size_t g = c / GROUP;

	bool huge = sample || !j->small || j->advised;
	if (err == 0 && j->thp)
		figure(huge ? FIG_HUGE : FIG_SMALL, ns);
	if (sample) { /* (one that failed: the next one samples again) */
		j->sampling = false;
		if (err == 0 && phase != j->phase) {
			j->run = 0;
			if (phase == SMALL && j->base_from > from)
				j->base_from = j->cnext = from; /* a block started on huge pages */
			j->phase = phase;
			j->advised = phase == HUGE;
			j->base_end = phase == HUGE ? base_upto(j, c) * j->chunk : j->len;
			if (phase == SMALL)
				stat_add(HP_STAT_POPULATE_SMALL_FIRST, 1);
		} else if (err == 0) {
			j->run = away ? j->run + 1 : 0;
		}
	} else if (err == 0 && !huge) {
		j->base_ns += ns;
		j->base_n++;
	}
	if (err == 0) {
		stat_add(HP_STAT_POPULATE_AHEAD_BYTES, j->chunk);
		if (g < j->pos)
			stat_add(HP_STAT_POPULATE_SAVED_US, ns / 1000); /* already passed */
		else
			j->group_ns[g % RING] += ns;
		return;
	}
	if (err == EEXIST)
		return;
	if (err == EINVAL)
		atomic_store(&unsupported, true);
	/* ENOMEM (a memory limit), EINVAL: the program faults the rest, the
	 * advice back; what it faulted at 4 KiB so far is collapsed */
	if (!j->dead)
		job_over_locked(j, reached(j) + GROUP);
}

/* pop_lock held: a worker leaves a job it pinned; the last one out of a
 * dead job frees its slot, and a populate_forget() waiting for it wakes. */
static void unpin(struct job *j)
{
	if (--j->inflight)
		return;
	if (j->dead)
		job_free_locked(j);
	pthread_cond_broadcast(&idle_cond);
}

/* pop_lock held: whether a fault-in of the job is auto's 2 MiB sample. */
static bool sample_now(struct job *j)
{
	if (j->sampling || (j->phase != HUGE && (j->phase != SAMPLING || !j->base_n)))
		return false;
	j->sampling = true;
	return true;
}

/* pop_lock held on entry and exit, not in between. */
static void do_fault(struct job *j, size_t c, unsigned *last_gen)
{
	uint64_t ns = 0;
	unsigned gen = j->gen;
	bool sample = sample_now(j);
	uint64_t mean_4k = j->base_n ? j->base_ns / j->base_n : fig_ns[FIG_SMALL];
	int phase = j->phase, run = j->run;
	size_t from = j->hi;
	bool away = false;

	j->inflight++;
	pthread_mutex_unlock(&pop_lock);
	int err = fault_in(j, c, sample && phase == SAMPLING, gen, last_gen, &ns);
	if (err == EINVAL)
		hp_log(1, "no MADV_POPULATE_WRITE in this kernel: populate is off");
	if (err == 0 && sample)
		phase = judge(j, phase, run, mean_4k, ns, from, &away);
	pthread_mutex_lock(&pop_lock);
	fault_done(j, c, err, ns, sample, phase, away, from);
	unpin(j);
}

/* MADV_COLLAPSE says EAGAIN when a page of the chunk is held a moment by
 * someone else (an unexpected reference, a page lock, a page not yet on the
 * LRU; seen on the chunk a program wrote last): a job's chunks are tried
 * again, this many times in all, so that one such moment does not leave a
 * chunk on 4 KiB pages for good. */
#define COLLAPSE_AGAIN 16
#define AGAIN_STEP_US 10000 /* the n-th try n * 10 ms after the refusal: 1.4 s in all */

/* pop_lock held on entry and exit, not in between: a collapsing job's
 * step -- the block's advice given back, or one chunk collapsed (2 MiB at
 * a time, so the program, a fork or a free waits for one at most). */
static void do_collapse(struct job *j, size_t c, unsigned *last_gen)
{
	unsigned gen = j->gen;
	int err = 0;

	j->inflight++;
	j->collapse_busy = true;
	pthread_mutex_unlock(&pop_lock);
	if (c == ADVISE_STEP)
		err = prim_advise(j->addr, j->len, MADV_HUGEPAGE) < 0 ? errno : 0;
	else if (!(err = follow(j, gen, last_gen)))
		err = prim_advise(j->addr + c * j->chunk, j->chunk, MADV_COLLAPSE) < 0 ? errno : 0;
	if (c != ADVISE_STEP && err == 0)
		stat_add(HP_STAT_POPULATE_COLLAPSED_BYTES, j->chunk);
	pthread_mutex_lock(&pop_lock);
	j->collapse_busy = false;
	if (c == ADVISE_STEP) {
		j->advised = true;
		if (err) /* the block stays on 4 KiB pages (a VMA count limit) */
			j->cend = 0;
	} else if (err == EINVAL && c == j->base_from) {
		/* the first chunk on 4 KiB pages, the program's, resident and
		 * advised: no MADV_COLLAPSE here */
		atomic_store(&no_collapse, true);
		j->cend = 0;
	} else if (err == ENOMEM || err == EBUSY) {
		j->cend = 0; /* no huge page, or no room under the cgroup's limit */
	} else if (err == EAGAIN && j->again < COLLAPSE_AGAIN && j->cnext > c) {
		j->again++; /* a page held a moment by someone else: this chunk again, */
		j->cnext = c; /* a little later each time */
		j->again_at_us = now_us() + (uint64_t)j->again * AGAIN_STEP_US;
	}
	unpin(j);
}

/* pop_lock held on entry and exit, not in between, the job pinned: the
 * program has started on a block to be faulted at 4 KiB first -- its first
 * faults (huge pages) gave the block's VMA its anon_vma, so the advice now
 * splits it into parts that merge again once the advice is given back.  A
 * split before any fault would not (each part its own anon_vma at its first
 * fault): the block would stay two VMAs for good, its chunk there never
 * collapsed -- as NumPy's own madvise, which starts a page into the block,
 * did to a block advised at its mapping.  From the first chunk it has not
 * been seen to reach; refused (a VMA count limit), the block stays on huge
 * pages. */
static void base_from_here(struct job *j)
{
	size_t from = reached(j);
	j->nh_pending = false;
	if (from >= j->n)
		return;
	pthread_mutex_unlock(&pop_lock);
	int rc = prim_advise(j->addr + from * j->chunk, j->len - from * j->chunk, MADV_NOHUGEPAGE);
	if (rc < 0)
		hp_log(1, "populate: no 4 KiB first for %p: %s", (void *)j->addr, strerror(errno));
	pthread_mutex_lock(&pop_lock);
	if (rc < 0 || j->dead)
		return; /* forgotten meanwhile: populate_forget gave the advice back */
	j->base_from = j->cnext = from;
	j->base_end = j->len;
	j->advised = false;
	if (j->phase == FIXED)
		stat_add(HP_STAT_POPULATE_SMALL_FIRST, 1);
}

static void do_look(struct job *j)
{
	struct sighting s;
	size_t pos = j->pos;
	bool watching = j->watching;

	j->inflight++;
	j->checking = true;
	pthread_mutex_unlock(&pop_lock);
	look(j, pos, watching, &s);
	pthread_mutex_lock(&pop_lock);
	j->checking = false;
	if (!j->dead && !j->collapsing)
		apply(j, &s, now_us());
	if (j->nh_pending && !j->watching && !j->dead && !j->collapsing)
		base_from_here(j);
	unpin(j);
	pthread_cond_broadcast(&work_cond); /* the other workers: new chunks maybe */
}

static void *worker_main(void *arg)
{
	int index = (int)(intptr_t)arg;
	unsigned last_gen = 0;

	hp_inside = 1; /* all of this thread is hpalloc's own code */
	pthread_setname_np(pthread_self(), NAME);
	pthread_mutex_lock(&pop_lock);
	for (;;) {
		struct job *j = NULL;
		size_t c = 0;
		uint64_t wait_us = 0;
		refresh_free();
		if (index < wanted_threads() && atomic_load_explicit(&njobs, memory_order_relaxed) &&
		    !forking && probe_due()) {
			uint64_t t0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
			probing = true;
			pthread_mutex_unlock(&pop_lock);
			probe();
			stat_add(HP_STAT_POPULATE_CPU_US, clock_us(CLOCK_THREAD_CPUTIME_ID) - t0);
			pthread_mutex_lock(&pop_lock);
			probing = false;
			pthread_cond_broadcast(&idle_cond);
			continue;
		}
		int what = index < wanted_threads() ? pick(&j, &c, &wait_us) : NOTHING;
		uint64_t t0 = what != NOTHING ? clock_us(CLOCK_THREAD_CPUTIME_ID) : 0;
		if (what == FAULT)
			do_fault(j, c, &last_gen);
		else if (what == COLLAPSE)
			do_collapse(j, c, &last_gen);
		else if (what == LOOK)
			do_look(j);
		if (what != NOTHING)
			stat_add(HP_STAT_POPULATE_CPU_US, clock_us(CLOCK_THREAD_CPUTIME_ID) - t0);
		else if (wait_us)
			timed_wait(wait_us);
		else
			pthread_cond_wait(&work_cond, &pop_lock);
	}
	return NULL;
}

/* pop_lock held: up to want workers; false if there are none.  Like the
 * janitor's start: hp_inside around pthread_create (its mallocs are libc's
 * under the preload library), every signal blocked in the new thread. */
static bool workers_up(int want)
{
	while (started < want && !create_failed) {
		pthread_attr_t attr;
		pthread_t thread;
		sigset_t all, old;

		hp_inside++;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 128 * 1024);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		int rc = pthread_create(&thread, &attr, worker_main, (void *)(intptr_t)started);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
		hp_inside--;
		if (rc != 0) {
			create_failed = true;
			hp_log(1, "no populate worker (%s): %d running", strerror(rc), started);
			break;
		}
		started++;
		stat_add(HP_STAT_POPULATE_THREADS, 1);
	}
	return started > 0;
}

/* ---- the heap's calls ------------------------------------------------------------ */

/* pop_lock held: how a fresh block starts (its phase), and whether it may
 * ever be on 4 KiB pages (true: its job collapses them) -- where
 * populate_pages says so, for a THP block, and a kernel that collapses. */
static bool base_first(const struct hp_map *m, int *phase)
{
	int pages = (int)hp_knob(KNOB_POPULATE_PAGES);
	*phase = FIXED;
	if (m->backend != HP_BACKEND_THP || pages == POP_PAGES_2M ||
	    atomic_load_explicit(&no_collapse, memory_order_relaxed))
		return false;
	if (pages == POP_PAGES_AUTO)
		*phase = SAMPLING;
	else if (pages == POP_PAGES_MEASURED)
		*phase = measured_start(fig_ns);
	return true;
}

void populate_fresh(const struct hp_map *m)
{
	HP_ERRNO_SAVE; /* mincore, pthread_create, clock_gettime, madvise */
	int want = wanted_threads(), phase;
	size_t chunk = m->kernel_page_size > HP_THP_SIZE ? m->kernel_page_size : HP_THP_SIZE;

	if (!want || m->len < POP_MIN_BLOCK || m->len / chunk < 2 * GROUP ||
	    atomic_load_explicit(&unsupported, memory_order_relaxed) || memcg_bounded())
		return;
	if (prim_resident(m->addr) != 0) {
		HP_ERRNO_RESTORE;
		return; /* faulted in already (a bind on hugetlb pages: numa.c) */
	}
	if (m->backend == HP_BACKEND_THP && (int)hp_knob(KNOB_POPULATE_PAGES) == POP_PAGES_MEASURED)
		probe_first();
	struct numa_home origin;
	numa_home_capture(m->numa, &origin);
	pthread_mutex_lock(&pop_lock);
	struct job *j = NULL;
	for (int i = 0; i < MAX_JOBS && !j; i++)
		if (!jobs[i].used)
			j = &jobs[i];
	if (j && workers_up(want)) {
		uint64_t now = now_us();
		if (++job_gen == 0) /* 0 is a worker's "no job yet" */
			job_gen = 1;
		bool small = base_first(m, &phase), four_k = small && phase != HUGE;
		*j = (struct job){.used = true, .watching = true, .addr = m->addr, .len = m->len,
				  .chunk = chunk, .n = m->len / chunk, .progress_ms = now / 1000,
				  .check_at_us = now + POLL_MIN_US, .poll_us = POLL_MIN_US,
				  .gen = job_gen, .origin = origin, .thp = m->backend == HP_BACKEND_THP,
				  .small = small, .nh_pending = four_k, .base_from = m->len / chunk,
				  .advised = true, .phase = phase};
		atomic_fetch_add_explicit(&njobs, 1, memory_order_relaxed);
		pthread_cond_broadcast(&work_cond);
	}
	pthread_mutex_unlock(&pop_lock);
	HP_ERRNO_RESTORE;
}

void populate_forget(const void *addr, size_t *base_off, size_t *base_len)
{
	bool advise = false;
	size_t len = 0, from = 0, to = 0;

	if (base_off)
		*base_off = *base_len = 0;
	if (likely(!atomic_load_explicit(&njobs, memory_order_relaxed)))
		return;
	HP_ERRNO_SAVE; /* madvise */
	pthread_mutex_lock(&pop_lock);
	for (int i = 0; i < MAX_JOBS; i++) {
		struct job *j = &jobs[i];
		if (!j->used || j->addr != addr)
			continue;
		len = j->len;
		/* a block faulted at 4 KiB first leaves with its advice back
		 * (again, if its worker gave it): the cache, a resize or a join of
		 * pieces needs the VMA a THP block has */
		advise = j->small;
		/* may still be on 4 KiB pages: what no collapse step has reached
		 * (one in flight ends before this returns; the slot may then
		 * serve another block: read now) */
		from = (j->cnext > j->base_from ? j->cnext : j->base_from) * j->chunk;
		to = j->small ? j->base_end : 0;
		unsigned gen = j->gen;
		j->dead = true;
		/* a chunk's fault-in or collapse, or a mincore: milliseconds.  The
		 * last worker out frees the slot, which may then serve another block. */
		while (j->used && j->gen == gen && j->inflight)
			pthread_cond_wait(&idle_cond, &pop_lock);
		if (j->used && j->gen == gen)
			job_free_locked(j);
		break;
	}
	pthread_mutex_unlock(&pop_lock);
	if (advise)
		prim_advise((void *)addr, len, MADV_HUGEPAGE);
	if (base_off && to > from) {
		*base_off = from;
		*base_len = to - from;
	}
	HP_ERRNO_RESTORE;
}

/* pop_lock held: any worker inside a job (a look or a fault-in) or a
 * probe (whose mapping a child would inherit)? */
static bool workers_inside(void)
{
	if (probing)
		return true;
	for (int i = 0; i < MAX_JOBS; i++)
		if (jobs[i].used && jobs[i].inflight)
			return true;
	return false;
}

/* Prepare: no worker inside a job across the fork (the first comment says
 * why), none starts one until the parent phase.  The child has no
 * workers: its jobs go (their blocks stay live, as the program's), and
 * its first fresh block starts workers of its own. */
void populate_fork(int phase)
{
	if (phase == FORK_PARENT) {
		forking = false;
		pthread_cond_broadcast(&work_cond);
	}
	fork_mutex(&pop_lock, phase);
	if (phase == FORK_PREPARE) {
		HP_NOCANCEL_BEGIN; /* fork is no cancellation point */
		forking = true;
		while (workers_inside())
			pthread_cond_wait(&idle_cond, &pop_lock);
		HP_NOCANCEL_END;
	}
	if (phase != FORK_CHILD)
		return;
	forking = false;
	pthread_cond_init(&work_cond, NULL);
	pthread_cond_init(&idle_cond, NULL);
	/* the child's copies of blocks on 4 KiB pages first: nobody collapses
	 * them here, so their later faults at least are on huge pages */
	HP_ERRNO_SAVE;
	for (int i = 0; i < MAX_JOBS; i++)
		if (jobs[i].used && jobs[i].small)
			prim_advise(jobs[i].addr, jobs[i].len, MADV_HUGEPAGE);
	HP_ERRNO_RESTORE;
	memset(jobs, 0, sizeof(jobs));
	mem_free = SIZE_MAX;
	mem_read_ms = 0;
	cpus_busy = false;
	others_avg = 0;
	probing = false;
	atomic_store(&njobs, 0);
	started = 0;
	create_failed = false;
	atomic_store(&hp_counters[HP_STAT_POPULATE_THREADS], 0);
}
