"""Every arm x seed (x grid point) of a comparison, resumably (sweep.py): the runs planned, launched side by side,
on GPUs or as cluster jobs, and the two-stage tuned protocol."""

import argparse
import collections
import itertools
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from configurator import parse
from model import GPTConfig
from nlq.common.domains import At, Number
from nlq.common.errors import UserError
from nlq.common.eta import format_eta
from nlq.common.repo import ROOT
from nlq.comparison import cluster, compare, cost, placement, tuning
from nlq.comparison.stats import LOSS, METRICS, Metric
from nlq.run import checkpoint
from nlq.run.config import TrainConfig
from nlq.run.rundir import read_metrics


@dataclass
class Run:
    arm: str
    seed: int
    config: str
    out_dir: Path
    max_iters: int
    point: dict = field(default_factory=dict)  # its grid point, {key: value as given on the command line}
    options: tuple = ()  # the train.py options of its point, stage and shortened schedule

    def status(self) -> str:
        """'finished', 'unfinished' (resumes) or 'missing' (starts)."""
        metrics = self.out_dir / "metrics.jsonl"
        if not metrics.exists():
            return "missing"
        done = any(r.get("step") == self.max_iters and "val_loss" in r for r in read_metrics(metrics))
        intact, damaged = checkpoint.survey(self.out_dir, verify=False)  # a damaged one: auto sets it aside
        configured = (self.out_dir / "config.json").is_file()  # the comparison reads it; a resume writes it again
        return "finished" if done and configured and intact is not None and not damaged else "unfinished"


def arm_names(configs) -> list[str]:
    """Each config file's name without '.py' and without the prefix all of them share up to an '_'
    (owt_baseline, owt_nlq -> baseline, nlq)."""
    stems = [Path(c).stem for c in configs]
    prefix = os.path.commonprefix(stems)
    prefix = prefix[: prefix.rfind("_") + 1] if len(stems) > 1 else ""
    return [s[len(prefix) :] for s in stems]


def plan(configs, seeds, out_root: Path, extra, points=({},), stage=None, tune_iters=None) -> list[Run]:
    """Every (arm, grid point, seed), with its config checked now: a typo, or a value outside its key's
    domain, fails before any run starts."""
    return [
        run
        for config, arm in zip(configs, arm_names(configs))
        for point in points
        for run in runs_of(config, arm, seeds, out_root, extra, point, stage, tune_iters)
    ]


def runs_of(config, arm, seeds, out_root: Path, extra, point: dict, stage=None, tune_iters=None) -> list[Run]:
    """One arm's runs at one grid point. A stage's runs are named after it and grouped by it in wandb
    (OUT_ROOT's name/tune or /report: how compare.py --tune tells the stages apart); stage 1 may be
    shortened to tune_iters steps, its schedule scaled alike. A stage's run of seed s also draws its own
    data order and validation windows (data_seed: the config's + s, the same for every arm, so pairs stay
    paired), and evaluates on one half of the validation split, stage 1 on the first, stage 2 on the second:
    a choice is neither made on the data it is reported on nor tied to one draw of the data (the paper's
    official order and windows, sampling/eval_order='official', are the same for every seed and stage)."""
    base, _ = parse([config, *extra], TrainConfig, GPTConfig)
    options = [f"--{k}={v}" for k, v in point.items()]
    if stage:
        options.append(f"--wandb_group={out_root.resolve().name}/{stage}")
    if stage and base.eval_order == "fixed":  # the official windows (eval_order='official') are the paper's own
        options.append(f"--eval_part={STAGE_PARTS[stage]}")
    if tune_iters:
        options += shortened(config, [*extra, *options], tune_iters)
    data_seed = base.data_seed
    runs = []
    for seed in seeds:
        name = "-".join(["tune"] * (stage == "tune") + [arm] + [point_name(point)] * bool(point) + [f"s{seed}"])
        out_dir = out_root / name
        own = [*options, f"--data_seed={data_seed + seed}"] if stage else options
        cfg, _ = parse([config, *extra, *own, f"--seed={seed}", f"--out_dir={out_dir}"], TrainConfig, GPTConfig)
        runs.append(Run(arm, seed, config, out_dir, cfg.max_iters, dict(point), tuple(own)))
    return runs


STAGE_PARTS = {"tune": "first", "report": "second"}  # the validation half each stage evaluates


def runs_with(config, arm, seeds, out_root: Path, options, point=None, stage=None) -> list[Run]:
    """runs_of, with options (a setting's data, an arm's query mode) on every run's own command line."""
    runs = runs_of(config, arm, seeds, out_root, list(options), point or {}, stage)
    return [replace(r, options=(*options, *r.options)) for r in runs]


def block_size_of(r: Run) -> int:
    """The context of a planned run's model (its config and options)."""
    _, model_cfg = parse([r.config, *r.options], TrainConfig, GPTConfig)
    return model_cfg.block_size


def point_name(point: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in point.items())


def shortened(config, options, steps: int) -> list[str]:
    """A schedule of `steps` steps shaped like the config's: max_iters, the end of the cosine and the
    warmup scaled by steps / max_iters."""
    cfg, _ = parse([config, *options], TrainConfig, GPTConfig)
    if not 0 < steps < cfg.max_iters:
        raise UserError(f"--tune_iters={steps}: give a number of steps from 1 to below max_iters={cfg.max_iters}")
    scale = steps / cfg.max_iters
    decay = max(1, round((cfg.lr_decay_iters or cfg.max_iters) * scale))
    return [f"--max_iters={steps}", f"--lr_decay_iters={decay}", f"--warmup_iters={round(cfg.warmup_iters * scale)}"]


# Run before the launcher: the run is sent SIGTERM when the sweep's thread that started it dies, however it
# dies (Linux's parent-death signal, kept across exec), so a killed sweep leaves no orphan training; if the
# sweep is already gone, the run does not start.
STOP_WITH_SWEEP = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != parent:\n"
    "    sys.exit('error: the sweep that started this run is gone')\n"
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def command(run: Run, launcher: str, extra) -> list[str]:
    """What the run executes (shown by --dry_run)."""
    return [
        *shlex.split(launcher),
        str(ROOT / "train.py"),
        run.config,
        *extra,
        *run.options,
        f"--seed={run.seed}",
        f"--out_dir={run.out_dir}",
        f"--wandb_run_name={run.arm}",
        "--init_from=auto",
    ]


def last_error(log: Path) -> str:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.exists() else []
    errors = [x for x in lines if x.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def execute(run: Run, launcher: str, extra, gpu: str | None, threads: int | None = None, started=None):
    """Run one run to its end: (exit status, None on success, else its last error line). threads: its CPU
    threads (OMP_NUM_THREADS), for runs side by side on a CPU; started(process) is told of its process."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    log = run.out_dir / "train.log"
    guarded = [sys.executable, "-c", STOP_WITH_SWEEP, str(os.getpid()), *command(run, launcher, extra)]
    with open(log, "a") as f:
        process = subprocess.Popen(guarded, stdout=f, stderr=subprocess.STDOUT, env=env)
        if started is not None:
            started(process)
        code = process.wait()
    return code, None if code == 0 else last_error(log)


STEP_LINE = re.compile(r"^step (\d+): loss ([\d.]+|nan|inf).*, eta (?:(\d+)d )?(\d+):(\d+)(?::(\d+))?$")


def log_progress(log: Path) -> tuple[int, float, float] | None:
    """(step, loss, seconds left) from the last timed step line of a train.log, or None before the first."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    for line in reversed(lines):
        m = STEP_LINE.match(line)
        if m:
            days, a, b, c = (int(g) if g else 0 for g in m.group(3, 4, 5, 6))
            # HH:MM:SS, or past a day 'Nd HH:MM'
            seconds = days * 86400 + (a * 3600 + b * 60 if m.group(3) else a * 3600 + b * 60 + c)
            return int(m.group(1)), float(m.group(2)), float(seconds)
    return None


def progress(running: list, waiting: int, slots: int, now: float, finished: tuple = ()) -> str:
    """One line: each running run's step, loss and ETA (from its log), and the sweep's ETA: the longest
    running run's remaining time plus the waiting runs, slots at a time, at the mean length of the runs
    finished so far (finished: their seconds), else of the running runs (elapsed + their ETA).
    running: (Run, its start time) pairs."""
    parts, lengths, left = [], [], [0.0]
    for r, started in running:
        seen = log_progress(r.out_dir / "train.log")
        if seen is None:
            parts.append(f"{r.arm} s{r.seed} starting")
            continue
        step, loss, seconds = seen
        parts.append(f"{r.arm} s{r.seed} step {step}/{r.max_iters} loss {loss:.4f} eta {format_eta(seconds)}")
        lengths.append(now - started + seconds)
        left.append(seconds)
    lengths = list(finished) or lengths
    if waiting and not lengths:
        sweep = "n/a"
    else:
        sweep = format_eta(max(left) + math.ceil(waiting / slots) * (sum(lengths) / len(lengths) if lengths else 0))
    return f"running: {'; '.join(parts) or 'none'} | {waiting} waiting | sweep eta {sweep}"


class Interrupted(UserError):
    """Ctrl-C during a sweep's runs: every run stopped, nothing more started; the shell's status for SIGINT."""

    exit_code = 130


INTERRUPTED = 130  # train.py's exit status after Ctrl-C (nlq/run/trainer.Interrupted)
GRACE_S = 20  # after Ctrl-C, the seconds a run is given to stop by itself before it is sent SIGINT
FAILURES_IN_A_ROW = 3  # runs that fail one after another (not by diverging): the rest would fail alike


class Broken(UserError):
    """Runs that failed one after another: the first one's error, nothing more started."""


def run_all(
    todo: list[tuple[Run, str]],
    launcher: str,
    extra,
    gpus: list[str | None],
    every: float = 60,
    threads=None,
    after=None,
) -> dict:
    """Every (run, its state) in todo, len(gpus) at a time (one per GPU, or None: runs side by side on the
    CPU with `threads` threads each), in order, with a progress line every `every` seconds; {run's name:
    (exit status, error line)} of the failures. after(run), called under the sweep's lock once a run has
    finished, gives the (run, state) pairs that follow it (a run carried on): they start before any run still
    waiting, so that a slot is never idle while one run's follow-up waits for the others. Ctrl-C (or a run
    that ends by one) stops the whole sweep: no run starts after it, the running ones stop (a terminal's
    Ctrl-C reaches them too; others are sent SIGINT after GRACE_S), and Interrupted says what finished and how
    to continue."""
    work, failures, lock, running, finished = collections.deque(todo), {}, threading.Lock(), {}, []
    stop, broken, processes, in_a_row = threading.Event(), threading.Event(), {}, []
    taken = [0]  # runs taken from work so far, follow-ups included

    def take():
        """The next (run, state), counted as running at once (so no other worker sees nothing running and
        leaves), None when nothing is left, or () while only a running run may add more."""
        with lock:
            if not work:
                return () if running else None
            taken[0] += 1
            r, state = work.popleft()
            running[r.out_dir] = (r, time.monotonic())
            return r, state

    def follow(r) -> tuple[int, str | None]:
        """Put r's follow-ups first in line: (0, None), or (1, the error) if after(r) failed, as r's failure
        (a worker that died here would leave the others waiting on it)."""
        try:
            work.extendleft(reversed(after(r) if after else []))
        except Exception as e:  # any error of after is the run's, said with it
            return 1, f"after it finished: {e}"
        return 0, None

    def worker(gpu):
        while not stop.is_set() and not broken.is_set():
            item = take()
            if item is None:
                return
            if not item:
                time.sleep(0.2)
                continue
            r, state = item
            print(f"start {describe(r)} ({state})" + (f" on GPU {gpu}" if gpu is not None else ""))
            try:
                code, error = execute(r, launcher, extra, gpu, threads, lambda p, d=r.out_dir: processes.update({d: p}))
            except OSError as e:  # its out_dir or log could not be made: a failure of this run, not a dead thread
                code, error = 1, f"could not start: {e}"
            with lock:
                processes.pop(r.out_dir, None)
                if not error:
                    finished.append(time.monotonic() - running[r.out_dir][1])
                    code, error = follow(r)
                if error:
                    failures[str(r.out_dir)] = (code, error)
                running.pop(r.out_dir)
                in_a_row[:] = [*in_a_row, (r, error)] if error and code not in (DIVERGED, INTERRUPTED) else []
                if len(in_a_row) >= FAILURES_IN_A_ROW:
                    broken.set()
                print(f"{'FAILED' if error else 'done'}: {describe(r)}" + (f": {error}" if error else ""))
            if code == INTERRUPTED:
                stop.set()

    workers = [threading.Thread(target=worker, args=(g,)) for g in gpus]
    for t in workers:
        t.start()
    due = time.monotonic() + every
    try:
        while any(t.is_alive() for t in workers):
            time.sleep(0.2)
            if time.monotonic() >= due:
                due += every
                with lock:
                    if running:
                        print(progress(list(running.values()), len(work), len(gpus), time.monotonic(), finished))
    except KeyboardInterrupt:
        stop.set()
        stop_runs(workers, processes, lock)
    if stop.is_set():
        raise Interrupted(
            f"interrupted: {len(finished)} run(s) finished, {taken[0] - len(finished)} stopped or failed (each "
            f"resumes from its last checkpoint), {len(work)} not started; run the same command again to continue"
        )
    if broken.is_set():
        first, error = in_a_row[0]
        raise Broken(
            f"{len(in_a_row)} runs failed one after another, so the {len(work)} left were not started; the first, "
            f"{describe(first)}: {error}. Fix that and run the same command again"
        )
    return failures


def stop_runs(workers, processes: dict, lock) -> None:
    """After Ctrl-C: the runs still going after GRACE_S (a SIGINT sent to the sweep alone) are sent SIGINT;
    every worker has ended when this returns."""
    deadline = time.monotonic() + GRACE_S
    while any(t.is_alive() for t in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    with lock:
        for p in processes.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
    for t in workers:
        t.join()


def check_out_root(out_root: Path) -> None:
    """Before any run starts: out_root is, or can be made in, a writable directory."""
    existing = next(p for p in (out_root, *out_root.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out_root={out_root}: {existing} is not a writable directory; choose another --out_root")


# What a grid may vary: the optimizer and its schedule, and the model (a GPTConfig field); of the model's,
# not the context and vocabulary (they change the data), and of the run's, nothing else (its mechanics).
TUNABLE = {"learning_rate", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr", "warmup_iters"}


TUNABLE |= {"lr_decay_iters"}


# Keys a grid may not vary: every run must see the same tokens (the data order and windows), and these
# the sweep sets itself.
NOT_A_GRID_KEY = {
    **dict.fromkeys(("dataset", "data_seed", "sampling", "eval_order", "block_size"), "it changes the data order"),
    **dict.fromkeys(("batch_size", "gradient_accumulation_steps", "eval_iters"), "it changes the batches"),
    "max_iters": "it is the length: use --tune_iters for a shorter stage 1",
    "seed": "the seeds are --tune_seeds and --seeds",
    **dict.fromkeys(("out_dir", "init_from", "wandb_run_name", "wandb_group", "eval_part"), "the sweep sets it"),
}


DIVERGED = 3  # train.py's exit status for a run that diverged (train.Diverged)


def parser(doc: str | None = None) -> argparse.ArgumentParser:
    """sweep.py's options (doc: its --help text)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("arms", nargs="+", help="config files, one per arm; the first is the baseline")
    p.add_argument("--seeds", default="1,2,3", help="model seeds, a comma list (with --grid: stage 2's)")
    p.add_argument("--out_root", default="out-sweep", help="each run's out_dir is OUT_ROOT/ARM-sSEED")
    add_run_options(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a grid axis (repeatable)")
    p.add_argument("--tune_seeds", help="with --grid: the seeds of stage 1, disjoint from --seeds")
    p.add_argument("--tune_iters", type=int, help="with --grid: stage 1's length (its schedule scaled alike)")
    p.add_argument(
        "--metric", default="val_loss", choices=list(METRICS),
        help="with --grid: what stage 1 chooses by and the comparison reports (accuracy: datasets of examples)",
    )  # fmt: skip
    p.add_argument("--png", help="the comparison figure (default: OUT_ROOT/compare.png; '' for none)")
    p.add_argument("--md", help="also write the comparison table to this markdown file")
    p.add_argument("--json", help="with --grid: also write the result as JSON here")
    p.add_argument(
        "--prices", metavar="JSON", help="time each arm's step at a bench.py or gpu_check.py report's ratios"
    )
    return p


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Where and how the runs run (sweep.py's and screen.py's): launcher, GPUs or CPU jobs, the executor."""
    p.add_argument("--launcher", default=f"{shlex.quote(sys.executable)}", help="e.g. 'torchrun --nproc_per_node=8'")
    p.add_argument("--gpus", help="a comma list of GPUs, each given runs through CUDA_VISIBLE_DEVICES")
    p.add_argument(
        "--runs_per_gpu", type=int,
        help="with --gpus: runs at a time on each GPU (default: what its free memory and the cores allow)",
    )  # fmt: skip
    p.add_argument(
        "--gpu_step_ms",
        type=Number(At(above=0)),
        default=10.0,
        help="with --gpus and --dry_run: a step's time for the GPU plan",
    )
    p.add_argument("--jobs", type=int, default=1, help="without --gpus: runs side by side on this machine's CPUs")
    p.add_argument("--threads", type=int, help="each run's CPU threads (default: the CPUs / the runs at a time)")
    p.add_argument(
        "--executor", default="local", choices=("local", *cluster.EXECUTORS),
        help="local: runs started here (--gpus, --jobs); slurm: SLURM job arrays through submitit; submitit_local: "
        "submitit's local executor (the cluster path on this machine)",
    )  # fmt: skip
    p.add_argument("--slurm_partition", help="with --executor=slurm: the partition")
    p.add_argument("--slurm_gpus", type=int, default=8, help="with --executor=slurm: GPUs per job (one node)")
    p.add_argument("--slurm_time", type=int, default=4320, help="a job's time limit in minutes (default 3 days)")
    p.add_argument("--slurm_parallelism", type=int, help="with --executor=slurm: at most this many jobs at once")
    p.add_argument("--dry_run", action="store_true", help="list each run and what it would do; run nothing")
    p.add_argument("--progress_every", type=Number(At(above=0)), default=60, help="seconds between progress lines")


def sweep(args, extra) -> None:
    """The sweep args (sweep.py's options, parser()) and extra (--key=value options passed on to every run) ask
    for: its runs, then the comparison."""
    unknown = [x for x in extra if not x.startswith("--") or "=" not in x]
    if unknown:
        raise UserError(f"{unknown[0]}: sweep passes only --key=value options on to train.py")
    if args.tune_iters is not None and args.tune_iters < 1:
        raise UserError(f"--tune_iters={args.tune_iters}: give stage 1's number of steps, at least 1")
    check_outputs(args)
    args.price_list = cost.read_prices(args.prices) if args.prices else None
    check_executor(args, extra)
    check_metric(args, extra)
    seeds = seed_list("--seeds", args.seeds)
    if args.grid or args.tune_seeds or args.tune_iters or args.json:
        return two_stage(args, extra, seeds)
    runs = plan(args.arms, seeds, Path(args.out_root), extra)
    check_arm_names(runs, args.arms)
    finished, failures = launch(runs, args, extra)
    if finished:
        compare.compare(compare.read_runs([str(r.out_dir) for r in finished]), runs[0].arm, metric=args.metric,
                        **outputs(args))  # fmt: skip
    if len(finished) < len(runs) and not args.dry_run:
        raise UserError(
            f"{len(runs) - len(finished)} of {len(runs)} runs did not finish ({len(failures)} failed, above): fix "
            "them, then run the same command again"
        )


def check_metric(args, extra) -> None:
    """An accuracy is measured on datasets of examples (data/synthetic_tasks/prepare.py): a sweep of text runs
    asked for one is refused before any run starts."""
    if args.metric == "val_loss":
        return
    from nlq.data.examples import is_examples

    for config in args.arms:
        cfg, _ = parse([config, *extra], TrainConfig, GPTConfig)
        path = cfg.dataset if os.path.isdir(cfg.dataset) else os.path.join("data", cfg.dataset)
        if not is_examples(path):
            raise UserError(
                f"--metric={args.metric}: {config} trains on {path}, a token dataset; accuracy is measured on datasets "
                "of examples (data/synthetic_tasks/prepare.py): use --metric=val_loss"
            )


def check_outputs(args) -> None:
    """The figure, table and JSON paths can be written, before any run starts (one inside OUT_ROOT, which the
    sweep makes, once OUT_ROOT can be made)."""
    from nlq.common.atomic import check_writable
    from nlq.common.figures import check_figure_path
    from nlq.common.repo import check_not_a_project_page

    root = Path(args.out_root).resolve()
    for option, path, check in (("--png", args.png, check_figure_path), ("--md", args.md, check_writable),
                                ("--json", args.json, check_writable)):  # fmt: skip
        if not path:
            continue
        check_not_a_project_page(option, path)
        if not root.exists() and root in Path(path).resolve().parents:
            check_out_root(Path(args.out_root))
            continue
        check(option, path)


def check_executor(args, extra=()) -> None:
    """The executor's options agree with it, before anything is planned (extra: the runs' own options)."""
    slurm = [o for o in ("slurm_partition", "slurm_parallelism") if getattr(args, o) is not None]
    if args.executor != "slurm" and slurm:
        raise UserError(f"--{slurm[0]} is an option of --executor=slurm, not --executor={args.executor}")
    if args.executor != "local" and (args.gpus or args.jobs != 1 or args.threads):
        option = "--gpus" if args.gpus else "--jobs" if args.jobs != 1 else "--threads"
        raise UserError(f"{option} places runs started here: with --executor={args.executor} the scheduler places jobs")
    if args.gpus and args.jobs != 1:
        raise UserError("--jobs is for runs side by side on CPUs: with --gpus, --runs_per_gpu sets runs at a time")
    placement.check(args, extra)
    for option in ("jobs", "threads"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise UserError(f"--{option}={value}: give a number >= 1")
    for option in ("slurm_gpus", "slurm_time", "slurm_parallelism"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise UserError(f"--{option}={value}: give a number >= 1")
    if args.executor == "slurm" and args.slurm_gpus > 1 and args.launcher == parser().get_default("launcher"):
        raise UserError(
            f"--slurm_gpus={args.slurm_gpus} with the default launcher trains on one GPU of each job: pass "
            f"--launcher='torchrun --standalone --nproc_per_node={args.slurm_gpus}', or --slurm_gpus=1"
        )


def two_stage(args, extra, seeds):
    """Stage 1, every arm x grid point x tune seed; each arm's point chosen; stage 2, each arm's point x
    fresh seed; the comparison of stage 2 (nlq/comparison/tuning.py). Run again, it continues in whichever
    stage it was."""
    keys, points = grid_points(args.grid, extra)
    rescheduled = sorted(set(keys) & {"warmup_iters", "lr_decay_iters"})
    if rescheduled and args.tune_iters:
        raise UserError(
            f"--grid over {rescheduled[0]} and --tune_iters both set stage 1's schedule (--tune_iters scales it): "
            "drop one of them"
        )
    if not args.grid or not args.tune_seeds:
        raise UserError("--grid=KEY=V1,V2 and --tune_seeds=S go together: a grid tuned on seeds, reported on --seeds")
    tune_seeds = seed_list("--tune_seeds", args.tune_seeds)
    shared = sorted(set(tune_seeds) & set(seeds))
    if shared:
        raise UserError(
            f"--tune_seeds and --seeds share {shared}: a choice reported on the seeds that made it is biased in its "
            "favour; give disjoint seeds"
        )
    out_root = Path(args.out_root)
    stage1 = plan(args.arms, tune_seeds, out_root, extra, points, "tune", args.tune_iters)
    check_arm_names(stage1, args.arms)
    if len(points) == 1:
        print(f"note: the grid has one point ({point_name(points[0])}): nothing is tuned")
    print(f"stage 1: {len(stage1)} runs ({len(args.arms)} arms x {len(points)} points x {len(tune_seeds)} tune seeds)")
    finished, failures = launch(stage1, args, extra, tolerate=DIVERGED)
    if args.dry_run:
        print(f"stage 2: each arm's chosen point x seeds {seeds}, once stage 1 has finished")
        return
    gave_up = {n for n, (code, _) in failures.items() if code == DIVERGED}
    if any(r not in finished and str(r.out_dir) not in gave_up for r in stage1):
        raise UserError("stage 1 is not complete (above): run the same command again; stage 2 starts after it")
    chosen = chosen_points(stage1, keys, METRICS[args.metric])
    stage2 = [r for config, arm in zip(args.arms, arm_names(args.arms)) for r in runs_of(
        config, arm, seeds, out_root, extra, chosen[arm], "report")]  # fmt: skip
    print(f"stage 2: {len(stage2)} runs at " + "; ".join(f"{a} {point_name(p)}" for a, p in chosen.items()))
    done, _ = launch(stage2, args, extra)
    if len(done) < len(stage2):
        raise UserError(f"{len(stage2) - len(done)} stage-2 runs did not finish (above): run the same command again")
    runs = compare.read_runs([str(r.out_dir) for r in stage1 + stage2])
    compare.compare(runs, stage2[0].arm, metric=args.metric, tune=",".join(keys), json_path=args.json, **outputs(args))


def seed_list(option: str, text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"{option}={text}: use a comma list of integers, e.g. 1,2,3") from None
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice or not seeds:
        raise UserError(f"{option}={text}: give each seed once (repeated: {twice}), e.g. 1,2,3")
    return seeds


def grid_points(grid: list[str], extra) -> tuple[list[str], list[dict]]:
    """(keys, every point of their values crossed, in the order given). Each key is a config field the grid
    may vary; its values' domains are checked when the runs are planned."""
    fields = {**TrainConfig.__dataclass_fields__, **GPTConfig.__dataclass_fields__}
    axes = {}
    for item in grid:
        key, _, values = item.partition("=")
        if key not in fields:
            raise UserError(f"--grid={item}: no config has a key {key!r} (python train.py --help lists them)")
        if key in NOT_A_GRID_KEY:
            raise UserError(f"--grid={item}: {key} cannot be a grid key: {NOT_A_GRID_KEY[key]}")
        if key in TrainConfig.__dataclass_fields__ and key not in TUNABLE:
            raise UserError(
                f"--grid={item}: {key} is not a tuning choice (it is how a run runs); a grid varies the optimizer "
                f"and schedule ({', '.join(sorted(TUNABLE))}) or the model's fields"
            )
        if key in axes or any(x.startswith(f"--{key}=") for x in extra):
            raise UserError(f"--grid={item}: {key} is given twice (in another --grid or as --{key}=...)")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals or len(set(vals)) < len(vals) or any("/" in v for v in vals):
            raise UserError(f"--grid={item}: give the key's values once each, e.g. --grid={key}=3e-4,1e-3,3e-3")
        axes[key] = vals
    keys = list(axes)
    return keys, [dict(zip(keys, combo)) for combo in itertools.product(*axes.values())]


def chosen_points(stage1: list[Run], keys, metric: Metric = LOSS, runs: dict | None = None) -> dict:
    """{arm: its chosen grid point as given on the command line}: tuning.choose on stage 1's runs (runs: {out_dir:
    its compare.Run} where they were read already, e.g. from a screen's records; else read from their out_dirs)."""
    runs = runs or {r.out_dir: compare.Run.from_dir(r.out_dir) for r in stage1}
    choice = tuning.choose(list(runs.values()), keys, metric)
    out = {}
    for r in stage1:
        if tuning.point_of(runs[r.out_dir], keys) == tuple(choice[r.arm]["chosen"].values()):
            out.setdefault(r.arm, r.point)
    return out


def check_arm_names(runs: list[Run], configs) -> None:
    if len({r.arm for r in runs}) < len(configs):
        raise UserError("two config files give the same arm name: give each arm its own file name")


def outputs(args) -> dict:
    """The comparison's figure (default: OUT_ROOT/compare.png; '': none) and table."""
    png = str(Path(args.out_root) / "compare.png") if args.png is None else args.png
    return {"png": png, "md": args.md, "prices": args.price_list}


def launch(runs: list[Run], args, extra, tolerate=None, after=None) -> tuple[list[Run], dict]:
    """List the runs and what each will do; unless a dry run, run those not finished: (the finished runs,
    {name: (exit status, error)} of the rest that ran, follow-ups included). A run whose exit status is
    `tolerate` (a divergence in stage 1) is said, not counted as failed. after(run): the (run, state) pairs
    that follow a run once it has finished (run_all's); a cluster's jobs take them batch by batch."""
    states = [r.status() for r in runs]  # read once here; again only after the runs end
    for r, state in zip(runs, states):
        action = {"finished": "skip", "unfinished": "resume", "missing": "start"}[state]
        print(f"{action:6} {describe(r)}: {shlex.join(command(r, args.launcher, extra))}")
    todo = [(r, state) for r, state in zip(runs, states) if state != "finished"]
    placed, threads, said = placement.slots(args, [r for r, _ in todo]) if args.executor == "local" else ([], None, "")
    if args.dry_run:
        if args.gpus and todo:
            print(f"{said}\n{placement.gpu_plan([r.max_iters for r, _ in todo], [], placed, args.gpu_step_ms)}")
        return [], {}
    check_out_root(Path(args.out_root))
    if args.executor == "local":
        print(f"runs: {said}")
        failures = run_all(todo, args.launcher, extra, placed, args.progress_every, threads, after)
    else:
        failures, batch = {}, todo
        while batch:
            failures.update(submit_all(batch, args, extra))
            batch = [x for r, _ in batch if r.status() == "finished" for x in (after(r) if after else [])]
    finished = [r for r in runs if r.status() == "finished"]
    failed = {n: e for n, (code, e) in failures.items() if code != tolerate}
    print(f"\n{len(finished)} of {len(runs)} runs finished, {len(failed)} failed this time")
    for name, (code, error) in failures.items():
        said = "diverged: counted as the worst value of its point" if code == tolerate else "failed"
        print(f"  {name} {said}: {error}")
    return finished, failures


def submit_all(todo, args, extra) -> dict:
    """Every (run, its state) of todo as a submitit job (nlq/comparison/cluster.py), waited for: the failures,
    as run_all's."""
    folder = Path(args.out_root) / "submitit"
    ex = cluster.make_executor(
        args.executor, folder, args.slurm_partition, args.slurm_gpus, args.slurm_time, args.slurm_parallelism
    )
    for r, _ in todo:
        r.out_dir.mkdir(parents=True, exist_ok=True)
    commands = {r.out_dir: command(r, args.launcher, extra) for r, _ in todo}
    return cluster.run_jobs(todo, commands, ex, folder, args.progress_every, progress, last_error)


def describe(r: Run) -> str:
    return f"{r.arm}{' ' + point_name(r.point) if r.point else ''} seed {r.seed}"
