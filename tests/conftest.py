"""Shared fixtures. The suite needs nothing beside the repo: its text corpus is generated here, and what the
scripts cache per machine (hardware.machine_cached) goes to a directory of the session's own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nlq.data.textprep import synthetic_play

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def machine_cache(tmp_path_factory):
    """A fresh cache for CPU peaks and dtype choices: no test reads the user's, or an earlier session's."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(synthetic_play(120_000))
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
