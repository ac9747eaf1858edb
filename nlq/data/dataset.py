"""The on-disk dataset: train.bin / val.bin (flat uint16 token ids) and meta.json, in one directory.

meta.json is written last, so it marks a complete dataset: a prepare run that is interrupted leaves
only *.tmp files behind, never a train.bin or val.bin that looks finished.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from nlq.common.atomic import atomic_write_json, atomic_write_text, temp_path
from nlq.common.errors import UserError

DTYPE = np.uint16  # what prepare writes; the loader reads meta.json's dtype, one of DTYPES
DTYPES = ("uint16", "uint32")
MAX_VOCAB = int(np.iinfo(DTYPE).max) + 1  # ids 0..65535


class DataError(UserError):
    """A dataset problem."""

    every_rank = True


def prepare_command(data_dir: Path, force: bool = False) -> str:
    """How to (re)make a dataset: its own prepare.py if it has one, else any script that writes it."""
    script = Path(data_dir) / "prepare.py"
    if script.exists():
        return f"`python {script}{' --force' if force else ''}`"
    return f"the prepare script that {'wrote' if force else 'writes'} {data_dir}{' (with --force)' if force else ''}"


def existing_files(out_dir) -> list[str]:
    """The dataset files out_dir already holds."""
    return [str(Path(out_dir) / f) for f in ("train.bin", "val.bin", "meta.json") if (Path(out_dir) / f).exists()]


def refuse_overwrite(out_dir, force: bool) -> None:
    """Raise unless out_dir holds no dataset files or force is set; prepare scripts call it before any work."""
    existing = existing_files(out_dir)
    if existing and not force:
        raise DataError(f"{', '.join(existing)} already exist: pass --force to overwrite")


def holds(out_dir, splits: dict, meta: dict) -> bool:
    """Whether out_dir holds exactly what write_dataset(out_dir, splits, meta) would write: the same meta.json
    and, split by split, the same token ids (splits: {name: one int array})."""
    try:
        held = json.loads((Path(out_dir) / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    counts = {name: int(np.asarray(ids).size) for name, ids in splits.items()}
    if held != {**meta, "dtype": "uint16", "tokens": counts}:
        return False
    for name, ids in splits.items():
        path = Path(out_dir) / f"{name}.bin"
        if not path.is_file() or path.read_bytes() != np.asarray(ids, dtype=DTYPE).tobytes():
            return False
    return True


def write_dataset(out_dir, splits: dict, meta: dict, force: bool = False) -> dict:
    """Stream each split's token chunks (iterables of int arrays) into <split>.bin and write meta.json.
    Memory stays at one chunk. Returns the meta written, with token counts added."""
    out_dir = Path(out_dir)
    vocab = meta["vocab_size"]
    if vocab > MAX_VOCAB:
        raise DataError(f"vocab_size={vocab} does not fit uint16 token files (ids must be <= {MAX_VOCAB - 1})")
    refuse_overwrite(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts, max_ids, tmps = {}, {}, {}
    try:
        for name, chunks in splits.items():
            tmps[name] = tmp = temp_path(out_dir / f"{name}.bin")
            n, top, shown = 0, -1, time.monotonic()
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    if time.monotonic() - shown > 5:  # a long corpus: a line every few seconds
                        print(f"{name}: {n:,} tokens written", file=sys.stderr)
                        shown = time.monotonic()
                    chunk = np.asarray(chunk)
                    if chunk.size:
                        if chunk.min() < 0 or chunk.max() >= vocab:
                            raise DataError(f"{name}: token id {int(chunk.max())} outside vocab_size={vocab}")
                        top = max(top, int(chunk.max()))
                    f.write(np.ascontiguousarray(chunk, dtype=DTYPE).data)  # no copy when already uint16
                    n += chunk.size
                f.flush()
                os.fsync(f.fileno())
            if n == 0:
                raise DataError(f"the {name} split is empty: the input holds no text (nothing was replaced)")
            counts[name], max_ids[name] = n, top
        # Complete: drop the old marker first, so a crash while renaming never pairs new and old files.
        (out_dir / "meta.json").unlink(missing_ok=True)
        for name, tmp in tmps.items():
            os.replace(tmp, out_dir / f"{name}.bin")
        meta = {**meta, "dtype": "uint16", "tokens": counts}
        atomic_write_json(out_dir / "meta.json", meta, indent=2, ensure_ascii=False)
        for name, top in max_ids.items():  # counted while writing: the first run need not read the bins
            remember_max_id(out_dir, name, top)
        return meta
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)


def load_meta(data_dir) -> dict:
    """meta.json, with every field the loader needs checked."""
    path = Path(data_dir) / "meta.json"
    redo = f"rerun {prepare_command(data_dir, force=True)}"
    if not path.exists():
        raise DataError(f"{path} not found: run {prepare_command(data_dir)} first")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e}): {redo}") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path} is not a JSON object: {redo}")
    tokens = meta.get("tokens")
    problems = []
    if meta.get("dtype") not in DTYPES:
        problems.append(f"dtype (one of {', '.join(DTYPES)}; it has {meta.get('dtype')!r})")
    top = int(np.iinfo(meta["dtype"]).max) + 1 if meta.get("dtype") in DTYPES else MAX_VOCAB
    vocab = meta.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 1 <= vocab <= top:
        problems.append(f"vocab_size (an integer from 1 to {top}, what its dtype holds; it has {vocab!r})")
    if not isinstance(tokens, dict) or not all(isinstance(tokens.get(s), int) for s in ("train", "val")):
        problems.append("tokens (the train and val token counts)")
    if problems:
        raise DataError(f"{path} lacks a valid {'; '.join(problems)}: {redo}")
    return meta


def open_split(data_dir, split: str, min_tokens: int = 0) -> np.ndarray:
    """Memory-map one split in meta.json's dtype, checked against meta.json (a truncated file is refused)."""
    meta = load_meta(data_dir)
    path = Path(data_dir) / f"{split}.bin"
    if not path.exists():
        raise DataError(f"{path} not found: run {prepare_command(data_dir)} first")
    dtype = np.dtype(meta["dtype"])
    size = path.stat().st_size
    if size == 0 or size % dtype.itemsize:
        raise DataError(
            f"{path} has {size} bytes, not a whole number (> 0) of {meta['dtype']} tokens: "
            f"the file is damaged, rerun {prepare_command(data_dir, force=True)}"
        )
    tokens = np.memmap(path, dtype=dtype, mode="r")
    if len(tokens) != meta["tokens"][split]:
        raise DataError(
            f"{path} holds {len(tokens)} tokens but meta.json says {meta['tokens'][split]}: "
            f"the file is damaged, rerun {prepare_command(data_dir, force=True)}"
        )
    if len(tokens) < min_tokens:
        raise DataError(
            f"{path} holds {len(tokens)} tokens, fewer than block_size + 1 = {min_tokens}: "
            "lower block_size or prepare more data"
        )
    return tokens


MAX_IDS = ".max_ids.json"  # the cache of max_token_id, beside the bins


def _max_id_key(data_dir, split: str) -> str:
    stat = (Path(data_dir) / f"{split}.bin").stat()
    return f"{split} {stat.st_size} {stat.st_mtime_ns}"


def _cached_max_ids(data_dir) -> dict:
    try:
        cached = json.loads((Path(data_dir) / MAX_IDS).read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def remember_max_id(data_dir, split: str, top: int) -> None:
    """Cache a split's largest id under its file's current size and modification time."""
    kept = {k: v for k, v in _cached_max_ids(data_dir).items() if not k.startswith(f"{split} ")}
    try:
        atomic_write_text(Path(data_dir) / MAX_IDS, json.dumps({**kept, _max_id_key(data_dir, split): top}) + "\n")
    except UserError:  # a read-only dataset: counted again next time
        pass


def max_token_id(data_dir, split: str, tokens: np.ndarray) -> int:
    """The largest id in a split, read from the data itself (a vectorised pass over the memory map, 64M
    tokens at a time) once per version of the file: cached in data_dir/.max_ids.json under the file's size
    and modification time, so a bin rewritten by another tool is read again. meta.json is not trusted."""
    cached = _cached_max_ids(data_dir).get(_max_id_key(data_dir, split))
    if isinstance(cached, int) and not isinstance(cached, bool):
        return cached
    step = 1 << 26
    top = max(int(tokens[i : i + step].max()) for i in range(0, len(tokens), step))
    remember_max_id(data_dir, split, top)
    return top


def check_token_ids(data_dir, meta: dict, splits: dict) -> None:
    """Every token id of every split is below meta.json's vocab_size (which the model's must then reach)."""
    for name, tokens in splits.items():
        top = max_token_id(data_dir, name, tokens)
        if top >= meta["vocab_size"]:
            raise DataError(
                f"{Path(data_dir) / name}.bin holds token id {top}, but meta.json says vocab_size="
                f"{meta['vocab_size']}: the dataset is inconsistent, rerun {prepare_command(data_dir, force=True)}"
            )
