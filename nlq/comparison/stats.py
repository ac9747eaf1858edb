"""The statistics of a comparison of arms over seeds: each arm's improvement over a baseline with its 95 % t
interval and p (paired by seed where both arms ran the same seeds, else Welch), and Holm's adjustment of the
p of several arms compared with one baseline. A run here is anything with .seed and .evals ({step: {"val_loss":
..., "val_acc": ...}}): compare.Run. What is compared is a Metric: the validation loss (lower is better, the
improvement relative to the baseline's) or an accuracy on the synthetic tasks (higher is better, the
improvement in points)."""

import math
import statistics
from dataclasses import dataclass

# A spread this small relative to the loss is float rounding (3.10 - 3.05 and 3.00 - 2.95 differ in the
# 16th digit), not seed-to-seed variation: no t-test on it, which would report p ~ 1e-30.
ROUNDING = 1e-12


@dataclass(frozen=True)
class Metric:
    """An evaluation record's key, which way is better, and how a difference from the baseline is stated:
    relative to the baseline's mean (a loss), or as a difference (an accuracy, in points)."""

    key: str
    higher_is_better: bool
    relative: bool
    name: str  # in sentences
    column: str  # a table's column

    @property
    def worst(self) -> float:
        """What a run that never reached its last evaluation counts as."""
        return -math.inf if self.higher_is_better else math.inf

    def best(self, rows, value):
        """The row of rows whose value(row) is best (the first such)."""
        return (max if self.higher_is_better else min)(rows, key=value)

    @property
    def better(self) -> str:
        return "higher accuracy" if self.higher_is_better else "lower loss"

    def gain(self, value: float) -> str:
        """An improvement as the tables print it: a percentage of the baseline, or points."""
        return f"{value:+.2%}" if self.relative else f"{100 * value:+.2f} pts"


METRICS = {
    "val_loss": Metric("val_loss", False, True, "validation loss", "val loss"),
    "val_acc": Metric("val_acc", True, False, "test accuracy per scored token", "accuracy"),
    "val_example_acc": Metric("val_example_acc", True, False, "test accuracy per example", "example accuracy"),
    "val_acc_macro": Metric(
        "val_acc_macro", True, False, "test accuracy, macro over classes (MAD's)", "macro accuracy"
    ),
}
LOSS = METRICS["val_loss"]


def paired(arm_runs, base_runs) -> bool:
    """Whether two arms ran the same seeds, one run each: their differences pair seed by seed."""
    seeds = [r.seed for r in arm_runs]
    return len(seeds) > 1 and len(set(seeds)) == len(seeds) and sorted(seeds) == sorted(r.seed for r in base_runs)


def shared_seeds(arm_runs, base_runs) -> list:
    """The baseline's runs on the arm's seeds, where the baseline ran every seed the arm ran (stage 2's extra
    seeds can give the baseline more seeds than an arm): the pairs the arm's differences are taken over.
    Otherwise every baseline run."""
    seeds = {r.seed for r in arm_runs}
    base = [r for r in base_runs if r.seed in seeds]
    return base if len(seeds) > 1 and len(base) == len(seeds) == len(arm_runs) else list(base_runs)


def by_seed(rs, step, key: str = "val_loss"):
    return [r.evals[step][key] for r in sorted(rs, key=lambda r: r.seed)]


def versus_baseline(arm_runs, base_runs, step, metric: Metric = LOSS):
    """(improvement, its 95 % interval as (low, high) or None, p or None, 'paired'/'Welch'), a t interval on
    the difference of means. A loss: (baseline mean - arm mean) / baseline mean; an accuracy: arm mean -
    baseline mean. Positive is better in both."""
    from scipy import stats

    base_runs = shared_seeds(arm_runs, base_runs)
    a, b = by_seed(arm_runs, step, metric.key), by_seed(base_runs, step, metric.key)
    base = statistics.mean(b)
    sign = 1 if metric.higher_is_better else -1
    diff = sign * (statistics.mean(a) - base)
    scale = base if metric.relative else 1.0
    rounding = ROUNDING * abs(scale)
    if paired(arm_runs, base_runs):
        d = [sign * (x - y) for x, y in zip(a, b)]
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
        return diff / scale, None, None, "one run"
    half = stats.t.ppf(0.975, df) * se
    return diff / scale, ((diff - half) / scale, (diff + half) / scale), p, kind


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


def who_first(pairs) -> dict:
    """Which of two paired runs reached a level first, where a run that never reached it is censored at its
    budget: pairs are ((arm's time, reached), (baseline's time, reached)), one per seed. A pair is decided
    where one reached at a time no later than the other's time (the other's reaching time, or its budget if
    it never reached: it was still short of the level there); a tie, two runs that never reached, or one that
    reached past the other's budget are undecided. p: the exact two-sided sign test over the decided pairs
    (under no difference each is the arm's with chance 1/2), valid whatever the censoring; None if none is
    decided."""
    from scipy import stats

    def first(x, x_reached, y, y_reached) -> bool:  # x reached, before y did or while y was still short
        return x_reached and (x < y or (x == y and not y_reached))

    arm_first = sum(first(a, ra, b, rb) for (a, ra), (b, rb) in pairs)
    base_first = sum(first(b, rb, a, ra) for (a, ra), (b, rb) in pairs)
    decided = arm_first + base_first
    p = float(stats.binomtest(arm_first, decided, 0.5).pvalue) if decided else None
    return {"arm_first": arm_first, "baseline_first": base_first, "undecided": len(pairs) - decided, "p": p}


def ratio(arm_costs, base_costs) -> dict:
    """Paired costs to a level (an arm's and the baseline's, one pair a seed, each > 0: tokens, FLOPs, seconds)
    compared on their own scale, as ratios. A duration's effect is a ratio and its spread grows with the slow
    runs: on raw differences one slow baseline seed widens the interval it should narrow. Returns the
    geometric-mean ratio arm / baseline, its 95 % interval (a t interval on the mean log ratio), the paired
    t-test's p on the log ratios, Wilcoxon's signed-rank p on them beside it (no normality assumed), and the
    number of pairs. Below 1 the arm needs less: 'X % sooner' is 1 - ratio. Fewer than 2 pairs: no interval
    or p; log ratios all equal: no p (the interval is the point)."""
    from scipy import stats

    logs = [math.log(a / b) for a, b in zip(arm_costs, base_costs, strict=True)]
    n = len(logs)
    mean = statistics.mean(logs)
    out = {"ratio": math.exp(mean), "interval": None, "p": None, "wilcoxon_p": None, "n": n}
    if n < 2:
        return out
    sd = statistics.stdev(logs)
    if sd <= ROUNDING:
        return out | {"interval": [math.exp(mean), math.exp(mean)]}
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    out["sd_log"] = sd  # the spread a power calculation reads (seeds_for_power)
    out["interval"] = [math.exp(mean - half), math.exp(mean + half)]
    out["p"] = float(stats.ttest_1samp(logs, 0.0).pvalue)
    if any(x != 0 for x in logs):
        out["wilcoxon_p"] = float(stats.wilcoxon(logs).pvalue)
    return out


def mean_interval(values: list, log: bool = False) -> tuple[float, float, float]:
    """(mean, low, high): the mean of values over seeds with its 95 % t interval; with log, the geometric mean and
    the interval on the logs (a duration's). One value: the interval is the point."""
    from scipy import stats

    xs = [math.log(v) for v in values] if log else list(values)
    mean = statistics.mean(xs)
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    back = math.exp if log else float
    return back(mean), back(mean - half), back(mean + half)


def seeds_for_power(effect: float, sd: float, alpha: float, power: float = 0.8, most: int = 10_000) -> int | None:
    """The fewest paired seeds whose paired t-test (two-sided, at level alpha: a Holm-adjusted level is at worst
    alpha / m) detects a true mean difference `effect` with the chance `power`, where the seed-by-seed
    differences spread with the standard deviation sd: the noncentral t's power, seed count by seed count. For a
    ratio the differences are log ratios (effect |log ratio|); for an accuracy, points. None: more than `most`."""
    from scipy import stats

    effect = abs(effect) / sd
    for n in range(2, most + 1):
        df, shift = n - 1, effect * math.sqrt(n)
        crit = stats.t.ppf(1 - alpha / 2, df)
        # the lower tail as the upper tail of the mirrored shift: nct.cdf far below its centre gives nan
        if stats.nct.sf(crit, df, shift) + stats.nct.sf(crit, df, -shift) >= power:
            return n
    return None
