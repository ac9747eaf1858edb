"""Every config value is checked before any work: each field of each config class declares its domain
(domains.py), and a value just outside it is one line and a non-zero exit in the entry point that reads it."""

import dataclasses
import importlib
import math
import re
from pathlib import Path

import pytest
from helpers import (
    bench_data_main,
    bench_head_main,
    bench_main,
    error_of,
    sample_main,
    tiny_args,
    train_main,
    zeroshot_main,
)

from model import GPTConfig
from nlq.bench.cost import BenchConfig
from nlq.bench.data_speed import DataBenchConfig
from nlq.bench.head import HeadBenchConfig
from nlq.common import domains, fits
from nlq.inference.sampling import SampleConfig
from nlq.inference.zeroshot import EvalConfig
from nlq.run import checkpoint
from nlq.run.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = {  # every config class, and the scripts that parse it
    TrainConfig: train_main,
    GPTConfig: train_main,
    SampleConfig: sample_main,
    EvalConfig: zeroshot_main,
    BenchConfig: bench_main,
    DataBenchConfig: bench_data_main,
    HeadBenchConfig: bench_head_main,
}


def project_config_classes():
    """The dataclasses named *Config in the project's modules: model.py's and the library's."""
    found = set()
    paths = [ROOT / "model.py", *(p for p in (ROOT / "nlq").glob("*/*.py") if p.parent.name != "hf")]
    for path in paths:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(name)
        for obj in vars(module).values():
            is_class = isinstance(obj, type) and dataclasses.is_dataclass(obj)  # not a dataclass's instance
            if is_class and obj.__name__.endswith("Config") and obj.__module__ == name:
                found.add(obj)
    return found


def test_every_config_class_is_covered():
    assert project_config_classes() == set(ENTRY_POINTS), "add the new config class and its entry point here"


@pytest.mark.parametrize("cls", list(ENTRY_POINTS), ids=lambda c: c.__name__)
def test_every_field_declares_its_domain(cls):
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if domains.base_type(cls, f.name) is not bool and domains.domain_of(cls, f.name) is None
    ]
    assert missing == [], f"declare a domain on these fields of {cls.__name__}: Annotated[type, At(...)/OneOf(...)]"


def outside(cls, name):
    """Values just outside a field's domain; for a bool field, values that are no bool."""
    if domains.base_type(cls, name) is bool:
        return ["maybe", 2]
    return domains.domain_of(cls, name).outside()


def cases():
    return [(cls, f.name, v) for cls in ENTRY_POINTS for f in dataclasses.fields(cls) for v in outside(cls, f.name)]


def on_the_command_line(value) -> str:
    return value if isinstance(value, str) else repr(value)


@pytest.mark.parametrize("cls", list(ENTRY_POINTS), ids=lambda c: c.__name__)
def test_each_value_just_outside_a_domain_is_refused_by_the_dataclass(cls):
    for c, name, value in cases():
        if c is cls:
            with pytest.raises(ValueError, match=f"^{name}="):
                cls(**{name: value})


@pytest.mark.parametrize("cls", list(ENTRY_POINTS), ids=lambda c: c.__name__)
def test_each_value_just_outside_a_domain_is_one_line_in_its_entry_point(cls, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written; if anything were, it would land here
    for c, name, value in cases():
        if c is cls:
            message = error_of([f"--{name}={on_the_command_line(value)}"], main=ENTRY_POINTS[cls])
            assert f"{name}=" in message and ("is invalid" in message or "is not of type" in message), message
    assert list(tmp_path.iterdir()) == []


def test_a_value_outside_its_domain_in_a_checkpoint_is_one_line(char_data, tmp_path):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    ckpt = checkpoint.load(tmp_path / "ckpt.pt")
    checkpoint.save({**ckpt, "model_args": {**ckpt["model_args"], "n_layer": -3}}, tmp_path / "ckpt.pt")
    for main, argv in [
        (sample_main, [f"--out_dir={tmp_path}", "--device=cpu"]),
        (train_main, tiny_args(char_data, tmp_path, init_from="resume")),
    ]:
        message = error_of(argv, main=main)
        assert "n_layer=-3 is invalid: it must be >= 1" in message


def test_a_model_that_cannot_fit_is_refused_before_allocation(char_data, tmp_path):
    vocab = int(fits.free_bytes("cpu") / 4 / 32 * 2)  # the 32-wide embedding table alone: twice what is free
    message = error_of(tiny_args(char_data, tmp_path / "big", vocab_size=vocab))
    assert re.search(r"the model has [\d,]+ parameters: its float32 weights need [\d,.]+ GiB, more than", message)
    assert "GiB free on cpu" in message and not (tmp_path / "big").exists()
    # A checkpoint naming such a model: sample.py refuses before building it.
    train_main(tiny_args(char_data, tmp_path / "run", max_iters=4))
    ckpt = checkpoint.load(tmp_path / "run" / "ckpt.pt")
    checkpoint.save({**ckpt, "model_args": {**ckpt["model_args"], "vocab_size": vocab}}, tmp_path / "run" / "ckpt.pt")
    assert "GiB free on cpu" in error_of([f"--out_dir={tmp_path / 'run'}", "--device=cpu"], main=sample_main)


def test_at_names_the_bound_it_breaks():
    at = domains.At(0, below=1)
    assert at.problem(0.5) is None and at.problem(1) == "must be < 1" and at.problem(-1) == "must be >= 0"
    assert at.problem(math.nan) == "must be a finite number"
    assert all(at.problem(v) for v in at.outside())


WRONG_TYPE = {  # base type: values of another type that a careless cast would let through
    int: [True, 2.5, "3"],
    float: [True, "3e-4"],
    str: [3, 2.5, True],
    tuple: ["a,b", 3],
    bool: [1, 0.0, "yes"],
}
ON_THE_COMMAND_LINE = {int: ["True", "2.5", "3e2"], float: ["True", "abc", "1e-3x"], bool: ["2", "yes please"]}


def wrong_types(cls):
    return [(f.name, v) for f in dataclasses.fields(cls) for v in WRONG_TYPE[domains.base_type(cls, f.name)]]


@pytest.mark.parametrize("cls", list(ENTRY_POINTS), ids=lambda c: c.__name__)
def test_a_value_of_the_wrong_type_is_refused_by_the_dataclass(cls):
    """A bool for an int, a string for a float, a float for an int, ...: refused, never cast."""
    for name, value in wrong_types(cls):
        with pytest.raises(ValueError, match=f"^{name}={re.escape(repr(value))} is invalid"):
            cls(**{name: value})


@pytest.mark.parametrize("cls", list(ENTRY_POINTS), ids=lambda c: c.__name__)
def test_a_value_of_the_wrong_type_is_one_line_on_the_command_line(cls, tmp_path, monkeypatch):
    """--n_layer=True, --n_layer=2.5, --learning_rate=abc, --compile=yes please: one line naming the key."""
    monkeypatch.chdir(tmp_path)
    for f in dataclasses.fields(cls):
        for text in ON_THE_COMMAND_LINE.get(domains.base_type(cls, f.name), []):
            message = error_of([f"--{f.name}={text}"], main=ENTRY_POINTS[cls])
            assert f"{f.name}=" in message, (f.name, text, message)
    assert list(tmp_path.iterdir()) == []


class Parsed(Exception):
    """Raised where a script would parse its options: carries its parser."""


ARGPARSE_SCRIPTS = sorted(  # the scripts with options of their own beside (or instead of) a config dataclass
    str(p.relative_to(ROOT))
    for p in [*ROOT.glob("*.py"), *ROOT.glob("data/*/prepare.py")]
    if p.name != "configurator.py" and re.search(r"^import argparse|^from \S+ import .*\bparser\b", p.read_text(), re.M)
)


def test_the_argparse_scripts_are_found():
    assert {"sweep.py", "screen.py", "verdict.py", "gpu_check.py", "data/openwebtext/prepare.py"} <= set(
        ARGPARSE_SCRIPTS
    )


@pytest.mark.parametrize("script", ARGPARSE_SCRIPTS)
def test_every_float_option_of_every_argparse_script_refuses_values_outside_its_domain(script, monkeypatch):
    """A script's float option is a domains.Number: nan, inf and each value just outside its domain are argparse's
    one-line error (exit 2), never a run on a number that means nothing (gpu_check.py --budget_s=nan exited 0)."""
    import argparse

    from helpers import command

    def caught(self, *args, **kwargs):
        raise Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
    with pytest.raises(Parsed) as e:
        command(script)([])
    parser = e.value.args[0]
    floats = [a for a in parser._actions if a.type is float or isinstance(a.type, domains.Number)]
    monkeypatch.undo()
    for action in floats:
        assert isinstance(action.type, domains.Number), f"{script} {action.option_strings[0]}: a float without a domain"
        for value in [*action.type.domain.outside(), "x"]:
            with pytest.raises(argparse.ArgumentTypeError):  # argparse's one line, exit 2
                action.type(str(value))
        if action.default is not None:
            assert action.type(str(action.default)) == action.default
