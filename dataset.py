"""The on-disk dataset: train.bin / val.bin (flat uint16 token ids) and meta.json, in one directory.

meta.json is written last, so it marks a complete dataset: a prepare run that is interrupted leaves
only *.tmp files behind, never a train.bin or val.bin that looks finished.
"""

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

import numpy as np

DTYPE = np.uint16
MAX_VOCAB = int(np.iinfo(DTYPE).max) + 1  # ids 0..65535


class DataError(Exception):
    """A dataset problem with a one-line explanation that names the fix."""


def prepare_command(data_dir: Path) -> str:
    script = Path(data_dir) / "prepare.py"
    return f"python {script}" if script.exists() else f"a prepare script that writes {data_dir}/meta.json"


def refuse_overwrite(out_dir, force: bool) -> None:
    """Raise unless out_dir holds no dataset files or force is set; prepare scripts call it before any work."""
    existing = [str(Path(out_dir) / f) for f in ("train.bin", "val.bin", "meta.json") if (Path(out_dir) / f).exists()]
    if existing and not force:
        raise DataError(f"{', '.join(existing)} already exist: pass --force to overwrite")


def write_dataset(out_dir, splits: dict, meta: dict, force: bool = False) -> dict:
    """Stream each split's token chunks (iterables of int arrays) into <split>.bin and write meta.json.
    Memory stays at one chunk. Returns the meta written, with token counts added."""
    out_dir = Path(out_dir)
    vocab = meta["vocab_size"]
    if vocab > MAX_VOCAB:
        raise DataError(f"vocab_size={vocab} does not fit uint16 token files (ids must be <= {MAX_VOCAB - 1})")
    refuse_overwrite(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts, tmps = {}, []
    try:
        for name, chunks in splits.items():
            tmp = out_dir / f"{name}.bin.tmp"
            tmps.append(tmp)
            n = 0
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    chunk = np.asarray(chunk)
                    if chunk.size and (chunk.min() < 0 or chunk.max() >= vocab):
                        raise DataError(f"{name}: token id {int(chunk.max())} outside vocab_size={vocab}")
                    f.write(chunk.astype(DTYPE).tobytes())
                    n += chunk.size
                f.flush()
                os.fsync(f.fileno())
            counts[name] = n
        # Complete: drop the old marker first, so a crash while renaming never pairs new and old files.
        (out_dir / "meta.json").unlink(missing_ok=True)
        for tmp in tmps:
            os.replace(tmp, tmp.with_suffix(""))
        meta = {**meta, "dtype": "uint16", "tokens": counts}
        tmp_meta = out_dir / "meta.json.tmp"
        tmp_meta.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp_meta, out_dir / "meta.json")
        return meta
    finally:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)


def load_meta(data_dir) -> dict:
    path = Path(data_dir) / "meta.json"
    if not path.exists():
        raise DataError(f"{path} not found: run `{prepare_command(data_dir)}` first")
    return json.loads(path.read_text())


def open_split(data_dir, split: str, min_tokens: int = 0) -> np.ndarray:
    """Memory-map one split, checked against meta.json (a truncated file is refused)."""
    meta = load_meta(data_dir)
    path = Path(data_dir) / f"{split}.bin"
    if not path.exists():
        raise DataError(f"{path} not found: run `{prepare_command(data_dir)}` first")
    tokens = np.memmap(path, dtype=DTYPE, mode="r")
    if len(tokens) != meta["tokens"][split]:
        raise DataError(
            f"{path} holds {len(tokens)} tokens but meta.json says {meta['tokens'][split]}: "
            f"the file is damaged, rerun `{prepare_command(data_dir)} --force`"
        )
    if len(tokens) < min_tokens:
        raise DataError(
            f"{path} holds {len(tokens)} tokens, fewer than block_size + 1 = {min_tokens}: "
            "lower block_size or prepare more data"
        )
    return tokens


def read_text(input_path: str | None, cache: Path, url: str) -> str:
    """Text from --input, else from a cached download, else downloaded from url into the cache."""
    if input_path:
        path = Path(input_path)
        if not path.is_file():
            raise DataError(f"--input {input_path}: no such file")
        return path.read_text(encoding="utf-8")
    if not cache.exists():
        print(f"downloading {url} to {cache}", file=sys.stderr)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                data = r.read()
        except OSError as e:
            raise DataError(f"could not download {url} ({e}): pass --input PATH to a local copy") from None
        tmp = cache.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, cache)
    return cache.read_text(encoding="utf-8")


TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def prepare_text(doc: str, here: Path, tokenize, argv=None):
    """The command line of a dataset made from one text (tiny shakespeare): --input or a download,
    the first 90 % of the text for train.bin and the rest for val.bin. tokenize(text, train, val)
    returns (train ids, val ids, meta)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="local text file (default: download tiny shakespeare)")
    p.add_argument("--out_dir", default=str(here))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    try:
        refuse_overwrite(args.out_dir, args.force)
        text = read_text(args.input, here / "input.txt", TINY_SHAKESPEARE_URL)
        cut = int(0.9 * len(text))
        train, val, meta = tokenize(text, text[:cut], text[cut:])
        meta = write_dataset(
            args.out_dir,
            {"train": [train], "val": [val]},
            {**meta, "source": args.input or TINY_SHAKESPEARE_URL},
            force=args.force,
        )
    except DataError as e:
        sys.exit(f"error: {e}")
    print(
        f"vocab_size {meta['vocab_size']:,}, train {meta['tokens']['train']:,} tokens, "
        f"val {meta['tokens']['val']:,} tokens -> {args.out_dir}"
    )
