"""A confirmatory screen's statement (screen.py --statement=FILE): what the screen runs and which comparisons it
calls, written and committed before it runs, conventionally as results/NAME/statement.json beside the records
it makes. The screen then runs exactly that: every arm on every setting, on the same fixed seeds, no seed added
by any rule; its report says per stated comparison "called" or "not called" (Holm over the stated comparisons at
alpha), and everything else is reported, not called.

    {"arms": ["config/synth_baseline.py", "config/synth_nlq.py"], "baseline": "baseline",
     "screen": "default", "settings": ["recall", "fuzzy-recall"],
     "comparisons": ["nlq:recall:tokens", "nlq:fuzzy-recall:accuracy"],
     "tune_seeds": [100], "seeds": [101, 102, ...], "alpha": 0.05,
     "stage1": "tuned again on tune seed 100: why, in words"}

and, where stated, "grid" (stage 1's grid, screen.py's --grid: a list of KEY=V1,V2,...; the screen's own
unstated), "ladder" (the model sizes, screen.py's --ladder) and "continue_to" (the multiple of its budget a short
stage-2 run carries on to; 3 unstated).

A comparison is ARM:SETTING:MEASURE (power.py's): accuracy at the budget, called on its paired t-test in points,
or a cost to the midpoint (tokens, flops, seconds, priced), called on the paired t-test of its log ratios; one
whose pairs hold a bound (a run that never reached the midpoint) is not called. The seeds come from power.py.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from nlq.common.errors import UserError
from nlq.comparison import sweep
from nlq.comparison.power import MEASURES, Comparison
from nlq.comparison.screening import TO_MIDPOINT, ladder_names, sooner
from nlq.comparison.stats import holm

FIELDS = {"arms": list, "baseline": str, "screen": str, "settings": list, "comparisons": list,
          "tune_seeds": list, "seeds": list, "alpha": float, "stage1": str}  # fmt: skip
# stage 1's grid (screen.py --grid, each axis KEY=V1,V2,...); the model sizes every setting runs at (screen.py
# --ladder), its settings NAME-KEY=V; the multiple of its budget a stage-2 run short of the midpoint carries on to
# (screen.py --continue_to, 3 when not stated)
OPTIONAL = {"grid": list, "ladder": str, "continue_to": int}
# screen.py's options a statement sets: given beside it, they would change what was stated
SET_BY_IT = {"baseline": None, "screen": "default", "settings": None, "overall": None, "tune_seeds": "1",
             "seeds": "2,3,4", "max_extra_seeds": 5, "grid": None, "ladder": None, "continue_to": 3}  # fmt: skip


class StatementError(UserError):
    pass


@dataclass(frozen=True)
class Statement:
    path: Path
    arms: list
    baseline: str
    screen: str
    settings: list
    comparisons: list
    tune_seeds: list
    seeds: list
    alpha: float
    stage1: str
    grid: list | None = None
    ladder: str | None = None
    continue_to: int = SET_BY_IT["continue_to"]


def read(path, arm_names, setting_names, check_spent: bool = True) -> Statement:
    """The statement at path, each field of its type and each name one the screen has: arm_names(configs) gives
    the arms' names, setting_names(screen) the screen's settings (both screen.py's); with check_spent, its seeds
    none that another screen kept beside it used (a rebuild reads a statement already run: no check)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise StatementError(f"--statement={path}: not a readable JSON statement ({e})") from None
    if not isinstance(raw, dict) or not set(FIELDS) <= set(raw) <= set(FIELDS) | set(OPTIONAL):
        have = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise StatementError(
            f"--statement={path}: holds {have}; a statement holds exactly {', '.join(FIELDS)} (and may hold "
            f"{', '.join(OPTIONAL)})"
        )
    for key, kind in (FIELDS | {k: v for k, v in OPTIONAL.items() if k in raw}).items():
        value = float(raw[key]) if kind is float and isinstance(raw[key], int) else raw[key]
        if not isinstance(value, kind) or (kind in (list, str) and not value):
            raise StatementError(f"--statement={path}: {key} must be a non-empty {kind.__name__}")
        raw[key] = value
    if not all(isinstance(x, str) and x for x in [*raw["arms"], *raw["settings"], *raw["comparisons"]]):
        raise StatementError(f"--statement={path}: arms, settings and comparisons are lists of names (strings)")
    if not all(isinstance(x, str) for x in raw.get("grid", [])):
        raise StatementError(f'--statement={path}: grid is a list of axes, each "KEY=V1,V2,..." (a string)')
    s = Statement(path=path, **raw)
    arms = arm_names(s.arms)
    if s.baseline not in arms:
        raise StatementError(f"--statement={path}: baseline {s.baseline} is not one of its arms ({', '.join(arms)})")
    unknown = [n for n in s.settings if n not in setting_names(s.screen)]
    if unknown or len(set(s.settings)) < len(s.settings):
        raise StatementError(
            f"--statement={path}: settings {s.settings}: each once, of screen {s.screen}'s "
            f"({', '.join(setting_names(s.screen))})"
        )
    try:
        run = ladder_names(s.settings, s.ladder)
        sweep.grid_points(s.grid or [], [])
    except UserError as e:
        raise StatementError(f"--statement={path}: {e}") from None
    check_comparisons(s, [a for a in arms if a != s.baseline], run)
    check_seeds(s, check_spent)
    if isinstance(s.continue_to, bool) or s.continue_to < 1:
        raise StatementError(f"--statement={path}: continue_to={s.continue_to}: a whole multiple of the budget, 1 up")
    if not 0 < s.alpha < 1:
        raise StatementError(f"--statement={path}: alpha={s.alpha}: give the family's level, between 0 and 1")
    return s


def comparisons(s: Statement) -> list[Comparison]:
    return [Comparison(*c.split(":")) for c in s.comparisons]


def check_comparisons(s: Statement, arms: list, settings: list) -> None:
    """Each comparison ARM:SETTING:MEASURE names an arm compared, a setting the screen runs (with a ladder, one of
    its sizes: NAME-KEY=V) and a measure, each once."""
    seen = set()
    for text in s.comparisons:
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 3:
            raise StatementError(f"--statement={s.path}: comparison {text!r} is not ARM:SETTING:MEASURE")
        arm, setting, measure = parts
        if arm not in arms or setting not in settings or measure not in MEASURES or text in seen:
            raise StatementError(
                f"--statement={s.path}: comparison {text}: name an arm compared ({', '.join(arms)}), a setting it runs "
                f"({', '.join(settings)}) and a measure ({', '.join(MEASURES)}), each comparison once"
            )
        seen.add(text)


def check_seeds(s: Statement, check_spent: bool = True) -> None:
    """Whole seeds, each once, the tune seeds apart from the reported ones, and none a recorded screen used: a
    screen kept beside this one in results/ (its parent's siblings) names its seeds in its statement.json or
    its screen_plan.json, and they are spent."""
    every = [*s.tune_seeds, *s.seeds]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in every) or len(set(every)) < len(
        every
    ):
        raise StatementError(f"--statement={s.path}: seeds and tune_seeds: whole numbers >= 0, each once, apart")
    if not check_spent:
        return
    here = s.path.resolve().parent
    for other in sorted(here.parent.glob("*/statement.json")) + sorted(here.parent.glob("*/screen_plan.json")):
        if other.parent == here:
            continue
        again = sorted(spent_by(other) & set(every))
        if again:
            raise StatementError(
                f"--statement={s.path}: seed {again[0]} was used by {other}: a confirmatory screen runs fresh seeds"
            )


def spent_by(path: Path) -> set:
    """The seeds a statement or a screen's plan names (none: not one)."""
    try:
        used = json.loads(path.read_text())
        return {int(x) for key in ("seeds", "tune_seeds") for x in str(used[key]).strip("[]").split(",") if x.strip()}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def apply(s: Statement, args) -> None:
    """screen.py's args as the statement sets them; an option of screen.py that would change it, refused."""
    for option, default in SET_BY_IT.items():
        if getattr(args, option) != default:
            raise StatementError(f"--{option}: the statement {s.path} sets it; leave --{option} out, or state it there")
    if args.arms:
        raise StatementError(f"{args.arms[0]}: the statement {s.path} names the arms; give no config files beside it")
    args.arms, args.baseline, args.screen = list(s.arms), s.baseline, s.screen
    args.settings, args.overall, args.ladder, args.continue_to = ",".join(s.settings), None, s.ladder, s.continue_to
    args.grid = list(s.grid) if s.grid else None
    args.tune_seeds, args.seeds = ",".join(map(str, s.tune_seeds)), ",".join(map(str, s.seeds))
    args.max_extra_seeds = 0  # no seed added by any rule: the stated seeds are every seed


def called(s: Statement, results: dict) -> list[dict]:
    """Per stated comparison: its estimate, p (accuracy: the paired t-test in points; a cost: the paired t-test
    of log ratios), p adjusted by Holm over the stated comparisons, and whether it is called (adjusted p below
    alpha). A cost whose pairs hold a bound has no p and is not called."""
    rows = []
    for c in comparisons(s):
        arm = results[c.setting]["arms"][c.arm]
        if c.measure == "accuracy":
            rows.append({"comparison": str(c), "estimate": arm["improvement"], "scale": "points", "p": arm["p"]})
        else:
            ratio = arm[TO_MIDPOINT[c.measure].key]["ratio"]
            rows.append({"comparison": str(c), "estimate": ratio["ratio"], "scale": "ratio", "p": ratio.get("p"),
                         "bounds": ratio.get("bounds", 0)})  # fmt: skip
    adjusted = holm({r["comparison"]: r["p"] for r in rows})
    for r in rows:
        r["p_holm"] = adjusted[r["comparison"]]
        r["called"] = r["p_holm"] is not None and r["p_holm"] < s.alpha
    return rows


def markdown(s: Statement, rows: list[dict]) -> list[str]:
    """The answer to what was stated, first on the page: each comparison called or not."""
    lines = [
        f"## Stated before the run ({Path(s.path).name}, beside this page)",
        "",
        "Stage 1"
        + (f" on the grid {' '.join(s.grid)}" if s.grid else "")
        + f": {s.stage1}. Seeds {', '.join(map(str, s.seeds))} for every arm on every setting"
        + (f" at every size of the ladder {s.ladder}" if s.ladder else "")
        + "; called where p "
        f"after Holm over the {len(rows)} stated comparisons is below {s.alpha:g}. Everything below this section is "
        "reported, not called.",
        "",
        "| comparison | estimate | p | p (Holm) | answer |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["estimate"] is None:
            estimate = f"{r['bounds']} pair(s) hold a bound: no ratio"
        elif r["scale"] == "ratio":
            estimate = f"{r['estimate']:.2f}x ({sooner(r['estimate'])})"
        else:
            estimate = f"{100 * r['estimate']:+.1f} pts"
        p = "—" if r["p"] is None else f"{r['p']:.3g}"
        p_holm = "—" if r["p_holm"] is None else f"{r['p_holm']:.3g}"
        lines.append(
            f"| {r['comparison']} | {estimate} | {p} | {p_holm} | {'called' if r['called'] else 'not called'} |"
        )
    return [*lines, ""]
