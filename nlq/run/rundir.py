"""A run's out_dir: its lock, config.json, metrics.jsonl and wandb run (everything but checkpoints).

One process trains in an out_dir at a time: RunDir.lock takes an exclusive flock on out_dir/train.lock,
which the OS releases when the process dies however it dies, so a SIGKILL never leaves a stale lock.
metrics.jsonl is appended a line per record; a kill or full disk during an append can cut its last line,
which read_metrics drops with a warning, while a damaged line in the middle is an error naming it.
"""

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from nlq.common.atomic import WriteError, atomic_write_json, atomic_write_text, fsync_dir, remove_stale_temps
from nlq.common.errors import UserError
from nlq.run.checkpoint import CHECKPOINT, SHARDED

METRICS, CONFIG, LOCK = "metrics.jsonl", "config.json", "train.lock"


def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl. A cut last line is dropped with a warning on stderr."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError as e:  # a directory of that name, unreadable: nothing this project wrote
        raise UserError(f"{path} cannot be read ({e.strerror or e}): move it aside, then run again") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if all(not rest.strip() for rest in lines[number:]):
                print(f"warning: {path} line {number} is cut (a kill or full disk mid-write): dropped", file=sys.stderr)
                break
            raise UserError(f"{path} line {number} is damaged: repair or delete that line, then run again") from None
    return records


class RunDir:
    def __init__(self, out_dir):
        self.path = Path(out_dir)
        self._lock_file = None

    @property
    def checkpoint(self) -> Path:
        """The single-file checkpoint (checkpoint.latest finds the newest of either format)."""
        return self.path / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    def held(self) -> list[Path]:
        """What a new run would erase: checkpoints of either format (kept ones too) and metrics.jsonl."""
        kept = sorted(self.path.glob("ckpt_[0-9]*.pt"))
        return [p for p in (self.checkpoint, self.path / SHARDED, *kept, self.metrics) if p.exists()]

    def set_aside(self, paths, config: bool) -> Path:
        """Move paths (and, if config, config.json) into a new out_dir/stale-<time>/; returns it."""
        aside = self.path / time.strftime("stale-%Y%m%d-%H%M%S")
        while aside.exists():
            aside = aside.with_name(aside.name + "+")
        aside.mkdir()
        for p in [*paths, self.path / CONFIG] if config else paths:
            if p.exists():
                os.replace(p, aside / p.name)
        fsync_dir(self.path)
        return aside

    def holds_a_run(self) -> bool:
        return bool(self.held())

    def lock(self) -> None:
        """Take the out_dir for this process, or raise naming the process that holds it."""
        self._created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            f = open(self.path / LOCK, "a+")
        except OSError as e:
            raise UserError(f"out_dir {self.path} is not writable ({e.strerror}): choose another out_dir") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise UserError(
                f"out_dir {self.path} is in use by another training process (pid {holder}): wait for it, "
                "stop it, or choose another out_dir"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._lock_file = f  # held until unlock() or the process's end, whichever comes first
        for directory in (self.path, self.path / SHARDED):  # ours now: what a killed writer left is removed
            if directory.is_dir():
                remove_stale_temps(directory)

    def unlock(self, failed: bool = False) -> None:
        """Release the lock. A start that failed in an out_dir it created leaves no empty directory behind."""
        if self._lock_file is None:
            return
        self._lock_file.close()  # closing the file releases the flock
        self._lock_file = None
        if failed and self._created and [p.name for p in self.path.iterdir()] == [LOCK]:
            (self.path / LOCK).unlink()
            self.path.rmdir()

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    def evaluated(self, step: int) -> bool:
        """Whether metrics.jsonl holds the evaluation of step."""
        return self.metrics.exists() and any(r["step"] == step and "val_loss" in r for r in read_metrics(self.metrics))

    def write_config(self, resolved: dict) -> None:
        atomic_write_json(self.path / CONFIG, resolved)

    def machines(self, current: dict) -> list:
        """What the run has trained on (CPU threads, device, dtype, torch; float sums depend on them): the
        machines config.json records from before this start's step, and this start's if it differs from the
        last of them."""
        try:
            held = json.loads((self.path / CONFIG).read_text()).get("machine")
        except (OSError, ValueError, AttributeError):
            held = None
        kept = [m for m in held if isinstance(m, dict) and m.get("step", 0) < current["step"]] if isinstance(
            held, list) else []  # fmt: skip
        same = bool(kept) and {k: v for k, v in kept[-1].items() if k != "step"} == {
            k: v for k, v in current.items() if k != "step"}  # fmt: skip
        return kept if same else [*kept, current]

    def trim_metrics(self, start: int) -> None:
        """A resumed run replays the steps after its checkpoint: drop their old records (a new run, start 0,
        drops all). The evaluation at the checkpoint's own step stays: it is not repeated."""
        if not self.metrics.exists():
            return
        records = read_metrics(self.metrics) if start else []
        kept = [r for r in records if r["step"] < start or (r["step"] == start and "val_loss" in r)]
        atomic_write_text(self.metrics, "".join(json.dumps(r) + "\n" for r in kept))

    def append(self, record: dict) -> None:
        try:
            with open(self.metrics, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise WriteError(f"could not append to {self.metrics} ({e.strerror}): free space, then resume") from None


class Wandb:
    """The run's wandb logging, or nothing when wandb_log is off. A missing login is found before training."""

    def __init__(self, enabled: bool):
        self.run = self.wandb = None
        if enabled:
            import wandb

            self.wandb = wandb

    def start(self, cfg, resolved: dict, run_id: str) -> None:
        if self.wandb is None:
            return
        offline = os.environ.get("WANDB_MODE") in ("offline", "disabled")
        if not offline and not self.wandb.login(prompt=False):
            raise UserError(
                "wandb_log=True but wandb has no login: run `wandb login`, or set WANDB_MODE=offline, "
                "or pass --wandb_log=False"
            )
        try:
            self.run = self.wandb.init(
                project=cfg.wandb_project,
                group=cfg.wandb_group,
                name=cfg.wandb_run_name,
                id=run_id,
                resume="allow",
                config=resolved,
            )
        except Exception as e:  # network, auth, or a server refusal: one line, before any training
            raise UserError(
                f"wandb.init failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
                "set WANDB_MODE=offline or pass --wandb_log=False"
            ) from None

    def log(self, record: dict) -> None:
        if self.run is not None:
            self.wandb.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def finish(self) -> None:
        if self.run is not None:
            self.wandb.finish()
