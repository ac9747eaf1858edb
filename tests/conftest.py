"""Shared fixtures. The suite needs nothing beside the repo: its text corpus is generated here."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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


def make_corpus(n_chars: int = 120_000, seed: int = 0) -> str:
    """A play-shaped text of common English words (speaker lines, sentences, punctuation): character
    statistics a tiny model learns within a few dozen steps. random.Random(seed) is stable across Python
    versions, so the corpus is the same everywhere."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        line = f"{rng.choice(_SPEAKERS)}:\n{' '.join(words).capitalize()}{rng.choice('.,;!?')}\n\n"
        parts.append(line)
        size += len(line)
    return "".join(parts)


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(make_corpus())
    return path


@pytest.fixture(scope="session")
def char_data(tmp_path_factory, corpus_file) -> Path:
    """The generated corpus prepared at the character level by the project's own script."""
    out = tmp_path_factory.mktemp("char_data")
    subprocess.run(
        [sys.executable, ROOT / "data/shakespeare_char/prepare.py", "--input", corpus_file, "--out_dir", out],
        check=True,
        capture_output=True,
    )
    return out
