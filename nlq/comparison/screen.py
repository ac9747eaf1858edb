"""The synthetic screen's runs (screen.py): each setting's dataset, stage 1 and 2 of every arm, the estimate of
its time, and the report (nlq/comparison/screening.py)."""

import argparse
import json
import os
import shlex
import shutil
import time
from dataclasses import replace
from pathlib import Path

from configurator import parse
from model import GPTConfig, training_flops_per_token
from nlq.common.atomic import atomic_write_json, atomic_write_text, check_writable
from nlq.common.domains import At, Number
from nlq.common.errors import UserError
from nlq.common.figures import check_figure_path
from nlq.comparison import cost, placement, records, screening, statement, sweep
from nlq.comparison.compare import Run
from nlq.comparison.screening import ACCURACY
from nlq.data.examples import rescore_floor, write_task
from nlq.data.tasks import TaskError
from nlq.eval.accuracy import midpoint, tokens_to_reach
from nlq.run import hardware
from nlq.run.config import TrainConfig

TOKENS_PER_SECOND = 60_000  # one run of the screen's model with one thread on the 2-core VM (docs/screening.md)
CONTINUED = "continued"  # OUT_ROOT/continued/SETTING/RUN: a stage-2 run carried on past its budget


def parser(doc: str | None = None) -> argparse.ArgumentParser:
    """screen.py's options (doc: its --help text)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("arms", nargs="*", help="config files, one per arm; the first is the baseline unless --baseline")
    p.add_argument(
        "--statement", metavar="JSON",
        help="a confirmatory screen's statement, committed before the run: its arms, settings, seeds and the "
        "comparisons called (nlq/comparison/statement.py); the screen runs exactly it",
    )  # fmt: skip
    p.add_argument(
        "--records", metavar="DIR",
        help="the folder that keeps the screen's plan, one small record per run and its report (default: the "
        "statement's folder, else OUT_ROOT); a run recorded there is not run again (nlq/comparison/records.py)",
    )  # fmt: skip
    p.add_argument(
        "--rebuild", metavar="DIR",
        help="rebuild the report and figures of the screen kept in DIR from its records alone, into --out_root, "
        "and say whether each file is identical to DIR's",
    )  # fmt: skip
    p.add_argument(
        "--baseline", help="the arm every other arm is compared with, by its name (default: the first config's)"
    )
    p.add_argument(
        "--screen", default="default",
        help=f"the task settings: {', '.join(screening.SCREENS)}, or a JSON file of one's own (docs/screening.md)",
    )  # fmt: skip
    p.add_argument("--settings", help="a comma list of the screen's setting names to run (default: all)")
    p.add_argument(
        "--overall",
        help="a comma list of the settings the overall answer reads, named before the run (default: those where "
        "the baseline is informative; all if none is)",
    )
    p.add_argument(
        "--ladder", metavar="KEY=V1,V2",
        help="every setting at each model size, n_embd (the head width held at the arms' config's) or n_layer, "
        "each size a setting of its own tuned on its own stage 1 (e.g. --ladder=n_embd=32,64,128)",
    )  # fmt: skip
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2", help="a grid axis (default: the screen's)")
    p.add_argument("--tune_seeds", default="1", help="stage 1's seeds")
    p.add_argument("--seeds", default="2,3,4", help="stage 2's seeds, disjoint from --tune_seeds")
    p.add_argument("--out_root", default="out-screen", help="datasets, runs and the report go here")
    p.add_argument(
        "--max_extra_seeds", type=int, default=5,
        help="stage 2's fresh seeds added per arm and setting where its interval holds zero (to 5, then 8)",
    )  # fmt: skip
    sweep.add_run_options(p)
    p.set_defaults(jobs=None)  # two side by side on a CPU machine (docs/screening.md); one per GPU or job otherwise
    # 3: on fuzzy recall 2 of 15 stage-2 runs reached the midpoint only between 2 and 3 times their budget
    p.add_argument(
        "--continue_to", type=int, default=3,
        help="a stage-2 run short of the midpoint at its budget carries on at its min_lr to this many times the "
        "budget, for its tokens to the midpoint (1: never); its budget's results are untouched (docs/screening.md)",
    )  # fmt: skip
    p.add_argument(
        "--tokens_per_s", type=Number(At(above=0)), default=TOKENS_PER_SECOND, help="one run's speed, for estimates"
    )
    p.add_argument(
        "--prices", metavar="JSON", help="time each arm's step at a bench.py or gpu_check.py report's ratios"
    )
    return p


def screen(args, extra) -> None:
    """The screen args (screen.py's options, parser()) and extra (--key=value options for every run) ask for:
    each setting's data, stage 1, the choices, stage 2, the report."""
    if args.rebuild:
        return rebuild(args, extra)
    args.stated = None
    if args.statement:
        args.stated = statement.read(args.statement, sweep.arm_names, setting_names)
        statement.apply(args.stated, args)
    settings, grid, extra = checked(args, extra)
    keys, points = sweep.grid_points(grid, extra)
    tune_seeds, seeds = sweep.seed_list("--tune_seeds", args.tune_seeds), sweep.seed_list("--seeds", args.seeds)
    if set(tune_seeds) & set(seeds):
        raise UserError("--tune_seeds and --seeds share a seed: report on fresh seeds")
    out_root, folder = Path(args.out_root), folder_of(args)
    sweep.check_out_root(out_root)
    held = same_screen(out_root, settings, args, grid, extra)
    if folder != out_root:
        same_screen(folder, settings, args, grid, extra)
    keep = Keeper(folder, records.tag_of(args.statement), out_root, args)
    data = {s.name: out_root / "data" / s.name for s in settings}
    stage1 = [r for s in settings for r in plan(s, data[s.name], args.arms, tune_seeds, out_root, extra, points)]
    sweep.check_arm_names(stage1, args.arms)
    fresh = extra_seeds(tune_seeds + seeds, min(args.max_extra_seeds, max(screening.SEED_ROUNDS) - len(seeds)))
    estimate(settings, stage1, args, len(seeds), len(fresh))
    if args.dry_run:
        return dry_run(stage1, args, seeds, fresh, settings, keep)
    prepare_outputs(out_root, folder, held)
    for s in settings:
        prepare(s, data[s.name], out_root)
    started = time.time()
    run_stage1(stage1, args, keep)
    stage2 = [r for s in settings for r in chosen_runs(s, stage1, data[s.name], args, seeds, extra, keys, keep)]
    run_recorded(stage2, data, args, keep, "stage-2")
    for target in screening.seed_rounds(len(seeds), len(fresh)):
        asked = seeds + fresh[: target - len(seeds)]
        added = more_seeds(settings, stage1, stage2, asked, data, args, extra, keys, keep)
        run_recorded(added, data, args, keep, "extra-seed")
        stage2 += added
    inputs = report_inputs(settings, stage1 + stage2, keys, data, args)
    atomic_write_json(folder / "report_inputs.json", inputs, indent=1)
    report, lines = report_of(inputs, keep.read_all(inputs["records"]), args.stated)
    publish(report, lines, folder, started)


def checked(args, extra) -> tuple[list, list, list]:
    """The screen's arms, options and settings checked before anything: (its settings, its grid, extra)."""
    if not args.arms:
        raise UserError("name the arms' config files (the baseline first), or a confirmatory screen's --statement=FILE")
    if len(args.arms) < 2:
        raise UserError(
            f"one arm ({args.arms[0]}) has nothing to be compared with: name two config files or more, the "
            "baseline first (e.g. config/synth_baseline.py config/synth_nlq.py)"
        )
    names = sweep.arm_names(args.arms)
    if args.baseline is not None and args.baseline not in names:
        raise UserError(f"--baseline={args.baseline}: not an arm of this screen; give one of {', '.join(names)}")
    if args.jobs is None:
        args.jobs = 2 if args.executor == "local" and not args.gpus else 1
    if any(not x.startswith("--") or "=" not in x for x in extra):
        raise UserError(f"{next(x for x in extra if not x.startswith('--') or '=' not in x)}: give --key=value")
    sweep.check_executor(args, extra)
    if any(x.startswith("--dataset=") for x in extra):
        raise UserError("--dataset: each setting of a screen trains on its own data; leave --dataset out")
    settings, rates = chosen_settings(args)
    screening.check_settings(settings)
    args.overall = overall_settings(args.overall, settings)
    args.prices = {"file": args.prices, "ratios": cost.read_prices(args.prices)} if args.prices else None
    if args.max_extra_seeds < 0:
        raise UserError(f"--max_extra_seeds={args.max_extra_seeds}: give 0 (none) or more")
    if args.continue_to < 1:
        raise UserError(f"--continue_to={args.continue_to}: give a whole multiple of a run's budget, 1 (never) or more")
    return settings, args.grid or [f"learning_rate={rates}"], extra


def folder_of(args) -> Path:
    """Where the screen keeps its plan, its runs' records and its report: the statement's folder, else --records,
    else OUT_ROOT."""
    if args.stated is not None:
        if args.records and Path(args.records).resolve() != args.stated.path.resolve().parent:
            raise UserError(f"--records={args.records}: a stated screen keeps its records beside its statement")
        return args.stated.path.parent
    return Path(args.records or args.out_root)


def dry_run(stage1, args, seeds, fresh, settings, keep) -> None:
    todo = [r for r in stage1 if not keep.has(r)]
    if len(todo) < len(stage1):
        print(f"{len(stage1) - len(todo)} stage-1 runs recorded in {keep.folder}: not run again")
    sweep.launch(todo, args, extra=[])
    print(f"stage 2: each arm's chosen point per setting x seeds {seeds}, once stage 1 has finished")
    if fresh:
        print(
            f"then up to {len(fresh)} more seeds ({','.join(map(str, fresh))}) for each arm and setting whose "
            f"interval holds zero (to {' then '.join(map(str, screening.seed_rounds(len(seeds), len(fresh))))} "
            f"seeds): at most {len(fresh) * len(args.arms) * len(settings)} runs more (--max_extra_seeds)"
        )
    if args.gpus:
        print(f"the whole screen: {whole_gpu_plan(settings, stage1, args, len(seeds), len(fresh))}")


def prepare_outputs(out_root: Path, folder: Path, held: dict) -> None:
    """The folders made, the report's files checked writable, the plan kept (in both, where they differ)."""
    for place in dict.fromkeys([out_root, folder]):
        place.mkdir(parents=True, exist_ok=True)
        atomic_write_json(place / "screen_plan.json", held, indent=1)
    for name in ("screen.md", "screen.json", "report_inputs.json"):
        check_writable(f"the report {name}", folder / name)
    for name in REPORT_FILES[2:]:
        check_figure_path("the figure", folder / name)


def run_stage1(stage1, args, keep) -> None:
    """Stage 1's runs not recorded, one setting at a time, each setting's recorded once it has run (a run that
    diverged too: it counts as its point's worst), so that a screen stopped keeps every setting it tuned."""
    todo = [r for r in stage1 if not keep.has(r)]
    if len(todo) < len(stage1):
        print(f"{len(stage1) - len(todo)} stage-1 runs recorded in {keep.folder}: not run again")
    short = 0
    for setting in dict.fromkeys(r.out_dir.parent.name for r in todo):
        group = [r for r in todo if r.out_dir.parent.name == setting]
        finished, failures = sweep.launch(group, args, extra=[], tolerate=sweep.DIVERGED)
        gave_up = {n for n, (code, _) in failures.items() if code == sweep.DIVERGED}
        done = [r for r in group if r in finished or str(r.out_dir) in gave_up]
        keep.write(done, multiple=1)
        short += len(group) - len(done)
    if short:
        raise UserError("stage 1 is not complete (above): run the same command again; stage 2 starts after it")


def run_recorded(runs, data, args, keep, which: str) -> None:
    """The runs not recorded, side by side, each carried on right after it where short of the midpoint, and
    the arms of one seed of one setting recorded as soon as the last of them (continuations included) has
    finished: a screen stopped keeps every pair it finished, and no slot waits for another run's continuation."""
    todo = [r for r in runs if not keep.has(r)]
    if len(todo) < len(runs):
        print(f"{len(runs) - len(todo)} {which} runs recorded in {keep.folder}: not run again")
    groups, left, group_of = {}, {}, {}
    for r in todo:
        groups.setdefault((r.out_dir.parent.name, r.seed), []).append(r)
    fresh = {r.out_dir for r in todo}

    def still_to_run(r, key) -> list:
        """r if unfinished, else its continuation's chain (made ready) where r is a fresh run short of the
        midpoint; each run returned is one of its group's left."""
        if r.status() != "finished":
            left.setdefault(key, set()).add(r.out_dir)
            group_of[r.out_dir] = key
            return [r]
        c = carried(r, data[key[0]], keep.out_root, args.continue_to) if r.out_dir in fresh else None
        return still_to_run(c, key) if c else []

    def after(r) -> list:
        key = group_of[r.out_dir]
        left[key].discard(r.out_dir)
        more = still_to_run(r, key)
        if not left[key]:
            keep.write(groups[key], args.continue_to)
        return [(m, m.status()) for m in more]

    work = [w for key, group in groups.items() for r in group for w in still_to_run(r, key)]
    for key in groups.keys() - left.keys():  # finished and carried on before a stop, not yet recorded
        keep.write(groups[key], args.continue_to)
    sweep.launch(work, args, extra=[], after=after)
    short = sum(1 for key in groups if left.get(key))
    if short:
        raise UserError(f"{short} {which} seed groups did not finish (above): run the same command again")


class Keeper:
    """The screen's records in folder (nlq/comparison/records.py), made under the statement tagged tag, of the runs
    trained under out_root."""

    def __init__(self, folder: Path, tag, out_root: Path, args=None):
        self.folder, self.tag, self.out_root, self.args = folder, tag, out_root, args

    def machine(self) -> dict:
        """What a record says its run ran on: the CPU, the runs at a time and each one's threads."""
        jobs = self.args.jobs
        threads = self.args.threads or (max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else os.cpu_count())
        return {"machine": hardware.cpu_model() or "unknown", "jobs": jobs, "threads": threads}

    @staticmethod
    def name_of(r: sweep.Run) -> str:
        return f"{r.out_dir.parent.name}/{r.out_dir.name}"

    def has(self, r: sweep.Run) -> bool:
        return records.recorded(self.folder, r.out_dir.parent.name, r.out_dir.name)

    def write(self, runs, multiple: int) -> None:
        for r in runs:
            if not self.has(r):
                later = self.out_root / CONTINUED / r.out_dir.parent.name / r.out_dir.name
                later = later if multiple > 1 and (later / "metrics.jsonl").is_file() else None
                made = records.make(r.out_dir, r.out_dir.parent.name, self.tag, self.machine(), later, multiple)
                records.write(self.folder, made)

    def read(self, runs) -> list[Run]:
        return [records.read(records.path_of(self.folder, *self.name_of(r).split("/")), self.tag)[0] for r in runs]

    def read_all(self, names) -> tuple[list[Run], dict]:
        """The records of names (SETTING/RUN): (their runs, {run name: its continuation})."""
        runs, continued = [], {}
        for name in names:
            run, later = records.read(records.path_of(self.folder, *name.split("/")), self.tag)
            runs.append(run)
            if later is not None:
                continued[run.name] = later
        return runs, continued


def same_screen(out_root: Path, settings, args, grid, extra) -> dict:
    """out_root holds this screen or none (in --dry_run too): the arms, grid, seeds and options that make its
    runs, and each setting of a name it has, as screen_plan.json keeps them. Returns what it should hold."""
    plan = {
        "arms": dict(zip(sweep.arm_names(args.arms), args.arms)),
        "baseline": baseline_of(args),  # it decides which extra seeds run
        "grid": grid,
        "tune_seeds": args.tune_seeds,
        "seeds": args.seeds,
        "options": extra,
        "continue_to": args.continue_to,  # runs carried on to another multiple would read tokens on another scale
        "settings": {s.name: screening.json_ready(s) for s in settings},
    }
    file = out_root / "screen_plan.json"
    try:
        held = json.loads(file.read_text()) if file.exists() else None
    except (OSError, ValueError) as e:
        raise UserError(f"{file} cannot be read ({e}): use another --out_root, or remove that file") from None
    if isinstance(held, dict):
        held.setdefault("baseline", next(iter(held.get("arms") or {}), None))  # before --baseline: the first arm
        held.setdefault("continue_to", plan["continue_to"])  # a plan from before it was kept says nothing of it
        keys = ("arms", "baseline", "grid", "tune_seeds", "seeds", "options", "continue_to")
        differ = [k for k in keys if held.get(k) != plan[k]]
        theirs = held.get("settings") if isinstance(held.get("settings"), dict) else {}
        differ += [f"setting {n}" for n, v in plan["settings"].items() if n in theirs and theirs[n] != v]
        if differ:
            raise UserError(
                f"--out_root={out_root} holds another screen (its {', '.join(differ)} differ, {file}): use another "
                "--out_root, or that screen's own options"
            )
        plan["settings"] = {**theirs, **plan["settings"]}
    return plan


def baseline_of(args) -> str:
    """The arm the others are compared with: --baseline, else the first config's."""
    return args.baseline or sweep.arm_names(args.arms)[0]


def floor_of(data_dir: Path) -> dict:
    return json.loads((data_dir / "meta.json").read_text())["floor"]


def continuation(r: sweep.Run, out_root: Path, multiple: int) -> sweep.Run:
    """The stage-2 run r carried on to `multiple` times its budget: a run of its own beside it
    (OUT_ROOT/continued/SETTING/NAME) with only max_iters raised. The cosine still ends where r's ends (the
    setting's lr_decay_iters), so the added steps run at r's min_lr, as train.py's schedule holds it past
    the cosine's end: every run of every arm follows one schedule, 'warmup, cosine to the budget, then
    min_lr', of which each is computed only as far as its tokens to the midpoint need."""
    steps = r.max_iters * multiple
    out_dir = out_root / CONTINUED / r.out_dir.parent.name / r.out_dir.name
    return replace(
        r,
        out_dir=out_dir,
        max_iters=steps,
        options=(*[o for o in r.options if not o.startswith("--max_iters=")], f"--max_iters={steps}"),
    )


def short_of_midpoint(r: sweep.Run, data_dir: Path) -> bool:
    """Whether a finished run's accuracy never reached its setting's midpoint."""
    return tokens_to_reach(screening.curve(Run.from_dir(r.out_dir)), midpoint(floor_of(data_dir)["token"])) is None


def carried(r: sweep.Run, data_dir: Path, out_root: Path, multiple: int) -> sweep.Run | None:
    """The finished stage-2 run r's continuation to `multiple` times its budget, made ready to resume, if r
    did not reach its setting's midpoint (else None). The continuation starts from a copy of r's checkpoint and
    log, made aside and then renamed (a kill leaves no half copy): r itself is never written again."""
    if multiple == 1 or not short_of_midpoint(r, data_dir):
        return None
    c = continuation(r, out_root, multiple)
    if not c.out_dir.exists():
        copying = c.out_dir.with_name(c.out_dir.name + ".copying")
        shutil.rmtree(copying, ignore_errors=True)
        copying.mkdir(parents=True)
        for name in ("ckpt.pt", "metrics.jsonl", "config.json"):
            shutil.copy2(r.out_dir / name, copying / name)
        copying.rename(c.out_dir)
        print(f"carry on {sweep.describe(r)} to {multiple}x its budget: it is short of the midpoint")
    return c


def extra_seeds(used: list, most: int) -> list[int]:
    """`most` fresh seeds after every seed the screen uses (the rounds stop at SEED_ROUNDS' last count)."""
    return list(range(max(used) + 1, max(used) + 1 + max(0, most)))


def more_seeds(settings, stage1, stage2, asked, data, args, extra, keys, keep) -> list:
    """One round of extra seeds: for each setting, the arms screening.wanting_seeds names on the runs recorded so
    far (their seeds before this round's, so that a rerun decides alike) run on this round's new seeds (asked, the
    seeds the round ends with)."""
    baseline = baseline_of(args)
    names = dict(zip(sweep.arm_names(args.arms), args.arms))
    added = []
    for s in settings:
        here = [r for r in stage2 if r.out_dir.parent.name == s.name]
        runs, continued = keep.read_all([keep.name_of(r) for r in stage1 + here if r.out_dir.parent.name == s.name])
        report = screening.setting_report(runs, keys, baseline, floor_of(data[s.name]), continued=continued)
        for arm in screening.wanting_seeds(report, baseline):
            held = {r.seed for r in here if r.arm == arm}
            new = [seed for seed in asked if seed not in held]
            point = next(r.point for r in here if r.arm == arm)
            added += setting_runs(s, data[s.name], names[arm], arm, new, keep.out_root, extra, point, "report")
            if new:
                print(f"{s.name}: {arm} on seeds {','.join(map(str, new))} too (the rule on seeds: docs/screening.md)")
    return added


def setting_names(screen: str) -> list[str]:
    return [s.name for s in screen_of(screen)[0]]


def screen_of(name: str) -> tuple[list, str]:
    """A screen's settings and its default learning rates: a named screen's, or a JSON file's."""
    if name.endswith(".json"):
        screen, grid = screening.read_screen(name)
        return screen, grid or screening.GRIDS["default"]
    if name in screening.SCREENS:
        return screening.SCREENS[name], screening.GRIDS[name]
    raise UserError(f"--screen={name}: one of {', '.join(screening.SCREENS)}, or a .json file of settings")


def chosen_settings(args) -> tuple[list, str]:
    """The screen's settings (those --settings names, if given; each at every size of --ladder) and its default
    learning rates."""
    screen, grid = screen_of(args.screen)
    if args.settings:
        names = comma_names(args.settings)
        unknown = [n for n in names if n not in {s.name for s in screen}]
        if unknown or not names:
            raise UserError(f"--settings={args.settings}: the screen has {', '.join(s.name for s in screen)}")
        screen = [s for s in screen if s.name in names]
    if args.ladder:
        screen = screening.ladder(screen, args.ladder, head_width(args.arms))
    return screen, grid


def head_width(arms) -> int:
    """The arms' configs' head width (n_embd / n_head), one for all of them."""
    widths = {}
    for config in arms:
        _, model = parse([config], TrainConfig, GPTConfig)
        widths[config] = model.n_embd // model.n_head
    if len(set(widths.values())) > 1:
        raise UserError(f"--ladder: the arms' heads differ in width ({widths}): give arms of one head width")
    return next(iter(widths.values()))


def comma_names(option: str) -> list[str]:
    """The names of a comma list option, blanks dropped."""
    return [n.strip() for n in option.split(",") if n.strip()]


def overall_settings(option: str | None, settings) -> list[str] | None:
    """--overall's setting names, each one this screen runs; None without it (the informative rule decides)."""
    if option is None:
        return None
    names = comma_names(option)
    ran = [s.name for s in settings]
    if not names or any(n not in ran for n in names) or len(set(names)) < len(names):
        raise UserError(f"--overall={option}: name settings this screen runs, each once: {', '.join(ran)}")
    return names


def setting_runs(setting, data_dir, config, arm, seeds, out_root, extra, point, stage) -> list:
    """One arm's runs of one setting at one grid point: sweep's runs, with the setting's train.py options."""
    return sweep.runs_with(
        config, arm, seeds, out_root / setting.name, [*setting.options(data_dir), *extra], point, stage
    )


def plan(setting, data_dir, arms, seeds, out_root, extra, points) -> list:
    """Stage 1 of one setting: every arm x grid point x tune seed."""
    return [
        r
        for config, arm in zip(arms, sweep.arm_names(arms))
        for point in points
        for r in setting_runs(setting, data_dir, config, arm, seeds, out_root, extra, point, "tune")
    ]


def chosen_runs(setting, stage1, data_dir, args, seeds, extra, keys, keep) -> list:
    """Stage 2 of one setting: each arm's point chosen on its recorded stage-1 runs by accuracy, on the fresh
    seeds."""
    tune = [r for r in stage1 if r.out_dir.parent.name == setting.name]
    chosen = sweep.chosen_points(tune, keys, ACCURACY, dict(zip([r.out_dir for r in tune], keep.read(tune))))
    return [
        r
        for config, arm in zip(args.arms, sweep.arm_names(args.arms))
        for r in setting_runs(setting, data_dir, config, arm, seeds, keep.out_root, extra, chosen[arm], "report")
    ]


def prepare(setting, data_dir: Path, out_root: Path) -> None:
    """The setting's dataset, made unless data_dir holds it already with the same settings; a dataset of
    other settings is replaced only while no run of the setting exists (their examples would differ)."""
    asked = {"task": setting.task, "settings": setting.settings, "seed": setting.seed}
    asked |= {
        "train_targets": setting.train_targets,
        "examples_asked": {"train": setting.num_train, "test": setting.num_test},
    }
    try:
        held = json.loads((data_dir / "meta.json").read_text())
    except (OSError, ValueError):
        held = None
    if isinstance(held, dict) and all(held.get(k) == v for k, v in asked.items()):
        rescored = rescore_floor(data_dir)  # a dataset made before the floor's rules changed: its runs stand
        if rescored:
            old, new = rescored
            was = f"{old['token']:.3f}" if isinstance(old, dict) else "none"
            print(f"{data_dir}: key-blind floor rescored from its test split, {was} -> {new['token']:.3f} per token")
        return
    runs = out_root / setting.name
    if held is not None and runs.is_dir() and any(runs.iterdir()):
        raise UserError(
            f"{data_dir} was made with other settings than setting {setting.name}'s, and {runs} holds runs on it: "
            "use another --out_root (or remove both)"
        )
    try:
        write_task(
            data_dir, setting.task, setting.settings, setting.num_train, setting.num_test, setting.seed,
            setting.train_targets, force=True,
        )  # fmt: skip
    except TaskError as e:
        raise UserError(f"setting {setting.name}: {e}") from None
    print(f"made {data_dir} ({setting.task}, {screening.json_settings(setting.settings)})")


def estimate(settings, stage1, args, seeds: int, extra: int = 0) -> None:
    """The runs and their estimated time at --tokens_per_s per run, --jobs at a time (on GPUs: the GPU plan,
    whole_gpu_plan). Stage 2 is counted as seeds runs per arm and setting at its full length; the most that
    continuations could add (every stage-2 run short, extra seeds included) is said apart. A setting whose model
    is not the config's size (a ladder) counts its tokens at its FLOPs a token over the config's (size_scales)."""
    arms, fresh, tokens = len(args.arms), {}, {}
    for r in stage1:
        n = run_tokens(r, settings)
        tokens[r.out_dir.parent.name] = tokens.get(r.out_dir.parent.name, 0) + n
        fresh[r.out_dir.parent.name] = n * seeds * arms
    scales = size_scales(settings, stage1, args, {n: t + fresh[n] for n, t in tokens.items()})
    total = sum(tokens.values()) + sum(fresh.values())
    runs = len(stage1) + seeds * arms * len(settings)
    run_hours = sum((tokens[n] + fresh[n]) * scales[n] for n in tokens) / args.tokens_per_s / 3600
    if args.executor == "local" and args.gpus:
        print(f"{runs} runs ({len(stage1)} in stage 1, {runs - len(stage1)} in stage 2 over {len(settings)} settings), "
              f"{total / 1e6:,.0f}M training tokens, on GPUs: the GPU plan below")  # fmt: skip
        return
    local = args.executor == "local"
    if local:
        when = f"about {run_hours / args.jobs:.1f} hours, {args.jobs} at a time"
    else:
        when = f"about {run_hours:.1f} run-hours, as many at a time as the scheduler gives"
    print(
        f"{runs} runs ({len(stage1)} in stage 1, {runs - len(stage1)} in stage 2 over {len(settings)} settings), "
        f"{total / 1e6:,.0f}M training tokens: {when} at {args.tokens_per_s:,.0f} tokens/s a run of the config's "
        "size (evaluations and starts add about 15 %)"
    )
    if args.continue_to > 1:
        more = (seeds + extra) / seeds * (args.continue_to - 1)
        most = sum(fresh.values()) * more
        hours = (
            sum(f * scales[n] for n, f in fresh.items()) * more / args.tokens_per_s / 3600 / (args.jobs if local else 1)
        )
        print(
            f"continuations (--continue_to={args.continue_to}): each stage-2 run short of its setting's midpoint at "
            f"its budget carries on to {args.continue_to}x it; were every one short, {extra} extra seeds "
            f"included, {screening.tokens_text(most)} tokens more, about {hours:.1f} "
            + ("hours" if local else "run-hours")
        )


def size_scales(settings, stage1, args, tokens: dict) -> dict:
    """{setting: its training FLOPs a token over the arms' config's own size's} (1 where the setting's model is the
    config's), each ladder setting's said in a line: its size, FLOPs a token, tokens (tokens: stage 1 and 2's)
    and hours at --tokens_per_s so scaled (a wider model's step costs more; on a CPU a small model's less
    than its FLOPs say)."""
    _, own = parse([args.arms[0]], TrainConfig, GPTConfig)
    scales = {}
    for s in settings:
        r = next(r for r in stage1 if r.out_dir.parent.name == s.name)
        _, model = parse([r.config, *r.options], TrainConfig, GPTConfig)
        flops = training_flops_per_token(model, model.block_size)
        at_own_size = replace(model, n_embd=own.n_embd, n_head=own.n_head, n_layer=own.n_layer)
        scales[s.name] = flops / training_flops_per_token(at_own_size, model.block_size)
        if s.model:
            hours = tokens[s.name] * scales[s.name] / args.tokens_per_s / 3600
            hours /= args.jobs if args.executor == "local" else 1
            size = ", ".join(f"{k}={v}" for k, v in s.model.items())
            print(f"  {s.name} ({size}): {flops:,.0f} training FLOPs a token, {tokens[s.name] / 1e6:,.1f}M tokens, "
                  f"about {hours:.2f} hours ({scales[s.name]:.2f}x the config's FLOPs a token)")  # fmt: skip
    return scales


def run_tokens(r, settings) -> int:
    cfg, _ = parse([r.config, *r.options], TrainConfig, GPTConfig)
    return cfg.batch_size * cfg.gradient_accumulation_steps * cfg.max_iters * seq_len(settings, r.out_dir.parent.name)


def whole_gpu_plan(settings, stage1, args, seeds: int, extra: int) -> str:
    """placement.gpu_plan of stage 1, stage 2 on seeds, and at most extra seeds more, every setting and arm."""
    placed, _, _ = placement.slots(args, stage1)
    stage2 = [s.max_iters for s in settings for _ in range(seeds * len(args.arms))]
    more = [s.max_iters for s in settings for _ in range(extra * len(args.arms))]
    return placement.gpu_plan([r.max_iters for r in stage1] + stage2, more, placed, args.gpu_step_ms)


def seq_len(settings, name: str) -> int:
    return next(s.settings["seq_len"] for s in settings if s.name == name)


def report_inputs(settings, planned, keys, data, args) -> dict:
    """What the report reads beside the records (report_inputs.json, kept with them): the runs it reads, in order,
    and the settings' floors and tasks, the baseline, the grid's keys, the prices and the overall's settings."""
    return {
        "records": [Keeper.name_of(r) for r in planned],
        "baseline": baseline_of(args),
        "keys": keys,
        "prices": args.prices,
        "overall": args.overall,
        "floors": {s.name: floor_of(data[s.name]) for s in settings},
        "tasks": {s.name: {"task": s.task, "settings": s.settings, "axis": list(s.axis)} for s in settings},
        "command": ["screen.py", *map(shlex.quote, args.arms)],
        "screen": args.screen,
    }


def report_of(inputs: dict, recorded: tuple, stated) -> tuple[dict, list[str]]:
    """The screen's report (screen.json) and page (screen.md's lines) from its records alone: recorded is
    Keeper.read_all's (runs, continuations) of inputs' records; stated the statement (None: none)."""
    runs, continued = recorded
    baseline, ratios = inputs["baseline"], (inputs["prices"] or {}).get("ratios")
    by_setting = {name: [r for r in runs if r.name.split("/")[0] == name] for name in inputs["floors"]}
    results = {
        name: screening.setting_report(rs, inputs["keys"], baseline, inputs["floors"][name], ratios, continued)
        for name, rs in by_setting.items()
    }
    report = {
        "baseline": baseline,
        "prices": inputs["prices"],
        "keys": inputs["keys"],
        "settings": results,
        "tasks": inputs["tasks"],
        "overall": screening.overall(results, by_setting, baseline, inputs["overall"]),
        "budget": screening.budget(runs, continued),
        "command": inputs["command"],
        "screen": inputs["screen"],
    }
    lines = screening.markdown(report)
    if stated is not None:  # the answer to what was stated, before everything reported
        report["statement"] = statement.called(stated, results)
        lines[2:2] = statement.markdown(stated, report["statement"])
    return report, lines


REPORT_FILES = ("screen.md", "screen.json", "screen.png", "curves.png", "axes.png", "ladder.png")


def publish(report: dict, lines: list[str], folder: Path, started: float | None = None) -> list[Path]:
    """The report's page, JSON and figures written in folder (axes.png, ladder.png only where an axis, a ladder was
    run); their paths."""
    atomic_write_text(folder / "screen.md", "\n".join(lines) + "\n")
    atomic_write_json(folder / "screen.json", report, indent=1)
    screening.plot_accuracy(report, folder / "screen.png")
    screening.plot_curves(report, folder / "curves.png")
    drawn = {"axes.png": screening.plot_axes(report, folder / "axes.png")}
    drawn["ladder.png"] = screening.plot_ladder(report, folder / "ladder.png")
    print("\n".join(lines))
    written = [folder / n for n in REPORT_FILES if drawn.get(n, True)]
    took = f" ({time.time() - started:.0f} s)" if started is not None else ""
    print(f"\nreport: {', '.join(map(str, written))}{took}")
    return written


def rebuild(args, extra) -> None:
    """The report of the screen kept in --rebuild's folder, from its records alone, written into --out_root; each
    file said identical to the folder's or not (exit 1 if any differs)."""
    folder, dest = Path(args.rebuild), Path(args.out_root)
    if extra or args.arms or args.statement:
        raise UserError("--rebuild=DIR reads everything from DIR: give only --out_root beside it")
    try:
        inputs = json.loads((folder / "report_inputs.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--rebuild={folder}: no screen's report_inputs.json there ({e})") from None
    if dest.resolve() == folder.resolve() or (dest / "screen_plan.json").exists():
        raise UserError(f"--out_root={dest} holds a screen: give a folder of its own for the rebuilt report")
    stated_path = folder / "statement.json"
    stated = None
    if stated_path.is_file():
        stated = statement.read(stated_path, sweep.arm_names, setting_names, check_spent=False)
    keep = Keeper(folder, records.tag_of(stated_path if stated else None), dest)
    report, lines = report_of(inputs, keep.read_all(inputs["records"]), stated)
    dest.mkdir(parents=True, exist_ok=True)
    written = publish(report, lines, dest)
    theirs = {p.name: folder / p.name for p in written}
    differ = [p.name for p in written if not theirs[p.name].is_file() or theirs[p.name].read_bytes() != p.read_bytes()]
    for p in written:
        print(f"{p.name}: {'differs from' if p.name in differ else 'identical to'} {folder / p.name}")
    if differ:
        raise UserError(f"the rebuilt {', '.join(differ)} differ from {folder}'s: the code reading the records changed")
