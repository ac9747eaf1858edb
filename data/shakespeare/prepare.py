"""Tiny shakespeare in GPT-2 BPE: train.bin / val.bin (first 90 % / last 10 % of the text) + meta.json.

python data/shakespeare/prepare.py                 # downloads input.txt next to this file
python data/shakespeare/prepare.py --input PATH    # or reads a local copy
"""

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for running this file directly

from dataset import DataError, read_text, write_dataset  # noqa: E402
from tokenizer import gpt2_encoding  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="local text file (default: download tiny shakespeare)")
    p.add_argument("--out_dir", default=str(HERE))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    try:
        text = read_text(args.input, HERE / "input.txt", URL)
        enc = gpt2_encoding()
        cut = int(0.9 * len(text))
        splits = {"train": [np.array(enc.encode_ordinary(text[:cut]))],
                  "val": [np.array(enc.encode_ordinary(text[cut:]))]}
        meta = write_dataset(args.out_dir, splits, {"tokenizer": "gpt2", "vocab_size": enc.n_vocab,
                                                     "source": args.input or URL}, force=args.force)
    except DataError as e:
        sys.exit(f"error: {e}")
    print(f"train {meta['tokens']['train']:,} tokens, val {meta['tokens']['val']:,} tokens -> {args.out_dir}")


if __name__ == "__main__":
    main()
