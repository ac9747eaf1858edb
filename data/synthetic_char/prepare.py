"""A generated play at the character level, made offline: the quick start's data, with nothing to download.

python data/synthetic_char/prepare.py && python train.py config/quickstart.py

About 1 MB of speaker lines of common English words (textprep.synthetic_play, seeded: the same text on
every machine), cut 90 % / 10 % into train.bin / val.bin, one id per character (meta.json lists them).
"""

from pathlib import Path

from nlq.data.textprep import char_tokenize, prepare_text, synthetic_play

HERE = Path(__file__).resolve().parent


def main(argv=None):
    prepare_text(__doc__, HERE, char_tokenize, argv, generate=synthetic_play)


if __name__ == "__main__":
    main()
