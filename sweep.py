"""Every arm x seed of a comparison, resumably, then the comparison itself.

    python sweep.py config/owt_baseline.py config/owt_nlq.py --seeds=1,2,3 \\
        --launcher="torchrun --standalone --nproc_per_node=8"
    python sweep.py config/mini_*.py --seeds=1,2,3 --out_root=out-mini     # the CPU miniature
    python sweep.py config/owt_*.py --gpus=0,1,2,3                         # one single-GPU run per GPU
    python sweep.py config/owt_*.py --dry_run                              # list what would run

Run (arm, seed) is `LAUNCHER train.py ARM.py --seed=SEED --out_dir=OUT_ROOT/ARM-sSEED --wandb_run_name=ARM
--init_from=auto [extra --key=value options]`, where ARM is the config file's name without `.py` and the
prefix every arm's name shares (owt_nlq -> nlq). The data seed stays the config's, so every run sees the
same batches. A finished run (its metrics hold the evaluation at max_iters) is skipped, an unfinished one
resumes from its checkpoint, a missing one starts: running the same command again after a crash or a
preemption is always safe.
Each run's console goes to OUT_ROOT/ARM-sSEED/train.log. One failing run does not stop the others;
the summary names it with its last error line. The end is compare.py's table and figure over all
finished runs, against the first arm given.
"""

import argparse
import math
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import checkpoint
import compare
from configurator import parse
from errors import UserError, cli_main
from model import GPTConfig
from rundir import read_metrics
from train import TrainConfig, format_eta

ROOT = Path(__file__).resolve().parent


@dataclass
class Run:
    arm: str
    seed: int
    config: str
    out_dir: Path
    max_iters: int

    def status(self) -> str:
        """'finished', 'unfinished' (resumes) or 'missing' (starts)."""
        metrics = self.out_dir / "metrics.jsonl"
        if not metrics.exists():
            return "missing"
        done = any(r.get("step") == self.max_iters and "val_loss" in r for r in read_metrics(metrics))
        intact, damaged = checkpoint.survey(self.out_dir, verify=False)  # a damaged one: auto sets it aside
        return "finished" if done and intact is not None and not damaged else "unfinished"


def arm_names(configs) -> list[str]:
    """Each config file's name without '.py' and without the prefix all of them share up to an '_'
    (owt_baseline, owt_nlq -> baseline, nlq)."""
    stems = [Path(c).stem for c in configs]
    prefix = os.path.commonprefix(stems)
    prefix = prefix[: prefix.rfind("_") + 1] if len(stems) > 1 else ""
    return [s[len(prefix) :] for s in stems]


def plan(configs, seeds, out_root: Path, extra) -> list[Run]:
    """Every (arm, seed), with its config checked now: a typo fails before any run starts."""
    runs = []
    for config, arm in zip(configs, arm_names(configs)):
        for seed in seeds:
            out_dir = out_root / f"{arm}-s{seed}"
            cfg, _ = parse([config, *extra, f"--seed={seed}", f"--out_dir={out_dir}"], TrainConfig, GPTConfig)
            runs.append(Run(arm, seed, config, out_dir, cfg.max_iters))
    return runs


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
        f"--seed={run.seed}",
        f"--out_dir={run.out_dir}",
        f"--wandb_run_name={run.arm}",
        "--init_from=auto",
    ]


def last_error(log: Path) -> str:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.exists() else []
    errors = [x for x in lines if x.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def execute(run: Run, launcher: str, extra, gpu: str | None) -> str | None:
    """Run one (arm, seed) to its end; None on success, else its last error line."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    log = run.out_dir / "train.log"
    guarded = [sys.executable, "-c", STOP_WITH_SWEEP, str(os.getpid()), *command(run, launcher, extra)]
    with open(log, "a") as f:
        code = subprocess.run(guarded, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    return None if code == 0 else last_error(log)


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


def run_all(todo: list[tuple[Run, str]], launcher: str, extra, gpus: list[str | None], every: float = 60) -> dict:
    """Every (run, its state) in todo, len(gpus) at a time (one per GPU), in order, with a progress line every
    `every` seconds; {run: error line} of the failures."""
    work, failures, lock, running, finished = queue.Queue(), {}, threading.Lock(), {}, []
    for item in todo:
        work.put(item)

    def worker(gpu):
        while True:
            try:
                r, state = work.get_nowait()
            except queue.Empty:
                return
            print(f"start {r.arm} seed {r.seed} ({state})" + (f" on GPU {gpu}" if gpu is not None else ""))
            with lock:
                running[r.out_dir] = (r, time.monotonic())
            try:
                error = execute(r, launcher, extra, gpu)
            except OSError as e:  # its out_dir or log could not be made: a failure of this run, not a dead thread
                error = f"could not start: {e}"
            with lock:
                started = running.pop(r.out_dir)[1]
                if error:
                    failures[(r.arm, r.seed)] = error
                else:
                    finished.append(time.monotonic() - started)
                print(f"{'FAILED' if error else 'done'}: {r.arm} seed {r.seed}" + (f": {error}" if error else ""))

    threads = [threading.Thread(target=worker, args=(g,)) for g in gpus]
    for t in threads:
        t.start()
    due = time.monotonic() + every
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if time.monotonic() >= due:
            due += every
            with lock:
                if running:
                    print(progress(list(running.values()), work.qsize(), len(gpus), time.monotonic(), finished))
    return failures


def check_out_root(out_root: Path) -> None:
    """Before any run starts: out_root is, or can be made in, a writable directory."""
    existing = next(p for p in (out_root, *out_root.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out_root={out_root}: {existing} is not a writable directory; choose another --out_root")


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("arms", nargs="+", help="config files, one per arm; the first is the baseline")
    p.add_argument("--seeds", default="1,2,3", help="model seeds, a comma list (the data seed stays fixed)")
    p.add_argument("--out_root", default="out-sweep", help="each run's out_dir is OUT_ROOT/ARM-sSEED")
    p.add_argument("--launcher", default=f"{shlex.quote(sys.executable)}", help="e.g. 'torchrun --nproc_per_node=8'")
    p.add_argument("--gpus", help="a comma list: one run per GPU at a time, through CUDA_VISIBLE_DEVICES")
    p.add_argument("--png", help="the comparison figure (default: OUT_ROOT/compare.png; '' for none)")
    p.add_argument("--md", help="also write the comparison table to this markdown file")
    p.add_argument("--dry_run", action="store_true", help="list each run and what it would do; run nothing")
    p.add_argument("--progress_every", type=float, default=60, help="seconds between progress lines")
    args, extra = p.parse_known_args(argv)
    unknown = [x for x in extra if not x.startswith("--") or "=" not in x]
    if unknown:
        raise UserError(f"{unknown[0]}: sweep passes only --key=value options on to train.py")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seeds={args.seeds}: use a comma list of integers, e.g. 1,2,3") from None
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice or not seeds:
        raise UserError(f"--seeds={args.seeds}: give each seed once (repeated: {twice}), e.g. 1,2,3")
    out_root = Path(args.out_root)
    runs = plan(args.arms, seeds, out_root, extra)
    if len({r.arm for r in runs}) < len(args.arms):
        raise UserError("two config files give the same arm name: give each arm its own file name")
    states = [r.status() for r in runs]  # read once here; again only after the runs end
    todo = [(r, state) for r, state in zip(runs, states) if state != "finished"]
    for r, state in zip(runs, states):
        action = {"finished": "skip", "unfinished": "resume", "missing": "start"}[state]
        print(f"{action:6} {r.arm} seed {r.seed}: {shlex.join(command(r, args.launcher, extra))}")
    if args.dry_run:
        return
    check_out_root(out_root)
    gpus = args.gpus.split(",") if args.gpus else [None]
    if not args.progress_every > 0:
        raise UserError(f"--progress_every={args.progress_every}: give a number of seconds > 0")
    failures = run_all(todo, args.launcher, extra, gpus, args.progress_every)
    finished = [r for r in runs if r.status() == "finished"]
    print(f"\n{len(finished)} of {len(runs)} runs finished, {len(failures)} failed this time")
    for (arm, seed), error in failures.items():
        print(f"  {arm} seed {seed}: {error}")
    if finished:
        png = str(out_root / "compare.png") if args.png is None else args.png  # '' : no figure
        md = [f"--md={args.md}"] if args.md else []
        compare.run([*(str(r.out_dir) for r in finished), f"--baseline={runs[0].arm}", f"--png={png}", *md])
    if failures or len(finished) < len(runs):
        raise UserError(
            f"{len(runs) - len(finished)} of {len(runs)} runs did not finish ({len(failures)} failed, above): fix "
            "them, then run the same command again"
        )


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
