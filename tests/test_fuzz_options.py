"""The newest commands (screen.py, verdict.py) over their option space: a seeded random sample of options,
each value inside or outside its domain, each command run as --dry_run. Every one ends in success or in one
line naming the problem (exit 1 or argparse's 2), never a traceback, and a refused one writes nothing."""

import contextlib
import io
import json
import random
from pathlib import Path

import pytest
from helpers import screen_main, verdict_main
from test_screen import SCREEN, tiny_screen
from test_verdict import TINY, folder

INTS = ["-1", "0", "1", "3", "1000000000", "x", "1.5", ""]
FLOATS = ["-0.5", "0", "0.3", "0.7", "1", "nan", "inf", "x", ""]
SEEDS = ["1", "2,3", "1,1", "0", "-2", "a", "", ",", "5,6,7"]
SCREEN_OPTIONS = {
    "settings": ["mq", "mq32", "nope", "", "mq,mq", ","],
    "grid": ["learning_rate=1e-3,2e-3", "learning_rate=", "lr=1", "weight_decay=0,0.1", "=1", "learning_rate=x"],
    "tune_seeds": SEEDS,
    "seeds": SEEDS,
    "max_extra_seeds": INTS,
    "tokens_per_s": FLOATS,
    "jobs": INTS,
    "threads": INTS,
    "progress_every": FLOATS,
    "screen": ["default", "full", "mad", "nope", "missing.json"],
}
VERDICT_OPTIONS = {
    "arms": ["linear,residual_gelu", "linear", "linear,nope", "wide_mlp,identity", "", ",,"],
    "val_size": FLOATS,
    "test_size": FLOATS,
    "review_items": INTS,
    "prompt_tokens": INTS,
    "new_tokens": INTS,
    "temperature": FLOATS,
    "top_k": INTS,
    "latency_repeats": INTS,
    "seeds": SEEDS,
    "tokenizer": ["char", "gpt2", "bytes"],
    "jobs": INTS,
}


def outcome(main, argv) -> tuple[int, str]:
    """(exit status, the last line of stderr or the exit message) of main(argv); 0 when it returns."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
            if isinstance(code, str):
                return 1, code
            return code or 0, (err.getvalue().strip().splitlines() or [""])[-1]
    return 0, ""


def sampled(options: dict, rng: random.Random) -> list[str]:
    names = rng.sample(sorted(options), rng.randint(1, 3))
    return [f"--{n}={rng.choice(options[n])}" for n in names]


def check(main, base, options, root: Path, cases: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(cases):
        chosen = sampled(options, rng)
        out = root / f"o{i}"
        code, line = outcome(main, [*base(out), *chosen, "--dry_run"])
        assert code in (0, 1, 2), (chosen, code, line)
        if code:
            assert line.startswith("error:") or "error:" in line, (chosen, line)
            assert not out.exists(), (chosen, "wrote", sorted(p.name for p in out.iterdir()))


@pytest.mark.parametrize("seed", [0, 1])
def test_screen_options_outside_their_domain_are_one_line(tmp_path, seed):
    command = tiny_screen(tmp_path)
    (tmp_path / "missing.json").write_text(json.dumps({**SCREEN, "settings": [{"name": "x"}]}))
    check(screen_main, lambda out: [*command, f"--out_root={out}"], SCREEN_OPTIONS, tmp_path, 40, seed)


def test_a_temperature_that_is_not_a_number_is_refused(tmp_path):
    src = folder(tmp_path / "docs", n=40)
    for value in ("nan", "inf", "-1"):
        code, line = outcome(
            verdict_main, [f"--data={src}", f"--out={tmp_path / 'V'}", *TINY, f"--temperature={value}"]
        )
        assert code == 1 and f"--temperature={float(value)}: it must be a finite number >= 0" in line


@pytest.mark.parametrize("seed", [0, 1])
def test_verdict_options_outside_their_domain_are_one_line(tmp_path, seed):
    src = folder(tmp_path / "docs", n=40)
    check(verdict_main, lambda out: [f"--data={src}", f"--out={out}", *TINY], VERDICT_OPTIONS, tmp_path, 40, seed)
