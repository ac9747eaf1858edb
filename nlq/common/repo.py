"""Where the repository's own commands and files are: the library launches train.py for a sweep's runs,
prepare.py for a corpus, and reads config/ and tests/ from the checkout it is installed from (pip install -e .)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
