"""Datasets made from one text (tiny shakespeare, any --input, or a generated play): reading it (UTF-8, or
a one-line error naming the file), downloading or generating it when no local copy is given, the
character codec's tokenization, and the command line the prepare scripts of data/*_char/ and
data/shakespeare/ share.
"""

import argparse
import random
import sys
import urllib.request
from pathlib import Path

import numpy as np

from nlq.common.atomic import atomic_write_text
from nlq.common.errors import cli_main
from nlq.data.dataset import DataError, existing_files, holds, refuse_overwrite, write_dataset


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
        if path.is_dir():
            raise DataError(f"--input {input_path} is a directory: name the text file itself")
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


_SPEAKERS = ("ALDER", "BRIONY", "CASSIAN", "DELPH", "EMRYS")
_WORDS = (
    "the and of to a in that is was he for it with as his on be at by i this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three"
).split()


def synthetic_play(n_chars: int = 1_000_000, seed: int = 0) -> str:
    """A play-shaped text of common English words (speaker lines, sentences, punctuation), made offline:
    character statistics a small model learns in minutes. random.Random(seed) is the same in every
    Python version, so the text is the same everywhere."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        line = f"{rng.choice(_SPEAKERS)}:\n{' '.join(words).capitalize()}{rng.choice('.,;!?')}\n\n"
        parts.append(line)
        size += len(line)
    return "".join(parts)


def char_tokenize(text, train, val):
    """The character codec: one id per distinct character of the whole text, in sorted order."""
    chars = "".join(sorted(set(text)))
    lut = {c: i for i, c in enumerate(chars)}
    encode = lambda s: np.array([lut[c] for c in s], dtype=np.int64)  # noqa: E731
    return encode(train), encode(val), {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}


def prepare_text(doc: str, here: Path, tokenize, argv=None, generate=None):
    """The command line of a dataset made from one text: --input, else generate() if given, else a download
    of tiny shakespeare; the first 90 % of the text for train.bin and the rest for val.bin.
    tokenize(text, train, val) returns (train ids, val ids, meta)."""
    cli_main(lambda a: _prepare_text(doc, here, tokenize, a, generate), argv)


def _prepare_text(doc, here, tokenize, argv, generate):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = "generate the text offline" if generate else "download tiny shakespeare"
    p.add_argument("--input", help=f"local text file (default: {default})")
    p.add_argument("--out_dir", default=str(here))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    offline = args.input or generate or (here / "input.txt").is_file()  # the text, without a download
    if not offline:
        refuse_overwrite(args.out_dir, args.force)
    if args.input or not generate:
        text, source = read_text(args.input, here / "input.txt", TINY_SHAKESPEARE_URL), args.input
    else:
        text, source = generate(), "textprep.synthetic_play"
    cut = int(0.9 * len(text))
    train, val, meta = tokenize(text, text[:cut], text[cut:])
    meta = {**meta, "source": source or TINY_SHAKESPEARE_URL}
    if existing_files(args.out_dir) and not args.force and holds(args.out_dir, {"train": train, "val": val}, meta):
        print(f"{args.out_dir} already holds this dataset: nothing to do")  # a rerun of the same command
        return
    meta = write_dataset(args.out_dir, {"train": [train], "val": [val]}, meta, force=args.force)
    print(
        f"vocab_size {meta['vocab_size']:,}, train {meta['tokens']['train']:,} tokens, "
        f"val {meta['tokens']['val']:,} tokens -> {args.out_dir}"
    )
