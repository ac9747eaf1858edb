"""A dataset of whole examples (the synthetic tasks): MAD-Lab's layout, one directory per split,

    DIR/train/inputs.npy  DIR/train/targets.npy  DIR/test/inputs.npy  DIR/test/targets.npy  DIR/meta.json

each array n examples x seq_len integers, targets[i, t] the id position t must predict or -100 where
nothing is scored. meta.json (the task, its settings, the roles of the ids) is written last and marks a
complete dataset; a directory written by MAD-Lab's own generator has none and is read as is, its vocabulary
taken from the largest id. Arrays are memory-mapped without pickle (safe_load.numpy_array).
"""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlq.common.atomic import atomic_write_json, fsync_dir
from nlq.common.safe_load import numpy_array
from nlq.data.dataset import DataError
from nlq.data.floor import key_blind_floor
from nlq.data.tasks import IGNORE, generate, key_blind_view

SPLITS = ("train", "test")
ARRAYS = ("inputs", "targets")


@dataclass
class Split:
    inputs: np.ndarray  # n x seq_len
    targets: np.ndarray  # n x seq_len, IGNORE where not scored

    def __len__(self) -> int:
        return len(self.inputs)


@dataclass
class Examples:
    path: Path
    meta: dict
    train: Split
    test: Split

    @property
    def seq_len(self) -> int:
        return self.train.inputs.shape[1]


def is_examples(path) -> bool:
    """Whether path holds an examples dataset (its train/inputs.npy), not train.bin / val.bin."""
    return (Path(path) / "train" / "inputs.npy").is_file()


def refuse_overwrite(out_dir, force: bool) -> None:
    """Raise unless out_dir holds no examples dataset or force is set; before any work."""
    existing = [str(Path(out_dir) / f) for f in ("meta.json", *SPLITS) if (Path(out_dir) / f).exists()]
    if existing and not force:
        raise DataError(f"{', '.join(existing)} already exist: pass --force to overwrite")


def write_examples(out_dir, splits: dict, meta: dict, force: bool = False) -> dict:
    """Write {split: (inputs, targets)} and meta.json (with the counts added) into out_dir. The arrays go to a
    directory beside it first; meta.json is written last, so an interrupted write never looks complete."""
    out_dir = Path(out_dir)
    refuse_overwrite(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "meta.json").unlink(missing_ok=True)
    for split, (x, y) in splits.items():
        staging = out_dir / f".{split}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name, array in zip(ARRAYS, (x, y)):
            with open(staging / f"{name}.npy", "wb") as f:
                np.save(f, np.ascontiguousarray(array, dtype=np.int64))  # int64: nothing pickled
                f.flush()
                os.fsync(f.fileno())
        shutil.rmtree(out_dir / split, ignore_errors=True)
        os.replace(staging, out_dir / split)
    fsync_dir(out_dir)
    meta = {**meta, "format": "examples", "examples": {s: len(x) for s, (x, _) in splits.items()}}
    atomic_write_json(out_dir / "meta.json", meta, indent=2)
    return meta


def write_task(out_dir, task: str, settings: dict, num_train: int, num_test: int, seed: int, targets=None, force=False):
    """A synthetic task's dataset (nlq/data/tasks.py) in out_dir; its meta.json holds the task, every setting,
    the roles of the ids, the test split's key-blind floor and how many test inputs also occur in training.
    Returns (meta, {split: scored positions})."""
    refuse_overwrite(out_dir, force)
    splits, vocab, form = generate(task, settings, num_train, num_test, seed, targets)
    test_x, test_y = splits["test"]
    seen = {row.tobytes() for row in splits["train"][0]}
    meta = {
        "task": task,
        "settings": settings,
        "seed": seed,
        "examples_asked": {"train": num_train, "test": num_test},
        "train_targets": form,
        "vocab_size": settings["vocab_size"],
        "seq_len": settings["seq_len"],
        "roles": vocab.roles(),
        "floor": key_blind_floor(test_x, test_y, **key_blind_view(task, settings, test_x)),
        "test_inputs_in_train": int(sum(row.tobytes() in seen for row in np.asarray(test_x))),
    }
    meta = write_examples(out_dir, splits, meta, force=force)
    return meta, {s: int((y != IGNORE).sum()) for s, (_, y) in splits.items()}


def rescore_floor(out_dir) -> tuple | None:
    """A synthetic task's meta.json floor recomputed from its test split with today's rules (nlq/data/floor.py),
    written back if it changed (the examples stay as they are): (old, new), or None when it had not changed."""
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "meta.json").read_text())
    x, y = (_array(out_dir / "test" / f"{a}.npy") for a in ARRAYS)
    floor = key_blind_floor(x, y, **key_blind_view(meta["task"], meta["settings"], x))
    if meta.get("floor") == floor:
        return None
    atomic_write_json(out_dir / "meta.json", {**meta, "floor": floor}, indent=2)
    return meta.get("floor"), floor


def open_examples(path, block_size: int | None = None) -> Examples:
    """Both splits, memory-mapped and checked: integer arrays of one shape per split and one length for
    both, inputs within the vocabulary, targets within it or -100, every training example with a target
    (a row of none has no loss) and a scored test position. With block_size, the examples must fit it."""
    path = Path(path)
    splits = {s: Split(*(_array(path / s / f"{a}.npy") for a in ARRAYS)) for s in SPLITS}
    for s, split in splits.items():
        if split.inputs.ndim != 2 or split.inputs.shape != split.targets.shape or not len(split):
            raise DataError(
                f"{path / s}: inputs {split.inputs.shape} and targets {split.targets.shape} must be one shape, "
                "examples x seq_len, with at least one example: rerun the task's prepare script with --force"
            )
    lengths = {s: split.inputs.shape[1] for s, split in splits.items()}
    if len(set(lengths.values())) > 1:
        raise DataError(f"{path}: the splits' examples differ in length ({lengths}): make them one seq_len")
    meta = _meta(path, splits)
    vocab = meta["vocab_size"]
    for s, split in splits.items():
        low, top = int(split.inputs.min()), int(split.inputs.max())
        scored = split.targets[split.targets != IGNORE]
        if low < 0 or top >= vocab or (scored.size and (scored.min() < 0 or scored.max() >= vocab)):
            raise DataError(f"{path / s}: ids outside 0..{vocab - 1} (meta.json's vocab_size): the data is damaged")
    if not (splits["train"].targets != IGNORE).any(axis=1).all():
        raise DataError(f"{path}/train: an example has no target (every one is -100): it gives no loss; remove it")
    if not (splits["test"].targets != IGNORE).any():
        raise DataError(f"{path}/test scores no position (every target is -100): nothing to measure accuracy on")
    if block_size is not None and lengths["train"] > block_size:
        raise DataError(
            f"{path}: its examples are {lengths['train']} tokens, longer than block_size={block_size}: "
            f"set block_size >= {lengths['train']}"
        )
    return Examples(path, meta, splits["train"], splits["test"])


def _array(file: Path) -> np.ndarray:
    if not file.is_file():
        raise DataError(f"{file} not found: an examples dataset holds train/ and test/ inputs.npy and targets.npy")
    try:
        array = numpy_array(file)
    except (ValueError, OSError) as e:
        raise DataError(f"{file} is not a readable .npy array ({e}): rerun its prepare script with --force") from None
    if array.dtype.kind not in "iu":
        raise DataError(f"{file} holds {array.dtype}, not integer ids: rerun its prepare script with --force")
    return array


def _meta(path: Path, splits: dict) -> dict:
    """meta.json where there is one (written by data/synthetic_tasks/prepare.py), else the vocabulary from the
    largest id of the data (a MAD-Lab directory)."""
    top = max(max(int(s.inputs.max()), int(s.targets.max())) for s in splits.values())
    file = path / "meta.json"
    if not file.exists():
        return {"format": "examples", "vocab_size": top + 1, "task": "unknown (no meta.json)"}
    try:
        meta = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{file} is not valid JSON ({e}): rerun its prepare script with --force") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise DataError(f"{file} lacks an integer vocab_size: rerun its prepare script with --force")
    return meta
