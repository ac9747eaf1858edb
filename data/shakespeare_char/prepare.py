"""Tiny shakespeare at the character level: train.bin / val.bin (first 90 % / last 10 %) + meta.json.

python data/shakespeare_char/prepare.py                 # downloads input.txt next to this file
python data/shakespeare_char/prepare.py --input PATH    # or reads a local copy
"""

from pathlib import Path

from nlq.data.textprep import char_tokenize, prepare_text

HERE = Path(__file__).resolve().parent


def main(argv=None):
    prepare_text(__doc__, HERE, char_tokenize, argv)


if __name__ == "__main__":
    main()
