"""The statistics of a comparison of arms over seeds: each arm's relative improvement over a baseline with
its 95 % t interval and p (paired by seed where both arms ran the same seeds, else Welch), and Holm's
adjustment of the p of several arms compared with one baseline. A run here is anything with .seed and
.evals ({step: {"val_loss": ...}}): compare.Run."""

import math
import statistics

# A spread this small relative to the loss is float rounding (3.10 - 3.05 and 3.00 - 2.95 differ in the
# 16th digit), not seed-to-seed variation: no t-test on it, which would report p ~ 1e-30.
ROUNDING = 1e-12


def paired(arm_runs, base_runs) -> bool:
    """Whether two arms ran the same seeds, one run each: their differences pair seed by seed."""
    seeds = [r.seed for r in arm_runs]
    return len(seeds) > 1 and len(set(seeds)) == len(seeds) and sorted(seeds) == sorted(r.seed for r in base_runs)


def by_seed(rs, step):
    return [r.evals[step]["val_loss"] for r in sorted(rs, key=lambda r: r.seed)]


def versus_baseline(arm_runs, base_runs, step):
    """(relative improvement, its 95 % interval as (low, high) or None, p or None, 'paired'/'Welch'):
    improvement = (baseline mean - arm mean) / baseline mean, a t interval on the difference of means."""
    from scipy import stats

    a, b = by_seed(arm_runs, step), by_seed(base_runs, step)
    base = statistics.mean(b)
    diff = base - statistics.mean(a)
    rounding = ROUNDING * abs(base)
    if paired(arm_runs, base_runs):
        d = [y - x for x, y in zip(a, b)]
        se, df, kind = statistics.stdev(d) / math.sqrt(len(d)), len(d) - 1, "paired"
        se = se if se > rounding else 0.0
        p = float(stats.ttest_rel(b, a).pvalue) if se > 0 else None
    elif len(a) > 1 and len(b) > 1:
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        se, kind = math.sqrt(va + vb), "Welch"
        se = se if se > rounding else 0.0
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else 1
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue) if se > 0 else None
    else:
        return diff / base, None, None, "one run"
    half = stats.t.ppf(0.975, df) * se
    return diff / base, ((diff - half) / base, (diff + half) / base), p, kind


def holm(p: dict) -> dict:
    """Holm's step-down adjustment of {name: p} (None stays None): the k-th smallest of m p-values times
    m - k + 1, never below an earlier adjusted one, at most 1. It keeps the chance of any false finding
    among the m arms at the level used, where each arm tested alone would not."""
    ranked = sorted((v, k) for k, v in p.items() if v is not None)
    out, running = {k: None for k, v in p.items() if v is None}, 0.0
    for i, (v, k) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - i) * v))
        out[k] = running
    return out
