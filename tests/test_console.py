"""What a researcher meets at the console: help, comma lists, wandb without a login, nanoGPT's keys."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import sample_main, tiny_args, train_main

from configurator import parse
from model import GPTConfig
from nlq.bench.cost import BenchConfig
from nlq.bench.data_speed import DataBenchConfig
from nlq.common.errors import ConfigError
from nlq.inference.sampling import SampleConfig
from nlq.inference.zeroshot import EvalConfig
from nlq.run import checkpoint, hardware
from nlq.run.config import TrainConfig
from nlq.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "train.py": (TrainConfig, GPTConfig),
    "sample.py": (SampleConfig,),
    "zeroshot.py": (EvalConfig,),
    "bench.py": (BenchConfig,),
    "bench_data.py": (DataBenchConfig,),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_lists_every_field_with_its_default_and_comment(script):
    r = subprocess.run([sys.executable, ROOT / script, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == ""
    assert "usage: python" in r.stdout
    lines = r.stdout.splitlines()
    for cls in SCRIPTS[script]:
        for field in dataclasses.fields(cls):
            line = next((x for x in lines if x.strip().startswith(f"--{field.name}=")), None)
            assert line is not None, f"{script} --help lacks {field.name}"
            assert line.strip().startswith(f"--{field.name}={field.default!r}")
            assert len(line.split(")  ", 1)) == 2, f"{field.name} has no description in {cls.__name__}"
    assert subprocess.run([sys.executable, ROOT / script, "-h"], capture_output=True, cwd=ROOT).returncode == 0


def test_tuple_options_take_comma_lists_and_python_syntax():
    for argv in (["--tasks=lambada,wikitext"], ["--tasks=('lambada', 'wikitext')"], ["--tasks=lambada, wikitext"]):
        assert parse(argv, EvalConfig)[0].tasks == ("lambada", "wikitext")
    assert parse(["--tasks=hellaswag"], EvalConfig)[0].tasks == ("hellaswag",)
    cfg, _ = parse(["--keep_checkpoints=5"], TrainConfig, GPTConfig)
    assert cfg.keep_checkpoints == (5,)
    cfg, _ = parse(["--keep_checkpoints=100,200"], TrainConfig, GPTConfig)
    assert cfg.keep_checkpoints == (100, 200)
    with pytest.raises(ConfigError, match="keep_checkpoints=.* is not of type"):
        parse(["--keep_checkpoints=5,x"], TrainConfig, GPTConfig)


@pytest.mark.parametrize("spelling", ["nan", "inf", "-inf", "Infinity"])
def test_every_float_option_refuses_a_non_finite_value_as_not_finite(spelling):
    """Python reads each spelling as a float: on the command line it is a number that is not finite (not a
    value of another type), for every float field of every script, bounded or not."""
    tried = 0
    for classes in SCRIPTS.values():
        for cls in classes:
            for f in dataclasses.fields(cls):
                if "float" in str(f.type):
                    with pytest.raises((ConfigError, ValueError), match=rf"{f.name}=.*must be a finite number"):
                        parse([f"--{f.name}={spelling}"], *classes)
                    tried += 1
    assert tried >= 10  # learning_rate, dropout, temperature, the peaks, ...


def test_a_bare_flag_sets_a_bool_and_nothing_else():
    cfg, _ = parse(["--eval_only", "--compile=False"], TrainConfig, GPTConfig)
    assert cfg.eval_only is True and cfg.compile is False
    with pytest.raises(ConfigError, match="--batch_size: overrides are written --key=value"):
        parse(["--batch_size"], TrainConfig, GPTConfig)


def test_a_single_dash_option_is_a_one_line_error():
    with pytest.raises(ConfigError, match="-x: options are written --key=value"):
        parse(["-x"], TrainConfig, GPTConfig)


def tiny(char_data, out_dir, **kw):
    return tiny_args(char_data, out_dir, **{"max_iters": 4, "eval_interval": 2, "lr_decay_iters": 4, **kw})


def test_wandb_without_a_login_stops_before_anything_is_written(char_data, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr(wandb, "login", lambda **kw: False)
    with pytest.raises(SystemExit) as e:
        train_main(tiny(char_data, tmp_path / "run", wandb_log=True))
    message = str(e.value.code)
    assert message.startswith("error: wandb_log=True but wandb has no login") and "\n" not in message
    assert "WANDB_MODE=offline" in message and "--wandb_log=False" in message
    assert not (tmp_path / "run").exists()


def test_always_save_checkpoint_false_saves_only_improvements(char_data, tmp_path, monkeypatch):
    losses = iter([3.0, 2.0, 2.5])  # evaluations at steps 0, 2, 4: 4 is worse than 2

    def fake_evaluate(self, tokens, offsets):
        return next(losses) if tokens is self.data.val else 1.0

    monkeypatch.setattr(Trainer, "evaluate", fake_evaluate)
    train_main(tiny(char_data, tmp_path, always_save_checkpoint=False))
    ckpt = checkpoint.load(tmp_path / "ckpt.pt")
    assert ckpt["iter_num"] == 2 and ckpt["best_val_loss"] == 2.0
    val = [json.loads(x)["val_loss"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if "val_loss" in x]
    assert val == [3.0, 2.0, 2.5]


def test_nanogpt_sample_keys_are_accepted():
    (cfg,) = parse(["--compile=True", "--init_from=resume", "--start=hi"], SampleConfig)
    assert cfg.compile and cfg.start == "hi"
    cfg, _ = parse(["--backend=gloo", "--always_save_checkpoint=False"], TrainConfig, GPTConfig)
    assert cfg.backend == "gloo" and not cfg.always_save_checkpoint


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--top_k=0"], "top_k=0 is invalid"),
        (["--temperature=-1"], "temperature=-1.0 is invalid"),
        (["--num_samples=0"], "num_samples=0 is invalid"),
        (["--max_new_tokens=0"], "max_new_tokens=0 is invalid"),
        (["--temperature=nan"], "temperature=nan is invalid: it must be a finite number"),
        (["--temperature=inf"], "temperature=inf is invalid: it must be a finite number"),
        (["--top_k=inf"], "top_k=inf (command line) is not of type int"),
    ],
)
def test_sample_arguments_are_validated(argv, message):
    with pytest.raises(SystemExit) as e:
        sample_main(argv)
    assert str(e.value.code).startswith("error: ") and message in str(e.value.code)


def test_sample_checks_the_prompt_before_loading_a_model(tmp_path):
    # out_dir has no checkpoint: the missing prompt file must be the error, found before any loading
    with pytest.raises(SystemExit) as e:
        sample_main([f"--out_dir={tmp_path}", f"--start=FILE:{tmp_path / 'none.txt'}"])
    assert "no such file" in str(e.value.code) and "ckpt.pt" not in str(e.value.code)


def test_sample_refuses_a_checkpoint_whose_vocab_misses_its_tokenizer(char_data, tmp_path):
    train_main(tiny(char_data, tmp_path, max_iters=2))
    ckpt = checkpoint.load(tmp_path / "ckpt.pt")
    del ckpt["tokenizer"]  # as a nanoGPT checkpoint: no tokenizer, so GPT-2 BPE, which needs 50257 ids
    checkpoint.save(ckpt, tmp_path / "ckpt.pt")
    with pytest.raises(SystemExit) as e:
        sample_main([f"--out_dir={tmp_path}", "--start=a"])
    assert "has 50257 ids but the model's vocab_size is 65" in str(e.value.code)


def test_train_console_header_and_closing_summary(char_data, tmp_path, capsys):
    """A short header (what differs from the defaults, where the full config is), no repeated timing
    notice, and a closing summary whose val loss is the best one in the log."""
    train_main(tiny_args(char_data, tmp_path))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"run {tmp_path}: ") and "n_layer=2" in out[0] and "out_dir=" not in out[0]
    assert out[0].endswith(f"(every setting: {tmp_path / 'config.json'})") and not any(line == "{" for line in out)
    assert not any("timing from the next" in line for line in out)
    best = min(
        r["val_loss"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r
    )
    assert out[-3] == f"done: step 8, best val loss {best:.4f}; checkpoint {tmp_path / 'ckpt.pt'}"
    assert out[-2].split() == ["sample:", "python", "sample.py", f"--out_dir={tmp_path}"]


def test_a_cpu_peak_is_measured_once_per_machine(tmp_path, monkeypatch):
    """Two runs on one machine compute their MFU against the same peak: measured once, then read back."""
    from nlq.run import hardware

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured = iter([1.5e11, 4e11, 9e11])
    dtypes = []
    monkeypatch.setattr(hardware, "measure_cpu_flops", lambda dtype: dtypes.append(dtype) or next(measured))
    first = hardware.peak_flops("cpu", torch.float32, cached=True)
    second = hardware.peak_flops("cpu", torch.float32, cached=True)
    assert first[0] == second[0] == 1.5e11 and first[1].endswith(f"kept in {tmp_path}/nonlinear-queries/cpu_peak.json")
    # a bf16 run's MFU is against the bf16 matmul peak, measured in bf16 (against float32's it can pass 100 %)
    assert hardware.peak_flops("cpu", torch.bfloat16, cached=True)[0] == 4e11
    assert sorted(json.loads((tmp_path / "nonlinear-queries" / "cpu_peak.json").read_text()).values()) == [1.5e11, 4e11]
    assert hardware.peak_flops("cpu", torch.float32)[0] == 9e11  # bench measures anew, each round
    assert dtypes == [torch.float32, torch.bfloat16, torch.float32]


@pytest.mark.parametrize(
    "name,peak",  # dense bf16 tensor FLOP/s from the data sheets (their sparsity figures halved)
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA L40", 181e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA L4", 121e12),
    ],
)
def test_gpu_peaks_match_the_most_specific_name(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert hardware.peak_flops("cuda", torch.bfloat16) == (peak, f"{name} data sheet")
    assert hardware.peak_flops("cuda", torch.float32)[0] == peak / 2  # TF32


@pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="this torch has only the legacy TF32 flags"
)
def test_tf32_is_switched_through_the_api_that_does_not_refuse_a_mix():
    """Once anything used torch's fp32_precision API (a library, a user's script), reading the legacy
    allow_tf32 flag raises; set_tf32 switches and reports through the new API, and restores what was there."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"  # as a library would; torch then refuses to read allow_tf32
        assert hardware.set_tf32(False) is True
        assert matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"
        assert hardware.set_tf32(True) is False and matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = before


@pytest.mark.parametrize("again, reported", [(1e3, "none"), (1e15, "below 1")])
def test_a_reported_mfu_is_never_above_one(char_data, tmp_path, monkeypatch, again, reported):
    """The cached CPU peak was measured while the machine was busy (1 kFLOP/s): the first step computes
    faster than it, so the peak is measured once more. Still lower: no MFU is reported; higher: MFU
    against the best reading, which the cache then keeps."""
    from helpers import records

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    readings = iter([1e3, again])
    monkeypatch.setattr(hardware, "measure_cpu_flops", lambda dtype: next(readings))
    train_main(tiny(char_data, tmp_path / "run", cpu_peak_flops=None, log_interval=1))
    timed = [r["mfu"] for r in records(tmp_path / "run", "mfu").values() if r["ms"]]  # steps with a time
    assert timed
    if reported == "none":
        assert all(m is None for m in timed)
    else:
        assert all(m is not None and 0 < m < 1 for m in timed)
        cache = json.loads((tmp_path / "cache" / "nonlinear-queries" / "cpu_peak.json").read_text())
        assert list(cache.values()) == [1e15]
