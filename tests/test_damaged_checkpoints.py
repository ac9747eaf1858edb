"""Damaged, slimmed and mistyped checkpoints, this project's and the official code's: every use gets one
line and never a crash (fused AdamW reads a state of another shape out of bounds), and a checkpoint shared
without its optimizer state serves every use but a continuation."""

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import HANG_S, error_of, sample_main, tiny_args, train_main
from test_official import official_args, write_official

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def finished_run(char_data, tmp_path_factory):
    """A tiny run of 8 steps (ckpt.pt at step 8) to damage copies of."""
    out = tmp_path_factory.mktemp("run") / "run"
    train_main(tiny_args(char_data, out))
    return out


def damaged_copy(finished_run, tmp_path, damage) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    damage(ckpt)
    torch.save(ckpt, out / "ckpt.pt")
    return out


def first_state(ckpt) -> dict:
    return ckpt["optimizer"]["state"][0]


DAMAGES = {
    "a moment of another shape": (lambda c: first_state(c).update(exp_avg=torch.zeros(3)), "is (3,) torch.float32"),
    "an integer moment": (
        lambda c: first_state(c).update(exp_avg_sq=first_state(c)["exp_avg_sq"].long()),
        "torch.int64",
    ),
    "an index past the model's parameters": (
        lambda c: c["optimizer"]["state"].update({999: first_state(c)}),
        "indexes parameters outside this model's",
    ),
    "a negative step": (lambda c: first_state(c).update(step=torch.tensor(-1.0)), "not a count"),
    "a NaN step": (lambda c: first_state(c).update(step=torch.tensor(math.nan)), "not a count"),
    "a group missing": (lambda c: c["optimizer"]["param_groups"].pop(), "groups of"),
    "no state (None)": (lambda c: c.update(optimizer=None), "holds no optimizer state"),
    "no state ({})": (lambda c: c.update(optimizer={}), "holds no optimizer state"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_resume_from_a_damaged_optimizer_state_is_one_line_and_never_a_crash(
    finished_run, char_data, tmp_path, damage
):
    """In a process of its own: before the check, the first two damages crashed train.py (exit 139)."""
    change, words = DAMAGES[damage]
    out = damaged_copy(finished_run, tmp_path, change)
    before = (out / "ckpt.pt").read_bytes()
    args = tiny_args(char_data, out, max_iters=12, init_from="resume")
    done = subprocess.run([sys.executable, ROOT / "train.py", *args], capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last and "Traceback" not in done.stderr
    assert (out / "ckpt.pt").read_bytes() == before


def test_a_checkpoint_shared_without_its_optimizer_state_still_samples(finished_run, tmp_path):
    out = damaged_copy(finished_run, tmp_path, lambda c: c.pop("optimizer"))
    sample_main([f"--out_dir={out}", "--device=cpu", "--max_new_tokens=3", "--start=a"])


@pytest.mark.parametrize("slimmed", [lambda c: c.pop("optimizer"), lambda c: c.update(optimizer=None)])
def test_an_official_checkpoint_without_its_optimizer_state_samples_and_refuses_only_to_continue(
    char_data, tmp_path, slimmed
):
    path = tmp_path / "ckpt.pt"
    write_official(path, official_args(vocab=50304))
    ckpt = torch.load(path, weights_only=True)
    slimmed(ckpt)
    torch.save(ckpt, path)
    sample_main([f"--init_from={path}", "--device=cpu", "--max_new_tokens=3", "--start=a"])
    out = tmp_path / "run"
    message = error_of(tiny_args(char_data, out, init_from=path, init_continue=True))
    assert "holds no optimizer state" in message and not out.exists()


def test_an_official_checkpoint_whose_optimizer_holds_another_model_samples_and_refuses_to_continue(
    char_data, tmp_path
):
    path = tmp_path / "ckpt.pt"
    write_official(path, official_args(vocab=50304))
    ckpt = torch.load(path, weights_only=True)
    ckpt["optimizer"]["param_groups"][0]["params"].pop()
    torch.save(ckpt, path)
    sample_main([f"--init_from={path}", "--device=cpu", "--max_new_tokens=3", "--start=a"])
    message = error_of(tiny_args(char_data, tmp_path / "run", init_from=path, init_continue=True))
    assert "does not hold this model's" in message and "cannot be continued" in message


TYPES = [
    (lambda c: c.update(iter_num="3000"), "iter_num is '3000', not a step count"),
    (lambda c: c.update(iter_num=-1), "iter_num is -1, not a step count"),
    (lambda c: c.update(iter_num=2.5), "iter_num is 2.5, not a step count"),
    (lambda c: c.update(model=list(c["model"].values())), "model is not a dict of tensors"),
    (lambda c: c.update(model_args=[1, 2]), "model_args is a list"),
]


@pytest.mark.parametrize("change, words", TYPES)
@pytest.mark.parametrize("layout", ["ours", "official"])
def test_fields_of_the_wrong_type_are_one_line(finished_run, tmp_path, change, words, layout):
    path = tmp_path / "ckpt.pt"
    if layout == "official":
        write_official(path, official_args(vocab=50304))
    else:
        shutil.copy(finished_run / "ckpt.pt", path)
    ckpt = torch.load(path, weights_only=True)
    change(ckpt)
    torch.save(ckpt, path)
    assert words in error_of([f"--init_from={path}", "--device=cpu", "--max_new_tokens=2"], main=sample_main)


def test_non_finite_weights_are_one_line_in_every_reader(finished_run, tmp_path):
    out = damaged_copy(finished_run, tmp_path, lambda c: c["model"]["transformer.ln_f.weight"].fill_(math.inf))
    message = error_of([f"--out_dir={out}", "--device=cpu", "--max_new_tokens=2"], main=sample_main)
    assert "holds non-finite weights in 1 tensors (transformer.ln_f.weight, ...): the run diverged" in message


def test_an_official_checkpoint_as_an_out_dirs_ckpt_pt_is_trained_from_not_resumed(char_data, tmp_path):
    """Copied into an out_dir as ckpt.pt, the paper's checkpoint lacks what a resume reads (this project's
    config): the message says how to start from it instead, and nothing is written."""
    out = tmp_path / "run"
    out.mkdir()
    write_official(out / "ckpt.pt", official_args(vocab=50304))
    before = (out / "ckpt.pt").read_bytes()
    message = error_of(tiny_args(char_data, out, init_from="resume"))
    assert "is an official checkpoint of arXiv 2603.13381 (no config): train from it with " in message
    assert f"--init_from={out / 'ckpt.pt'}" in message
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt", "train.lock"]  # the lock every start takes
    assert (out / "ckpt.pt").read_bytes() == before
