"""A fair comparison of arms: every arm tuned on the same grid, its point chosen on one set of seeds, the
comparison reported on fresh seeds.

Stage 1 ("tune") runs every arm at every grid point on the tune seeds; each arm's point is the one with
the best final value of the metric (the lowest validation loss, or on the synthetic tasks the highest
accuracy), averaged over its tune seeds (a run that diverged or never reached its last step counts as the
worst value, +inf loss or -inf accuracy, and is said so). Stage 2 ("report") runs each arm's chosen point
on seeds disjoint from the tune seeds: a choice reported on the seeds that made it is biased in its
favour. The report is of stage 2 alone: per arm its chosen values, its loss over the fresh seeds, its
improvement over the baseline's *tuned* point (paired by seed) with a 95 % interval and p, p adjusted for
the number of arms compared (Holm), its tuning budget (runs, tokens, training FLOPs from the model's own
count) and a warning when the choice lies at an end of the grid.

A run is a compare.Run; its stage is the end of its wandb_group ("NAME/tune" or "NAME/report", as
sweep.py sets it), so the analysis needs the run directories alone (compare.py --tune=KEY).
"""

import math
import statistics

from model import GPTConfig, training_flops_per_token
from nlq.common.errors import UserError
from nlq.comparison.stats import LOSS, METRICS, Metric, holm, versus_baseline

STAGES = ("tune", "report")
LOG_KEYS = ("learning_rate", "min_lr", "weight_decay")  # drawn on a log axis, whatever their span


class TuningError(UserError):
    """The runs do not make a two-stage comparison: the line says what is missing."""


def stage_of(run) -> str | None:
    group = run.config.get("wandb_group") or ""
    stage = group.rsplit("/", 1)[-1]
    return stage if stage in STAGES else None


def point_of(run, keys) -> tuple:
    """The run's values of the grid keys, from its recorded config."""
    missing = [k for k in keys if k not in run.config]
    if missing:
        raise TuningError(f"{run.name} records no {', '.join(missing)}: not a key of its config")
    return tuple(run.config[k] for k in keys)


def final_value(run, metric: Metric = LOSS) -> float:
    """The metric at the run's last step (max_iters), or the worst value (metric.worst) if it never got there
    (it diverged, or stopped), so that a point whose runs diverge is never chosen."""
    record = run.evals.get(run.config.get("max_iters"))
    if record is None or not isinstance(record.get(metric.key), (int, float)) or not math.isfinite(record[metric.key]):
        return metric.worst
    return record[metric.key]


def choose(tune_runs, keys, metric: Metric = LOSS) -> dict:
    """{arm: {"chosen": {key: value}, "points": [{"point", "values", "<metric>_mean", "diverged", ...}]}}: each
    arm's grid point of best mean final value over its tune seeds. An accuracy ties often (several points
    at 100 %): among tied points the lower mean final validation loss decides, then the first in sorted
    grid order."""
    out, mean = {}, f"{metric.key}_mean"
    tie = (lambda row: -row["val_loss_mean"]) if metric is not LOSS else (lambda row: 0)  # noqa: E731
    for arm, runs in sorted(by_arm(tune_runs).items()):
        points, losses = {}, {}
        for r in runs:
            points.setdefault(point_of(r, keys), []).append(final_value(r, metric))
            losses.setdefault(point_of(r, keys), []).append(final_value(r, LOSS))
        rows = [
            {"point": dict(zip(keys, p)), "values": values, mean: statistics.mean(values)}
            | {"diverged": sum(not math.isfinite(x) for x in values)}
            | ({} if metric is LOSS else {"val_loss_mean": statistics.mean(losses[p])})
            for p, values in sorted(points.items(), key=lambda kv: [sort_key(v) for v in kv[0]])
        ]
        if all(row["diverged"] == len(row["values"]) for row in rows):
            raise TuningError(
                f"every grid point of {arm} diverged or did not finish in stage 1 ({len(rows)} points): nothing to "
                "choose; add smaller learning rates to the grid (or check its runs' train.log), then run again"
            )
        best = metric.best(rows, lambda row: (row[mean], tie(row)))
        out[arm] = {"chosen": best["point"], "points": rows}
    return out


def check_one_sweep(runs, keys) -> list[str]:
    """The runs are one two-stage comparison: one sweep's (one wandb_group name), each (arm, stage, seed,
    point) once (a copy of a sweep's directory read with it doubles every run); warnings for a grid key the
    runs do not vary."""
    sweeps = {}
    for r in runs:
        sweeps.setdefault((r.config.get("wandb_group") or "").rsplit("/", 1)[0], r.name)
    if len(sweeps) > 1:
        named = "; ".join(f"{g or '(none)'}: e.g. {name}" for g, name in sweeps.items())
        raise TuningError(f"the runs come from {len(sweeps)} sweeps ({named}): compare one sweep's runs at a time")
    seen = {}
    for r in runs:
        ident = (r.arm, stage_of(r), r.seed, point_of(r, keys))
        if ident in seen:
            raise TuningError(
                f"{seen[ident]} and {r.name} are the same run (arm {r.arm}, stage {ident[1]}, seed {r.seed}, "
                f"{dict(zip(keys, ident[3]))}): a copy of a sweep's directory? give each run once"
            )
        seen[ident] = r.name
    return [
        f"warning: no run varies {key} (every run has {key}={runs[0].config.get(key)}): nothing was tuned over it"
        for i, key in enumerate(keys)
        if len({point_of(r, keys)[i] for r in runs}) < 2
    ]


def sort_key(value):
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def by_arm(runs) -> dict:
    arms = {}
    for r in runs:
        arms.setdefault(r.arm, []).append(r)
    return arms


def at_grid_edge(rows: list, chosen: dict) -> list[str]:
    """A warning per numeric key whose chosen value is the smallest or largest of at least two tried."""
    out = []
    for key, value in chosen.items():
        tried = sorted({row["point"][key] for row in rows if isinstance(row["point"][key], (int, float))})
        if len(tried) < 2 or value not in (tried[0], tried[-1]):
            continue
        end = "smallest" if value == tried[0] else "largest"
        out.append(f"extend the grid: {key}={value} is the {end} tried")
    return out


def budget(runs) -> dict:
    """What an arm's tuning spent: its runs, their training tokens, their training FLOPs (the model's own
    count per token, GPT.flops_per_token, times its tokens)."""
    tokens = flops = 0
    for r in runs:
        c = r.config
        n = c["block_size"] * c["batch_size"] * c["gradient_accumulation_steps"] * c["max_iters"]
        fields = {k: v for k, v in c.items() if k in GPTConfig.__dataclass_fields__}
        tokens += n
        flops += training_flops_per_token(GPTConfig(**fields), c["block_size"]) * n
    return {"runs": len(runs), "tokens": tokens, "flops": flops}


def report(runs, keys, baseline: str, metric: Metric = LOSS) -> dict:
    """The two-stage comparison of runs (both stages) as a dict (the --json layout)."""
    tune = [r for r in runs if stage_of(r) == "tune"]
    fresh = [r for r in runs if stage_of(r) == "report"]
    if not tune or not fresh:
        raise TuningError(
            f"{len(tune)} stage-1 (tune) and {len(fresh)} stage-2 (report) runs: a two-stage comparison needs both "
            "(their wandb_group ends in /tune or /report, as sweep.py --grid sets it)"
        )
    warnings = check_one_sweep(runs, keys)
    choice, arms = choose(tune, keys, metric), by_arm(fresh)
    tune_seeds = sorted({r.seed for r in tune})
    check_stage2(choice, arms, keys, tune_seeds, baseline, metric)
    step = min(r.config["max_iters"] for r in fresh)
    out = {"baseline": baseline, "metric": metric.key, "keys": list(keys), "step": step, "tune_seeds": tune_seeds}
    out["warnings"] = warnings
    out["seeds"], out["arms"] = sorted({r.seed for r in fresh}), {}
    tune_arms = by_arm(tune)
    for arm, rs in sorted(arms.items()):
        values = [r.evals[step][metric.key] for r in rs]
        gain, interval, p, kind = (
            (0.0, None, None, "") if arm == baseline else versus_baseline(rs, arms[baseline], step, metric)
        )
        out["arms"][arm] = {
            "chosen": choice[arm]["chosen"],
            "n": len(rs),
            f"{metric.key}_mean": statistics.mean(values),
            f"{metric.key}_std": statistics.stdev(values) if len(values) > 1 else None,
            "improvement": gain,
            "interval": list(interval) if interval else None,
            "p": p,
            "test": kind,
            "budget": budget(tune_arms[arm]),
            "at_grid_edge": at_grid_edge(choice[arm]["points"], choice[arm]["chosen"]),
            "margin": margin(choice[arm], values, metric),
            "stage1": [finite(row, metric) for row in choice[arm]["points"]],
        }
    adjusted = holm({a: r["p"] for a, r in out["arms"].items() if a != baseline})
    for arm, r in out["arms"].items():
        r["p_holm"] = adjusted.get(arm)
    return out


def margin(choice: dict, fresh_values: list, metric: Metric) -> dict | None:
    """How far the chosen point's stage-1 mean is ahead of the runner-up's, against the seed-to-seed spread
    of the arm's stage-2 runs (their standard deviation: the noise of one run at a point): a margin within it
    means stage 1 did not tell the two points apart. None with one grid point or a single stage-2 run."""
    mean = f"{metric.key}_mean"
    rows = [r for r in choice["points"] if math.isfinite(r[mean])]
    others = [r for r in rows if r["point"] != choice["chosen"]]
    if not others or len(fresh_values) < 2:
        return None
    best = next(r for r in rows if r["point"] == choice["chosen"])
    runner = metric.best(others, lambda r: r[mean])
    ahead, noise = abs(best[mean] - runner[mean]), statistics.stdev(fresh_values)
    return {"runner_up": runner["point"], "margin": ahead, "noise": noise, "within_noise": ahead <= noise}


def finite(row: dict, metric: Metric = LOSS) -> dict:
    """A stage-1 row with None for a value that is not finite (JSON has no infinity)."""
    number = lambda x: x if math.isfinite(x) else None  # noqa: E731
    means = {key: number(row[key]) for key in (f"{metric.key}_mean", "val_loss_mean") if key in row}
    return {**row, "values": [number(x) for x in row["values"]], **means}


def check_stage2(choice: dict, arms: dict, keys, tune_seeds: list, baseline: str, metric: Metric = LOSS) -> None:
    """Stage 2 holds every tuned arm, the baseline too, each at its chosen point, on fresh seeds, finished."""
    if baseline not in arms:
        raise TuningError(f"the baseline {baseline!r} has no stage-2 runs: its tuned point is what the arms face")
    lengths = sorted({r.config["max_iters"] for rs in arms.values() for r in rs})
    if len(lengths) > 1:
        raise TuningError(f"the stage-2 runs train for different lengths ({lengths} steps): report them at one length")
    for arm, rs in arms.items():
        if arm not in choice:
            raise TuningError(f"{arm} has stage-2 runs but no stage-1 runs: its point was chosen elsewhere")
        for r in rs:
            if dict(zip(keys, point_of(r, keys))) != choice[arm]["chosen"]:
                raise TuningError(f"{r.name} is not at {arm}'s chosen point {choice[arm]['chosen']}")
            if r.seed in tune_seeds:
                raise TuningError(
                    f"{r.name} reports seed {r.seed}, a tune seed: a choice reported on the seeds that made it is "
                    "biased in its favour; report on fresh seeds"
                )
            if not math.isfinite(final_value(r, metric)):
                raise TuningError(f"{r.name} did not reach its last step: finish (or rerun) it before reporting")


def arm_order(result: dict) -> list[str]:
    """The arms of a report by their stage-2 mean, worst first and best last (as compare.worst_first)."""
    metric = METRICS[result["metric"]]
    means = {arm: r[f"{metric.key}_mean"] for arm, r in result["arms"].items()}
    return sorted(means, key=lambda a: means[a], reverse=not metric.higher_is_better)


def markdown(result: dict) -> list[str]:
    """The stage-2 table, its budgets and its warnings, as markdown lines."""
    metric = METRICS[result["metric"]]
    keys, mean, std = ", ".join(result["keys"]), f"{metric.key}_mean", f"{metric.key}_std"
    lines = [
        f"stage 2: {metric.name} at step {result['step']} on fresh seeds {result['seeds']}, each arm at the "
        f"{keys} that stage 1 chose on seeds {result['tune_seeds']}; improvement over {result['baseline']}'s "
        f"tuned point ({'in points' if not metric.relative else 'relative'}; positive: {metric.better}), its 95 % "
        "interval and t-test p, and p adjusted for the arms compared (Holm)",
        "",
        f"| arm | chosen | {metric.column} | n | vs tuned baseline | 95 % interval | p | p (Holm) "
        "| tuning: runs, tokens, FLOPs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arm_order(result):
        r = result["arms"][arm]
        chosen = ", ".join(f"{k}={v}" for k, v in r["chosen"].items())
        spread = f" ± {r[std]:.4f}" if r[std] is not None else ""
        ci = f"[{metric.gain(r['interval'][0])}, {metric.gain(r['interval'][1])}]" if r["interval"] else "—"
        p = f"{r['p']:.3g} ({r['test']})" if r["p"] is not None else "—"
        holm_p = f"{r['p_holm']:.3g}" if r["p_holm"] is not None else "—"
        b = r["budget"]
        lines.append(
            f"| {arm} | {chosen} | {r[mean]:.4f}{spread} | {r['n']} | {metric.gain(r['improvement'])} | {ci} | {p} "
            f"| {holm_p} | {b['runs']}, {b['tokens']:,}, {b['flops']:.3g} |"
        )
    budgets = {(r["budget"]["runs"], r["budget"]["tokens"]) for r in result["arms"].values()}
    if len(budgets) > 1:
        lines += ["", "warning: the arms' tuning budgets differ (runs, tokens): the comparison is not on equal terms"]
    for arm, r in sorted(result["arms"].items()):
        lines += [f"warning: {arm}: {w}" for w in r["at_grid_edge"]]
        m = r.get("margin")
        if m and m["within_noise"]:
            runner = ", ".join(f"{k}={v}" for k, v in m["runner_up"].items())
            lines.append(
                f"note: {arm}: its choice tied with {runner} in stage 1 (the lower validation loss decided)"
                if m["margin"] == 0
                else f"note: {arm}: its choice was {m['margin']:.4g} ahead of {runner} in stage 1, within the spread "
                f"of its stage-2 seeds ({m['noise']:.4g}): the two points are not told apart"
            )
        lines += [
            f"note: {arm}: {row['diverged']} of {len(row['values'])} tune runs at {row['point']} did not finish "
            "(counted as the worst value)"
            for row in r["stage1"]
            if row["diverged"]
        ]
    if all(len(r["stage1"]) == 1 for r in result["arms"].values()):
        lines += ["note: the grid has one point: nothing was tuned"]
    return lines + result["warnings"]


def loss_span(curves: dict, metric: Metric = LOSS) -> tuple | None:
    """The stage-1 panel's axis: from the best value to the quartile of the points' means on the worse side
    (a loss's upper, an accuracy's lower). A learning rate far too large ends near the value at
    initialisation, which would flatten every optimum into one line; the points beyond are drawn at the
    edge. None when there is no range to show."""
    means = [m for c in curves.values() for m in c["mean"] if m is not None and math.isfinite(m)]
    best_side = "high" if metric.higher_is_better else "low"
    bests = [x for c in curves.values() for x in c[best_side] if x is not None and math.isfinite(x)]
    if len(means) < 2 or not bests:
        return None
    low_q, _, high_q = statistics.quantiles(means, n=4, method="inclusive")
    if metric.higher_is_better:
        return (low_q, max(bests)) if max(bests) > low_q else None
    return (min(bests), high_q) if high_q > min(bests) else None


def figure_data(result: dict) -> dict:
    """What the figure draws: per grid key, per arm, the stage-1 curve (value, mean, min, max over tune
    seeds) at the other keys' chosen values, and the chosen value, with the loss axis's span (loss_span);
    per arm, the stage-2 improvement with its interval."""
    metric = METRICS[result["metric"]]
    curves, spans = {}, {}
    for key in result["keys"]:
        curves[key] = {}
        for arm, r in result["arms"].items():
            others = {k: v for k, v in r["chosen"].items() if k != key}
            rows = [row for row in r["stage1"] if all(row["point"][k] == v for k, v in others.items())]
            done = [[x for x in row["values"] if x is not None] for row in rows]
            curves[key][arm] = {
                "values": [row["point"][key] for row in rows],
                "mean": [row[f"{metric.key}_mean"] for row in rows],  # None: a point whose runs did not all finish
                "low": [min(f) if f else None for f in done],
                "high": [max(f) if f else None for f in done],
                "chosen": r["chosen"][key],
            }
        spans[key] = loss_span(curves[key], metric)
    gains = {arm: (r["improvement"], r["interval"]) for arm, r in result["arms"].items()}
    return {"curves": curves, "span": spans, "improvement": gains, "baseline": result["baseline"]} | {
        "metric": metric.key
    }


def plot(result: dict, path) -> None:
    """The metric against each grid key (log axis when its values span a factor of 10 or more), one line per
    arm with the spread over tune seeds and the chosen point ringed, points beyond the axis's worse end as
    triangles on it; beside them, stage 2's improvements."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlq.common.figures import save_figure

    data = figure_data(result)
    metric = METRICS[data["metric"]]
    keys = list(data["curves"])
    fig, axes = plt.subplots(1, len(keys) + 1, figsize=(5.5 * (len(keys) + 1), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        span = data["span"][key]
        pad = 0.08 * (span[1] - span[0]) if span else 0.0
        low, high = (span[0] - pad, span[1] + pad) if span else (-math.inf, math.inf)
        edge, mark = (low, "v") if metric.higher_is_better else (high, "^")  # the worse end of the axis
        for arm, c in sorted(data["curves"][key].items()):
            # a point whose runs did not all finish has no mean; the chosen point always has one
            shown = [
                (v, m, lo, hi) for v, m, lo, hi in zip(c["values"], c["mean"], c["low"], c["high"]) if m is not None
            ]
            v, m, lo, hi = map(list, zip(*shown))
            (line,) = ax.plot(v, m, marker="o", label=arm)
            ax.fill_between(v, lo, hi, color=line.get_color(), alpha=0.15)
            if c["chosen"] in v:
                ax.plot([c["chosen"]], [m[v.index(c["chosen"])]], "o", ms=12, mfc="none", color=line.get_color())
            off = [x for x, y in zip(v, m) if (y < low if metric.higher_is_better else y > high)]
            ax.plot(off, [edge] * len(off), mark, ms=9, color=line.get_color(), clip_on=False)
        if span:
            ax.set_ylim(low, high)
        numeric = sorted({v for arm in data["curves"][key].values() for v in arm["values"] if isinstance(v, float)})
        if numeric and min(numeric) > 0 and (key in LOG_KEYS or max(numeric) / min(numeric) >= 10):
            ax.set_xscale("log")
        if numeric:
            ax.set_xticks(numeric, [f"{v:g}" for v in numeric])
            ax.minorticks_off()
        where = "▼: below the axis" if metric.higher_is_better else "▲: above the axis"
        label = f"final {metric.column} ({where})" if span else f"final {metric.column}"
        ax.set(xlabel=key, ylabel=label, title=f"stage 1: {metric.column} against {key} (tune seeds)")
        ax.legend()
    ax = axes[0][-1]
    arms = sorted(data["improvement"])
    for i, arm in enumerate(arms):
        gain, interval = data["improvement"][arm]
        err = [[gain - interval[0]], [interval[1] - gain]] if interval else None
        ax.errorbar([i], [gain * 100], yerr=None if err is None else [[e[0] * 100] for e in err], fmt="o", capsize=4)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(arms)), arms, rotation=30)
    unit = "%" if metric.relative else "points"
    ax.set(ylabel=f"improvement over tuned {data['baseline']} ({unit})", title="stage 2: fresh seeds, 95 % interval")
    fig.tight_layout()
    save_figure(fig, path)
