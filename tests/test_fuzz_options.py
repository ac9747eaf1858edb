"""The commands over their option space: a seeded random sample of options, each value inside or outside its
domain. screen.py and verdict.py run as --dry_run; bench.py and sample.py until the work would start (their
first measurement, stubbed to stop there: every check comes before it); compare.py on small runs made here.
Every one ends in success or in one line naming the problem (exit 1 or argparse's 2), never a traceback, and
a refused one writes nothing."""

import contextlib
import io
import json
import random
from pathlib import Path

import pytest
from helpers import bench_main, compare_main, sample_main, screen_main, verdict_main
from test_screen import SCREEN, tiny_screen
from test_tools import fake_run, run_dir  # noqa: F401 (run_dir: a fixture, a tiny trained run to sample from)
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
    "continue_to": INTS,
    "tokens_per_s": FLOATS,
    "jobs": INTS,
    "threads": INTS,
    "progress_every": FLOATS,
    "screen": ["default", "full", "mad", "nope", "missing.json"],
    "baseline": ["base", "nlq", "nope", ""],
    "runs_per_gpu": INTS,
    "gpus": ["0", "0,1", ""],
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


class WorkStarts(BaseException):
    """Raised where a stubbed command would start its work: every check of its options has passed."""


def work_starts(*args, **kwargs):
    raise WorkStarts


def outcome(main, argv) -> tuple[int, str]:
    """(exit status, the last line of stderr or the exit message) of main(argv); 0 when it returns or reaches
    its work."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except WorkStarts:
            return 0, ""
        except SystemExit as e:
            code = e.code
            if isinstance(code, str):
                return 1, code
            return code or 0, (err.getvalue().strip().splitlines() or [""])[-1]
    return 0, ""


def sampled(options: dict, rng: random.Random) -> list[str]:
    """One to three options; a value of None is the bare flag."""
    names = rng.sample(sorted(options), rng.randint(1, 3))
    return [f"--{n}" if (v := rng.choice(options[n])) is None else f"--{n}={v}" for n in names]


def check(main, base, options, root: Path, cases: int, seed: int, dry_run=("--dry_run",)) -> None:
    rng = random.Random(seed)
    for i in range(cases):
        chosen = sampled(options, rng)
        out = root / f"o{i}"
        code, line = outcome(main, [*base(out), *chosen, *dry_run])
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
        assert code == 2 and f"error: argument --temperature: {value} is invalid: it must be" in line


@pytest.mark.parametrize("seed", [0, 1])
def test_verdict_options_outside_their_domain_are_one_line(tmp_path, seed):
    src = folder(tmp_path / "docs", n=40)
    check(verdict_main, lambda out: [f"--data={src}", f"--out={out}", *TINY], VERDICT_OPTIONS, tmp_path, 40, seed)


DTYPES = ["auto", "float32", "bfloat16", "float16", "bf16", ""]
BENCH_OPTIONS = {
    "preset": ["tiny", "gpt2", "nope"],
    "modes": ["linear,residual_gelu", "residual_gelu", "linear,nope", "", "linear,linear"],
    "batch_size": INTS,
    "repeats": INTS,
    "steps": INTS,
    "prompt_len": [*INTS, "32", "63", "64", "100", "None"],
    "decode_tokens": [*INTS, "31", "32", "None"],
    "decode": ["auto", "graph", "compiled", "static", "cache", "x"],
    "decode_dtype": DTYPES,
    "dtype": DTYPES,
    "device": ["cpu", "auto", "cuda:x", "nope", "mps"],
    "cpu_peak_flops": [*FLOATS, "None"],
    "train": ["True", "False", "x", None],
    "recompute": ["True", "False", "1"],
    "parallelism": ["none", "ddp", "fsdp", "x"],
    "compile": ["True", "False", "None", "x"],
}


@pytest.mark.parametrize("seed", [0, 1])
def test_bench_options_outside_their_domain_are_one_line(tmp_path, seed, monkeypatch):
    from nlq.bench import cost

    monkeypatch.setattr(cost, "warm_up", work_starts)  # the models are built and timed there
    options = {**BENCH_OPTIONS, "out": [str(tmp_path), str(tmp_path / "no" / "b.json"), "", "b.json"]}
    base = lambda out: ["--preset=tiny", "--device=cpu", f"--out={out}"]  # noqa: E731
    check(bench_main, base, options, tmp_path, 40, seed, dry_run=())


SAMPLE_OPTIONS = {
    "num_samples": [*INTS, "10000000000"],
    "max_new_tokens": INTS,
    "temperature": FLOATS,
    "top_k": [*INTS, "None"],
    "seed": [*INTS, "-5", str(2**64)],
    "start": ["KING:", "", "FILE:missing.txt", "FILE:.", "Ω", "a" * 40, "FILE:"],
    "use_cache": ["True", "False", "x", None],
    "decode": ["auto", "graph", "compiled", "static", "cache", "x"],
    "dtype": DTYPES,
    "device": ["cpu", "auto", "cuda:x", "nope"],
    "init_from": ["resume", "missing.pt", "nope", ""],
    "compile": ["True", "False"],
}


@pytest.mark.parametrize("seed", [0, 1])
def test_sample_options_outside_their_domain_are_one_line(tmp_path, seed, monkeypatch, run_dir):  # noqa: F811
    from nlq.inference import sampling

    monkeypatch.setattr(sampling, "decoding_precision", work_starts)  # decoding is measured, then runs, there
    monkeypatch.chdir(tmp_path)
    check(sample_main, lambda out: [f"--out_dir={run_dir}"], SAMPLE_OPTIONS, tmp_path, 40, seed, dry_run=())


@pytest.mark.parametrize("seed", [0, 1])
def test_compare_options_outside_their_domain_are_one_line(tmp_path, seed, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    for arm, seeds in (("linear", (1, 2)), ("nlq", (1, 2))):
        for s in seeds:
            fake_run(runs, f"{arm}-s{s}", arm, s, {0: 4.0, 10: 3.0 - 0.1 * s}, ["a", "b"])
    (tmp_path / "bad.json").write_text("[1]")
    options = {
        "baseline": ["linear", "nlq", "x", ""],
        "step": ["0", "10", "5", "-1", "x", ""],
        "metric": ["val_loss", "val_acc", "x"],
        "md": [str(tmp_path / "t.md"), str(tmp_path), str(tmp_path / "no" / "t.md"), "README.md"],
        "tune": ["learning_rate", "", ","],
        "json": [str(tmp_path / "r.json"), str(tmp_path)],
        "prices": [str(tmp_path / "bad.json"), str(tmp_path / "none.json"), str(tmp_path)],
        "at_end": [None, "1"],
        "reference": [str(tmp_path / "none"), str(runs)],
    }
    monkeypatch.chdir(tmp_path)
    base = lambda out: [str(runs / "*"), f"--png={out}.png"]  # noqa: E731
    check(compare_main, base, options, tmp_path, 40, seed, dry_run=())
