"""The synthetic screen's runs (screen.py): each setting's dataset, stage 1 and 2 of every arm, the estimate of
its time, and the report (nlq/comparison/screening.py)."""

import argparse
import json
import shlex
import shutil
import time
from dataclasses import replace
from pathlib import Path

from configurator import parse
from model import GPTConfig
from nlq.common.atomic import atomic_write_json, atomic_write_text, check_writable
from nlq.common.domains import At, Number
from nlq.common.errors import UserError
from nlq.common.figures import check_figure_path
from nlq.comparison import cost, placement, screening, statement, sweep
from nlq.comparison.compare import Run
from nlq.comparison.screening import ACCURACY
from nlq.data.examples import rescore_floor, write_task
from nlq.data.tasks import TaskError
from nlq.eval.accuracy import midpoint, tokens_to_reach
from nlq.run.config import TrainConfig
from nlq.run.rundir import read_metrics

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
    args.stated = None
    if args.statement:
        args.stated = statement.read(args.statement, sweep.arm_names, lambda name: [s.name for s in screen_of(name)[0]])
        statement.apply(args.stated, args)
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
    prices = {"file": args.prices, "ratios": cost.read_prices(args.prices)} if args.prices else None
    grid = args.grid or [f"learning_rate={rates}"]
    keys, points = sweep.grid_points(grid, extra)
    tune_seeds, seeds = sweep.seed_list("--tune_seeds", args.tune_seeds), sweep.seed_list("--seeds", args.seeds)
    if set(tune_seeds) & set(seeds):
        raise UserError("--tune_seeds and --seeds share a seed: report on fresh seeds")
    if args.max_extra_seeds < 0:
        raise UserError(f"--max_extra_seeds={args.max_extra_seeds}: give 0 (none) or more")
    if args.continue_to < 1:
        raise UserError(f"--continue_to={args.continue_to}: give a whole multiple of a run's budget, 1 (never) or more")
    out_root = Path(args.out_root)
    sweep.check_out_root(out_root)
    held = same_screen(out_root, settings, args, grid, extra)
    data = {s.name: out_root / "data" / s.name for s in settings}
    stage1 = [r for s in settings for r in plan(s, data[s.name], args.arms, tune_seeds, out_root, extra, points)]
    sweep.check_arm_names(stage1, args.arms)
    fresh = extra_seeds(tune_seeds + seeds, min(args.max_extra_seeds, max(screening.SEED_ROUNDS) - len(seeds)))
    estimate(settings, stage1, args, len(seeds), len(fresh))
    if args.dry_run:
        sweep.launch(stage1, args, extra=[])
        print(f"stage 2: each arm's chosen point per setting x seeds {seeds}, once stage 1 has finished")
        if fresh:
            print(
                f"then up to {len(fresh)} more seeds ({','.join(map(str, fresh))}) for each arm and setting whose "
                f"interval holds zero (to {' then '.join(map(str, screening.seed_rounds(len(seeds), len(fresh))))} "
                f"seeds): at most {len(fresh) * len(args.arms) * len(settings)} runs more (--max_extra_seeds)"
            )
        if args.gpus:
            print(f"the whole screen: {whole_gpu_plan(settings, stage1, args, len(seeds), len(fresh))}")
        return
    out_root.mkdir(parents=True, exist_ok=True)
    for name in ("screen.md", "screen.json"):
        check_writable(f"the report {name}", out_root / name)
    for name in ("screen.png", "curves.png", "axes.png"):
        check_figure_path("the figure", out_root / name)
    atomic_write_json(out_root / "screen_plan.json", held, indent=1)
    for s in settings:
        prepare(s, data[s.name], out_root)
    started = time.time()
    finished, failures = sweep.launch(stage1, args, extra=[], tolerate=sweep.DIVERGED)
    gave_up = {n for n, (code, _) in failures.items() if code == sweep.DIVERGED}
    if any(r not in finished and str(r.out_dir) not in gave_up for r in stage1):
        raise UserError("stage 1 is not complete (above): run the same command again; stage 2 starts after it")
    stage2 = [
        r for s in settings for r in chosen_runs(s, stage1, data[s.name], args.arms, seeds, out_root, extra, keys)
    ]
    launch_all(stage2, args, "stage-2")
    continue_short(settings, stage2, data, args, out_root)
    for target in screening.seed_rounds(len(seeds), len(fresh)):
        asked = seeds + fresh[: target - len(seeds)]
        added = more_seeds(settings, stage1, stage2, asked, data, args, out_root, extra, keys)
        continue_short(settings, added, data, args, out_root)
        stage2 += added
    write_report(settings, stage1 + stage2, keys, data, out_root, args, started, prices)


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
        "settings": {s.name: screening.json_ready(s) for s in settings},
    }
    file = out_root / "screen_plan.json"
    try:
        held = json.loads(file.read_text()) if file.exists() else None
    except (OSError, ValueError) as e:
        raise UserError(f"{file} cannot be read ({e}): use another --out_root, or remove that file") from None
    if isinstance(held, dict):
        held.setdefault("baseline", next(iter(held.get("arms") or {}), None))  # before --baseline: the first arm
        differ = [k for k in ("arms", "baseline", "grid", "tune_seeds", "seeds", "options") if held.get(k) != plan[k]]
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


def launch_all(runs, args, which: str) -> None:
    done, _ = sweep.launch(runs, args, extra=[])
    if len(done) < len(runs):
        raise UserError(f"{len(runs) - len(done)} {which} runs did not finish (above): run the same command again")


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


def continue_short(settings, runs, data, args, out_root: Path) -> None:
    """Carry on each of the (finished) stage-2 runs that did not reach the midpoint, to --continue_to times its
    budget. Each continuation starts from a copy of its run's checkpoint and log, made aside and then renamed
    (a kill leaves no half copy), and resumes from it: the run itself is never written again."""
    if args.continue_to == 1:
        return
    todo = []
    for s in settings:
        for r in runs:
            if r.out_dir.parent == out_root / s.name and short_of_midpoint(r, data[s.name]):
                todo.append((r, continuation(r, out_root, args.continue_to)))
    for r, c in todo:
        if not c.out_dir.exists():
            copying = c.out_dir.with_name(c.out_dir.name + ".copying")
            shutil.rmtree(copying, ignore_errors=True)
            copying.mkdir(parents=True)
            for name in ("ckpt.pt", "metrics.jsonl", "config.json"):
                shutil.copy2(r.out_dir / name, copying / name)
            copying.rename(c.out_dir)
    if todo:
        print(f"{len(todo)} stage-2 runs short of the midpoint carry on to {args.continue_to}x their budget")
    launch_all([c for _, c in todo], args, "continued")


def continued_of(runs, out_root: Path, multiple: int) -> dict:
    """{run name: its continuation read up to `multiple` times its budget} for the runs that have one (a
    continuation carried further by an earlier --continue_to is read only that far)."""
    out = {}
    for r in runs:
        path = out_root / CONTINUED / Path(r.name).parent.name / Path(r.name).name
        if multiple > 1 and (path / "metrics.jsonl").is_file():
            steps = r.config["max_iters"] * multiple
            records = [x for x in read_metrics(path / "metrics.jsonl") if x.get("step", 0) <= steps]
            out[r.name] = Run(str(path), json.loads((path / "config.json").read_text()), records)
    return out


def extra_seeds(used: list, most: int) -> list[int]:
    """`most` fresh seeds after every seed the screen uses (the rounds stop at SEED_ROUNDS' last count)."""
    return list(range(max(used) + 1, max(used) + 1 + max(0, most)))


def more_seeds(settings, stage1, stage2, asked, data, args, out_root, extra, keys) -> list:
    """One round of extra seeds: for each setting, the arms screening.wanting_seeds names on the runs so far (their
    seeds before this round's, so that a rerun decides alike) run on this round's new seeds (asked, the seeds
    the round ends with)."""
    baseline = baseline_of(args)
    names = dict(zip(sweep.arm_names(args.arms), args.arms))
    added = []
    for s in settings:
        here = [r for r in stage2 if r.out_dir.parent == out_root / s.name]
        runs = [Run.from_dir(r.out_dir) for r in stage1 + here if r.out_dir.parent == out_root / s.name]
        continued = continued_of(runs, out_root, args.continue_to)
        report = screening.setting_report(runs, keys, baseline, floor_of(data[s.name]), continued=continued)
        for arm in screening.wanting_seeds(report, baseline):
            held = {r.seed for r in here if r.arm == arm}
            new = [seed for seed in asked if seed not in held]
            point = next(r.point for r in here if r.arm == arm)
            added += setting_runs(s, data[s.name], names[arm], arm, new, out_root, extra, point, "report")
            if new:
                print(f"{s.name}: {arm} on seeds {','.join(map(str, new))} too (the rule on seeds: docs/screening.md)")
    launch_all(added, args, "extra-seed")
    return added


def screen_of(name: str) -> tuple[list, str]:
    """A screen's settings and its default learning rates: a named screen's, or a JSON file's."""
    if name.endswith(".json"):
        screen, grid = screening.read_screen(name)
        return screen, grid or screening.GRIDS["default"]
    if name in screening.SCREENS:
        return screening.SCREENS[name], screening.GRIDS[name]
    raise UserError(f"--screen={name}: one of {', '.join(screening.SCREENS)}, or a .json file of settings")


def chosen_settings(args) -> tuple[list, str]:
    """The screen's settings (those --settings names, if given) and its default learning rates."""
    screen, grid = screen_of(args.screen)
    if not args.settings:
        return screen, grid
    names = comma_names(args.settings)
    unknown = [n for n in names if n not in {s.name for s in screen}]
    if unknown or not names:
        raise UserError(f"--settings={args.settings}: the screen has {', '.join(s.name for s in screen)}")
    return [s for s in screen if s.name in names], grid


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


def chosen_runs(setting, stage1, data_dir, arms, seeds, out_root, extra, keys) -> list:
    """Stage 2 of one setting: each arm's point chosen on its stage-1 runs by accuracy, on the fresh seeds."""
    chosen = sweep.chosen_points([r for r in stage1 if r.out_dir.parent == out_root / setting.name], keys, ACCURACY)
    return [
        r
        for config, arm in zip(arms, sweep.arm_names(arms))
        for r in setting_runs(setting, data_dir, config, arm, seeds, out_root, extra, chosen[arm], "report")
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
    continuations could add (every stage-2 run short, extra seeds included) is said apart."""
    arms, fresh = len(args.arms), {}
    tokens = 0
    for r in stage1:
        setting = r.out_dir.parent.name
        cfg, _ = parse([r.config, *r.options], TrainConfig, GPTConfig)
        run_tokens = cfg.batch_size * cfg.gradient_accumulation_steps * cfg.max_iters * seq_len(settings, setting)
        tokens += run_tokens
        fresh[setting] = run_tokens * seeds * arms
    tokens += sum(fresh.values())
    runs = len(stage1) + seeds * arms * len(settings)
    run_hours = tokens / args.tokens_per_s / 3600
    if args.executor == "local" and args.gpus:
        print(f"{runs} runs ({len(stage1)} in stage 1, {runs - len(stage1)} in stage 2 over {len(settings)} settings), "
              f"{tokens / 1e6:,.0f}M training tokens, on GPUs: the GPU plan below")  # fmt: skip
        return
    if args.executor == "local":
        when = f"about {run_hours / args.jobs:.1f} hours, {args.jobs} at a time"
    else:
        when = f"about {run_hours:.1f} run-hours, as many at a time as the scheduler gives"
    print(
        f"{runs} runs ({len(stage1)} in stage 1, {runs - len(stage1)} in stage 2 over {len(settings)} settings), "
        f"{tokens / 1e6:,.0f}M training tokens: {when} at {args.tokens_per_s:,.0f} tokens/s a run (evaluations "
        "and starts add about 15 %)"
    )
    if args.continue_to > 1:
        most = sum(fresh.values()) * (seeds + extra) / seeds * (args.continue_to - 1)
        local = args.executor == "local"
        hours = most / args.tokens_per_s / 3600 / (args.jobs if local else 1)
        print(
            f"continuations (--continue_to={args.continue_to}): each stage-2 run short of its setting's midpoint at "
            f"its budget carries on to {args.continue_to}x it; were every one short, {extra} extra seeds "
            f"included, {screening.tokens_text(most)} tokens more, about {hours:.1f} "
            + ("hours" if local else "run-hours")
        )


def whole_gpu_plan(settings, stage1, args, seeds: int, extra: int) -> str:
    """placement.gpu_plan of stage 1, stage 2 on seeds, and at most extra seeds more, every setting and arm."""
    placed, _, _ = placement.slots(args, stage1)
    stage2 = [s.max_iters for s in settings for _ in range(seeds * len(args.arms))]
    more = [s.max_iters for s in settings for _ in range(extra * len(args.arms))]
    return placement.gpu_plan([r.max_iters for r in stage1] + stage2, more, placed, args.gpu_step_ms)


def seq_len(settings, name: str) -> int:
    return next(s.settings["seq_len"] for s in settings if s.name == name)


def write_report(settings, runs, keys, data, out_root: Path, args, started: float, prices=None) -> None:
    baseline = baseline_of(args)
    by_setting = {s.name: [Run.from_dir(r.out_dir) for r in runs if r.out_dir.parent == out_root / s.name]
                  for s in settings}  # fmt: skip
    results, continued = {}, {}
    for s in settings:
        ratios = prices["ratios"] if prices else None
        continued[s.name] = continued_of(by_setting[s.name], out_root, args.continue_to)
        floor = floor_of(data[s.name])
        results[s.name] = screening.setting_report(by_setting[s.name], keys, baseline, floor, ratios, continued[s.name])
    report = {
        "baseline": baseline,
        "prices": prices,
        "keys": keys,
        "settings": results,
        "tasks": {s.name: {"task": s.task, "settings": s.settings, "axis": list(s.axis)} for s in settings},
        "overall": screening.overall(results, by_setting, baseline, args.overall),
        "budget": screening.budget(
            [r for rs in by_setting.values() for r in rs],
            runs,
            args,
            {n: c for cs in continued.values() for n, c in cs.items()},
        ),
        "command": ["screen.py", *map(shlex.quote, args.arms)],
        "screen": args.screen,
    }
    lines = screening.markdown(report)
    if getattr(args, "stated", None):  # the answer to what was stated, before everything reported
        report["statement"] = statement.called(args.stated, results)
        lines[2:2] = statement.markdown(args.stated, report["statement"])
    atomic_write_text(out_root / "screen.md", "\n".join(lines) + "\n")
    atomic_write_json(out_root / "screen.json", report, indent=1)
    screening.plot_accuracy(report, out_root / "screen.png")
    screening.plot_curves(report, out_root / "curves.png")
    axes = screening.plot_axes(report, out_root / "axes.png")
    print("\n".join(lines))
    shown = ", ".join(str(out_root / n) for n in ("screen.md", "screen.json", "screen.png", "curves.png"))
    print(f"\nreport: {shown}" + (f", {out_root / 'axes.png'}" if axes else "") + f" ({time.time() - started:.0f} s)")
