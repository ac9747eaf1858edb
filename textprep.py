"""Datasets made from one text file (tiny shakespeare, or any --input): reading it (UTF-8, or a one-line
error naming the file), downloading it when no local copy is given, and the command line the
prepare scripts of data/shakespeare*/ share.
"""

import argparse
import sys
import urllib.request
from pathlib import Path

from atomic import atomic_write_text
from configurator import cli_main
from dataset import DataError, refuse_overwrite, write_dataset


def decode_text(path: Path, data: bytes) -> str:
    """The UTF-8 text of a file; binary or non-UTF-8 input is refused with the file named."""
    if b"\x00" in data[: 1 << 20]:
        raise DataError(f"{path} looks binary (it holds NUL bytes): pass a UTF-8 text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text (byte {e.start}): convert it, e.g. iconv -t utf-8") from None
    if not text.strip():
        raise DataError(f"{path} holds no text: pass a non-empty file")
    return text


def read_text(input_path: str | None, cache: Path, url: str) -> str:
    """Text from --input, else from a cached download, else downloaded from url into the cache."""
    if input_path:
        path = Path(input_path)
        if not path.is_file():
            raise DataError(f"--input {input_path}: no such file")
        return decode_text(path, path.read_bytes())
    if not cache.exists():
        print(f"downloading {url} to {cache}", file=sys.stderr)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                data = r.read()
        except OSError as e:
            raise DataError(f"could not download {url} ({e}): pass --input PATH to a local copy") from None
        atomic_write_text(cache, decode_text(Path(url), data))
    return decode_text(cache, cache.read_bytes())


TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def prepare_text(doc: str, here: Path, tokenize, argv=None):
    """The command line of a dataset made from one text (tiny shakespeare): --input or a download,
    the first 90 % of the text for train.bin and the rest for val.bin. tokenize(text, train, val)
    returns (train ids, val ids, meta)."""
    cli_main(lambda a: _prepare_text(doc, here, tokenize, a), argv)


def _prepare_text(doc, here, tokenize, argv):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="local text file (default: download tiny shakespeare)")
    p.add_argument("--out_dir", default=str(here))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
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
    print(
        f"vocab_size {meta['vocab_size']:,}, train {meta['tokens']['train']:,} tokens, "
        f"val {meta['tokens']['val']:,} tokens -> {args.out_dir}"
    )
