"""Tiny shakespeare at the character level: train.bin / val.bin (first 90 % / last 10 %) + meta.json.

python data/shakespeare_char/prepare.py                 # downloads input.txt next to this file
python data/shakespeare_char/prepare.py --input PATH    # or reads a local copy
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for running this file directly

from textprep import prepare_text  # noqa: E402


def tokenize(text, train, val):
    chars = "".join(sorted(set(text)))
    lut = {c: i for i, c in enumerate(chars)}
    encode = lambda s: np.array([lut[c] for c in s], dtype=np.int64)  # noqa: E731
    return encode(train), encode(val), {"tokenizer": "char", "vocab_size": len(chars), "chars": chars}


if __name__ == "__main__":
    prepare_text(__doc__, HERE, tokenize)
