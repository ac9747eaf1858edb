import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.fixture(scope="session")
def shakespeare_char(tmp_path_factory):
    """tiny shakespeare prepared at the character level by the project's own script."""
    out = tmp_path_factory.mktemp("shakespeare_char")
    subprocess.run(
        [sys.executable, ROOT / "data/shakespeare_char/prepare.py", "--input", SHAKESPEARE, "--out_dir", out],
        check=True,
        capture_output=True,
    )
    return out
