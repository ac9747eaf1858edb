"""The synthetic screen (screen.py): the arms on tasks where attention decides the outcome, under the fair
protocol of tuning.py, per task setting: every arm x grid point on the tune seeds, each arm's point chosen
by test accuracy, then fresh seeds. What this module holds: the screens (named lists of task settings), and
the report built from the run directories alone.

Per setting the report gives the key-blind floor (nlq/eval/accuracy.py, from the test split), each arm's
accuracy with its improvement over the tuned baseline in points (paired by seed, 95 % interval, p, Holm over
the arms), and each arm's tokens to the midpoint between the floor and 100 %: how soon it learns to recall,
the sensitive measure near a task's transition (a stage-2 run short of it at its budget is read on its
continuation, nlq/comparison/screen.py's; one that never reaches it counts the tokens it ran, a lower bound,
and is said so). A setting is informative when the tuned baseline's accuracy lies clearly
above the floor (a quarter of the way to 100 % or more) and below saturation. Overall: per seed, each arm's
accuracy averaged over the informative settings (or those named before the run) and its tokens to the
midpoint averaged geometrically over them, compared with the baseline's likewise.
"""

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from nlq.common.errors import UserError
from nlq.comparison import cost, tuning
from nlq.comparison.stats import METRICS, Metric, holm, mean_interval, ratio, versus_baseline, who_first
from nlq.data.tasks import TaskError, generate
from nlq.eval.accuracy import midpoint, tokens_to_reach


class ScreenError(UserError):
    """A screen that cannot be run: the line says what to change."""


ACCURACY = METRICS["val_acc"]
TOKENS = Metric("tokens_to_midpoint", False, True, "tokens to the midpoint accuracy", "tokens to midpoint")
TO_MIDPOINT = {  # the cost of reaching the midpoint, per axis of nlq/comparison/cost.py (tokens: the unit)
    "tokens": TOKENS,
    "flops": Metric("flops_to_midpoint", False, True, "training FLOPs to the midpoint accuracy", "FLOPs to midpoint"),
    "seconds": Metric("seconds_to_midpoint", False, True, "training time to the midpoint accuracy", "time to midpoint"),
    "priced": Metric(
        "priced_to_midpoint", False, True, "time to the midpoint at the prices' step ratios", "priced time to midpoint"
    ),
}
ABOVE_FLOOR = 0.25  # informative: the baseline at least this far of the way from the floor to 100 %
SATURATED = 0.995  # ... and below this accuracy
EVALUATIONS = 16  # per run: the learning curve's points
SEED_ROUNDS = (5, 8)  # stage 2's seeds where the rule asks for more (wanting_seeds): to 5, then to 8


@dataclass(frozen=True)
class Setting:
    """One task setting of a screen: its dataset (nlq/data/tasks.py) and the length of a run on it."""

    name: str
    task: str
    settings: dict  # the task's settings, vocab_size and seq_len included
    max_iters: int  # a run's steps (64 examples a step with the screen's configs)
    train_targets: str = "probed"
    num_train: int = 12_800
    num_test: int = 1_280
    seed: int = 12345
    axis: tuple = ()  # (key, value): its place on a difficulty axis of its task
    model: dict = field(default_factory=dict)  # the model's size where it is not the arms' config's (a ladder)

    def options(self, data_dir) -> list[str]:
        """train.py's options for a run on this setting: its data, context and vocabulary, its length (warmup
        a twentieth, cosine to the end), an evaluation every sixteenth of it, and its model's size if set."""
        s = self.settings
        return [
            *(f"--{k}={v}" for k, v in self.model.items()),
            f"--dataset={data_dir}",
            f"--block_size={s['seq_len']}",
            f"--vocab_size={s['vocab_size']}",
            f"--max_iters={self.max_iters}",
            f"--lr_decay_iters={self.max_iters}",
            f"--warmup_iters={self.max_iters // 20}",
            f"--eval_interval={max(1, self.max_iters // EVALUATIONS)}",
        ]


def recall(name, frac_noise=0.0, steps=1000, vocab=24, seq=32, noise=8, **kw):
    """MAD's in-context recall, trained on the probed positions only: 8 keys and 8 values (vocab 24 with 8
    noise ids, used or not, so that its noise axis keeps one vocabulary)."""
    settings = dict(vocab_size=vocab, seq_len=seq, noise_vocab_size=noise, frac_noise=frac_noise)
    return Setting(name, "in-context-recall", settings, steps, **kw)


def mqar(name, pairs=6, steps=3500, vocab=64, seq=24, **kw):
    return Setting(name, "mqar", dict(vocab_size=vocab, seq_len=seq, num_kv_pairs=pairs), steps, **kw)


def mad(task: str, baseline: dict, changes: dict, epochs=200, batch=64) -> list:
    """MAD's benchmark for one task (its configs/tasks/*.yml): the baseline setting and each change of it,
    trained on the whole sequence as MAD trains (the recall tasks) for its 200 epochs of the training set."""
    out = []
    for key, values in [(None, [None]), *changes.items()]:
        for value in values:
            setting = {**baseline, **({key: value} if key else {})}
            n = setting.pop("num_train_examples", 12_800)
            targets = "all" if "recall" in task else "probed"
            name = f"{task}" + (f"-{key}={value}" if key else "")
            out.append(Setting(name, task, setting, epochs * n // batch, targets, n, axis=(key, value) if key else ()))
    return out


MAD_RECALL = dict(vocab_size=[32, 64, 128], seq_len=[256, 512, 1024], num_train_examples=[6400, 3200, 1600, 800])
# MAD's fuzzy recall with 2-token keys: the baseline leaves its floor at 5e-4 within 2,250 steps (probes in
# docs/screening.md; at 1e-3 and 3e-3 it did not in 3,000)
FUZZY = Setting(
    "fuzzy-recall", "fuzzy-in-context-recall", dict(vocab_size=16, seq_len=32, k_motif_size=2, v_motif_size=1), 4000
)
SCREENS = {
    # calibrated on the 2-core VM (docs/screening.md): each setting's baseline leaves its plateau well inside
    # the run at its tuned learning rate; about an hour with 2 runs side by side
    "default": [
        recall("recall", axis=("frac_noise", 0.0)),
        recall("recall-noise60", frac_noise=0.6, steps=2000, axis=("frac_noise", 0.6)),
        mqar("mqar", axis=("num_kv_pairs", 6)),
        FUZZY,
    ],
    # more settings (the noise and key-count axes, a larger vocabulary, longer context, fuzzy keys, selective
    # copying, memorization): screen.py --screen=full --dry_run says its cost
    "full": [
        recall("recall", axis=("frac_noise", 0.0)),
        recall("recall-noise30", frac_noise=0.3, steps=1500, axis=("frac_noise", 0.3)),
        recall("recall-noise60", frac_noise=0.6, steps=2000, axis=("frac_noise", 0.6)),
        recall("recall-v40", vocab=40, steps=4000),
        recall("recall-l64", seq=64, steps=2500),
        mqar("mqar-4", pairs=4, steps=2000, axis=("num_kv_pairs", 4)),
        mqar("mqar", axis=("num_kv_pairs", 6)),
        mqar("mqar-8", pairs=8, seq=32, steps=6000, axis=("num_kv_pairs", 8)),
        FUZZY,
        Setting("selective-copying", "selective-copying", dict(vocab_size=16, seq_len=64, num_tokens_to_copy=8), 4000),
        Setting("memorization", "memorization", dict(vocab_size=256, seq_len=32), 4000, num_train=256),
    ],
    # MAD's own benchmark (arXiv 2403.17844, athms/mad-lab's configs/tasks/*.yml): every task's baseline and
    # changes, 200 epochs each, the recall tasks trained on the whole sequence; a cluster's or GPUs' work
    "mad": [
        *mad("in-context-recall", dict(vocab_size=16, seq_len=128), MAD_RECALL),
        *mad("fuzzy-in-context-recall", dict(vocab_size=16, seq_len=128, k_motif_size=3, v_motif_size=3), MAD_RECALL),
        *mad(
            "noisy-in-context-recall",
            dict(vocab_size=32, seq_len=128, noise_vocab_size=16, frac_noise=0.2),
            {**MAD_RECALL, "vocab_size": [48, 80, 144], "frac_noise": [0.4, 0.6, 0.8]},
        ),  # fmt: skip
        *mad(
            "selective-copying",
            dict(vocab_size=16, seq_len=256, num_tokens_to_copy=16),
            {
                "vocab_size": [32, 64, 128],
                "seq_len": [512, 1024],
                "num_train_examples": [6400, 3200, 1600, 800],
                "num_tokens_to_copy": [32, 64, 96],
            },
        ),  # fmt: skip
        *mad(
            "memorization",
            dict(vocab_size=256, seq_len=32, num_train_examples=256),
            {"vocab_size": [512, 1024, 2048, 4096, 8192]},
        ),  # fmt: skip
    ],
}
GRIDS = {"default": "5e-4,1e-3,2e-3,4e-3", "full": "5e-4,1e-3,2e-3,4e-3", "mad": "1e-4,5e-4,1e-3"}


def read_screen(path) -> tuple[list, str | None]:
    """A screen of one's own from a JSON file: {"settings": [{"name", "task", "settings", "max_iters", and
    optionally "train_targets", "num_train", "num_test", "seed", "axis"}, ...], "grid": "V1,V2"}: (the
    settings, its learning rates or None)."""
    try:
        spec = json.loads(Path(path).read_text())
        settings = [Setting(**{**s, "axis": tuple(s.get("axis", ()))}) for s in spec["settings"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ScreenError(
            f"{path} is not a screen ({type(e).__name__}: {e}): give "
            '{"settings": [{"name", "task", "settings": {"vocab_size", "seq_len", ...}, "max_iters"}, ...]}'
        ) from None
    names = [s.name for s in settings]
    if not settings or len(set(names)) < len(names) or any(not n or "/" in n for n in names):
        raise ScreenError(f"{path}: give one setting or more, each with its own name (no '/')")
    return settings, spec.get("grid")


LADDER_KEYS = ("n_embd", "n_layer")


def ladder_sizes(option: str) -> tuple[str, list[int]]:
    """--ladder=KEY=V1,V2,...'s key and sizes, or one line saying what a ladder is."""
    key, _, values = option.partition("=")
    try:
        sizes = [int(v) for v in values.split(",")]
    except ValueError:
        sizes = []
    if key not in LADDER_KEYS or len(sizes) < 2 or len(set(sizes)) < len(sizes) or min(sizes) < 1:
        raise ScreenError(
            f"--ladder={option}: give {' or '.join(LADDER_KEYS)}=V1,V2,... with two sizes or more, each a whole "
            "number >= 1, each once (e.g. --ladder=n_embd=32,64,128)"
        )
    return key, sizes


def ladder_names(names: list[str], option: str | None) -> list[str]:
    """The settings a ladder makes of names (without one: names)."""
    if not option:
        return list(names)
    key, sizes = ladder_sizes(option)
    return [f"{name}-{key}={size}" for name in names for size in sizes]


def ladder(settings, option: str, head_width: int) -> list[Setting]:
    """--ladder=KEY=V1,V2,...: each setting at each model size, a setting of its own (NAME-KEY=V, its size on its
    difficulty axis), so that each size is tuned on its own stage 1. Along n_embd the head width is held
    (head_width, the arms' config's: n_head = n_embd / it); along n_layer the width is the config's."""
    key, sizes = ladder_sizes(option)
    if key == "n_embd" and any(w % head_width for w in sizes):
        odd = next(w for w in sizes if w % head_width)
        raise ScreenError(
            f"--ladder={option}: n_embd={odd} is not a whole number of heads {head_width} wide (the head width is "
            f"held at the arms' config's): give multiples of {head_width}"
        )
    model = {w: {"n_embd": w, "n_head": w // head_width} if key == "n_embd" else {"n_layer": w} for w in sizes}
    named = iter(ladder_names([s.name for s in settings], option))
    return [replace(s, name=next(named), axis=(key, w), model=model[w]) for s in settings for w in sizes]


def json_ready(setting: Setting) -> dict:
    """A setting as screen_plan.json and a screen of one's own write it."""
    held = {k: v for k, v in setting.__dict__.items() if k != "model" or v}  # plans made before ladders hold none
    return {**held, "axis": list(setting.axis)}


def check_settings(settings) -> None:
    """Every setting builds its task (one example of each split), before any run or directory."""
    for s in settings:
        held = s.settings if isinstance(s.settings, dict) else {}
        missing = [k for k in ("vocab_size", "seq_len") if not isinstance(held.get(k), int) or held[k] < 1]
        if missing:
            raise ScreenError(f"setting {s.name}: give its settings {' and '.join(missing)} (positive integers)")
        sizes = s.model if isinstance(s.model, dict) else {"model": s.model}
        if any(k not in ("n_embd", "n_head", "n_layer") or not isinstance(v, int) or v < 1 for k, v in sizes.items()):
            raise ScreenError(f"setting {s.name}: model {s.model}: give n_embd, n_head or n_layer, whole numbers >= 1")
        if not isinstance(s.max_iters, int) or isinstance(s.max_iters, bool) or s.max_iters < 1:
            raise ScreenError(f"setting {s.name}: max_iters={s.max_iters!r}: give its steps, an integer >= 1")
        try:
            generate(s.task, held, 1, 1, s.seed, s.train_targets)
        except TaskError as e:
            raise ScreenError(f"setting {s.name}: {e}") from None
        except TypeError as e:  # a setting its task does not take
            raise ScreenError(f"setting {s.name}: {e}: give only the task's own settings (nlq/data/tasks.py)") from None


def by_stage(runs) -> tuple[list, list]:
    return [r for r in runs if tuning.stage_of(r) == "tune"], [r for r in runs if tuning.stage_of(r) == "report"]


def curve(run) -> list[tuple[int, float]]:
    """(training tokens, test accuracy) at each evaluation of a run."""
    return [(run.evals[s]["tokens"], run.evals[s]["val_acc"]) for s in sorted(run.evals)]


def tokens_to_midpoint(run, floor: float, continued=None) -> tuple[float, bool]:
    """(tokens at which the run's accuracy first reaches the midpoint, whether it did). A run that does not by
    its budget is read on its continuation, where it has one (the same run carried on at its min_lr,
    nlq/comparison/screen.py's continuation); one that never does counts its last evaluation's tokens, a lower
    bound."""
    for r in filter(None, (run, continued)):
        reached = tokens_to_reach(curve(r), midpoint(floor))
        if reached is not None:
            return reached, True
    return float(curve(continued or run)[-1][0]), False


def one(seed: int, value: float, key: str = TOKENS.key):
    """A stand-in run holding one value, for stats.versus_baseline."""
    return SimpleNamespace(seed=seed, evals={0: {key: value}})


def compared(rs, base, metric: Metric, is_baseline: bool) -> dict:
    """The mean of rs's values and its improvement over base's (versus_baseline: paired by seed)."""
    mean = statistics.mean(r.evals[0][metric.key] for r in rs)
    gain, interval, p, kind = (0.0, None, None, "") if is_baseline else versus_baseline(rs, base, 0, metric)
    return {"mean": mean, "improvement": gain, "interval": list(interval) if interval else None, "p": p, "test": kind}


def adjust(arms: dict, key: str, baseline: str) -> None:
    """Holm's adjustment of arms[*][key]['p'] over the arms compared with the baseline."""
    adjusted = holm({a: r[key]["p"] for a, r in arms.items() if a != baseline})
    for arm, r in arms.items():
        r[key]["p_holm"] = adjusted.get(arm)


def setting_report(runs, keys, baseline: str, floor: dict, prices: dict | None = None, continued=None) -> dict:
    """One setting's two-stage comparison by accuracy (tuning.report's dict), with its floor, whether it is
    informative, and each arm's tokens, training FLOPs and seconds to the midpoint (cost.per_token; prices:
    cost.read_prices's) against the baseline's, paired by seed. continued: {run name: its continuation}, for
    the stage-2 runs that did not reach the midpoint by their budget: their tokens to it are read there, and
    each arm says how many of its runs reached it by the budget ('by_budget') and after ('reached')."""
    continued = continued or {}
    result = tuning.report(runs, keys, baseline, ACCURACY)
    base_acc = result["arms"][baseline]["val_acc_mean"]
    result |= {"floor": floor, "midpoint": midpoint(floor["token"])}
    result["informative"] = floor["token"] + ABOVE_FLOOR * (1 - floor["token"]) <= base_acc < SATURATED
    fresh = by_stage(runs)[1]
    arms = tuning.by_arm(fresh)
    scale = {"tokens": {r.name: 1.0 for r in fresh}, **cost.per_token(fresh, baseline, prices)}
    result["cost_axes"] = list(scale)
    reach = {
        arm: [(r.seed, *tokens_to_midpoint(r, floor["token"], continued.get(r.name)), r.name) for r in rs]
        for arm, rs in arms.items()
    }
    by_budget = {arm: sum(tokens_to_midpoint(r, floor["token"])[1] for r in rs) for arm, rs in arms.items()}
    for axis, metric in TO_MIDPOINT.items():
        if axis not in scale:
            continue
        stand_in = {arm: [one(s, t * scale[axis][n], metric.key) for s, t, _, n in rows] for arm, rows in reach.items()}
        for arm, rows in reach.items():
            entry = compared(stand_in[arm], stand_in[baseline], metric, arm == baseline)
            entry |= {"values": [r.evals[0][metric.key] for r in stand_in[arm]], "seeds": [s for s, *_ in rows]}
            entry |= {"reached": sum(ok for _, _, ok, _ in rows), "by_budget": by_budget[arm]}
            entry["continued"] = sum(r.name in continued for r in arms[arm])
            if arm != baseline:
                entry["first"] = first_to_midpoint(rows, reach[baseline], scale[axis])
                entry["ratio"] = paired_ratio(rows, reach[baseline], scale[axis])
            result["arms"][arm][metric.key] = entry
        adjust(result["arms"], metric.key, baseline)
        ratios = {a: r[metric.key]["ratio"] for a, r in result["arms"].items() if a != baseline}
        for arm, p in holm({a: r["p"] for a, r in ratios.items() if r.get("p") is not None}).items():
            ratios[arm]["p_holm"] = p
        adjusted = holm({a: r[metric.key]["first"]["p"] for a, r in result["arms"].items() if a != baseline})
        for arm, p in adjusted.items():
            result["arms"][arm][metric.key]["first"]["p_holm"] = p
    for arm, rs in arms.items():
        result["arms"][arm]["curves"] = {r.seed: curve(r) for r in rs}
        macro = [r.evals[result["step"]].get("val_acc_macro") for r in rs]
        result["arms"][arm]["val_acc_macro_mean"] = statistics.mean(macro) if None not in macro else None
    return result


def first_to_midpoint(rows, base_rows, scale: dict) -> dict:
    """stats.who_first of an arm's runs against the baseline's of the same seeds, their costs to the midpoint
    (rows: tokens_to_midpoint's (seed, tokens, reached, run name), times scale[run name] on this cost axis):
    valid where runs never reached it, whose costs are only bounds."""
    base = {seed: (tokens * scale[name], ok) for seed, tokens, ok, name in base_rows}
    return who_first([((t * scale[n], ok), base[s]) for s, t, ok, n in rows if s in base])


def paired_ratio(rows, base_rows, scale: dict) -> dict:
    """stats.ratio of an arm's costs to the midpoint over the baseline's, seed by seed (rows as
    first_to_midpoint's), where every paired figure is a value; a pair holding a bound (a run that never
    reached the midpoint) leaves only who reached it first, and the entry says how many pairs are bounds."""
    base = {seed: (tokens * scale[name], ok) for seed, tokens, ok, name in base_rows}
    pairs = [((t * scale[n], ok), base[s]) for s, t, ok, n in rows if s in base]
    bounds = sum(not (a_ok and b_ok) for (_, a_ok), (_, b_ok) in pairs)
    if bounds or not pairs:
        return {"ratio": None, "bounds": bounds, "n": len(pairs)}
    return ratio([a for (a, _), _ in pairs], [b for _, (b, _) in pairs]) | {"bounds": 0}


def seed_rounds(seeds: int, most: int) -> list[int]:
    """The seed counts stage 2 grows to, from `seeds`, where the rule asks: SEED_ROUNDS, at most `most` more."""
    return sorted({min(t, seeds + most) for t in SEED_ROUNDS if min(t, seeds + most) > seeds})


def wanting_seeds(result: dict, baseline: str) -> list[str]:
    """The arms of one setting's report (setting_report) the protocol gives more fresh seeds: every arm when
    the tuned baseline reached the midpoint in fewer than all of its seeds (the tokens it is compared on are
    then lower bounds); else each arm whose tokens-to-midpoint interval holds zero, and the baseline, its
    partner seed by seed."""
    arms = result["arms"]
    base = arms[baseline]["tokens_to_midpoint"]
    if base["reached"] < len(base["values"]):
        return sorted(arms)
    unsure = [
        arm
        for arm, r in arms.items()
        if arm != baseline and r["tokens_to_midpoint"]["interval"] is not None
        and r["tokens_to_midpoint"]["interval"][0] <= 0 <= r["tokens_to_midpoint"]["interval"][1]
    ]  # fmt: skip
    return sorted([*unsure, baseline]) if unsure else []


def overall(results: dict, runs_by_setting: dict, baseline: str, named: list | None = None) -> dict:
    """Per arm over the settings named before the run (named), else over the informative ones (all of them
    if none is): per seed its accuracy averaged over the settings and its tokens (FLOPs, seconds) to the
    midpoint averaged geometrically, against the baseline's, paired by seed; Holm over the arms. An arm
    enters with the seeds it ran in every setting."""
    if named:
        chosen = [n for n in results if n in named]
    else:
        chosen = [n for n, r in results.items() if r["informative"]] or list(results)
    axes = [a for a in TO_MIDPOINT if all(a in results[n]["cost_axes"] for n in chosen)]
    seeds = {}  # arm -> seed -> {key: [value per setting]}
    for name in chosen:
        step = results[name]["step"]
        for r in by_stage(runs_by_setting[name])[1]:
            seeds.setdefault(r.arm, {}).setdefault(r.seed, {}).setdefault(ACCURACY.key, []).append(
                r.evals[step]["val_acc"]
            )
        for arm, entry in results[name]["arms"].items():
            for axis in axes:
                key = TO_MIDPOINT[axis].key
                for seed, value in zip(entry[key]["seeds"], entry[key]["values"]):
                    seeds[arm][seed].setdefault(key, []).append(math.log(max(value, 1e-300)))
    whole = {a: {s: v for s, v in d.items() if len(v[ACCURACY.key]) == len(chosen)} for a, d in seeds.items()}
    out = {"settings": chosen, "named": bool(named), "cost_axes": axes, "arms": {}}
    mean = {ACCURACY.key: statistics.mean} | {TO_MIDPOINT[a].key: lambda v: math.exp(statistics.mean(v)) for a in axes}
    for key, average in mean.items():
        per = {a: [one(s, average(v[key]), key) for s, v in d.items()] for a, d in whole.items() if d}
        metric = ACCURACY if key == ACCURACY.key else next(m for m in TO_MIDPOINT.values() if m.key == key)
        for arm in per:
            entry = compared(per[arm], per[baseline], metric, arm == baseline)
            out["arms"].setdefault(arm, {})["accuracy" if metric is ACCURACY else key] = entry
        adjust(out["arms"], "accuracy" if metric is ACCURACY else key, baseline)
    return out


def cell(entry: dict, metric: Metric) -> str:
    """'mean (improvement [interval], p Holm)' of a compared() entry."""
    value = amount(entry["mean"], metric)
    if entry["interval"] is None:
        return value
    low, high = (metric.gain(x) for x in entry["interval"])
    holm_p = f", p {entry['p_holm']:.2g}" if entry.get("p_holm") is not None else ""
    return f"{value} ({metric.gain(entry['improvement'])} [{low}, {high}]{holm_p})"


def tokens_text(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,.0f}"


def amount(value: float, metric: Metric) -> str:
    """An accuracy, tokens, FLOPs or seconds as the tables print them."""
    if metric is ACCURACY:
        return f"{value:.4f}"
    if metric is TO_MIDPOINT["flops"]:
        return f"{value:.3g}"
    return f"{value:,.0f} s" if metric is TO_MIDPOINT["seconds"] else tokens_text(value)


def cost_metrics(axes) -> list[Metric]:
    return [TO_MIDPOINT[a] for a in axes]


def markdown(report: dict) -> list[str]:
    """The screen's tables: overall, then per setting (tuning.markdown's table, the floor, the tokens to the
    midpoint), then the budget."""
    base = report["baseline"]
    names = ", ".join(report["overall"]["settings"])
    named = report["overall"].get("named")  # a report from before --overall has no such key
    which = f"settings named before the run (--overall: {names})" if named else f"informative settings ({names})"
    lines = [
        "# The synthetic screen: every arm tuned by test accuracy per setting, reported on fresh seeds; baseline "
        f"{base}",
        "",
        "## Overall",
        "",
        f"Over the {which}: per seed, accuracy averaged "
        "and the cost of reaching the midpoint (tokens, training FLOPs, seconds) averaged geometrically over them; "
        "improvement over the tuned baseline (accuracy in points, costs relative: positive is sooner), 95 % "
        f"interval, p adjusted over the arms (Holm).{price_note(report)}",
        "",
        *cost_table(report["overall"]["arms"], report["overall"]["cost_axes"], with_accuracy=True),
    ]
    for name, result in report["settings"].items():
        lines += ["", f"## {name}", "", *setting_lines(result, report["tasks"][name])]
    lines += ["", "## Budget", "", *budget_lines(report["budget"])]
    return lines


def setting_lines(result: dict, task: dict) -> list[str]:
    floor = result["floor"]
    flag = "informative" if result["informative"] else "NOT informative (the baseline is at the floor or saturated)"
    lines = [
        f"{task['task']} {json_settings(task['settings'])}: key-blind floor {floor['token']:.3f} per token "
        f"({floor['example']:.3f} per example), midpoint {result['midpoint']:.3f}; {flag}",
        "",
        *tuning.markdown(result),
        *macro_line(result["arms"]),
        "",
        *cost_table(result["arms"], result["cost_axes"]),
        *ratio_lines(result["arms"], result["cost_axes"]),
        "",
        values_line(result["arms"]),
    ]
    return lines


def ratio_lines(arms: dict, axes) -> list[str]:
    """Each cost to the midpoint on its own scale: per arm, paired_ratio's geometric-mean ratio to the baseline,
    its interval, the sooner share, the t-test's p on log ratios (Holm over the arms) and Wilcoxon's p; or how
    many pairs are bounds. Nothing for a report made before ratios were computed."""
    lines = []
    for metric in cost_metrics(axes):
        shown = [f"{arm} {ratio_cell(r[metric.key]['ratio'])}" for arm, r in sorted(arms.items())
                 if r[metric.key].get("ratio") is not None]  # fmt: skip
        if shown:
            lines.append(f"- {metric.column}: {'; '.join(shown)}")
    if not lines:
        return []
    return [
        "",
        "Costs to the midpoint as paired ratios, arm / baseline (a duration's own scale): geometric mean [95 % "
        "interval], the share sooner (1 - ratio), the paired t-test's p on log ratios (Holm over the arms) and "
        "Wilcoxon's signed-rank p; a pair holding a bound leaves who reached it first (the table) alone:",
        "",
        *lines,
    ]


def sooner(ratio: float) -> str:
    """A cost ratio to the baseline's in words: 0.43 -> '57 % sooner', 1.2 -> '20 % later'."""
    return f"{100 * abs(1 - ratio):.0f} % {'sooner' if ratio <= 1 else 'later'}"


def ratio_cell(r: dict) -> str:
    """'0.43x [0.36, 0.53], 57 % sooner, p 6e-07 (Holm 1e-06), Wilcoxon 0.0001', or the bounds that stop it."""
    if r["ratio"] is None:
        return f"{r['bounds']} of {r['n']} pairs hold a bound: who reached it first only"
    shown = f"{r['ratio']:.2f}x"
    if r["interval"]:
        shown += f" [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}]"
    shown += f", {sooner(r['ratio'])}"
    if r["p"] is not None:
        shown += f", p {r['p']:.2g} (Holm {r['p_holm']:.2g}), Wilcoxon {r['wilcoxon_p']:.2g}"
    return shown + f" ({r['n']} pairs)"


def values_line(arms: dict) -> str:
    """How many stage-2 runs' tokens to the midpoint are values (the run reached it) rather than lower bounds
    (it ran out of steps first), over the setting's arms, and which arms hold the bounds."""
    entries = {arm: r[TOKENS.key] for arm, r in sorted(arms.items())}
    runs = sum(len(e["values"]) for e in entries.values())
    reached = sum(e["reached"] for e in entries.values())
    if reached == runs:
        return f"tokens to the midpoint: a value in all {runs} stage-2 runs"
    short = ", ".join(
        f"{arm} {len(e['values']) - e['reached']}" for arm, e in entries.items() if e["reached"] < len(e["values"])
    )
    return (
        f"tokens to the midpoint: a value in {reached} of {runs} stage-2 runs ({reached / runs:.0%}); the others "
        f"never reached it and count the tokens they ran, a lower bound: {short}"
    )


def cost_table(arms: dict, axes, with_accuracy=False) -> list[str]:
    """One row per arm: its accuracy (overall) or how many of its runs reached the midpoint (a setting), and
    its tokens, FLOPs and seconds to the midpoint, each against the baseline's."""
    metrics = cost_metrics(axes)
    lead = ["accuracy"] if with_accuracy else ["reached / runs", "first to midpoint: arm, baseline, undecided"]
    lines = ["| arm | " + " | ".join([*lead, *(m.column for m in metrics)]) + " |"]
    lines.append("|---" * (len(metrics) + len(lead) + 1) + "|")
    for arm, r in sorted(arms.items()):
        t = r[TOKENS.key]
        cells = [cell(r["accuracy"], ACCURACY)] if with_accuracy else [reached_cell(t)]
        cells += [] if with_accuracy else [first_cell(t.get("first"))]
        lines.append(f"| {arm} | " + " | ".join([*cells, *(cell(r[m.key], m) for m in metrics)]) + " |")
    return lines


def reached_cell(entry: dict) -> str:
    """'5 / 8', or where runs were continued past their budget '7 / 8 (5 by the budget)'."""
    shown = f"{entry['reached']} / {len(entry['values'])}"
    return shown + (f" ({entry['by_budget']} by the budget)" if entry.get("continued") else "")


def first_cell(first: dict | None) -> str:
    """'4, 1, 1 (p 0.38)' of first_to_midpoint's counts, its sign test's p adjusted (Holm); '—' for the baseline."""
    if first is None:
        return "—"
    p = f" (p {first['p_holm']:.2g})" if first.get("p_holm") is not None else ""
    return f"{first['arm_first']}, {first['baseline_first']}, {first['undecided']}{p}"


def price_note(report: dict) -> str:
    note = " Seconds: each run's own logged step times."
    prices = report.get("prices")
    if not prices:
        return note
    shown = ", ".join(f"{a} {v:.3f}" for a, v in sorted(prices["ratios"].items()))
    return f"{note} Priced time: tokens, each arm's at its step's ratio in {prices['file']} ({shown} x linear's)."


def macro_line(arms: dict) -> list[str]:
    """MAD's measure beside the table's per-token accuracy, where every run recorded it."""
    if any(r.get("val_acc_macro_mean") is None for r in arms.values()):
        return []
    shown = ", ".join(f"{a} {r['val_acc_macro_mean']:.4f}" for a, r in sorted(arms.items()))
    return ["", f"MAD's accuracy (torchmetrics' macro average over classes), mean over the fresh seeds: {shown}"]


def json_settings(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def budget_lines(budget: dict) -> list[str]:
    more = budget.get("continued")
    return [
        f"{budget['runs']} runs{f' ({more} of them carried on past their budget)' if more else ''}, "
        f"{budget['tokens']:,} training tokens, {budget['flops']:.3g} training FLOPs; "
        f"{budget['hours']:.2f} hours of runs, {budget['wall_hours']:.2f} hours from the first run's start to the "
        f"last one's end ({budget['jobs']} at a time, {budget['threads']} threads each"
        + (f", on {budget['machine']})" if budget.get("machine") else ")")  # reports before records said none
    ]


def budget(runs, continued: dict) -> dict:
    """What the screen spent, from its runs' records (nlq/comparison/records.py): its runs, their training tokens
    and FLOPs (tuning.budget) with the steps their continuations added (continued: {run name: its
    continuation}), the hours of the runs (each from its start to its log's last write) and from the first start
    to the last end, and the machines, runs at a time and threads each they ran with."""
    spent, more = tuning.budget(runs), tuning.budget(list(continued.values()))
    less = tuning.budget([r for r in runs if r.name in continued])  # the steps a continuation copied
    for key in ("tokens", "flops"):
        spent[key] += more[key] - less[key]
    spent["continued"] = len(continued)
    spans = [r.timing["wall"] for r in [*runs, *continued.values()]]
    hours = sum(end - start for start, end in spans) / 3600
    wall = (max(e for _, e in spans) - min(s for s, _ in spans)) / 3600
    ran = {key: sorted({r.timing[key] for r in runs}, key=str) for key in ("machine", "jobs", "threads")}
    return spent | {"hours": hours, "wall_hours": wall} | {k: " or ".join(map(str, v)) for k, v in ran.items()}


def plot_accuracy(report: dict, path) -> None:
    """Accuracy per arm and setting (mean ± std over the fresh seeds), each setting's floor a dashed line and a
    bar below it said so; the legend beside the axes (never over a bar at 1.0), the axis tall enough for every
    error bar, and the screen and its seeds in the title."""
    plt = pyplot()
    names, arms = list(report["settings"]), sorted(report["overall"]["arms"] or report_arms(report))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(names) * len(arms) / 3 + 1.5), 4.5))
    width, top = 0.8 / len(arms), 1.0
    for i, arm in enumerate(arms):
        for j, name in enumerate(names):
            r = report["settings"][name]["arms"].get(arm, {})
            mean, std = r.get("val_acc_mean", math.nan), r.get("val_acc_std") or 0.0
            x = j + (i - (len(arms) - 1) / 2) * width
            ax.bar(x, mean, width, yerr=std, capsize=3, color=f"C{i}", label=arm if j == 0 else None)
            top = max(top, mean + std) if math.isfinite(mean) else top
            if mean < report["settings"][name]["floor"]["token"]:
                ax.text(x, mean + std + 0.02, "below floor", rotation=90, ha="center", va="bottom", fontsize=7)
    for j, name in enumerate(names):
        floor = report["settings"][name]["floor"]["token"]
        ax.hlines(floor, j - 0.45, j + 0.45, colors="black", linestyles="dashed", linewidth=1)
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set(ylim=(0, top + 0.04), ylabel="test accuracy per scored token", title=accuracy_title(report))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="arm", title_fontsize=8)
    save(fig, path)


def accuracy_title(report: dict) -> str:
    """The screen, its fresh seeds (those of the curves drawn) and what the bars are."""
    seeds = sorted({int(s) for setting in report["settings"].values() for r in setting["arms"].values()
                    for s in r.get("curves", {})})  # fmt: skip
    screen = report.get("screen")
    return (
        f"{f'screen {screen}: ' if screen else ''}test accuracy at the budget, mean ± std over fresh seeds "
        f"{spans(seeds)}; dashed: floor"
    )


def spans(numbers: list[int]) -> str:
    """Sorted whole numbers as runs: [2, 3, 4, 7] -> '2-4, 7'."""
    runs = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def plot_curves(report: dict, path) -> None:
    """Per setting, each arm's test accuracy against training tokens (mean over the fresh seeds), with the
    floor (dashed) and the midpoint (dotted)."""
    plt = pyplot()
    names = list(report["settings"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        result = report["settings"][name]
        for arm, r in sorted(result["arms"].items()):
            runs = list(r["curves"].values())
            tokens = [t for t, _ in runs[0]]
            mean = [statistics.mean(c[i][1] for c in runs if i < len(c)) for i in range(len(tokens))]
            ax.plot([t / 1e6 for t in tokens], mean, label=arm)
        ax.axhline(result["floor"]["token"], color="black", linestyle="dashed", linewidth=1)
        ax.axhline(result["midpoint"], color="grey", linestyle="dotted", linewidth=1)
        ax.set(title=name, xlabel="training tokens (M)", ylabel="test accuracy", ylim=(0, 1.02))
    axes[0][0].legend(fontsize=8)
    save(fig, path)


def axes_of(report: dict) -> dict:
    """{(task, key): [(value, setting name)]}: the difficulty axes the screen ran (two or more settings of a
    task placed on one key); a ladder of model sizes is ladder_of's."""
    out = {}
    for name, task in report["tasks"].items():
        if task["axis"] and task["axis"][0] not in LADDER_KEYS:
            out.setdefault((task["task"], task["axis"][0]), []).append((task["axis"][1], name))
    return {k: sorted(v) for k, v in out.items() if len(v) > 1}


def plot_axes(report: dict, path) -> bool:
    """Accuracy (mean ± std over the fresh seeds) against each difficulty axis that was run; False (and no
    figure) when none was."""
    found = axes_of(report)
    if not found:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(1, len(found), figsize=(4.5 * len(found), 3.8), squeeze=False)
    for ax, ((task, key), points) in zip(axes[0], found.items()):
        for arm in sorted(report["settings"][points[0][1]]["arms"]):
            rows = [report["settings"][name]["arms"][arm] for _, name in points]
            ax.errorbar([v for v, _ in points], [r["val_acc_mean"] for r in rows],
                        yerr=[r["val_acc_std"] or 0.0 for r in rows], marker="o", capsize=3, label=arm)  # fmt: skip
        ax.set(title=task, xlabel=key, ylabel="test accuracy", ylim=(0, 1.02))
        ax.legend(fontsize=8)
    save(fig, path)
    return True


def ladder_of(report: dict) -> dict:
    """{(setting, key): [(size, setting name)]}: the ladders the screen ran (--ladder's settings NAME-KEY=V)."""
    out = {}
    for name, task in report["tasks"].items():
        if task["axis"] and task["axis"][0] in LADDER_KEYS:
            base = name.rsplit(f"-{task['axis'][0]}=", 1)[0]
            out.setdefault((base, task["axis"][0]), []).append((task["axis"][1], name))
    return {k: sorted(v) for k, v in out.items() if len(v) > 1}


def plot_ladder(report: dict, path) -> bool:
    """Zoology's figure: per setting of a ladder, each arm's accuracy at the budget (top) and tokens to the
    midpoint (bottom, log) against the model's size (log), the mean over the fresh seeds with its 95 % interval
    (tokens: the geometric mean, its interval on the logs); the floor dashed and the midpoint dotted. False (no
    figure) without a ladder."""
    found = ladder_of(report)
    if not found:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(2, len(found), figsize=(4.5 * len(found), 7.0), squeeze=False)
    for col, ((base, key), points) in enumerate(found.items()):
        top, bottom = axes[0][col], axes[1][col]
        sizes = [v for v, _ in points]
        for arm in sorted(report["settings"][points[0][1]]["arms"]):
            rows = [report["settings"][name]["arms"][arm] for _, name in points]
            for ax, values, log in (
                (top, [[c[-1][1] for c in r["curves"].values()] for r in rows], False),
                (bottom, [r["tokens_to_midpoint"]["values"] for r in rows], True),
            ):
                drawn = [mean_interval(v, log) for v in values]
                mid = [m for m, _, _ in drawn]
                spread = [[m - lo for m, lo, _ in drawn], [hi - m for m, _, hi in drawn]]
                ax.errorbar(sizes, mid, yerr=spread, marker="o", capsize=3, label=arm)
        first = report["settings"][points[0][1]]
        top.axhline(first["floor"]["token"], color="black", linestyle="dashed", linewidth=1)
        top.axhline(first["midpoint"], color="grey", linestyle="dotted", linewidth=1)
        top.set(title=base, xscale="log", ylabel="test accuracy at the budget", ylim=(0, 1.02))
        bottom.set(xscale="log", yscale="log", xlabel=key, ylabel="tokens to the midpoint")
        for ax in (top, bottom):
            ax.set_xticks(sizes, [str(v) for v in sizes])
            ax.minorticks_off()
        top.legend(fontsize=8)
    save(fig, path)
    return True


def report_arms(report: dict) -> set:
    return {arm for r in report["settings"].values() for arm in r["arms"]}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path) -> None:
    from nlq.common.figures import save_figure

    fig.tight_layout()
    save_figure(fig, path)
    pyplot().close(fig)
