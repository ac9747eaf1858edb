"""sweep.py: every arm x seed, resumable; finished runs are never trained again."""

import json
from pathlib import Path

import pytest

import checkpoint
import sweep
import train

ARM = """
dataset = {data!r}
n_layer, n_head, n_embd, block_size, vocab_size = 1, 2, 16, 16, 65
batch_size, gradient_accumulation_steps = 2, 1
max_iters, lr_decay_iters, eval_interval, eval_iters, warmup_iters = 8, 8, 4, 1, 1
device, compile, cpu_peak_flops = "cpu", False, 1e11
"""


def write_arms(tmp_path, data):
    (tmp_path / "tiny_base.py").write_text(ARM.format(data=str(data)))
    (tmp_path / "tiny_nlq.py").write_text(ARM.format(data=str(data)) + 'query_mode = "residual_gelu"\n')
    (tmp_path / "tiny_broken.py").write_text(ARM.format(data=str(tmp_path / "nowhere")))
    return [str(tmp_path / f"tiny_{a}.py") for a in ("base", "nlq", "broken")]


def steps(out_dir):
    lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.slow
def test_sweep_runs_what_is_missing_resumes_what_is_unfinished_and_skips_what_is_done(char_data, tmp_path, capsys):
    base, nlq, broken = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    sweep.main([base, nlq, "--seeds=1,2", f"--out_root={root}", "--dry_run"])
    out = capsys.readouterr().out
    assert out.count("start ") == 4 and "--wandb_run_name=nlq" in out and "--init_from=auto" in out
    assert not root.exists()  # a dry run writes nothing

    # nlq seed 1 was interrupted after its step-4 checkpoint
    train.main([base, f"--out_dir={root / 'nlq-s1'}", "--seed=1", "--max_iters=4", "--query_mode=residual_gelu"])
    assert checkpoint.load(root / "nlq-s1" / "ckpt.pt")["iter_num"] == 4

    with pytest.raises(SystemExit) as e:  # the broken arm fails; the others finish regardless
        sweep.main([base, nlq, broken, "--seeds=1,2", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert "resume nlq seed 1" in out and out.count("start  ") == 5  # base x 2, nlq seed 2, broken x 2
    assert "4 of 6 runs finished, 2 failed this time" in out
    assert f"broken seed 1: error: {tmp_path / 'nowhere'}/meta.json not found" in out
    assert "2 run(s) failed" in str(e.value.code)
    for run in ("base-s1", "base-s2", "nlq-s1", "nlq-s2"):
        assert checkpoint.load(root / run / "ckpt.pt")["iter_num"] == 8
        assert steps(root / run) == list(range(8))
    assert "| nlq | " in out and "| base | " in out and "| 2 |" in out  # seeds pooled by arm

    mtimes = {p: p.stat().st_mtime_ns for p in root.glob("*/ckpt.pt")}
    sweep.main([base, nlq, "--seeds=1,2", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert out.count("skip ") == 4 and "start " not in out
    assert {p: p.stat().st_mtime_ns for p in root.glob("*/ckpt.pt")} == mtimes  # nothing trained again


def test_arm_names_drop_the_shared_prefix():
    assert sweep.arm_names(["config/owt_baseline.py", "config/owt_nlq_tuned.py"]) == ["baseline", "nlq_tuned"]
    assert sweep.arm_names(["config/mini_baseline.py", "x/mini_wide_mlp.py"]) == ["baseline", "wide_mlp"]
    assert sweep.arm_names(["config/quickstart.py"]) == ["quickstart"]
