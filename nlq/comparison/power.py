"""The seeds a confirmatory screen needs (power.py): per stated comparison (an arm against the baseline, on one
setting, on one measure), the fewest paired seeds whose paired t-test reaches the asked power at the level Holm
may test it at (alpha over the number of comparisons stated: the worst case), from the spread seed by seed in
an earlier screen's report, at stated effects.

The measures are read on their own scale: a cost to the midpoint (tokens, FLOPs, seconds, priced time) as log
ratios of the arm's cost to the baseline's, an accuracy at the budget as differences in points. A cost whose
earlier pairs held a bound (a run that never reached the midpoint) has no spread on the log scale: refused,
naming it.
"""

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from nlq.common.errors import UserError
from nlq.comparison.screening import TO_MIDPOINT, sooner
from nlq.comparison.stats import seeds_for_power

MEASURES = ["accuracy", *TO_MIDPOINT]  # accuracy at the budget, and each cost to the midpoint


@dataclass(frozen=True)
class Comparison:
    arm: str
    setting: str
    measure: str

    def __str__(self) -> str:
        return f"{self.arm}:{self.setting}:{self.measure}"


def read_report(path) -> dict:
    """A screen's screen.json, or one line saying what it is not."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable screen report ({e}); give a screen's OUT_ROOT/screen.json") from None
    if not isinstance(report, dict) or not isinstance(report.get("settings"), dict) or "baseline" not in report:
        raise UserError(f"{path}: not a screen report (no settings and baseline); give a screen's screen.json")
    return report


def comparisons(text: str, report: dict) -> list[Comparison]:
    """--compare's ARM:SETTING:MEASURE list, each a comparison the report can give, each once."""
    out = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3:
            raise UserError(f"--compare: {item!r} is not ARM:SETTING:MEASURE (e.g. nlq:recall:tokens)")
        c = Comparison(*parts)
        settings = report["settings"]
        if c.setting not in settings:
            raise UserError(f"--compare: {c}: the report has no setting {c.setting}; it has {', '.join(settings)}")
        arms = [a for a in settings[c.setting]["arms"] if a != report["baseline"]]
        if c.arm not in arms:
            raise UserError(f"--compare: {c}: {c.arm} is no arm compared on {c.setting}; give one of {', '.join(arms)}")
        if c.measure not in MEASURES:
            raise UserError(f"--compare: {c}: no measure {c.measure}; give one of {', '.join(MEASURES)}")
        if c in out:
            raise UserError(f"--compare: {c} is named twice; name each comparison once")
        out.append(c)
    return out


def spread(report: dict, c: Comparison) -> tuple[float, float, int]:
    """(the earlier estimate, the standard deviation of its seed-by-seed differences, the pairs): a log ratio
    for a cost, points for the accuracy."""
    arms = report["settings"][c.setting]["arms"]
    if c.measure == "accuracy":
        final = {
            a: {str(s): curve[-1][1] for s, curve in arms[a]["curves"].items()} for a in (c.arm, report["baseline"])
        }
        seeds = sorted(set(final[c.arm]) & set(final[report["baseline"]]))
        diffs = [final[c.arm][s] - final[report["baseline"]][s] for s in seeds]
        if len(diffs) < 2 or statistics.stdev(diffs) == 0:
            raise UserError(
                f"{c}: {len(diffs)} paired seed(s) in the report and no spread among them: nothing to plan from"
            )
        return statistics.mean(diffs), statistics.stdev(diffs), len(diffs)
    entry = arms[c.arm].get(TO_MIDPOINT[c.measure].key)
    ratio = (entry or {}).get("ratio")
    if entry is None or ratio is None:
        raise UserError(f"{c}: the report holds no paired ratios (a report from before them); give a newer screen's")
    if ratio["ratio"] is None or not ratio.get("sd_log"):
        why = f"{ratio['bounds']} of {ratio['n']} pairs hold a bound" if ratio["ratio"] is None else "no spread"
        raise UserError(f"{c}: {why}: no spread of log ratios to plan from; compare it by who reached it first")
    return math.log(ratio["ratio"]), ratio["sd_log"], ratio["n"]


def effect_of(name: str, estimate: float, measure: str) -> float:
    """A stated effect on the tested scale: 'estimate', 'half' (of it on that scale: the square root of a
    ratio), or a number (a ratio for a cost, points for the accuracy)."""
    if name == "estimate":
        return estimate
    if name == "half":
        return estimate / 2
    try:
        value = float(name)
    except ValueError:
        raise UserError(f"--effects: {name!r} is not estimate, half or a number") from None
    if measure == "accuracy":
        if not 0 < abs(value) < 1:
            raise UserError(f"--effects: {name} for an accuracy is a difference in points, between 0 and 1")
        return value
    if not 0 < value < math.inf or value == 1:
        raise UserError(f"--effects: {name} for a cost is a ratio to the baseline's, above 0 and not 1 (e.g. 0.8)")
    return math.log(value)


def shown(effect: float, measure: str) -> str:
    if measure == "accuracy":
        return f"{100 * effect:+.1f} pts"
    r = math.exp(effect)
    return f"{r:.2f}x ({sooner(r)})"


def plan(report: dict, compared: list[Comparison], effects, alpha=0.05, power=0.8, most=200) -> list[str]:
    """The table: per comparison and effect, the seeds needed, or that more than `most` are."""
    level = alpha / len(compared)
    lines = [
        f"Seeds for {100 * power:.0f} % power, each comparison at {level:.3g} (alpha {alpha:g} over the "
        f"{len(compared)} stated: the level Holm tests the first at), from the spread of the report's paired seeds "
        "(costs as log ratios, accuracy in points):",
        "",
        "| comparison | earlier estimate | spread (sd, pairs) | effect | seeds |",
        "|---|---|---|---|---|",
    ]
    for c in compared:
        estimate, sd, n = spread(report, c)
        for name in effects:
            effect = effect_of(name, estimate, c.measure)
            seeds = seeds_for_power(effect, sd, level, power, most)
            needed = str(seeds) if seeds is not None else f"over {most}: out of reach, do not call it"
            sd_shown = f"{100 * sd:.2g} pts" if c.measure == "accuracy" else f"{sd:.3g} in log"
            earlier, stated = shown(estimate, c.measure), shown(effect, c.measure)
            lines.append(f"| {c} | {earlier} | {sd_shown}, {n} | {name}: {stated} | {needed} |")
    return lines
