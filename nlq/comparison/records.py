"""A screen's records: one small JSON per run, everything the screen's report reads of it and nothing else (its
config, its evaluations, its continuation's, and a summary of its step times), kept in the screen's folder
(FOLDER/records/SETTING/RUN.json) beside its plan and its report. The report is built from the records alone,
so that it can be rebuilt anywhere (screen.py --rebuild=FOLDER), and a run whose record exists is never run
again, so that one screen can run over several days and machines with no checkpoint surviving between them.

A record is tied to the statement it was made under (the SHA-256 of the statement file's bytes; none for a
screen without one): a damaged record, or one made under another statement, is refused in one line.
"""

import hashlib
import json
from pathlib import Path

from nlq.common.atomic import atomic_write_json
from nlq.common.errors import UserError
from nlq.comparison import cost
from nlq.comparison.compare import CompareError, Run
from nlq.run.rundir import read_metrics

VERSION = 1
KEYS = {"version", "statement", "setting", "name", "config", "evals", "timing", "continued"}


class RecordError(UserError):
    pass


def tag_of(statement_path) -> str | None:
    """What ties a record to its statement: the SHA-256 of the statement file's bytes (None: no statement)."""
    return hashlib.sha256(Path(statement_path).read_bytes()).hexdigest() if statement_path else None


def path_of(folder: Path, setting: str, name: str) -> Path:
    return Path(folder) / "records" / setting / f"{name}.json"


def timing_of(run: Run, run_dir: Path, machine: dict) -> dict:
    """A run's step times as the report reads them: the median seconds per token, the span of its logged steps,
    its wall clock from its start (config.json) to its last write (metrics.jsonl), and the machine (CPU or GPU
    model, runs at a time, threads each)."""
    wall = [(run_dir / "config.json").stat().st_mtime, (run_dir / "metrics.jsonl").stat().st_mtime]
    return {"seconds_per_token": cost.measured_seconds_per_token(run), "span": cost.span(run), "wall": wall} | machine


def evaluations(records: list, up_to: int | None = None) -> list[dict]:
    return [r for r in records if "val_loss" in r and (up_to is None or r["step"] <= up_to)]


def make(run_dir: Path, setting: str, tag, machine: dict, continued_dir: Path | None, multiple: int) -> dict:
    """The record of the finished run in run_dir, with its continuation (continued_dir, read up to `multiple`
    times the run's budget) where it has one."""
    config = json.loads((run_dir / "config.json").read_text())
    metrics = read_metrics(run_dir / "metrics.jsonl")
    run = Run(str(run_dir), config, metrics)
    record = {"version": VERSION, "statement": tag, "setting": setting, "name": run_dir.name, "config": config,
              "evals": evaluations(metrics), "timing": timing_of(run, run_dir, machine), "continued": None}  # fmt: skip
    if continued_dir is not None:
        later = json.loads((continued_dir / "config.json").read_text())
        steps = config["max_iters"] * multiple
        wall = [(continued_dir / n).stat().st_mtime for n in ("config.json", "metrics.jsonl")]
        evals = evaluations(read_metrics(continued_dir / "metrics.jsonl"), steps)
        record["continued"] = {"config": later, "evals": evals, "wall": wall}
    return record


def write(folder: Path, record: dict) -> None:
    path = path_of(folder, record["setting"], record["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record, indent=None)


def read(path: Path, tag) -> tuple[Run, Run | None]:
    """The record at path as (its run, its continuation or None), each a compare.Run named SETTING/RUN
    (continued/SETTING/RUN); one line if it is damaged or was made under another statement."""
    try:
        record = json.loads(Path(path).read_text())
        if not isinstance(record, dict) or set(record) != KEYS or record["version"] != VERSION:
            raise ValueError(f"not a version-{VERSION} record of {', '.join(sorted(KEYS))}")
        name = f"{record['setting']}/{record['name']}"
        if Path(path) != path_of(Path(path).parents[2], record["setting"], record["name"]):
            raise ValueError(f"it names run {name}, not the one its place holds")
        run = Run(name, record["config"], record["evals"], timing=record["timing"])
        later = record["continued"]
        continued = None
        if later is not None:
            continued = Run(f"continued/{name}", later["config"], later["evals"], timing={"wall": later["wall"]})
    except (OSError, ValueError, KeyError, TypeError, CompareError) as e:
        raise RecordError(f"record {path} is damaged ({e}): remove it, and its run runs again") from None
    if record["statement"] != tag:
        raise RecordError(
            f"record {path} was made under another statement than this folder's: a statement is fixed once its "
            "screen has run; state a new screen in a folder of its own"
        )
    return run, continued


def recorded(folder: Path, setting: str, name: str) -> bool:
    return path_of(folder, setting, name).is_file()
