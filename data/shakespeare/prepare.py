"""Tiny shakespeare in GPT-2 BPE: train.bin / val.bin (first 90 % / last 10 % of the text) + meta.json.

python data/shakespeare/prepare.py                 # downloads input.txt next to this file
python data/shakespeare/prepare.py --input PATH    # or reads a local copy
"""

from pathlib import Path

import numpy as np

from nlq.data.textprep import prepare_text
from nlq.data.tokenizer import gpt2_encoding

HERE = Path(__file__).resolve().parent


def tokenize(text, train, val):
    enc = gpt2_encoding()
    return (
        np.array(enc.encode_ordinary(train)),
        np.array(enc.encode_ordinary(val)),
        {"tokenizer": "gpt2", "vocab_size": enc.n_vocab},
    )


if __name__ == "__main__":
    prepare_text(__doc__, HERE, tokenize)
