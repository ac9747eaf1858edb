"""What a run's training tokens cost, so that arms can be compared at equal cost as well as at equal steps:
training FLOPs (the model's own count per token, model.training_flops_per_token: exact); seconds, measured on
the machine that ran the run (the median of its logged step times); and, with a report the user names
(--prices: a bench.py or gpu_check.py JSON, e.g. the H200's), time at that report's prices: each arm's step
costs its measured ratio to linear's step, counted in the baseline's token-times (a token of the baseline
costs 1), so that a CPU's runs, or the paper's released logs, can be read at a GPU's relative prices.

At equal cost, each run is read where it had spent the budget: the least any run had spent by the step
compared, its metric linear between evaluations. The arm whose step costs more is read at an earlier step of
its own run; its cosine had not decayed as far there as a run planned for that length would have, so an equal-
time reading of runs planned for equal steps favours the cheaper arm a little.
"""

import json
import math
import statistics
from pathlib import Path

from model import WIDE_MLP_RATIO, GPTConfig, training_flops_per_token
from nlq.common.errors import UserError

AXES = {  # axis: (what a table calls it, its unit in a sentence)
    "flops": ("equal training FLOPs", "FLOPs"),
    "seconds": ("equal training time", "seconds"),
    "priced": ("equal time at the prices' step ratios", "baseline token-times"),
}


class CostError(UserError):
    """A cost that cannot be known: the line says what is missing."""


def priced_arm(run, prices: dict) -> str:
    """The name a report prices a run's arm by: the arm's own name where the report has it (an official run
    labelled so: --reference=DIR:residual_gelu), else its query mode, or wide_mlp (linear, the wide MLP)."""
    if run.arm in prices:
        return run.arm
    mode = run.config.get("query_mode", "linear")
    return "wide_mlp" if mode == "linear" and run.config.get("mlp_ratio") == WIDE_MLP_RATIO else mode


def read_prices(path) -> dict:
    """{arm: its training step's time relative to linear's, measured in one run of the report}: from a
    bench.py JSON (results per arm) or a gpu_check.py JSON (each step's result; the first step to price an arm
    gives its ratio: train.py's own loop before bench.py's step, compiled before eager)."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CostError(
            f"--prices={path} cannot be read as JSON ({e}): name a bench.py or gpu_check.py report"
        ) from None
    steps = report.get("steps", {}) if isinstance(report, dict) else {}
    results = [s.get("result") for s in steps.values() if isinstance(s, dict)] if steps else [report]
    ordered = sorted((r for r in results if isinstance(r, dict)), key=lambda r: "results" in r)
    prices = {}
    for result in ordered:
        try:
            ratios = step_ratios(result)
        except CostError as e:
            raise CostError(f"--prices={path}: {e}") from None
        for arm, ratio in ratios.items():
            prices.setdefault(arm, ratio)
    if "linear" not in prices or len(prices) < 2:
        raise CostError(f"--prices={path} times no arm beside linear's step: name a bench.py or gpu_check.py report")
    return prices


def step_ratios(result: dict) -> dict:
    """{arm: step time / linear's} of one report result, in any of its three layouts; {} without linear."""
    if isinstance(result.get("results"), dict):  # bench.py: train_step_s per arm
        times = {
            a: (r.get("train_step_s") or {}).get("median")  # None where bench timed decoding only
            for a, r in result["results"].items()
            if isinstance(r, dict)
        }
    elif isinstance(result.get("variants"), dict):  # gpu_check's step costs: ms per variant
        times = {a: (r.get("ms") or {}).get("median") for a, r in result["variants"].items() if isinstance(r, dict)}
    else:  # gpu_check's train loop: ms_per_step per arm
        times = {a: r.get("ms_per_step") for a, r in result.items() if isinstance(r, dict)}
    times = {a: t for a, t in times.items() if isinstance(t, (int, float)) and not isinstance(t, bool)}
    bad = {a: t for a, t in times.items() if not (math.isfinite(t) and t > 0)}  # JSON reads NaN and Infinity
    if bad:
        arm, t = next(iter(bad.items()))
        raise CostError(f"{arm}'s step time is {t}: a report's times must be finite numbers above 0 (rerun it)")
    return {a: t / times["linear"] for a, t in times.items()} if "linear" in times else {}


def flops_per_token(run) -> float | None:
    """Training FLOPs per token of a run's model at its context (None: its config does not describe one)."""
    fields = {k: v for k, v in run.config.items() if k in GPTConfig.__dataclass_fields__}
    try:
        return training_flops_per_token(GPTConfig(**fields), run.config["block_size"])
    except (KeyError, TypeError, ValueError):
        return None


def measured_seconds_per_token(run) -> float | None:
    """The median of a run's logged step times over its tokens per step (None: it logged no time); a run read
    from a record, its record's."""
    if run.timing is not None:
        return run.timing["seconds_per_token"]
    rates = [
        r["ms"] / 1e3 / (r["tokens"] / (step + 1))
        for step, r in run.steps.items()
        if isinstance(r.get("ms"), (int, float)) and r["ms"] > 0 and r.get("tokens")
    ]
    return statistics.median(rates) if rates else None


def span(run) -> tuple[float, float] | None:
    """(start, end) wall-clock time of a run's logged steps, each from its end back by its own time; None for a
    log that keeps no clock; a run read from a record, its record's."""
    if run.timing is not None:
        return tuple(run.timing["span"]) if run.timing["span"] else None
    ends = [(r["time"], r.get("ms") or 0) for r in run.steps.values() if isinstance(r.get("time"), (int, float))]
    return (min(t - ms / 1e3 for t, ms in ends), max(t for t, _ in ends)) if ends else None


def not_side_by_side(runs, baseline: str) -> list[str] | None:
    """The arms none of whose runs was training while one of the baseline's was: their step times were taken
    under whatever else loaded the machine at another time (None: some run logged no clock, so none can tell)."""
    spans = {r.name: span(r) for r in runs}
    if any(s is None for s in spans.values()):
        return None
    base = [spans[r.name] for r in runs if r.arm == baseline]
    overlaps = {r.arm: False for r in runs if r.arm != baseline}
    for r in runs:
        if r.arm != baseline:
            start, end = spans[r.name]
            overlaps[r.arm] |= any(start <= b_end and b_start <= end for b_start, b_end in base)
    return [arm for arm, side_by_side in overlaps.items() if not side_by_side]


def per_token(runs, baseline: str, prices: dict | None = None) -> dict:
    """{axis: {run name: its cost per token}} for every axis every run has: FLOPs; seconds as measured; with
    prices, the run's arm's price over the baseline arm's."""
    out = {
        "flops": {r.name: flops_per_token(r) for r in runs},
        "seconds": {r.name: measured_seconds_per_token(r) for r in runs},
    }
    if prices is not None:
        arms = {r.name: priced_arm(r, prices) for r in runs}
        unpriced = sorted({a for a in arms.values() if a not in prices})
        if unpriced:
            raise CostError(f"the prices name no {', '.join(unpriced)}: price them, or leave --prices out")
        base = next(arms[r.name] for r in runs if r.arm == baseline)
        out["priced"] = {name: prices[arm] / prices[base] for name, arm in arms.items()}
    return {axis: costs for axis, costs in out.items() if all(c is not None for c in costs.values())}


def value_at(curve: list, x: float) -> float | None:
    """The value of a curve [(x, value)] at x, linear between its points (None: beyond its ends)."""
    for (x0, v0), (x1, v1) in zip(curve, curve[1:]):
        if x0 <= x <= x1:
            return v0 if x1 == x0 else v0 + (v1 - v0) * (x - x0) / (x1 - x0)
    return curve[0][1] if curve and curve[0][0] == x else None


def at_equal_cost(runs, step: int, costs: dict, keys) -> tuple[float, dict]:
    """(the budget: the least cost any run had spent by step, {run name: {key: its value there, and the tokens
    it had seen}}) for one axis's costs per token."""
    untold = [r.name for r in runs if r.evals.get(step, {}).get("tokens") is None]
    if untold:  # logs written before train.py recorded tokens, or a stand-in without them
        raise CostError(f"{', '.join(untold[:3])} logged no tokens seen at step {step}")
    budget = min(r.evals[step]["tokens"] * costs[r.name] for r in runs)
    out = {}
    for r in runs:
        points = [(s, e) for s, e in sorted(r.evals.items()) if s <= step and e.get("tokens") is not None]
        row = {k: value_at([(e["tokens"] * costs[r.name], e[k]) for _, e in points], budget) for k in keys}
        row["tokens"] = budget / costs[r.name]
        if any(v is None or not math.isfinite(v) for v in row.values()):
            raise CostError(f"{r.name} has no evaluations around {budget:.3g} to read between")
        out[r.name] = row
    return budget, out
