"""Tiny shakespeare at the character level: train.bin / val.bin (first 90 % / last 10 %) + meta.json.

python data/shakespeare_char/prepare.py                 # downloads input.txt next to this file
python data/shakespeare_char/prepare.py --input PATH    # or reads a local copy
"""

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for running this file directly

from dataset import DataError, read_text, write_dataset  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="local text file (default: download tiny shakespeare)")
    p.add_argument("--out_dir", default=str(HERE))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    try:
        text = read_text(args.input, HERE / "input.txt", URL)
        chars = "".join(sorted(set(text)))
        lut = {c: i for i, c in enumerate(chars)}
        ids = np.array([lut[c] for c in text], dtype=np.int64)
        cut = int(0.9 * len(ids))
        meta = write_dataset(args.out_dir, {"train": [ids[:cut]], "val": [ids[cut:]]},
                             {"tokenizer": "char", "vocab_size": len(chars), "chars": chars,
                              "source": args.input or URL}, force=args.force)
    except DataError as e:
        sys.exit(f"error: {e}")
    print(f"vocab_size {meta['vocab_size']}, train {meta['tokens']['train']:,} tokens, "
          f"val {meta['tokens']['val']:,} tokens -> {args.out_dir}")


if __name__ == "__main__":
    main()
