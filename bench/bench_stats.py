"""The benches' verdicts (issue 35; bench/numpy_bench.py, bench/dask_bench.py):
intervals, not medians of noise.  Pure functions of the values given, no
state, no threads.

A row's verdict for hpalloc against another contender: the ratio of the
medians over their processes (hpalloc's ÷ the other's: below 1 is
faster), with a 95 % percentile bootstrap interval (both sides resampled
with replacement, VERDICT_RESAMPLES times, a fixed seed: the same run
gives the same report).  "ahead" or "behind" only when the interval
excludes 1, else "level"; "not slower" only when its upper end is at most
NOT_SLOWER.  No verdict from fewer than VERDICT_MIN_N processes a side.
"""

import random
import statistics

VERDICT_MIN_N = 10
VERDICT_RESAMPLES = 4000
NOT_SLOWER = 1.02


def bootstrap_ratio(a, b, resamples=VERDICT_RESAMPLES, seed=35):
    """(median(a) / median(b), 2.5th and 97.5th percentiles of that ratio
    over resamples of a and b)."""
    rng = random.Random(seed)
    med = statistics.median
    ratios = sorted(med(rng.choices(a, k=len(a))) / med(rng.choices(b, k=len(b)))
                    for _ in range(resamples))
    return med(a) / med(b), ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def verdict(a, b, min_n=VERDICT_MIN_N):
    """hpalloc's per-process values a against another contender's b:
    {"ratio", "lo", "hi", "word", "not_slower", "n"}; "word" is None (and
    "why" says why) when there are too few processes for a verdict."""
    if not a or not b or min(b) <= 0:
        return None
    ratio, lo, hi = bootstrap_ratio(a, b)
    v = {"ratio": ratio, "lo": lo, "hi": hi, "n": (len(a), len(b)), "word": None,
         "not_slower": None}
    if min(len(a), len(b)) < min_n:
        v["why"] = "%d and %d processes: a verdict needs %d each" % (len(a), len(b), min_n)
        return v
    v["word"] = "ahead" if hi < 1 else "behind" if lo > 1 else "level"
    v["not_slower"] = hi <= NOT_SLOWER
    return v


def fmt_verdict(v):
    """'0.74 [0.70–0.79]' and the verdict, as two cells."""
    if v is None:
        return ["–", "–"]
    ci = "%.2f [%.2f–%.2f]" % (v["ratio"], v["lo"], v["hi"])
    if v["word"] is None:
        return [ci, "no verdict (%s)" % v["why"]]
    word = v["word"] + (", not slower" if v["word"] == "level" and v["not_slower"] else "")
    return [ci, "**%s**" % word if v["word"] != "level" else word]
