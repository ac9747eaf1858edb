"""The paper-style table and validation curves of training runs (compare.py): runs read from out_dirs, wandb or
the paper's official run directories; the table with intervals and Holm's adjustment; the improvement figure."""

import glob
import json
import math
import statistics
from dataclasses import fields
from pathlib import Path

from model import GPTConfig, parameter_count
from nlq.common.atomic import atomic_write_json, atomic_write_text, check_writable
from nlq.common.errors import UserError
from nlq.common.figures import check_figure_path, save_figure
from nlq.common.repo import check_not_a_project_page
from nlq.comparison import cost, tuning
from nlq.comparison.stats import LOSS, METRICS, Metric, by_seed, holm, paired, versus_baseline
from nlq.paper import official
from nlq.run.rundir import read_metrics


class CompareError(UserError):
    """A problem with the runs given."""


class Run:
    """One training run: its config and its step records (train records and evaluation records); a run read
    from a screen's record (nlq/comparison/records.py) keeps its evaluations and, instead of its train records,
    the summary of its step times the record holds (timing)."""

    def __init__(self, name: str, config: dict, records, timing: dict | None = None):
        if not isinstance(config, dict) or not isinstance(
            config.get("wandb_run_name") or config.get("query_mode"), str
        ):
            raise CompareError(f"{name}: its config is not a train.py run's (a JSON object with query_mode)")
        self.name, self.config, self.timing = name, config, timing
        self.arm = config.get("wandb_run_name") or config["query_mode"]
        self.seed = config.get("seed")
        self.evals, self.steps = {}, {}  # step -> record; a later record of a step replaces an earlier one
        for number, r in enumerate(records, 1):
            check_record(r, f"{name} record {number}")
            (self.evals if "val_loss" in r else self.steps)[r["step"]] = r
        if not self.evals:
            raise CompareError(f"{name} holds no evaluation yet")

    @classmethod
    def from_dir(cls, path: Path):
        if not (path / "metrics.jsonl").is_file() or not (path / "config.json").is_file():
            raise CompareError(f"{path} has no metrics.jsonl and config.json: not an out_dir of train.py")
        try:
            config = json.loads((path / "config.json").read_text())
        except json.JSONDecodeError as e:
            raise CompareError(f"{path / 'config.json'} is not valid JSON ({e.msg})") from None
        return cls(str(path), config, read_metrics(path / "metrics.jsonl"))

    @classmethod
    def from_wandb(cls, run):
        """A wandb run logged by train.py. wandb merges what was logged at one step into one history row;
        split it back into the train record and the evaluation record."""
        records = []
        for row in run.scan_history():
            step = row["_step"]
            if row.get("val_loss") is not None:
                scores = {k: row[k] for k in METRICS if row.get(k) is not None}
                records.append({"step": step, **scores, "tokens": row.get("tokens")})
            if row.get("loss") is not None:
                records.append({"step": step, "loss": row["loss"], "fingerprint": row.get("fingerprint")})
        return cls(f"wandb:{run.name}", dict(run.config), records)

    @classmethod
    def from_official(cls, spec: str):
        """An official run directory of arXiv 2603.13381 (its three loss logs), as PATH or PATH:label. Its
        model (for the parameter count) comes from its ckpt.pt when the directory holds one."""
        path, _, label = spec.partition(":") if not Path(spec).is_dir() else (spec, "", "")
        train_losses, evals = official.losses(path)
        ckpt = Path(path) / "ckpt.pt"
        model_args = official.model_fields(official.read_model_args(ckpt), ckpt) if ckpt.is_file() else {}
        records = [{"step": s, "loss": v} for s, v in train_losses.items()] + [
            {"step": s, "val_loss": v, "train_eval_loss": t, "tokens": s * official.TOKENS_PER_STEP}
            for s, (v, t) in evals.items()
        ]
        config = {"query_mode": "official", **model_args, "wandb_run_name": label or "official", "official": True}
        return cls(f"{path} (official)", config, records)

    def non_embedding_params(self) -> int | None:
        if self.config.get("official") and "n_embd" not in self.config:
            return None  # an official run directory without its ckpt.pt
        names = {f.name for f in fields(GPTConfig)}
        try:
            config = GPTConfig(**{k: v for k, v in self.config.items() if k in names})
        except (TypeError, ValueError) as e:
            raise CompareError(f"{self.name}: its config does not describe a model ({e})") from None
        return parameter_count(config, non_embedding=True)


def check_record(r, where: str) -> None:
    """A metrics record as train.py writes it: an object with an integer step >= 0, numeric losses."""
    if not isinstance(r, dict) or not isinstance(r.get("step"), int) or isinstance(r["step"], bool) or r["step"] < 0:
        raise CompareError(f"{where} is not a train.py record (an object with an integer step): {str(r)[:80]}")
    for key in ("loss", *METRICS):
        if key in r and (not isinstance(r[key], (int, float)) or isinstance(r[key], bool)):
            raise CompareError(f"{where}: {key} is {r[key]!r}, not a number; repair or delete that record")


def arms_of(runs) -> dict:
    arms = {}
    for r in runs:
        arms.setdefault(r.arm, []).append(r)
    return arms


def improvement_curves(runs, baseline: str, metric: Metric = LOSS) -> dict:
    """{arm: (steps, mean, std)}: at every evaluation step all runs share, the arm's improvement over the
    baseline as the table reports it (a loss: (baseline mean - val loss) / baseline mean; an accuracy: the
    difference; positive is better); mean and std over the arm's seeds, of the seed-by-seed differences
    when the arms are paired."""
    arms = arms_of(runs)
    steps = sorted(set.intersection(*(set(r.evals) for r in runs)))
    base = arms[baseline]
    sign = 1 if metric.higher_is_better else -1
    out = {}
    for arm, rs in arms.items():
        means, stds = [], []
        for s in steps:
            base_mean = statistics.mean(by_seed(base, s, metric.key))
            scale = base_mean if metric.relative else 1.0
            if arm != baseline and paired(rs, base):
                pairs = zip(by_seed(rs, s, metric.key), by_seed(base, s, metric.key))
                d = [sign * (x - y) / scale for x, y in pairs]
            else:
                d = [sign * (x - base_mean) / scale for x in by_seed(rs, s, metric.key)]
            means.append(statistics.mean(d))
            stds.append(statistics.stdev(d) if len(d) > 1 else 0.0)
        out[arm] = (steps, means, stds)
    return out


def smoothed(values, beta: float) -> list:
    """Exponential moving average with bias correction (as Adam's moments): started from 0 and divided by
    1 - beta^n, so the first points are not dragged towards the first value. Non-finite points are skipped."""
    out, m, n = [], 0.0, 0
    for x in values:
        if math.isfinite(x):
            n += 1
            m = beta * m + (1 - beta) * x
        out.append(m / (1 - beta**n) if n else math.nan)
    return out


def fingerprint_report(runs) -> str:
    official_runs = [r for r in runs if r.config.get("official")]
    runs = [r for r in runs if not r.config.get("official")]
    notes = []
    for ref in official_runs:
        notes.append(
            f"{ref.name}: its train loss is one micro-batch's (12 rows) per step, noisier than the step means here; "
            "its evaluation at step k x 1000 comes before training that step, as here, on its own windows "
            "(eval_order='official' evaluates on them); it logs no batch fingerprints"
        )
        notes += [line for r in runs if (line := step_agreement(r, ref))]
    machines = machine_report(runs)
    return "\n".join([_fingerprints(runs), *([machines] if machines else []), *notes])


def machine_report(runs) -> str | None:
    """A warning when the runs trained with different CPU thread counts, devices or dtypes (config.json's
    machine, one entry per start): their float sums then differ in order, so two runs of a pair differ in
    more than their arm (1 and 2 CPU threads part visibly at a high learning rate). None when they agree or
    record nothing (runs of older versions, wandb)."""
    seen = {}
    for r in runs:
        for m in r.config.get("machine") or []:
            if isinstance(m, dict):
                seen.setdefault((m.get("threads"), m.get("device"), m.get("dtype")), []).append(r.name)
    if len(seen) < 2:
        return None
    parts = [f"{t} threads, {dev}, {dt}: {len(names)} runs (e.g. {names[0]})" for (t, dev, dt), names in seen.items()]
    return (
        f"WARNING: the runs trained on different machines ({'; '.join(parts)}): float summation order differs "
        "between them, so a pair differs in more than its arm; rerun them with one thread count, device and dtype"
    )


def step_agreement(run, ref, first: int = 100) -> str | None:
    """How closely a run's last-micro-batch losses follow an official run's logged ones over their first common
    steps: with its batches and initialisation replayed they differ by kernel and precision noise only."""
    common = sorted(s for s in set(run.steps) & set(ref.steps) if "last_micro_loss" in run.steps[s])[:first]
    if not common:
        return None
    diffs = [abs(run.steps[s]["last_micro_loss"] - ref.steps[s]["loss"]) for s in common]
    return (
        f"{run.name} vs {ref.name}, steps {common[0]}..{common[-1]} ({len(common)} in common): last micro-batch loss "
        f"minus its logged loss, mean |d| {statistics.mean(diffs):.4f}, max {max(diffs):.4f}"
    )


def _fingerprints(runs) -> str:
    """Whether the runs trained on identical batches, from the fingerprints of their common logged steps: all
    of them, or, when their data seeds differ (a two-stage comparison draws one per seed), the runs of each
    seed, which are the pairs."""
    if len({r.config.get("data_seed") for r in runs}) <= 1:
        return _identical(runs, f"all {len(runs)} runs", "the runs")
    groups = {}
    for r in runs:
        groups.setdefault(r.seed, []).append(r)
    for seed, group in sorted(groups.items(), key=lambda kv: str(kv[0])):
        said = _identical(group, f"the {len(group)} runs of seed {seed}", f"the runs of seed {seed}")
        if said.startswith("WARNING"):
            return said
    return (
        f"the runs of each seed trained on identical batches ({len(groups)} seeds, each its own data order: "
        "fingerprints equal within each seed at their common logged steps)"
    )


def _identical(runs, who: str, which: str) -> str:
    if len(runs) < 2:
        return "one run: nothing to compare batches with"
    common = set.intersection(*(set(r.steps) for r in runs))
    # a record without one (None: a wandb row that had none) says nothing about its batches
    common = sorted(s for s in common if all(r.steps[s].get("fingerprint") is not None for r in runs))
    if not common:
        return f"no logged step is common to {which}: identical batches cannot be checked"
    for s in common:
        prints = {r.name: r.steps[s]["fingerprint"] for r in runs}
        if len(set(prints.values())) > 1:
            return (
                f"WARNING: {which} trained on different batches (first at step {s}: {prints}); "
                "check dataset, data_seed, sampling, batch_size and gradient_accumulation_steps"
            )
    return f"{who} trained on identical batches (fingerprints equal at {len(common)} common logged steps)"


def resolve_baseline(runs, baseline: str | None) -> str:
    """The baseline arm: as given, else 'baseline', else 'linear', else the first run's."""
    arms = arms_of(runs)
    baseline = baseline or ("baseline" if "baseline" in arms else "linear" if "linear" in arms else next(iter(arms)))
    if baseline not in arms:
        raise CompareError(f"--baseline={baseline!r} is not an arm of these runs: arms are {sorted(arms)}")
    return baseline


def table(runs, baseline: str, step: int | None, metric: Metric = LOSS, prices: dict | None = None):
    """The table as markdown lines, at equal steps, then at equal FLOPs and equal time; footer included."""
    check_metric(runs, metric)
    common = sorted(set.intersection(*(set(r.evals) for r in runs)))
    if step is None:
        if not common:
            raise CompareError("the runs share no evaluation step: pass --step")
        step = common[-1]
    elif step not in common:
        raise CompareError(f"step {step} is not evaluated in every run: common evaluation steps are {common[-5:]} ...")
    bad = [r.name for r in runs if not math.isfinite(r.evals[step][metric.key])]
    if bad:
        raise CompareError(
            f"{', '.join(bad)} has a non-finite {metric.column} at step {step}: leave it out, or pass --step"
        )
    ended = sorted({r.evals[step]["ended"] for r in runs if "ended" in r.evals[step]})
    where = f"each run's last evaluation (steps {', '.join(map(str, ended))})" if ended else f"step {step}"
    lines = [
        f"{metric.name} at {where}; improvement over {baseline} ({'relative' if metric.relative else 'in points'}"
        f"; positive: {metric.better}), its 95 % interval and t-test p (paired by seed where both arms ran the "
        "same seeds, else Welch), and p adjusted for the arms compared (Holm)",
        "",
        *rows(runs, baseline, step, metric),
        *equal_cost_tables(runs, baseline, step, metric, prices, worst_first(runs, step, metric)),
    ]
    return lines + ["", fingerprint_report(runs)]


def worst_first(runs, step: int, metric: Metric) -> list[str]:
    """The arms by their mean at step, worst first and best last, as the paper's table ends with its best arm."""
    arms = arms_of(runs)
    means = {a: statistics.mean(r.evals[step][metric.key] for r in rs) for a, rs in arms.items()}
    return sorted(arms, key=lambda a: means[a], reverse=not metric.higher_is_better)


def rows(runs, baseline: str, step: int, metric: Metric, order: list[str] | None = None) -> list[str]:
    """The table's header and one row per arm at step, in order (default: worst_first's)."""
    arms = arms_of(runs)
    values = {a: [r.evals[step][metric.key] for r in rs] for a, rs in arms.items()}
    lines = [
        f"| arm | non-emb. params | {metric.column} | runs | vs baseline | 95 % interval | p | p (Holm) "
        "| tokens seen |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    versus = {a: versus_baseline(rs, arms[baseline], step, metric) for a, rs in arms.items() if a != baseline}
    adjusted = holm({a: v[2] for a, v in versus.items()})
    for arm in order or worst_first(runs, step, metric):
        rs = arms[arm]
        vals = values[arm]
        mean = statistics.mean(vals)
        shown = f"{mean:.4f} ± {statistics.stdev(vals):.4f}" if len(vals) > 1 else f"{mean:.4f}"
        gain, interval, p, kind = versus.get(arm, (0, None, None, ""))
        ci = f"[{metric.gain(interval[0])}, {metric.gain(interval[1])}]" if interval else "—"
        n = rs[0].non_embedding_params()
        holm_p = "—" if adjusted.get(arm) is None else f"{adjusted[arm]:.3g}"
        tokens = statistics.mean(r.evals[step].get("tokens") or 0 for r in rs)
        lines.append(
            f"| {arm} | {'—' if n is None else f'{n / 1e6:.2f}M'} | {shown} | {len(vals)} | {metric.gain(gain)} | {ci} "
            f"| {'—' if p is None else f'{p:.3g} ({kind})'} | {holm_p} | {tokens:,.0f} |"
        )
    return lines


def equal_cost_tables(runs, baseline: str, step: int, metric: Metric, prices: dict | None, order=None) -> list[str]:
    """The table again at equal training FLOPs and at equal training time (nlq/comparison/cost.py): each run
    read where it had spent what the cheapest run had spent by step; an axis some run cannot give is named.
    The rows keep the order of the table at equal steps (order), so that the tables read row by row."""
    per_token = cost.per_token(runs, baseline, prices)
    keys = list(dict.fromkeys([metric.key, "val_loss"]))
    lines = []
    for axis, costs in per_token.items():
        title, unit = cost.AXES[axis]
        try:
            budget, read = cost.at_equal_cost(runs, step, costs, keys)
        except cost.CostError as e:
            lines += ["", f"Not at {title}: {e}"]
            continue
        stand_ins = [Run(r.name, r.config, [{"step": step, **read[r.name]}]) for r in runs]
        how = {
            "seconds": " (each run's step times as it logged them)",
            "priced": " (priced by --prices: each arm's step at its ratio to linear's)",
        }.get(axis, "")
        lines += [
            "",
            f"At {title}: each run read where it had spent {budget:.3g} {unit}{how}, the least any run had spent "
            f"by step {step}; linear between evaluations (tokens seen: where each was read)",
            *([load_note(runs, baseline)] if axis == "seconds" else []),
            "",
            *rows(stand_ins, baseline, step, metric, order),
        ]
    missing = [cost.AXES[a][0] for a in cost.AXES if a not in per_token and (a != "priced" or prices)]
    if missing:
        lines += ["", f"Not at {' or '.join(missing)}: some run lacks it (no step times logged, or no model config)"]
    return lines


def load_note(runs, baseline: str) -> str:
    """Whether the measured times compare like with like: runs timed at different hours met different loads."""
    apart = cost.not_side_by_side(runs, baseline)
    fair = "a fair time is the prices' (bench.py times the arms side by side; pass its report as --prices=FILE)"
    if apart is None:
        return f"Whether the arms' steps were timed side by side cannot be told (some log keeps no clock): {fair}"
    if apart:
        return (
            f"Not timed side by side: no run of {', '.join(apart)} trained while one of {baseline} did, so the "
            f"machine's load then may differ and these times may differ for it alone; {fair}"
        )
    return f"Every arm trained while {baseline} did (timed side by side, under the same load)"


def check_metric(runs, metric: Metric) -> None:
    """Every run's evaluations hold the metric: accuracy is measured on datasets of examples only."""
    lacking = [r.name for r in runs if not all(metric.key in e for e in r.evals.values())]
    if lacking:
        raise CompareError(
            f"{lacking[0]} records no {metric.key} ({metric.name}): accuracy is measured on datasets of examples "
            "(data/synthetic_tasks/prepare.py); compare text runs by --metric=val_loss"
        )


def plot(runs, path, baseline: str, smooth=0.9, metric: Metric = LOSS):
    save_figure(figure(runs, baseline, smooth, metric), path)


def figure(runs, baseline: str, smooth=0.9, metric: Metric = LOSS):
    """Three panels: the improvement over the baseline (mean ± std over seeds; the table's sign: up is
    better), the metric itself, and the train loss as a bias-corrected moving average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_gain, ax_val, ax_train) = plt.subplots(1, 3, figsize=(20, 5.5), width_ratios=(2, 1, 1))
    colors = {arm: f"C{i}" for i, arm in enumerate(sorted({r.arm for r in runs}))}
    improvement_panel(ax_gain, runs, baseline, colors, metric)
    drawn = {ax_val: [], ax_train: []}
    for r in runs:
        label = f"{r.arm} (seed {r.seed})"
        steps = sorted(r.evals)
        values = [r.evals[s][metric.key] for s in steps]
        ax_val.plot(steps, values, color=colors[r.arm], label=label, marker=".")
        drawn[ax_val].append((steps, values))
        steps = sorted(r.steps)
        values = smoothed([r.steps[s]["loss"] for s in steps], smooth)
        ax_train.plot(steps, values, color=colors[r.arm], label=label)
        drawn[ax_train].append((steps, values))
    for ax, curves in drawn.items():  # the first steps' fall would flatten the arms' gap to a line
        last = max(steps[-1] for steps, _ in curves if steps)
        if last > 0:  # runs evaluated at step 0 alone keep matplotlib's axis
            ax.set_xlim((1 - LATE) * last, 1.02 * last)
        ax.set_ylim(*late_limits(curves))
    unit = "%" if metric.relative else "points"
    late = f"\nthe last {LATE:.0%} of training"
    titles = (
        f"improvement over {baseline} ({unit}; above 0: {metric.better}),\nmean ± std over seeds",
        metric.name + late,
        f"train loss (moving average, beta {smooth}, bias-corrected){late}",
    )
    for ax, title in zip((ax_gain, ax_val, ax_train), titles):
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


LATE = 0.4  # the share of training whose values set a panel's y-axis


def late_limits(curves) -> tuple[float, float]:
    """A y-axis for curves [(steps, values)] that holds every value of the last LATE of training, padded; the
    earlier values (a loss falling from ln(vocabulary)) run off it."""
    last = max(steps[-1] for steps, _ in curves if steps)
    late = [v for steps, values in curves for s, v in zip(steps, values) if s >= (1 - LATE) * last and math.isfinite(v)]
    if not late:
        return (0.0, 1.0)
    pad = 0.15 * (max(late) - min(late)) or 0.05 * abs(max(late)) or 0.1
    return (min(late) - pad, max(late) + pad)


def improvement_panel(ax, runs, baseline: str, colors: dict, metric: Metric = LOSS) -> None:
    """The improvement curves in %, scaled to the last 40 % of training; earlier points beyond the scale are
    drawn on its edge as open triangles. Each curve ends in its label, the table's number, kept apart."""
    arms = arms_of(runs)
    curves = {
        arm: (steps, [100 * m for m in mean], [100 * s for s in std])
        for arm, (steps, mean, std) in improvement_curves(runs, baseline, metric).items()
    }
    late = [
        v
        for steps, mean, std in curves.values()
        for st, m, s in zip(steps, mean, std)
        if st >= 0.6 * steps[-1]
        for v in (m - s, m + s)
    ]
    pad = 0.3 * (max(late) - min(late)) or 0.1
    low, high = min(late) - pad, max(late) + pad
    for arm, (steps, mean, std) in curves.items():
        shown = [min(max(m, low), high) for m in mean]
        ax.plot(steps, shown, color=colors[arm], label=f"{arm} (n={len(arms[arm])})", marker=".")
        band = ([m - s for m, s in zip(shown, std)], [m + s for m, s in zip(shown, std)])
        ax.fill_between(steps, *band, color=colors[arm], alpha=0.2)
        for edge, marker in ((high, "^"), (low, "v")):  # off the scale: an open triangle on its edge
            off = [st for st, m in zip(steps, mean) if (m > high if edge == high else m < low)]
            if off:
                ax.scatter(
                    off,
                    [edge] * len(off),
                    marker=marker,
                    facecolors="none",
                    edgecolors=colors[arm],
                    zorder=3,
                    clip_on=False,
                )
    ax.set_ylim(low, high)
    last = max(steps[-1] for steps, _, _ in curves.values())
    if last > 0:  # room inside the panel for the labels at the curves' ends
        ax.set_xlim(right=last * 1.25)
    gap, y_label = 0.05 * (high - low), -math.inf
    for y, arm in sorted((mean[-1], arm) for arm, (_, mean, _) in curves.items()):
        y_label = max(y, y_label + gap)
        end = curves[arm][0][-1]
        ax.annotate(f" {arm} {metric.gain(y / 100)}", (end, y_label), color=colors[arm], fontsize=8, va="center")
    ax.axhline(0, color="black", linewidth=0.8)
    if metric.relative:
        ax.set_ylabel(f"(val loss of {baseline} - val loss) / val loss of {baseline}, %")
    else:
        ax.set_ylabel(f"{metric.column} - {metric.column} of {baseline}, points")
    ax.legend(fontsize=8, loc="lower left")


def tuned(runs, keys, baseline: str, metric: Metric = LOSS, png=None, md=None, json_path=None, prices=None) -> None:
    """The two-stage comparison (nlq/comparison/tuning.py): its table (stage 2 also at equal FLOPs and time),
    and its JSON and figure where asked."""
    check_metric(runs, metric)
    result = tuning.report(runs, keys, baseline, metric)
    result["batches"] = fingerprint_report(runs)  # every run of both stages on the same batches, step by step
    fresh = [r for r in runs if tuning.stage_of(r) == "report"]
    costs = equal_cost_tables(fresh, baseline, result["step"], metric, prices, tuning.arm_order(result))
    lines = [*tuning.markdown(result), *costs, "", result["batches"]]
    print("\n".join(lines))
    if md:
        atomic_write_text(md, "\n".join(lines) + "\n")
        print(f"\ntable: {md}")
    if json_path:
        atomic_write_json(json_path, result)
        print(f"result: {json_path}")
    if png:
        tuning.plot(result, png)
        print(f"\nfigure: {png}")


def check_outputs(png=None, md=None, json_path=None, tune=None) -> None:
    """The figure, table and JSON paths can be written, and none is one of the project's pages, before any run
    is read."""
    for option, path in (("--png", png), ("--md", md), ("--json", json_path)):
        if path:
            check_not_a_project_page(option, path)
    if png:
        check_figure_path("--png", png)
    for option, path in (("--md", md), ("--json", json_path)):
        if path:
            check_writable(option, path)
    if json_path and not tune:
        raise CompareError("--json writes a two-stage comparison: give --tune=KEY as well")


def read_runs(patterns=(), wandb_path=None, group=None, references=()) -> list:
    """The runs of out_dirs or glob patterns (or of a wandb project's group), and official run directories."""
    if wandb_path:
        import wandb

        found = wandb.Api().runs(wandb_path, filters={"group": group} if group else {})
        runs = [Run.from_wandb(r) for r in found]
    else:
        # A pattern, or the shell's expansion of one, keeps the directories it matches: a sweep's out_root also
        # holds its figure, table and JSON, and a file is never a run (a path that is not there stays an error).
        named = [Path(m) for p in patterns for m in ([g for g in glob.glob(p) if Path(g).is_dir()] or [p])]
        twice = next((p for i, p in enumerate(named) if p.resolve() in {q.resolve() for q in named[:i]}), None)
        if twice is not None:  # it would be counted once, and the reader would not know
            raise CompareError(f"{twice} is named twice: name each run once")
        paths = sorted(m for m in named if not m.is_file())
        if named and not paths:
            raise CompareError(f"{named[0]} is a file, not a run: name train.py out_dirs (config.json, metrics.jsonl)")
        runs = [Run.from_dir(path) for path in paths]
    runs += [Run.from_official(spec) for spec in references]
    check_distinct(runs)
    return runs


WHERE = ("out_dir",)  # config fields that say where a run was written, not what it computed


def check_distinct(runs) -> None:
    """No run is counted twice: two runs whose configs agree in everything but WHERE (a run copied to another
    folder, or the same seed trained again) are one sample of their arm, and would narrow its interval."""
    seen = {}
    for r in runs:
        if r.config.get("official"):  # an official run directory's config holds its model, not where it was made
            continue
        key = json.dumps({k: v for k, v in r.config.items() if k not in WHERE}, sort_keys=True, default=str)
        if key in seen:
            raise CompareError(
                f"{seen[key]} and {r.name} are one run: the same config (arm {r.arm}, seed {r.seed}) apart from "
                "out_dir, a copy or the same seed trained again; name one of them"
            )
        seen[key] = r.name


def at_end(runs, step=None) -> list:
    """Each run as its last evaluation alone, at one shared step (runs of different lengths compared where each
    ended: e.g. an arm given fewer steps for equal time). The step's own record keeps the tokens each saw."""
    if step is not None:
        raise CompareError("--at_end compares each run at its own last evaluation: leave --step out")
    last = max(max(r.evals) for r in runs)
    out = []
    for r in runs:  # its train records (step times, fingerprints) and earlier evaluations (the cost axes) kept
        end = max(r.evals)
        earlier = [e for s, e in sorted(r.evals.items()) if s < end]
        out.append(Run(r.name, r.config, [*r.steps.values(), *earlier, {**r.evals[end], "step": last, "ended": end}]))
    return out


def compare(
    runs, baseline=None, step=None, metric="val_loss", tune=None, png=None, md=None, json_path=None, prices=None
) -> None:
    """The table (printed, and written to md), the figure (png) and, with tune (a two-stage comparison over
    those grid keys, comma-separated), its JSON, of runs against the baseline arm; prices: cost.read_prices's,
    for the table at equal time."""
    if not runs:
        raise CompareError("no runs given: name out_dirs, or --wandb ENTITY/PROJECT --group GROUP")
    baseline = resolve_baseline(runs, baseline)
    metric = METRICS[metric]
    if tune:
        keys = [k.strip() for k in tune.split(",") if k.strip()]
        return tuned(runs, keys, baseline, metric, png, md, json_path, prices)
    lines = table(runs, baseline, step, metric, prices)
    print("\n".join(lines))
    if md:
        atomic_write_text(md, "\n".join(lines) + "\n")
        print(f"\ntable: {md}")
    if png:
        plot(runs, png, baseline, metric=metric)
        print(f"\ncurves: {png}")
