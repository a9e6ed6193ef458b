"""bench/numpy_bench.py's report: results.md (headline, verdicts,
instructions, targets, a table per workload), results.png, and the tables
printed at the end of a run."""

import os

from numpy_bench_cast import (CGROUP_WORKLOADS, CONTROL_ONLY, WORKLOADS, GiB, config_name, say,
                              wanted)
from numpy_bench_summary import (SUMMARY_ROWS, behind_numpy_row, best_of,
                                 fmt_bytes, fmt_count, fmt_gap, fmt_value, hpalloc_cache_max,
                                 label_of, peers, row_title, summarize, target_rows, value_of,
                                 verdict_rows)
from bench_machine import in_venv
from bench_stats import NOT_SLOWER, VERDICT_MIN_N, fmt_verdict


def notes_for(name, s):
    info, notes = s.get("info", {}), []
    stats = info.get("stats") or {}
    if info.get("big_array"):
        notes.append("gathered array on " + info["big_array"])
    elif info.get("probe_backend"):
        notes.append("64 MiB array on %s (%s huge)" % (info["probe_backend"],
                                                       fmt_bytes(info.get("probe_huge_bytes"))))
    if stats.get("fallbacks"):
        notes.append("%s hugetlb fallbacks" % fmt_count(stats["fallbacks"]))
    if stats.get("cache_hits"):
        notes.append("cache hits %s" % fmt_count(stats["cache_hits"]))
    if stats.get("memcg_released_bytes"):
        notes.append("given back for the cgroup %s" % fmt_bytes(stats["memcg_released_bytes"]))
    if s.get("pool_given"):
        notes.append("hugetlb used: %s; pool pages the kernel gave: %s" % (
            fmt_bytes(info.get("hugetlb_peak_bytes", 0)),
            ", ".join("%s %s" % (lo if lo == hi else "%d–%d" % (lo, hi), z)
                      for z, (lo, hi) in sorted(s["pool_given"].items()))))
    if s.get("says"):
        notes.append("it says: " + " / ".join("“%s”" % line for line in s["says"]))
    if info.get("ballast"):
        notes.append("ballast " + info["ballast"])
    if s.get("errors"):
        notes.append("%d failed runs: %s" % (len(s["errors"]), s["errors"][0]))
    return "; ".join(notes)


def cgroup_cells(s):
    """The columns of a row run in a memory cgroup: OOM kills, its peak, how
    often its charge hit the limit (the kernel reclaimed or failed)."""
    return ["%d of %d" % (s["kills"], s["runs"]),
            "%s (max %s)" % (fmt_bytes(s["cgroup_peak"]), fmt_bytes(s["cgroup_peak_max"])),
            fmt_count(s["limit_hits"])]


def workload_table(w, title, unit, summary, contenders):
    rows = summary.get(w, {})
    base = rows.get("numpy", {}).get("median")
    extra_cols = []
    if w.startswith("temp"):
        extra_cols = [("ratio_same_footprint", "÷ in-place, same cache footprint"),
                      ("us_per_op", "µs per `a + b`")]
    if w == "zeros1G":
        extra_cols = [("first_s", "first call (warm) s"), ("first_faults", "first call faults"),
                      ("_gap", "started s after the last process ended")]
    if w == "zeros1G-cold":
        extra_cols = [("huge_now_mib", "on huge pages right after, MiB"),
                      ("huge_later_mib", "… up to 8 s later (once 90 %), MiB"),
                      ("huge_wait_s", "… after s"),
                      ("_gap", "started s after the last process ended")]
    if w == "sparse8G":
        extra_cols = [("anon_huge_mib", "of it AnonHugePages MiB"), ("s", "touch s")]
    if w == "allocpath":
        extra_cols = [("small_ns", "`np.empty(16)` ns")]
    if w == "pressure":
        extra_cols = [("kept_after_free_bytes", "RSS kept after `del a`")]
    cg_cols = ["OOM-killed", "cgroup peak", "limit hits"] if w in CGROUP_WORKLOADS else []
    head = ["contender", "median (%s)" % unit, "min–max", "÷ NumPy default",
            "minor faults", "peak RSS+hugetlb"] + cg_cols + [t for _, t in extra_cols] + ["notes"]
    out = ["### %s" % title, "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
    for c in contenders:
        s = rows.get(c.name)
        if c.skip_reason:
            if wanted(w, c):
                out.append("| %s | skipped: %s |" % (c.label, c.skip_reason) + " |" * (len(head) - 2))
            continue
        if s is None:
            continue
        if "median" not in s:
            if cg_cols:  # every process killed: the kills and the peak are the result
                cells = [c.label, "failed: %s" % s["errors"][0], "", "", "", ""] + cgroup_cells(s)
                out.append("| " + " | ".join(cells) + " |" * (len(head) - len(cells)) + " |")
            else:
                out.append("| %s | failed: %s |" % (c.label, s["errors"][0]) + " |" * (len(head) - 2))
            continue
        ratio = "%.2f" % (s["median"] / base) if base else "–"
        label = label_of(c, summary) + (" (%s)" % config_name(c, w) if c.per_workload else "")
        cells = [label, fmt_value(s["median"], unit),
                 "%s–%s" % (fmt_value(s["min"], unit), fmt_value(s["max"], unit)), ratio,
                 fmt_count(s["faults"]), fmt_bytes(s["peak"])]
        if cg_cols:
            cells += cgroup_cells(s)
        for key, _ in extra_cols:
            if key == "_gap":
                cells.append(fmt_gap(s.get("gap")))
                continue
            v = s["extra"].get(key)
            cells.append(fmt_count(v) if "faults" in key else fmt_bytes(v) if key.endswith("_bytes") else
                         fmt_value(v, "MiB" if key.endswith("_mib") else
                                   {"small_ns": "ns", "ratio_same_footprint": "×"}.get(key, "s")))
        cells.append(notes_for(c.name, s))
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


# The headline's columns: (contender, header); then hpalloc's best and the
# best hpalloc ÷ the best peer.
HEADLINE = (("numpy", "NumPy default"), ("tcmalloc", "tcmalloc"), ("jemalloc", "jemalloc"),
            ("mimalloc", "mimalloc"), ("glibc-thp", "glibc hugetlb=1"),
            ("torch-thp", "PyTorch THP"), ("glibc-hugetlb", "glibc hugetlb=2 (pool)"),
            ("libhugetlbfs", "libhugetlbfs"), ("hp-run", "hpalloc, default knobs"),
            ("hp-2M", "hpalloc hugetlb 2 MiB (pool)"), ("hp-1G", "hpalloc hugetlb 1 GiB (pool)"))


def summary_cell(summary, w, name, key, unit):
    """A contender's cell of the headline table."""
    s = summary.get(w, {}).get(name)
    if key == "cgroup" and s and s.get("runs"):
        return "%s (%d of %d)" % (fmt_bytes(s["cgroup_peak"]), s["kills"], s["runs"])
    if s and s.get("kills") and "median" not in s:
        return "OOM-killed (%d of %d)" % (s["kills"], s["runs"])
    v = value_of(summary, w, name, key)
    return fmt_value(v, unit) if v is not None else None


def summary_table(summary, contenders):
    """One row per workload, one column per allocator: the table the README
    shows.  hpalloc's best is the best of every hpalloc configuration that
    ran the workload, named; the last column compares it with the best
    peer."""
    units = {w: u for w, _, _, u in WORKLOADS}
    by_name = {c.name: c for c in contenders}
    hp_names = [c.name for c in contenders if c.hpalloc and not c.name.endswith("ctl")]
    columns = [(n, h) for n, h in HEADLINE if n in by_name]  # those of this run
    head = (["workload"] + [h for _, h in columns]
            + ["hpalloc, best", "best hpalloc ÷ best peer"])
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for w, key, title in SUMMARY_ROWS:
        if w not in summary:
            continue
        unit = units[w]
        cells = [row_title(summary, w, key, title)]
        for name, _ in columns:
            c = by_name.get(name)
            cell = summary_cell(summary, w, name, key, unit)
            cells.append(cell if cell is not None else
                         "–" if not wanted(w, c) else  # e.g. a switch for other programs
                         "skipped" if c.skip_reason else "failed")
        hp_best, hp_name = best_of(summary, w, hp_names, key)
        peer, peer_name = best_of(summary, w, peers(summary), key)
        cells.append("%s (%s)" % (summary_cell(summary, w, hp_name, key, unit),
                                  config_name(by_name[hp_name], w))
                     if hp_best is not None else "–")
        cells.append("%.2f (%s)" % (hp_best / peer, by_name[peer_name].label)
                     if hp_best is not None and peer and unit != "MiB" else "–")
        out.append("| " + " | ".join(cells) + " |")
    return out


def verdict_table(summary, contenders):
    head = ["row", "hpalloc, default knobs: median (processes)", "÷ NumPy default [95 % CI]",
            "verdict", "best peer", "÷ best peer [95 % CI]", "verdict",
            "hpalloc's best configuration", "÷ best peer [95 % CI]", "verdict",
            "minor faults: hpalloc / NumPy / best peer"]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for r in verdict_rows(summary, contenders):
        cells = ([r["title"], r["hp"]] + fmt_verdict(r["vs_numpy"]) + [r["peer"]]
                 + fmt_verdict(r["vs_peer"]) + [r["best"]] + fmt_verdict(r["best_vs_peer"])
                 + [r["faults"]])
        out.append("| " + " | ".join(cells) + " |")
    return out


# ---- instructions of the allocation path ---------------------------------------------------

def callgrind_table(counts, summary, contenders):
    """Instructions per pair beside the allocpath workload's times."""
    if not counts:
        return []
    if "_error" in counts:
        return ["Not counted: %s." % counts["_error"], ""]
    base = counts.get("numpy", {})
    head = ["contender", "`np.empty(16)` + free: instructions", "÷ NumPy default", "time ns",
            "cached `np.empty(64 MiB)` + free: instructions", "÷ NumPy default", "time ns"]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for c in contenders:
        n = counts.get(c.name)
        if n is None:
            continue
        if "error" in n:
            out.append("| %s | failed: %s |" % (c.label, n["error"]) + " |" * (len(head) - 2))
            continue
        cells = [c.label]
        # allocpath's times: large_ns is its primary metric, small_ns an extra one
        for which, time_key in (("small", "small_ns"), ("large", None)):
            v, b = n[which + "_ir"], base.get(which + "_ir")
            ns = value_of(summary, "allocpath", c.name, time_key)
            cells += [fmt_count(v), "%.2f" % (v / b) if b else "–",
                      fmt_value(ns, "ns") if ns is not None else "–"]
        out.append("| " + " | ".join(cells) + " |")
    pairs = next((n["pairs"] for n in counts.values() if "pairs" in n), 0)
    return out + ["", "(%s pairs per process after %d of warm-up, PYTHONHASHSEED=0; the main "
                  "thread's user-space instructions only)" % (fmt_count(pairs), 200), ""]


# ---- writing the report ------------------------------------------------------------------------


def write_markdown(path, opts, machine_info, notes, summary, contenders, cache_max, elapsed,
                   callgrind=None):
    L = ["# hpalloc NumPy benchmark%s" % (" (quick mode: not representative)" if opts.quick else ""),
         "",
         "Written by `make bench` (bench/numpy_bench.py); method in docs/benchmarks.md.",
         "",
         "**Machine:** %(cpu)s, %(cores)s cores, %(memory)s, kernel %(kernel)s, "
         "THP `%(thp)s` (defrag `%(thp_defrag)s`), NumPy %(numpy)s, Python %(python)s; "
         "%(date)s, load at start %(load)s." % machine_info,
         "",
         "**Python stack:** %s." % machine_info.get("stack", "not recorded"),
         "",
         "**Run:** %d rounds × each workload in its own process per contender, contenders "
         "interleaved (order reversed every other round); per process %d warm-up and %d+ "
         "measured repetitions (applications: %d and %d); median and min–max over the "
         "processes' medians; gather on %d GiB; application data × %g; %.0f s in all."
         % (opts.rounds, opts.warmup, opts.reps, opts.app_warmup, opts.app_reps,
            opts.gather_bytes // GiB, opts.scale, elapsed),
         ""]
    L += ["- " + n for n in notes] + [""]
    L += ["## Summary (medians)", "", "<!-- summary start -->"]
    L += summary_table(summary, contenders)
    L += ["<!-- summary end -->", ""]
    L += ["## Verdicts: 95 % bootstrap intervals of the ratio of medians", "",
          "hpalloc's median ÷ the other's over their processes (below 1: hpalloc faster); "
          "**ahead** or **behind** only when the interval excludes 1, else level; "
          "\"not slower\" only when its upper end is ≤ %.2f; no verdict from fewer than %d "
          "processes a side. The best peer and hpalloc's best configuration are picked by "
          "median, so their interval is a little optimistic for the pick." % (NOT_SLOWER,
                                                                               VERDICT_MIN_N),
          ""]
    L += verdict_table(summary, contenders) + [""]
    if callgrind:
        L += ["## Instructions of the allocation path (`valgrind --tool=callgrind`)", "",
              "Per `np.empty` + free, main thread, beside the times of the allocpath workload "
              "(docs/benchmarks.md):", ""]
        L += callgrind_table(callgrind, summary, contenders)
    L += ["## Targets (issues 6, 17, 25 and 35): hpalloc's best configuration; peak memory: "
          "its worst", "",
          "| target | limit | hpalloc | configuration | |", "|---|---|---|---|---|"]
    L += ["| " + " | ".join(r) + " |" for r in target_rows(summary, cache_max)
          + [behind_numpy_row(summary, contenders)]]
    L += ["", "## Workloads", ""]
    for w, title, _, unit in WORKLOADS:
        if w in summary:
            L += workload_table(w, title, unit, summary, contenders)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def write_chart(path, summary, contenders):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ("no chart: matplotlib is not installed (%s)"
                % ("pip install matplotlib" if in_venv() else "apt-get install python3-matplotlib"))
    shown = [(w, t, u) for w, t, _, u in WORKLOADS if w in summary and w not in CONTROL_ONLY]
    cols = 3
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(16, 3.6 * rows))
    for ax, (w, title, unit) in zip(axes.flat, shown):
        names = [c for c in contenders if c.name in summary[w] and "median" in summary[w][c.name]]
        med = [summary[w][c.name]["median"] for c in names]
        lo = [m - summary[w][c.name]["min"] for m, c in zip(med, names)]
        hi = [summary[w][c.name]["max"] - m for m, c in zip(med, names)]
        colors = ["tab:orange" if c.hpalloc else "tab:gray" if c.name.startswith("numpy")
                  else "tab:blue" for c in names]
        y = range(len(names))
        ax.barh(list(y), med, xerr=[lo, hi], color=colors, capsize=2)
        ax.set_yticks(list(y))
        ax.set_yticklabels([c.name for c in names], fontsize=8)
        ax.invert_yaxis()
        killed = ["%s %d/%d" % (c.name, summary[w][c.name]["kills"], summary[w][c.name]["runs"])
                  for c in contenders if summary[w].get(c.name, {}).get("kills")]
        ax.set_title(title.replace("`", "") + ("\nOOM-killed: " + ", ".join(killed) if killed else ""),
                     fontsize=9)
        ax.set_xlabel(unit + " (lower is better)", fontsize=8)
        if w.startswith("temp"):
            ax.axvline(1.0, color="black", lw=0.8, ls=":")
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.suptitle("hpalloc (orange) vs NumPy default (gray) and peers (blue): "
                 "median, whiskers min–max", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # room for the title
    fig.savefig(path, dpi=90)
    return None


def report(opts, info, notes, results, contenders, elapsed, callgrind=None):
    summary = summarize(results)
    os.makedirs(opts.out, exist_ok=True)
    cache_max = hpalloc_cache_max(summary)
    md = os.path.join(opts.out, "results.md")
    png = os.path.join(opts.out, "results.png")
    no_chart = write_chart(png, summary, contenders)
    if no_chart:
        notes = notes + [no_chart]
        say(no_chart)
    write_markdown(md, opts, info, notes, summary, contenders, cache_max, elapsed, callgrind)
    print("\n".join(summary_table(summary, contenders)))
    print()
    print("\n".join(verdict_table(summary, contenders)))
    if callgrind:
        print()
        print("\n".join(callgrind_table(callgrind, summary, contenders)))
    say("wrote %s%s (%.0f s)" % (md, "" if no_chart else " and " + png, elapsed))
