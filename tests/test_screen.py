"""The synthetic screen (screen.py): its report from hand-made runs (tokens to the midpoint, the informative
flag, the overall means), one tiny screen end to end (each arm's point the argmax of its own logs, fresh
seeds, a rerun that runs nothing, a stage-2 run deleted and redone alone, a screen stopped mid-way and
continued to the same result), and its one-line refusals."""

import json
import math
import re
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import HANG_S, error_of, screen_main, wait_until

from model import GPTConfig, training_flops_per_token
from nlq.common.errors import UserError
from nlq.comparison import records, screening
from nlq.comparison import screen as screen_lib
from nlq.comparison import sweep as sweep_lib
from nlq.comparison.compare import Run
from nlq.comparison.stats import who_first
from nlq.comparison.sweep import Run as Planned
from nlq.comparison.sweep import run_all
from nlq.eval.accuracy import tokens_to_reach

ROOT = Path(__file__).resolve().parents[1]


def run(arm, seed, curve, stage="report", lr=1e-3, steps=4):
    """A run whose test accuracy follows curve ([accuracy] at steps 0..steps, 100 tokens a step)."""
    config = {"wandb_run_name": arm, "seed": seed, "learning_rate": lr, "max_iters": steps, "wandb_group": f"s/{stage}"}
    config |= {"block_size": 8, "batch_size": 2, "gradient_accumulation_steps": 1, "n_layer": 1, "n_embd": 16}
    config |= {"n_head": 2, "vocab_size": 16}
    records = [{"step": s, "val_loss": 1 - a, "val_acc": a, "tokens": 100 * s} for s, a in enumerate(curve)]
    return Run(f"{stage}-{arm}-s{seed}", config, records)


FLOOR = {"token": 0.2, "example": 0.01}  # midpoint 0.6


def hand_made():
    """base reaches 0.6 at 250 and 150 tokens (seeds 2, 3), nlq at 150 and 50: 100 tokens sooner per seed."""
    runs = [run(a, 1, [0.2, 0.3, 0.5, 0.9, 0.95], "tune") for a in ("base", "nlq")]
    runs += [run("base", 2, [0.2, 0.3, 0.5, 0.7, 0.9]), run("base", 3, [0.2, 0.5, 0.7, 0.8, 0.9])]
    runs += [run("nlq", 2, [0.2, 0.5, 0.7, 0.9, 0.95]), run("nlq", 3, [0.4, 0.8, 0.9, 0.95, 0.97])]
    return runs


def test_a_settings_tokens_to_the_midpoint_from_hand_made_curves():
    result = screening.setting_report(hand_made(), ["learning_rate"], "base", FLOOR)
    assert result["midpoint"] == pytest.approx(0.6)
    base, nlq = result["arms"]["base"]["tokens_to_midpoint"], result["arms"]["nlq"]["tokens_to_midpoint"]
    assert base["values"] == pytest.approx([250.0, 150.0]) and nlq["values"] == pytest.approx([150.0, 50.0])
    assert base["mean"] == pytest.approx(200.0) and nlq["reached"] == 2
    assert nlq["improvement"] == pytest.approx(0.5)  # (200 - 100) / 200: sooner is positive
    assert result["informative"]  # baseline 0.9 > 0.2 + 0.25 x 0.8 = 0.4, below saturation
    assert result["arms"]["nlq"]["improvement"] == pytest.approx(0.96 - 0.9)  # accuracy, in points
    # the learning curves the figure draws: (tokens, accuracy) at each evaluation, per fresh seed
    assert result["arms"]["nlq"]["curves"][2] == [(0, 0.2), (100, 0.5), (200, 0.7), (300, 0.9), (400, 0.95)]
    assert sorted(result["arms"]["base"]["curves"]) == [2, 3]


def timed(r, ms):
    """The run r with a step record of ms milliseconds (its 100 tokens) at each step."""
    steps = [{"step": s, "loss": 1.0, "ms": ms, "tokens": 100 * (s + 1)} for s in range(4)]
    return Run(r.name, r.config, [*r.evals.values(), *steps])


def test_flops_and_seconds_to_the_midpoint_are_its_tokens_at_each_arms_cost():
    """hand_made's tokens to the midpoint (base 250, 150; nlq 150, 50) at 0.1 ms a token for base and 0.3
    for nlq: seconds 0.025, 0.015 against 0.045, 0.015; priced (nlq's step 1.5 x linear's): 225, 75 base
    token-times. FLOPs: the model's own count per token, the same for both (one config)."""
    runs = [timed(r, 10 if r.arm == "base" else 30) for r in hand_made()]
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    base, nlq = result["arms"]["base"]["seconds_to_midpoint"], result["arms"]["nlq"]["seconds_to_midpoint"]
    assert base["values"] == pytest.approx([0.025, 0.015]) and nlq["values"] == pytest.approx([0.045, 0.015])
    assert nlq["improvement"] == pytest.approx((0.02 - 0.03) / 0.02)  # later: negative
    per_token = training_flops_per_token(GPTConfig(n_layer=1, n_embd=16, n_head=2, vocab_size=16), 8)
    assert result["arms"]["nlq"]["flops_to_midpoint"]["values"] == pytest.approx([150 * per_token, 50 * per_token])
    for r in runs:
        r.config = r.config | ({"query_mode": "residual_gelu"} if r.arm == "nlq" else {})
    priced = screening.setting_report(runs, ["learning_rate"], "base", FLOOR, {"linear": 1.0, "residual_gelu": 1.5})
    assert priced["arms"]["nlq"]["priced_to_midpoint"]["values"] == pytest.approx([225, 75])
    assert priced["arms"]["nlq"]["priced_to_midpoint"]["improvement"] == pytest.approx((200 - 150) / 200)
    lines = screening.setting_lines(result, {"task": "mqar", "settings": {}})
    header = "| arm | reached / runs | first to midpoint: arm, baseline, undecided | tokens to midpoint |"
    assert any(line.startswith(header + " FLOPs to midpoint | time to midpoint |") for line in lines)
    # first to the midpoint: both reached in both seeds, nlq sooner in each (150 < 250, 50 < 150)
    assert [line for line in lines if line.startswith("| nlq |")][-1].startswith("| nlq | 2 / 2 | 2, 0, 0 (p 0.5) |")
    assert not any(line.startswith("MAD's accuracy") for line in lines)  # these runs did not record it


def test_the_default_recall_setting_is_the_documented_task():
    """The screen's recall setting as screening.recall documents it: MAD's in-context recall, a vocabulary of 24
    (8 of them noise ids), length 32, 1,000 steps, and train.py told that context and vocabulary."""
    setting = screening.recall("recall")
    assert (setting.task, setting.max_iters) == ("in-context-recall", 1000)
    assert setting.settings == dict(vocab_size=24, seq_len=32, noise_vocab_size=8, frac_noise=0.0)
    assert "--block_size=32" in setting.options("d") and "--vocab_size=24" in setting.options("d")


def test_a_run_that_never_reaches_the_midpoint_counts_its_budget_and_is_said():
    runs = hand_made()
    runs[2] = run("base", 2, [0.2, 0.3, 0.4, 0.5, 0.55])
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    base = result["arms"]["base"]["tokens_to_midpoint"]
    assert base["values"] == pytest.approx([400.0, 150.0]) and base["reached"] == 1
    # the setting's line: 3 of the 4 stage-2 runs (base's 1 of 2, nlq's 2 of 2) reached, 75 %; base holds the bound
    assert screening.setting_lines(result, {"task": "mqar", "settings": {}})[-1] == (
        "tokens to the midpoint: a value in 3 of 4 stage-2 runs (75%); the others never reached it and count the "
        "tokens they ran, a lower bound: base 1"
    )
    five = [1.0] * 5  # three arms of 5 runs: base reached in 2, nlq in 5, wide in 4: 11 of 15, 73 %
    arms = {
        arm: {"tokens_to_midpoint": {"values": five, "reached": k}} for arm, k in (("wide", 4), ("base", 2), ("nlq", 5))
    }
    assert screening.values_line(arms) == (
        "tokens to the midpoint: a value in 11 of 15 stage-2 runs (73%); the others never reached it and count the "
        "tokens they ran, a lower bound: base 3, wide 1"
    )
    everyone = screening.setting_report(hand_made(), ["learning_rate"], "base", FLOOR)
    assert screening.values_line(everyone["arms"]) == "tokens to the midpoint: a value in all 4 stage-2 runs"


def test_who_reached_first_on_hand_made_pairs_with_runs_that_never_reached():
    """Eight seeds, (arm, baseline), a time and whether it reached; a run that never reached is at its budget:
    1 both reached, arm sooner: arm; 2 both reached, baseline sooner: baseline; 3 arm reached at 300, baseline
    short at its budget of 400: arm; 4 baseline reached, arm never: baseline; 5 neither: undecided; 6 a tie:
    undecided; 7 arm reached at 500, past the baseline's budget of 400 where it was short: undecided; 8 arm
    reached at 400, the baseline still short at its budget of 400: arm. Arm 3, baseline 2, 3 undecided; the
    sign test's p is the binomial's: 2 x P(X <= 2), X ~ Bin(5, 1/2) = 2 x 16/32 = 1."""
    pairs = [((100, True), (200, True)), ((300, True), (150, True)), ((300, True), (400, False)),
             ((400, False), (250, True)), ((400, False), (400, False)), ((200, True), (200, True)),
             ((500, True), (400, False)), ((400, True), (400, False))]  # fmt: skip
    first = who_first(pairs)
    assert (first["arm_first"], first["baseline_first"], first["undecided"]) == (3, 2, 3)
    assert first["p"] == pytest.approx(1.0)
    lopsided = who_first([((1, True), (2, True))] * 9 + [((3, True), (2, False))])
    assert lopsided["arm_first"] == 9 and lopsided["undecided"] == 1
    assert lopsided["p"] == pytest.approx(2 * 0.5**9)  # scipy's exact binomial, written here: 2 x P(X = 9 of 9)
    from scipy import stats

    assert lopsided["p"] == pytest.approx(stats.binomtest(9, 9).pvalue)
    assert who_first([((400, False), (400, False))])["p"] is None


def test_a_setting_compares_who_reached_first_where_the_baseline_never_did():
    """hand_made with the baseline's seed 2 short of the midpoint (its 400-token budget: a bound): nlq reached
    in both seeds before the baseline, which counts as decided (nlq at 150 while the baseline was still short),
    so nlq is first in 2 of 2 pairs, p 0.5 (one arm: Holm changes nothing), on every cost axis alike."""
    runs = hand_made()
    runs[2] = run("base", 2, [0.2, 0.3, 0.4, 0.5, 0.55])
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    first = result["arms"]["nlq"]["tokens_to_midpoint"]["first"]
    assert first == {"arm_first": 2, "baseline_first": 0, "undecided": 0, "p": 0.5, "p_holm": 0.5}
    assert "first" not in result["arms"]["base"]["tokens_to_midpoint"]
    assert result["arms"]["nlq"]["flops_to_midpoint"]["first"]["arm_first"] == 2


@pytest.mark.parametrize("final, informative", [(0.39, False), (0.41, True), (0.994, True), (0.996, False)])
def test_a_setting_is_informative_between_a_quarter_above_the_floor_and_saturation(final, informative):
    runs = [run(a, 1, [0.2, final], "tune", steps=1) for a in ("base", "nlq")]
    runs += [run(a, s, [0.2, final], steps=1) for a in ("base", "nlq") for s in (2, 3)]
    assert screening.setting_report(runs, ["learning_rate"], "base", FLOOR)["informative"] is informative


def test_overall_averages_accuracy_and_the_geometric_mean_of_tokens_over_informative_settings():
    a = hand_made()
    b = hand_made()  # the same runs on a second setting, but for nlq's seed 2
    b[4] = run("nlq", 2, [0.2, 0.3, 0.4, 0.5, 0.55])  # never reaches: counted at 400 tokens
    results = {
        name: screening.setting_report(rs, ["learning_rate"], "base", FLOOR) for name, rs in (("a", a), ("b", b))
    }
    out = screening.overall(results, {"a": a, "b": b}, "base")
    assert out["settings"] == ["a", "b"]
    nlq = out["arms"]["nlq"]
    # seed 2: accuracy (0.95 + 0.55) / 2 = 0.75, seed 3: 0.97; tokens sqrt(150 x 400) and sqrt(50 x 50)
    assert nlq["accuracy"]["mean"] == pytest.approx((0.75 + 0.97) / 2)
    assert nlq["tokens_to_midpoint"]["mean"] == pytest.approx((math.sqrt(150 * 400) + 50) / 2)
    assert out["arms"]["base"]["tokens_to_midpoint"]["mean"] == pytest.approx(200.0)


def reaching(arm, seed, tokens, stage="report"):
    """A run that reaches the midpoint (0.6 over FLOOR) at exactly `tokens` (100 a step), then 0.9."""
    k = tokens // 100
    return run(arm, seed, [0.2] * k + [0.6] + [0.9] * (4 - k), stage)


# Tokens to the midpoint per report seed (2, 3, 4), chosen so that three arms' raw p differ and Holm moves them.
REACHED = {"base": (300, 400, 300), "nlq": (100, 200, 200), "ident": (300, 300, 400), "wide": (200, 300, 100)}


def test_three_arms_p_are_holm_adjusted_as_computed_by_hand():
    """scipy's paired t-test of each arm's tokens against the baseline's, then Holm by hand: the k-th smallest of
    m = 3 p-values times m - k + 1, never below an earlier one, at most 1. The report's p_holm must be those
    (with two arms, raw and adjusted p are the same number, so only three or more tell Holm from none)."""
    from scipy import stats

    runs = [reaching(a, 1, 200, "tune") for a in REACHED]
    runs += [reaching(a, seed, t) for a, ts in REACHED.items() for seed, t in zip((2, 3, 4), ts)]
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    raw = {a: stats.ttest_rel(REACHED["base"], REACHED[a]).pvalue for a in ("nlq", "ident", "wide")}
    expected, running = {}, 0.0
    for i, (p, a) in enumerate(sorted((p, a) for a, p in raw.items())):
        running = max(running, min(1.0, (3 - i) * p))
        expected[a] = running
    for arm in raw:
        entry = result["arms"][arm]["tokens_to_midpoint"]
        assert entry["values"] == pytest.approx(list(REACHED[arm]))
        assert entry["p"] == pytest.approx(raw[arm]) and entry["p_holm"] == pytest.approx(expected[arm])
    assert any(expected[a] != pytest.approx(raw[a]) for a in raw)  # the adjustment is visible in this data
    assert result["arms"]["base"]["tokens_to_midpoint"].get("p_holm") is None


def test_the_overall_answer_leaves_out_a_setting_that_is_not_informative():
    """Setting a is informative; on setting b every arm saturates (accuracy 0.999 at the end), so the overall
    figures are setting a's alone, where averaging both would move them."""
    a = hand_made()
    b = [run(arm, seed, [0.2, 0.6, 0.999, 0.999, 0.999], "tune" if seed == 1 else "report")
         for arm in ("base", "nlq") for seed in (1, 2, 3)]  # fmt: skip
    results = {n: screening.setting_report(rs, ["learning_rate"], "base", FLOOR) for n, rs in (("a", a), ("b", b))}
    assert results["a"]["informative"] and not results["b"]["informative"]
    out = screening.overall(results, {"a": a, "b": b}, "base")
    assert out["settings"] == ["a"]
    assert out["arms"]["nlq"]["accuracy"]["mean"] == pytest.approx((0.95 + 0.97) / 2)  # not with b's 0.999
    assert out["arms"]["nlq"]["tokens_to_midpoint"]["mean"] == pytest.approx((150 + 50) / 2)


def test_the_overall_answer_reads_the_settings_named_before_the_run_informative_or_not():
    """--overall names the settings: with both named, the saturated b is read too (it reaches the midpoint at
    100 tokens for every arm and seed); with b alone named, a is left out though it is informative."""
    a = hand_made()
    b = [run(arm, seed, [0.2, 0.6, 0.999, 0.999, 0.999], "tune" if seed == 1 else "report")
         for arm in ("base", "nlq") for seed in (1, 2, 3)]  # fmt: skip
    results = {n: screening.setting_report(rs, ["learning_rate"], "base", FLOOR) for n, rs in (("a", a), ("b", b))}
    both = screening.overall(results, {"a": a, "b": b}, "base", ["b", "a"])
    assert both["settings"] == ["a", "b"] and both["named"]
    nlq = both["arms"]["nlq"]
    assert nlq["accuracy"]["mean"] == pytest.approx(((0.95 + 0.999) / 2 + (0.97 + 0.999) / 2) / 2)
    # seeds 2 and 3: nlq reaches a's midpoint at 150 and 50 tokens, b's at 100
    assert nlq["tokens_to_midpoint"]["mean"] == pytest.approx((math.sqrt(150 * 100) + math.sqrt(50 * 100)) / 2)
    assert both["arms"]["base"]["tokens_to_midpoint"]["mean"] == pytest.approx(
        (math.sqrt(250 * 100) + math.sqrt(150 * 100)) / 2
    )
    alone = screening.overall(results, {"a": a, "b": b}, "base", ["b"])
    assert alone["settings"] == ["b"] and alone["arms"]["nlq"]["accuracy"]["mean"] == pytest.approx(0.999)


def ranked_apart():
    """Two stage-1 points of base on the tune seed that accuracy and loss rank the other way round: lr 1e-3
    ends at accuracy 0.9 with a loss of 2.0, lr 3e-3 at 0.8 with 1.0."""
    runs = []
    for lr, acc, loss in ((1e-3, 0.9, 2.0), (3e-3, 0.8, 1.0)):
        runs.append(run("base", 1, [0.2, acc], "tune", lr=lr, steps=1))
        for e in runs[-1].evals.values():
            e["val_loss"] = loss
    return runs


def test_stage_one_chooses_by_accuracy_where_the_loss_ranks_the_points_the_other_way():
    """The screen's choice per arm is the grid point of highest final test accuracy (tuning.choose with
    ACCURACY): lr 1e-3 has the higher accuracy and also the higher loss, so choosing by loss would pick 3e-3."""
    from nlq.comparison import tuning

    runs = ranked_apart()
    assert tuning.choose(runs, ["learning_rate"], screening.ACCURACY)["base"]["chosen"] == {"learning_rate": 1e-3}
    assert tuning.choose(runs, ["learning_rate"])["base"]["chosen"] == {"learning_rate": 3e-3}  # by loss: the other


def test_a_screen_of_ones_own_is_read_and_a_bad_one_is_one_line(tmp_path):
    good = {"settings": [{"name": "m", "task": "mqar", "settings": {"vocab_size": 16, "seq_len": 8}, "max_iters": 8}]}
    (tmp_path / "s.json").write_text(json.dumps(good | {"grid": "1e-3"}))
    settings, grid = screening.read_screen(tmp_path / "s.json")
    assert settings[0].options("D")[:4] == ["--dataset=D", "--block_size=8", "--vocab_size=16", "--max_iters=8"]
    assert grid == "1e-3"
    for bad in ({"settings": []}, {"settings": [{"name": "m"}]}, {"settings": good["settings"] * 2}):
        (tmp_path / "b.json").write_text(json.dumps(bad))
        with pytest.raises(screening.ScreenError):
            screening.read_screen(tmp_path / "b.json")


ARM = """
n_layer, n_head, n_embd = 1, 2, 16
batch_size, gradient_accumulation_steps, eval_iters = 4, 1, 1
device, compile, cpu_peak_flops, dtype = "cpu", False, 1e13, "float32"
"""
SCREEN = {
    "settings": [
        {"name": "mq", "task": "mqar", "settings": {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 2},
         "max_iters": 16, "num_train": 64, "num_test": 32, "axis": ["vocab_size", 16]},
        {"name": "mq32", "task": "mqar", "settings": {"vocab_size": 32, "seq_len": 8, "num_kv_pairs": 2},
         "max_iters": 16, "num_train": 64, "num_test": 32, "axis": ["vocab_size", 32]},
    ],
    "grid": "1e-3,3e-2",
}  # fmt: skip


def tiny_screen(tmp_path):
    (tmp_path / "syn_base.py").write_text(ARM)
    (tmp_path / "syn_nlq.py").write_text(ARM + 'query_mode = "residual_gelu"\n')
    (tmp_path / "screen.json").write_text(json.dumps(SCREEN))
    arms = [str(tmp_path / "syn_base.py"), str(tmp_path / "syn_nlq.py")]
    return [*arms, f"--screen={tmp_path / 'screen.json'}", "--seeds=2,3", "--max_extra_seeds=1", "--progress_every=1",
            "--continue_to=2"]  # fmt: skip


def final_acc_and_loss(run_dir) -> tuple[float, float]:
    """The last evaluation's (accuracy, negated validation loss): the higher is the better point."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    last = [r for r in map(json.loads, lines) if r.get("step") == 16 and "val_acc" in r][-1]
    return last["val_acc"], -last["val_loss"]


def accuracy_curve(run_dir) -> list[tuple[int, float]]:
    """(tokens, accuracy) of a run's evaluations, read from its log; [] if it has none."""
    if not (run_dir / "metrics.jsonl").exists():
        return []
    return [(r["tokens"], r["val_acc"]) for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if "val_acc" in r]


def results(report: dict) -> dict:
    """The report without its budget (wall times differ between two screens)."""
    return {k: v for k, v in report.items() if k != "budget"}


@pytest.mark.slow
def test_a_tiny_screen_end_to_end_chooses_by_accuracy_and_continues_where_it_stopped(tmp_path, capsys):
    command = tiny_screen(tmp_path)
    root = tmp_path / "A"
    screen_main([*command, f"--out_root={root}"])
    report = json.loads((root / "screen.json").read_text())
    for setting in ("mq", "mq32"):
        for arm in ("base", "nlq"):  # the argmax of stage 1, read here from the runs' own logs
            runs = {lr: root / setting / f"tune-{arm}-learning_rate={lr}-s1" for lr in ("1e-3", "3e-2")}
            scores = {lr: final_acc_and_loss(run) for lr, run in runs.items()}
            best = max(scores, key=scores.get)  # tied accuracies: the lower loss, then the first in grid order
            assert report["settings"][setting]["arms"][arm]["chosen"] == {"learning_rate": float(best)}
            for seed in (2, 3):
                name = f"{arm}-learning_rate={best}-s{seed}"
                level = report["settings"][setting]["midpoint"]
                curve, later = (accuracy_curve(d / setting / name) for d in (root, root / "continued"))
                # short at its budget: read on its continuation to twice the budget (--continue_to=2)
                expected = tokens_to_reach(curve, level) or tokens_to_reach(later, level) or float(later[-1][0])
                ttm = report["settings"][setting]["arms"][arm]["tokens_to_midpoint"]["values"]
                assert expected in ttm
    for name in ("screen.md", "screen.png", "curves.png", "axes.png"):
        assert (root / name).stat().st_size > 0
    for setting in ("mq", "mq32"):  # the one extra seed (4): for the baseline whenever for any arm
        seeds = {arm: sorted(int(s) for s in r["curves"]) for arm, r in report["settings"][setting]["arms"].items()}
        assert all(s in ([2, 3], [2, 3, 4]) for s in seeds.values()) and max(seeds.values()) == seeds["base"]
    assert json.loads((root / "data" / "mq" / "meta.json").read_text())["settings"]["num_kv_pairs"] == 2
    # Run again: nothing runs. A stage-2 run deleted: it alone runs again.
    capsys.readouterr()
    screen_main([*command, f"--out_root={root}"])
    assert "start  " not in capsys.readouterr().out
    for lr in ("1e-3", "3e-2"):  # a run whose record is gone runs again (its directory gone too: from the start)
        subprocess.run(["rm", "-rf", str(root / "mq" / f"nlq-learning_rate={lr}-s3")])
        (root / "records" / "mq" / f"nlq-learning_rate={lr}-s3.json").unlink(missing_ok=True)
    screen_main([*command, f"--out_root={root}"])
    out = capsys.readouterr().out
    assert out.count("start  ") == 1 and "nlq learning_rate=" in out and "seed 3 (missing)" in out
    assert results(json.loads((root / "screen.json").read_text())) == results(report)
    # A second screen stopped once some stage-1 runs are done, then continued: the same report.
    other = tmp_path / "B"
    p = subprocess.Popen(
        [sys.executable, ROOT / "screen.py", *command, f"--out_root={other}"], stdout=subprocess.DEVNULL
    )
    wait_until(lambda: list(other.glob("mq/tune-*/ckpt.pt")), "stage-1 checkpoint", p)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=HANG_S)
    screen_main([*command, f"--out_root={other}"])
    assert results(json.loads((other / "screen.json").read_text())) == results(report)
    # The overall read on the settings named (--overall): mq32 alone, its own per-setting means; nothing runs.
    capsys.readouterr()
    screen_main([*command, f"--out_root={root}", "--overall=mq32"])
    named = json.loads((root / "screen.json").read_text())
    assert "start  " not in capsys.readouterr().out and named["settings"] == report["settings"]
    assert named["overall"]["settings"] == ["mq32"] and named["overall"]["named"]
    for arm, entry in named["overall"]["arms"].items():
        assert entry["accuracy"]["mean"] == pytest.approx(report["settings"]["mq32"]["arms"][arm]["val_acc_mean"])
    assert "Over the settings named before the run (--overall: mq32):" in (root / "screen.md").read_text()


@pytest.mark.parametrize(
    "option, words",
    [
        ("--tokens_per_s=-5", "argument --tokens_per_s: -5 is invalid: it must be > 0"),
        ("--tokens_per_s=inf", "argument --tokens_per_s: inf is invalid: it must be a finite number"),
        ("--gpu_step_ms=nan", "argument --gpu_step_ms: nan is invalid: it must be a finite number"),
        ("--progress_every=0", "argument --progress_every: 0 is invalid: it must be > 0"),
    ],
)
def test_a_number_option_outside_its_domain_is_argparses_one_line(tmp_path, capsys, option, words):
    """Refused as the options are read (exit 2), dry run or not: screen.py --progress_every=0 ran before."""
    for dry_run in ([], ["--dry_run"]):
        with pytest.raises(SystemExit) as e:
            screen_main([*tiny_screen(tmp_path), f"--out_root={tmp_path / 'R'}", "--gpus=0", option, *dry_run])
        assert e.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == f"screen.py: error: {words}"
        assert not (tmp_path / "R").exists()


@pytest.mark.parametrize(
    "options, words",
    [
        (["--settings=nope"], "the screen has mq, mq32"),
        (["--screen=nope"], "one of default"),
        (["--tune_seeds=2"], "share a seed"),
        (["--grid=data_seed=1,2"], "data_seed cannot be a grid key"),
        (["--jobs=0"], "--jobs=0: give a number >= 1"),
        (["--executor=slurm", "--slurm_gpus=1", "--jobs=2"], "the scheduler places jobs"),
        (["--gpus=0", "--jobs=2"], "--jobs is for runs side by side on CPUs: with --gpus, --runs_per_gpu"),
        (["--runs_per_gpu=2"], "--runs_per_gpu places runs on GPUs: give --gpus as well"),
        (["--baseline=nope"], "--baseline=nope: not an arm of this screen; give one of base, nlq"),
        (["--gpus=0", "--runs_per_gpu=0"], "--runs_per_gpu=0: give a number above 0"),
        (["--dataset=data/x"], "each setting of a screen trains on its own data"),
        (["--max_extra_seeds=-1"], "--max_extra_seeds=-1: give 0 (none) or more"),
        (["--continue_to=0"], "--continue_to=0: give a whole multiple of a run's budget, 1 (never) or more"),
        (["--overall=mq,nope"], "--overall=mq,nope: name settings this screen runs, each once: mq, mq32"),
        (["--settings=mq", "--overall=mq32"], "--overall=mq32: name settings this screen runs, each once: mq"),
        (["--overall=mq,mq"], "--overall=mq,mq: name settings"),
        (["--overall=,"], "--overall=,: name settings"),
        (["--ladder=n_embd=16"], "--ladder=n_embd=16: give n_embd or n_layer=V1,V2,... with two sizes or more"),
        (["--ladder=n_embd=16,16"], "each once"),
        (["--ladder=n_embd=16,0"], "each a whole number >= 1"),
        (["--ladder=n_embd=16,x"], "each a whole number >= 1"),
        (["--ladder=n_head=1,2"], "give n_embd or n_layer"),
        (["--ladder=n_embd=16,12"], "n_embd=12 is not a whole number of heads 8 wide (the head width is held"),
    ],
)
@pytest.mark.parametrize("dry_run", [[], ["--dry_run"]])
def test_bad_screen_options_are_one_line_and_start_nothing(tmp_path, options, words, dry_run):
    root = tmp_path / "R"
    assert words in error_of([*tiny_screen(tmp_path), f"--out_root={root}", *options, *dry_run], main=screen_main)
    assert not root.exists()


@pytest.mark.parametrize("dry_run", [[], ["--dry_run"]])
def test_a_screen_of_one_arm_is_refused_before_anything(tmp_path, dry_run):
    """One arm has no baseline to be compared with: the screen would train its runs and report nothing."""
    command, root = tiny_screen(tmp_path)[1:], tmp_path / "R"
    message = error_of([*command, f"--out_root={root}", *dry_run], main=screen_main)
    assert "one arm (" in message and "has nothing to be compared with: name two config files or more" in message
    assert not root.exists()


@pytest.mark.parametrize(
    "change, words",
    [
        ({"task": "nope"}, "setting mq: task='nope': one of in-context-recall"),
        ({"settings": {"vocab_size": 16, "num_kv_pairs": 2}}, "setting mq: give its settings seq_len"),
        ({"settings": {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 9}}, "setting mq: num_kv_pairs=9"),
        ({"settings": {"vocab_size": 16, "seq_len": 8, "pairs": 2}}, "give only the task's own settings"),
        ({"max_iters": 0}, "setting mq: max_iters=0: give its steps"),
    ],
)
@pytest.mark.parametrize("dry_run", [[], ["--dry_run"]])
def test_a_screen_file_whose_setting_cannot_be_built_is_refused_before_anything(tmp_path, change, words, dry_run):
    command = tiny_screen(tmp_path)
    (tmp_path / "screen.json").write_text(json.dumps({**SCREEN, "settings": [SCREEN["settings"][0] | change]}))
    root = tmp_path / "R"
    assert words in error_of([*command, f"--out_root={root}", *dry_run], main=screen_main)
    assert not root.exists()


def test_a_screen_compared_with_another_baseline_is_another_screen(tmp_path, capsys):
    """--baseline decides which extra seeds run: an out_root whose screen compared with base (its plan, or an
    older plan that names no baseline: its first arm) is refused to a screen compared with nlq."""
    command, root = tiny_screen(tmp_path), tmp_path / "R"
    root.mkdir()
    plan = {"arms": {"base": command[0], "nlq": command[1]}, "grid": ["learning_rate=1e-3,3e-2"],
            "tune_seeds": "1", "seeds": "2,3", "options": [], "settings": {}}  # fmt: skip
    (root / "screen_plan.json").write_text(json.dumps(plan))
    screen_main([*command, f"--out_root={root}", "--dry_run"])  # the same screen: its baseline the first arm
    message = error_of([*command, f"--out_root={root}", "--baseline=nlq", "--dry_run"], main=screen_main)
    assert "holds another screen (its baseline differ" in message
    (root / "screen_plan.json").write_text(json.dumps(plan | {"continue_to": 3}))
    message = error_of([*command, f"--out_root={root}", "--continue_to=5", "--dry_run"], main=screen_main)
    assert "holds another screen (its continue_to differ" in message  # its runs carried on to 3x, not 5x


def test_an_out_root_holding_another_screen_is_refused_even_in_a_dry_run(tmp_path, capsys):
    command, root = tiny_screen(tmp_path), tmp_path / "R"
    (root / "mq").mkdir(parents=True)
    plan = {"arms": {"base": "x.py"}, "grid": ["learning_rate=1e-3"], "tune_seeds": "1", "seeds": "2,3"}
    (root / "screen_plan.json").write_text(json.dumps(plan | {"options": [], "settings": {}}))
    for dry_run in ([], ["--dry_run"]):
        message = error_of([*command, f"--out_root={root}", *dry_run], main=screen_main)
        assert "holds another screen (its arms, grid differ" in message and "use another --out_root" in message
    assert sorted(p.name for p in root.iterdir()) == ["mq", "screen_plan.json"]


def test_runs_that_fail_one_after_another_stop_the_screen_with_the_first_error(tmp_path):
    """A launcher that fails every run at once: the third failure in a row stops the screen, its first
    failure named."""
    command = tiny_screen(tmp_path)
    message = error_of([*command, f"--out_root={tmp_path / 'R'}", "--launcher=false"], main=screen_main)
    # stage 1 runs one setting at a time (mq's 4 runs), two side by side: the one beside the third may fail too
    assert re.search(r"(3 runs failed one after another, so the 1|4 runs .*, so the 0) left were not started", message)
    assert "the first, base learning_rate=" in message and "Fix that" in message
    assert len(list((tmp_path / "R").glob("*/tune-*"))) <= 3 + 1  # the two side by side when the third failed


def test_a_dataset_made_with_other_settings_is_not_replaced_under_its_runs(tmp_path):
    command = tiny_screen(tmp_path)
    root = tmp_path / "R"
    (root / "data" / "mq").mkdir(parents=True)
    (root / "data" / "mq" / "meta.json").write_text(json.dumps({"task": "mqar", "settings": {"vocab_size": 99}}))
    (root / "mq" / "tune-base-learning_rate=1e-3-s1").mkdir(parents=True)
    message = error_of([*command, f"--out_root={root}"], main=screen_main)
    assert "was made with other settings" in message and "use another --out_root" in message


def test_the_dry_run_lists_the_runs_and_estimates_their_time(tmp_path, capsys):
    screen_main([*tiny_screen(tmp_path), f"--out_root={tmp_path / 'R'}", "--dry_run", "--tokens_per_s=512"])
    out = capsys.readouterr().out
    # stage 1: 2 arms x 2 settings x 2 points; stage 2: 2 arms x 2 settings x 2 seeds; 16 steps of 4 x 8 tokens
    assert "16 runs (8 in stage 1, 8 in stage 2 over 2 settings), 0M training tokens" in out
    assert out.count("start  ") == 8 and not (tmp_path / "R").exists()
    hours = 16 * 16 * 4 * 8 / 512 / 2 / 3600
    assert f"about {hours:.1f} hours, 2 at a time" in out
    assert "then up to 1 more seeds (4) for each arm and setting whose interval holds zero (to 3 seeds)" in out
    assert "at most 4 runs more (--max_extra_seeds)" in out
    # were every stage-2 run short, seed 4 included: 2 settings x 2 arms x 3 seeds x 16 more steps of 32 tokens
    most = 2 * 2 * 3 * 16 * 32
    assert (
        f"were every one short, 1 extra seeds included, {most:,} tokens more, about {most / 512 / 2 / 3600:.1f}" in out
    )


def test_runs_side_by_side_get_their_share_of_the_cpus(tmp_path, monkeypatch):
    seen = []

    class Finished:  # a run's process that has ended well, its environment seen
        def __init__(self, cmd, env, **kw):
            seen.append(env.get("OMP_NUM_THREADS"))

        def wait(self):
            return 0

    monkeypatch.setattr(sweep_lib.subprocess, "Popen", Finished)
    r = Planned("a", 1, "c.py", tmp_path / "a", 8)
    run_all([(r, "missing"), (Planned("b", 1, "c.py", tmp_path / "b", 8), "missing")], "python", [], [None] * 2,
                  threads=3)  # fmt: skip
    assert seen == ["3", "3"]


@pytest.mark.parametrize(
    "seeds, most, rounds", [(3, 5, [5, 8]), (3, 2, [5]), (3, 3, [5, 6]), (3, 0, []), (6, 5, [8]), (8, 5, [])]
)
def test_stage_two_grows_to_five_then_eight_seeds_within_the_budget(seeds, most, rounds):
    assert screening.seed_rounds(seeds, most) == rounds


def test_the_arms_that_get_more_seeds():
    """Every arm while the baseline reached the midpoint in fewer than all its seeds; else each arm whose
    interval holds zero (an end of it on zero included) with the baseline, and none of the others."""

    def result(reached, **intervals):
        arms = {"base": {"tokens_to_midpoint": {"values": [1, 2, 3], "reached": reached, "interval": None}}}
        for arm, interval in intervals.items():
            arms[arm] = {"tokens_to_midpoint": {"values": [1, 2, 3], "reached": 3, "interval": interval}}
        return {"arms": arms}

    assert screening.wanting_seeds(result(2, a=[0.2, 0.5], b=[0.3, 0.4]), "base") == ["a", "b", "base"]
    assert screening.wanting_seeds(result(3, a=[-0.1, 0.5], b=[0.1, 0.4], c=[0.0, 0.2]), "base") == ["a", "base", "c"]
    assert screening.wanting_seeds(result(3, a=[0.1, 0.5], b=[-0.4, -0.1]), "base") == []


def test_a_dataset_made_before_the_floor_changed_is_rescored_and_its_examples_kept(tmp_path, capsys):
    """A setting's data with runs on it and an old meta.json floor (the most-frequent rule alone, filler ids
    counted): the screen recomputes the floor from the test split and keeps every example, so the runs stand."""
    from nlq.comparison import screen
    from nlq.data.floor import key_blind_floor
    from nlq.data.tasks import key_blind_view

    setting = screening.mqar("m", pairs=3, steps=10, vocab=16, seq=12, num_train=8, num_test=60)
    data = tmp_path / "data" / "m"
    screen.prepare(setting, data, tmp_path)
    arrays = {f: (data / "test" / f).read_bytes() for f in ("inputs.npy", "targets.npy")}
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps(meta | {"floor": {"token": 0.125, "example": 0.0}}))
    (tmp_path / "m" / "tune-baseline-s1").mkdir(parents=True)  # a run on these examples
    screen.prepare(setting, data, tmp_path)
    floor = json.loads((data / "meta.json").read_text())["floor"]
    x, y = (np.load(data / "test" / f) for f in ("inputs.npy", "targets.npy"))
    assert floor == key_blind_floor(x, y, **key_blind_view("mqar", setting.settings, x)) and floor["token"] > 1 / 3
    assert f"0.125 -> {floor['token']:.3f}" in capsys.readouterr().out
    assert {f: (data / "test" / f).read_bytes() for f in arrays} == arrays
    screen.prepare(setting, data, tmp_path)  # rescored once: nothing more to say
    assert "rescored" not in capsys.readouterr().out


def test_mads_macro_accuracy_is_shown_beside_where_every_run_recorded_it():
    runs = hand_made()
    for r in runs:  # macro a tenth below the per-token accuracy at every evaluation
        for e in r.evals.values():
            e["val_acc_macro"] = e["val_acc"] - 0.1
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    lines = screening.setting_lines(result, {"task": "mqar", "settings": {}})
    # final accuracies: base 0.9, 0.9; nlq 0.95, 0.97
    assert any(line.endswith(f"mean over the fresh seeds: base {0.8:.4f}, nlq {0.86:.4f}") for line in lines)


def test_mads_training_set_sizes_set_the_examples_and_the_steps_of_200_epochs():
    """MAD's benchmark changes the training set's size (800 to 12,800 examples): each such setting trains on
    that many examples for 200 epochs at 64 a step (800 x 200 / 64 = 2,500 steps), and the size is the
    dataset's, never passed to the task's generator as one of its settings."""
    settings = screening.mad("in-context-recall", {"vocab_size": 16, "seq_len": 128}, {"num_train_examples": [800]})
    base, small = settings
    assert (base.num_train, base.max_iters) == (12_800, 12_800 * 200 // 64)
    assert (small.num_train, small.max_iters) == (800, 2_500)
    assert "num_train_examples" not in small.settings and small.axis == ("num_train_examples", 800)


def test_tokens_to_the_midpoint_interval_is_the_paired_t_interval_relative_to_the_baselines_mean():
    """nlq against base over seeds 2-4 (REACHED): sooner by 200, 200, 100 tokens, mean 166.7, sd 57.7, so
    166.7 ± t(0.975, 2) x 57.7 / sqrt(3), over the baseline's mean of 333.3 tokens."""
    from scipy import stats

    runs = [reaching(a, 1, 200, "tune") for a in ("base", "nlq")]
    runs += [reaching(a, seed, t) for a in ("base", "nlq") for seed, t in zip((2, 3, 4), REACHED[a])]
    entry = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)["arms"]["nlq"]["tokens_to_midpoint"]
    sooner = [b - n for b, n in zip(REACHED["base"], REACHED["nlq"])]
    mean, half = statistics.mean(sooner), stats.t.ppf(0.975, 2) * statistics.stdev(sooner) / math.sqrt(3)
    base = statistics.mean(REACHED["base"])
    assert entry["improvement"] == pytest.approx(mean / base)
    assert entry["interval"] == pytest.approx([(mean - half) / base, (mean + half) / base])


def test_the_figures_draw_each_arms_means_the_floor_and_the_midpoint(monkeypatch, tmp_path):
    """What the page's figures say they show, read back from the drawn axes: per setting, each arm's mean
    curve over its seeds, the floor dashed and the midpoint dotted; the bars at each arm's mean accuracy,
    with the floor dashed across each setting."""
    drawn = []
    monkeypatch.setattr(screening, "save", lambda fig, path: drawn.append(fig))
    curves = {"base": {"2": [[0, 0.1], [100, 0.3]], "3": [[0, 0.3], [100, 0.9]]},
              "nlq": {"2": [[0, 0.2], [100, 1.0]], "3": [[0, 0.2], [100, 0.8]]}}  # fmt: skip
    report = {"overall": {"arms": {}}, "settings": {}}
    for name, floor, mid in (("recall", 0.4, 0.7), ("mqar", 0.5, 0.75)):
        arms = {arm: {"curves": c, "val_acc_mean": 0.6 + 0.1 * i, "val_acc_std": 0.05} for i, (arm, c) in
                enumerate(curves.items())}  # fmt: skip
        report["settings"][name] = {"floor": {"token": floor}, "midpoint": mid, "arms": arms}
    screening.plot_curves(report, tmp_path / "c.png")
    for ax, (name, floor, mid) in zip(drawn[0].axes, (("recall", 0.4, 0.7), ("mqar", 0.5, 0.75))):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert ax.get_title() == name and ax.get_ylabel() == "test accuracy"
        assert list(lines["base"].get_ydata()) == pytest.approx([0.2, 0.6])  # (0.1 + 0.3) / 2, (0.3 + 0.9) / 2
        assert list(lines["nlq"].get_ydata()) == pytest.approx([0.2, 0.9])
        assert list(lines["base"].get_xdata()) == pytest.approx([0, 100 / 1e6])  # millions of tokens
        styles = {line.get_linestyle(): line.get_ydata()[0] for line in ax.get_lines() if line.get_label()[0] == "_"}
        assert styles == pytest.approx({"--": floor, ":": mid})
    screening.plot_accuracy(report, tmp_path / "a.png")
    ax = drawn[1].axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [0.6, 0.6, 0.7, 0.7] and ax.get_ylabel() == "test accuracy per scored token"
    floors = sorted(float(y) for c in ax.collections if c.get_linestyle()[0][1] for y in c.get_segments()[0][:, 1])
    assert floors == pytest.approx([0.4, 0.4, 0.5, 0.5])


def test_the_screens_own_report_chooses_each_arms_point_by_accuracy():
    """Through setting_report, as the screen calls it, on ranked_apart's points: the accuracy's choice (1e-3)
    is reported, with its fresh seeds (a choice by loss would find them at another point and be refused)."""
    runs = ranked_apart()
    runs += [run("base", s, [0.2, 0.5, 0.7, 0.9, a], lr=1e-3) for s, a in ((2, 0.95), (3, 0.91))]
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    assert result["arms"]["base"]["chosen"] == {"learning_rate": 1e-3}
    assert result["arms"]["base"]["val_acc_mean"] == pytest.approx(0.93)  # (0.95 + 0.91) / 2: the 1e-3 seeds


def test_stage_two_is_planned_at_the_points_stage_one_chose_by_accuracy(tmp_path):
    """Through the code that plans the screen: stage 1 of setting mq planned for two arms at two learning
    rates, its runs' logs written here so that accuracy and loss rank the points apart (base: 1e-3 has the
    higher accuracy and the higher loss; nlq: the other way round). Stage 2 runs each arm at its accuracy's
    point, on the fresh seeds, with that point on its command line."""
    from nlq.comparison import screen

    arms = tiny_screen(tmp_path)[:2]
    setting = screening.Setting(**{k: v for k, v in SCREEN["settings"][0].items() if k != "axis"})
    root, data = tmp_path / "R", tmp_path / "R" / "data" / "mq"
    points = [{"learning_rate": "1e-3"}, {"learning_rate": "3e-2"}]
    stage1 = screen.plan(setting, data, arms, [1], root, [], points)
    assert len(stage1) == 4
    finals = {("base", "1e-3"): (0.9, 2.0), ("base", "3e-2"): (0.8, 1.0),
              ("nlq", "1e-3"): (0.7, 1.0), ("nlq", "3e-2"): (0.95, 2.5)}  # fmt: skip
    for r in stage1:
        acc, loss = finals[(r.arm, r.point["learning_rate"])]
        r.out_dir.mkdir(parents=True)
        config = {"wandb_run_name": r.arm, "wandb_group": "R/tune", "seed": r.seed, "query_mode": "linear",
                  "learning_rate": float(r.point["learning_rate"]), "max_iters": r.max_iters}  # fmt: skip
        (r.out_dir / "config.json").write_text(json.dumps(config))
        evals = [{"step": 0, "val_loss": 3.0, "val_acc": 0.1}, {"step": r.max_iters, "val_loss": loss, "val_acc": acc}]
        (r.out_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    args = screen.parser().parse_args(arms)
    args.jobs = 1
    keep = screen.Keeper(tmp_path / "kept", None, root, args)
    keep.write(stage1, multiple=1)  # the choice is read from the records: the run directories may be gone
    for r in stage1:
        shutil.rmtree(r.out_dir)
    stage2 = screen.chosen_runs(setting, stage1, data, args, [2, 3], [], ["learning_rate"], keep)
    chosen = {"base": "1e-3", "nlq": "3e-2"}  # by accuracy; the loss would choose the other point of each
    assert sorted((r.arm, r.seed) for r in stage2) == [("base", 2), ("base", 3), ("nlq", 2), ("nlq", 3)]
    for r in stage2:
        assert r.point == {"learning_rate": chosen[r.arm]} and f"--learning_rate={chosen[r.arm]}" in r.options
        assert r.out_dir == root / "mq" / f"{r.arm}-learning_rate={chosen[r.arm]}-s{r.seed}"


def test_a_gpus_run_memory_is_the_largest_runs_estimated_once_per_shape(tmp_path, monkeypatch):
    """Stage 1 of the tiny screen (two arms x two rates on one setting): the memory estimate runs once per arm
    (the rates and seeds change nothing it reads), and a run's need is the largest plus a CUDA context."""
    from nlq.comparison import placement, screen

    arms = tiny_screen(tmp_path)[:2]
    setting = screening.Setting(**{k: v for k, v in SCREEN["settings"][0].items() if k != "axis"})
    runs = screen.plan(setting, tmp_path / "d", arms, [1, 2], tmp_path / "R", [],
                       [{"learning_rate": "1e-3"}, {"learning_rate": "3e-2"}])  # fmt: skip
    calls = []

    def estimate(cfg, model_cfg, gpus):
        calls.append(model_cfg.query_mode)
        return {"ddp": {"total": 100 if model_cfg.query_mode == "linear" else 300}}

    monkeypatch.setattr(placement, "estimate", estimate)
    assert len(runs) == 8 and placement.run_bytes(runs) == 300 + placement.CONTEXT_BYTES
    assert sorted(calls) == ["linear", "residual_gelu"]


def continued(r, curve, steps=8):
    """r's continuation to `steps` steps: r's own evaluations up to its budget, then curve's accuracies at the
    steps after it (100 tokens a step, as run() counts)."""
    later = [{"step": s, "val_loss": 1 - a, "val_acc": a, "tokens": 100 * s} for s, a in enumerate(curve, 5)]
    return Run(r.name + "-continued", r.config | {"max_iters": steps}, [*r.evals.values(), *later])


def test_a_run_short_at_its_budget_is_read_on_its_continuation():
    """hand_made with the baseline's seed 2 short of the midpoint (0.6) at its 400-token budget. Its
    continuation crosses between 500 tokens (0.58) and 600 (0.70): 500 + 100 x 0.02 / 0.12 = 516.67 tokens, a
    value where the budget gave only the bound 400. nlq reached first in both seeds (150 < 516.67, 50 < 150).
    A continuation that stays short counts its own last evaluation, 800 tokens, not the budget's 400."""
    runs = hand_made()
    runs[2] = run("base", 2, [0.2, 0.3, 0.4, 0.5, 0.55])
    later = {runs[2].name: continued(runs[2], [0.58, 0.7, 0.8, 0.9])}
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR, continued=later)
    base = result["arms"]["base"]["tokens_to_midpoint"]
    assert base["values"] == pytest.approx([500 + 100 * 0.02 / 0.12, 150.0])
    assert (base["reached"], base["by_budget"], base["continued"]) == (2, 1, 1)
    assert result["arms"]["nlq"]["tokens_to_midpoint"]["first"]["arm_first"] == 2
    assert result["arms"]["base"]["val_acc_mean"] == pytest.approx((0.55 + 0.9) / 2)  # accuracy: at the budget
    lines = screening.cost_table(result["arms"], result["cost_axes"])
    assert any(line.startswith("| base | 2 / 2 (1 by the budget) |") for line in lines)
    assert any(line.startswith("| nlq | 2 / 2 |") for line in lines)  # none of nlq's was carried on
    still_short = {runs[2].name: continued(runs[2], [0.5, 0.55, 0.5, 0.59])}
    base = screening.setting_report(runs, ["learning_rate"], "base", FLOOR, continued=still_short)["arms"]["base"]
    assert base["tokens_to_midpoint"]["values"] == pytest.approx([800.0, 150.0])
    assert (base["tokens_to_midpoint"]["reached"], base["tokens_to_midpoint"]["by_budget"]) == (1, 1)


def test_a_continuation_carried_further_before_is_recorded_only_to_the_multiple_asked(tmp_path):
    """A run of 4 steps whose continuation holds evaluations to step 12 (3x): recorded at 2x, its continuation's
    curve ends at step 8; at 1x (never continue), it has none."""
    out_root = tmp_path / "R"
    r = run("base", 2, [0.2, 0.3, 0.4, 0.5, 0.55])
    own, path = out_root / "mq" / "base-s2", out_root / "continued" / "mq" / "base-s2"
    for d, config, steps in ((own, r.config, 5), (path, r.config | {"max_iters": 12}, 13)):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(config))
        evals = [{"step": s, "val_loss": 0.5, "val_acc": 0.55 if s > 4 else r.evals[s]["val_acc"], "tokens": 100 * s}
                 for s in range(steps)]  # fmt: skip
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in evals))
    planned = Planned("base", 2, "c.py", own, 4)
    args = screen_lib.parser().parse_args(["a.py", "b.py"])
    args.jobs = 1
    read = {}
    for multiple in (2, 1):
        keep = screen_lib.Keeper(tmp_path / f"kept{multiple}", None, out_root, args)
        keep.write([planned], multiple)
        _, read[multiple] = records.read(records.path_of(keep.folder, "mq", "base-s2"), None)
    assert sorted(read[2].evals) == list(range(9)) and read[1] is None
    later = read[2]
    assert screening.tokens_to_midpoint(r, FLOOR["token"], later) == (800.0, False)


def test_a_run_carried_on_is_the_run_of_the_longer_schedule_and_its_own_files_stay(tmp_path):
    """A stage-2 run of 8 steps short of the midpoint, carried on to 16 (--continue_to=2): its continuation's
    evaluations are those of one uninterrupted run of 16 steps whose cosine ends at step 8 (min_lr after it),
    to the bit, and the run's own files are not changed."""
    setting = screening.Setting("mq", "mqar", {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 2}, 8, num_train=64,
                                num_test=32)  # fmt: skip
    out_root, config = tmp_path / "R", tmp_path / "syn_base.py"
    config.write_text(ARM)
    command = [str(config), str(config), f"--out_root={out_root}", "--continue_to=2"]
    args, _ = screen_lib.parser().parse_known_args(command)
    args.jobs = 1
    data = out_root / "data" / "mq"
    screen_lib.prepare(setting, data, out_root)
    (r,) = screen_lib.setting_runs(setting, data, str(config), "base", [2], out_root, [], {"learning_rate": "1e-3"},
                                   "report")  # fmt: skip
    sweep_lib.launch([r], args, [])
    assert screen_lib.short_of_midpoint(r, data)  # 8 steps of a 1-layer model: at the floor
    before = {p.name: p.read_bytes() for p in r.out_dir.iterdir() if p.name != "train.lock"}
    cont = screen_lib.carried(r, data, out_root, 2)
    assert cont.out_dir == out_root / "continued" / "mq" / r.out_dir.name
    straight = Planned(r.arm, r.seed, r.config, tmp_path / "straight", 16, r.point, (*r.options, "--max_iters=16"))
    sweep_lib.launch([cont, straight], args, [])
    assert {p.name: p.read_bytes() for p in r.out_dir.iterdir() if p.name != "train.lock"} == before
    evaluations = {d: {x["step"]: x for x in map(json.loads, (d / "metrics.jsonl").open()) if "val_loss" in x}
                   for d in (r.out_dir, cont.out_dir, straight.out_dir)}  # fmt: skip
    assert sorted(evaluations[cont.out_dir]) == list(range(17)) and sorted(evaluations[r.out_dir]) == list(range(9))
    assert evaluations[cont.out_dir] == evaluations[straight.out_dir]
    assert all(evaluations[r.out_dir][s] == evaluations[cont.out_dir][s] for s in range(9))
    lrs = {x["step"]: x["lr"] for x in map(json.loads, (cont.out_dir / "metrics.jsonl").open()) if "lr" in x}
    assert all(lr == pytest.approx(1e-4) for s, lr in lrs.items() if s > 8)  # min_lr: a tenth of 1e-3


def test_only_the_stage_2_runs_short_of_the_midpoint_are_carried_on(tmp_path):
    """Three finished runs of setting mq (midpoint 0.6): base-s2 ends at 0.5, nlq-s2 reaches 0.7, nlq-s3 ends at
    0.59. Only base-s2 and nlq-s3 get a continuation, to 3x their budget, copied beside them; the run that
    reached the midpoint does not, and none does at --continue_to=1."""
    out_root, data = tmp_path / "R", tmp_path / "R" / "data" / "mq"
    data.mkdir(parents=True)
    (data / "meta.json").write_text(json.dumps({"floor": FLOOR}))
    planned = []
    for name, last in (("base-s2", 0.5), ("nlq-s2", 0.7), ("nlq-s3", 0.59)):
        r = run(name.split("-")[0], int(name[-1]), [0.2, 0.3, 0.4, 0.45, last])
        d = out_root / "mq" / name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(r.config))
        records = [{"step": s, **e} for s, e in sorted(r.evals.items())]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records))
        (d / "ckpt.pt").write_bytes(b"a checkpoint")
        planned.append(Planned(r.arm, r.seed, r.config, d, 4, {}, ("--max_iters=4",)))
    assert [screen_lib.carried(r, data, out_root, 1) for r in planned] == [None] * 3
    carried = {r.out_dir.name: screen_lib.carried(r, data, out_root, 3) for r in planned}
    assert carried["nlq-s2"] is None
    assert {n: (c.out_dir, c.max_iters, c.options[-1]) for n, c in carried.items() if c} == {
        n: (out_root / "continued" / "mq" / n, 12, "--max_iters=12") for n in ("base-s2", "nlq-s3")
    }
    assert sorted(p.name for p in (out_root / "continued" / "mq").iterdir()) == ["base-s2", "nlq-s3"]
    assert (out_root / "continued" / "mq" / "nlq-s3" / "ckpt.pt").read_bytes() == b"a checkpoint"


def recorded_screen(tmp_path, monkeypatch, finished: set, short: set, never=()):
    """run_recorded over seeds 2 and 3 of setting mq (arms base, nlq) with the runs stubbed: a run is finished
    once in `finished` (by out_dir), the launcher runs its work one at a time in order, putting each run's
    follow-ups first, as run_all does, and leaves the runs named in `never` unfinished; a fresh run named in
    `short` is carried on. The events: ('ran', name) and ('recorded', names)."""
    out_root, events = tmp_path / "R", []
    monkeypatch.setattr(Planned, "status", lambda r: "finished" if r.out_dir in finished else "missing")

    def carried(r, data_dir, root, multiple):
        return screen_lib.continuation(r, root, multiple) if r.out_dir.name in short else None

    def launch(work, args, extra, after):
        line = list(work)
        while line:
            r = line.pop(0)
            name = str(r.out_dir.relative_to(out_root))
            events.append(("ran", name))
            if name not in never:
                finished.add(r.out_dir)
                line[:0] = [m for m, _ in after(r)]
        return [], {}

    monkeypatch.setattr(screen_lib, "carried", carried)
    monkeypatch.setattr(sweep_lib, "launch", launch)

    def write(runs, multiple):
        events.append(("recorded", [r.out_dir.name for r in runs]))

    keep = SimpleNamespace(has=lambda r: False, folder=out_root, out_root=out_root, write=write)
    runs = [Planned(a, s, "c.py", out_root / "mq" / f"{a}-s{s}", 4) for s in (2, 3) for a in ("base", "nlq")]
    args = SimpleNamespace(continue_to=3)
    try:
        screen_lib.run_recorded(runs, {"mq": out_root / "data" / "mq"}, args, keep, "stage-2")
    except UserError as e:
        events.append(("error", str(e)))
    return events, runs


def test_a_seed_group_is_recorded_once_its_runs_and_their_continuations_have_run(tmp_path, monkeypatch):
    """base-s2 is short: its continuation runs right after it, before nlq-s2 (which waited); seed 2's pair is
    recorded as soon as nlq-s2 ends, before seed 3's runs start, not at the end of the stage."""
    events, _ = recorded_screen(tmp_path, monkeypatch, set(), short={"base-s2"})
    assert events == [
        ("ran", "mq/base-s2"), ("ran", "continued/mq/base-s2"), ("ran", "mq/nlq-s2"),
        ("recorded", ["base-s2", "nlq-s2"]),
        ("ran", "mq/base-s3"), ("ran", "mq/nlq-s3"), ("recorded", ["base-s3", "nlq-s3"]),
    ]  # fmt: skip


def test_after_a_stop_a_group_finished_is_recorded_and_a_continuation_left_is_run(tmp_path, monkeypatch):
    """Stopped before anything was recorded: seed 2's runs and base-s2's continuation had finished (recorded
    at once, nothing run); of seed 3, base-s3 had finished short of the midpoint but its continuation had not
    (it runs, with nlq-s3). A run that never finishes leaves its group unrecorded and says so."""
    root = tmp_path / "R"
    done = {
        root / "mq" / "base-s2",
        root / "continued" / "mq" / "base-s2",
        root / "mq" / "nlq-s2",
        root / "mq" / "base-s3",
    }
    events, _ = recorded_screen(tmp_path, monkeypatch, done, short={"base-s2", "base-s3"})
    assert events == [
        ("recorded", ["base-s2", "nlq-s2"]),
        ("ran", "continued/mq/base-s3"), ("ran", "mq/nlq-s3"), ("recorded", ["base-s3", "nlq-s3"]),
    ]  # fmt: skip
    events, _ = recorded_screen(tmp_path / "b", monkeypatch, set(), short=set(), never={"mq/nlq-s3"})
    assert ("recorded", ["base-s3", "nlq-s3"]) not in events and ("recorded", ["base-s2", "nlq-s2"]) in events
    assert events[-1] == ("error", "1 stage-2 seed groups did not finish (above): run the same command again")


def test_the_options_given_reach_the_report_as_given(tmp_path, monkeypatch):
    """screen.py's hand-off from its command line to the report, in the inner loop (only the slow end-to-end
    screen reached it): the baseline, the overall's settings, the prices and their file, the grid's keys, each
    setting's floor and the runs read (stage 1's on the tune seed), all kept in report_inputs.json beside the
    records, with every run stubbed away."""
    steps = {"linear": {"train_step_s": {"median": 2.0}}, "residual_gelu": {"train_step_s": {"median": 3.0}}}
    (tmp_path / "p.json").write_text(json.dumps({"results": steps}))
    seen = {}
    monkeypatch.setattr(screen_lib, "prepare", lambda *a: None)
    monkeypatch.setattr(sweep_lib, "launch", lambda runs, args, extra, tolerate=None, after=None: (list(runs), {}))
    monkeypatch.setattr(screen_lib, "chosen_runs", lambda *a: [])
    monkeypatch.setattr(screen_lib, "more_seeds", lambda *a: [])
    monkeypatch.setattr(screen_lib.Keeper, "write", lambda *a, **k: None)
    monkeypatch.setattr(screen_lib, "floor_of", lambda data_dir: {"token": 0.5, "data": str(data_dir)})
    seen = {}
    monkeypatch.setattr(screen_lib, "report_of", lambda inputs, recorded, stated: seen.update(inputs) or ({}, []))
    monkeypatch.setattr(screen_lib.Keeper, "read_all", lambda self, names: ([], {}))
    monkeypatch.setattr(screen_lib, "publish", lambda *a: seen.update(folder=a[2]))
    root = tmp_path / "R"
    screen_main([*tiny_screen(tmp_path), f"--out_root={root}", "--baseline=nlq", "--overall=mq32",
                 f"--prices={tmp_path / 'p.json'}", "--seeds=5,6", "--tune_seeds=4"])  # fmt: skip
    assert (seen["baseline"], seen["overall"], seen["keys"]) == ("nlq", ["mq32"], ["learning_rate"])
    assert seen["prices"] == {"file": str(tmp_path / "p.json"), "ratios": {"linear": 1.0, "residual_gelu": 1.5}}
    assert {n: f["data"] for n, f in seen["floors"].items()} == {n: str(root / "data" / n) for n in ("mq", "mq32")}
    assert sorted(seen["tasks"]) == ["mq", "mq32"] and seen["folder"] == root  # no statement, no --records
    # stage 1's runs (stage 2 stubbed), by the names of their records: SETTING/RUN
    assert seen["records"] == [f"{s}/tune-{a}-learning_rate={lr}-s4" for s in ("mq", "mq32") for a in ("base", "nlq")
                               for lr in ("1e-3", "3e-2")]  # fmt: skip
    assert json.loads((root / "report_inputs.json").read_text()) == {k: v for k, v in seen.items() if k != "folder"}


def test_the_accuracy_figure_keeps_its_legend_off_the_bars_and_every_error_bar_in_view(monkeypatch, tmp_path):
    """docs/screening.png's faults, read back from its axes: the legend lay over the bars at 1.0 (now beside the
    axes, right of them), error bars past 1.0 were cut (the axis reaches the highest mean + std), the title named
    neither the screen nor its seeds, and a bar below the floor had no word (now 'below floor' over it alone)."""
    drawn = []
    monkeypatch.setattr(screening, "save", lambda fig, path: drawn.append(fig))
    seeds = {str(s): [] for s in (2, 3, 4, 7)}

    def arm(mean, std):
        return {"val_acc_mean": mean, "val_acc_std": std, "curves": seeds}

    report = {"overall": {"arms": {}}, "screen": "default", "settings": {
        "recall": {"floor": {"token": 0.4}, "arms": {"base": arm(1.0, 0.0), "nlq": arm(0.9, 0.2)}},
        "mqar": {"floor": {"token": 0.5}, "arms": {"base": arm(0.3, 0.05), "nlq": arm(0.8, 0.1)}},
    }}  # fmt: skip
    screening.plot_accuracy(report, tmp_path / "a.png")
    fig = drawn[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_ylim()[1] >= 0.9 + 0.2  # nlq's error bar on recall, whole
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base", "nlq"]
    assert (
        ax.get_title()
        == "screen default: test accuracy at the budget, mean ± std over fresh seeds 2-4, 7; dashed: floor"
    )
    notes = [(t.get_text(), t.get_position()) for t in ax.texts]
    assert len(notes) == 1 and notes[0][0] == "below floor"  # base on mqar, the second setting's first bar
    assert notes[0][1][0] == pytest.approx(1 - 0.2) and notes[0][1][1] == pytest.approx(0.3 + 0.05 + 0.02)


def test_each_cost_to_the_midpoint_is_also_a_paired_ratio_and_bounds_leave_it_to_who_first():
    """hand_made: base reaches the midpoint at 250 and 150 tokens (seeds 2, 3), nlq at 150 and 50: ratios 0.6 and
    1/3, geometric mean sqrt(0.2) = 0.447 (55 % sooner), its interval and p from the log ratios by hand. With
    nlq's seed 3 never reaching it (a bound), no ratio: who reached it first alone."""
    from scipy import stats

    result = screening.setting_report(hand_made(), ["learning_rate"], "base", FLOOR)
    r = result["arms"]["nlq"]["tokens_to_midpoint"]["ratio"]
    logs = [math.log(0.6), math.log(1 / 3)]
    half = stats.t.ppf(0.975, 1) * statistics.stdev(logs) / math.sqrt(2)
    assert r["ratio"] == pytest.approx(math.sqrt(0.2)) and r["n"] == 2 and r["bounds"] == 0
    assert r["interval"] == pytest.approx([math.sqrt(0.2) * math.exp(-half), math.sqrt(0.2) * math.exp(half)])
    assert r["p"] == pytest.approx(stats.ttest_1samp(logs, 0).pvalue) and r["p_holm"] == r["p"]  # one arm
    assert "ratio" not in result["arms"]["base"]["tokens_to_midpoint"]
    lines = screening.setting_lines(result, {"task": "mqar", "settings": {}})
    assert next(line for line in lines if line.startswith("- tokens to midpoint: ")).startswith(
        f"- tokens to midpoint: nlq 0.45x [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}], 55 % sooner, p "
    )
    runs = [run("nlq", 3, [0.4, 0.5, 0.55, 0.58, 0.59]) if (x.arm, x.seed) == ("nlq", 3) else x for x in hand_made()]
    bounded = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)["arms"]["nlq"]["tokens_to_midpoint"]
    assert bounded["ratio"] == {"ratio": None, "bounds": 1, "n": 2} and bounded["first"]["arm_first"] == 1


def test_a_ladder_is_each_setting_at_each_width_with_the_head_width_held(tmp_path, capsys):
    """--ladder=n_embd=8,16,32 on the tiny screen (its arms 16 wide, 2 heads: heads 8 wide): each setting at each
    width is a setting of its own (its own stage 1), 1, 2 and 4 heads, the width on its axis; the dry run gives
    each width's training FLOPs a token, the model's own count for that size (model.training_flops_per_token),
    and its hours scaled by it against the arms' own width."""
    command = [*tiny_screen(tmp_path), f"--out_root={tmp_path / 'R'}", "--ladder=n_embd=8,16,32", "--dry_run"]
    screen_main(command)
    out = capsys.readouterr().out
    args, _ = screen_lib.parser().parse_known_args(command)
    settings, _ = screen_lib.chosen_settings(args)
    assert [s.name for s in settings] == [f"{n}-n_embd={w}" for n in ("mq", "mq32") for w in (8, 16, 32)]
    assert [s.axis for s in settings[:3]] == [("n_embd", 8), ("n_embd", 16), ("n_embd", 32)]
    tune = [line for line in out.splitlines() if line.startswith("start") and "mq-n_embd=32/" in line]
    assert len(tune) == 4 and all("--n_embd=32 --n_head=4 " in line for line in tune)  # 2 arms x 2 rates
    for name, width in (("mq", 8), ("mq", 32), ("mq32", 16)):
        vocab = 16 if name == "mq" else 32
        flops = training_flops_per_token(GPTConfig(n_layer=1, n_head=width // 8, n_embd=width, vocab_size=vocab,
                                                   block_size=8, bias=False), 8)  # fmt: skip
        own = training_flops_per_token(GPTConfig(n_layer=1, n_head=2, n_embd=16, vocab_size=vocab, block_size=8,
                                                 bias=False), 8)  # fmt: skip
        line = next(x for x in out.splitlines() if x.startswith(f"  {name}-n_embd={width} "))
        assert f"(n_embd={width}, n_head={width // 8}): {flops:,.0f} training FLOPs a token" in line
        assert f"({flops / own:.2f}x the config's FLOPs a token)" in line


def test_the_ladder_figure_draws_accuracy_and_tokens_against_width_with_intervals_over_seeds(monkeypatch, tmp_path):
    """Zoology's figure, read back from its axes: per setting of the ladder, each arm's mean final accuracy
    (top) and geometric-mean tokens to the midpoint (bottom) against the width, both axes of sizes on a log
    scale, each point's bar the 95 % t interval over its two seeds (t 12.706, worked by hand here), the floor
    dashed and the midpoint dotted; no ladder, no figure."""
    drawn = []
    monkeypatch.setattr(screening, "save", lambda fig, path: drawn.append(fig))
    report = {"tasks": {}, "settings": {}}
    for width in (8, 16, 32):
        name = f"mq-n_embd={width}"
        report["tasks"][name] = {"task": "mqar", "settings": {}, "axis": ["n_embd", width]}
        arms = {}
        for arm, final, tokens in (("base", [0.5, 0.7], [400.0, 100.0]), ("nlq", [0.9, 0.9], [100.0, 100.0])):
            curves = {str(seed): [[0, 0.2], [100, acc + width / 1000]] for seed, acc in zip((2, 3), final)}
            arms[arm] = {"curves": curves, "tokens_to_midpoint": {"values": [t * width for t in tokens]}}
        report["settings"][name] = {"floor": {"token": 0.2}, "midpoint": 0.6, "arms": arms}
    assert screening.plot_ladder(report, tmp_path / "l.png")
    top, bottom = drawn[0].axes
    assert top.get_title() == "mq" and bottom.get_xlabel() == "n_embd"
    assert (top.get_xscale(), bottom.get_xscale(), bottom.get_yscale()) == ("log", "log", "log")
    # each arm's points: its errorbar's data line, and its bars
    lines = {(ax, c.get_label()): c.lines[0] for ax in (top, bottom) for c in ax.containers}
    bars = {(ax, c.get_label()): c.lines[2][0] for ax in (top, bottom) for c in ax.containers}
    assert list(lines[(top, "base")].get_xdata()) == [8, 16, 32]
    assert list(lines[(top, "base")].get_ydata()) == pytest.approx([0.6 + w / 1000 for w in (8, 16, 32)])
    assert list(lines[(bottom, "base")].get_ydata()) == pytest.approx(
        [200.0 * w for w in (8, 16, 32)]
    )  # sqrt(400 x 100)
    assert list(lines[(bottom, "nlq")].get_ydata()) == pytest.approx([100.0 * w for w in (8, 16, 32)])
    half = 12.706 * 0.2 / 2  # two seeds 0.2 apart: sd 0.2 / sqrt 2, over sqrt 2
    spans = {arm: [float(seg[1][1] - seg[0][1]) for seg in bars[(top, arm)].get_segments()] for arm in ("base", "nlq")}
    assert spans == {"base": pytest.approx([2 * half] * 3, rel=1e-3), "nlq": [0.0] * 3}  # nlq's seeds agree
    log_half = 12.706 * math.log(4) / math.sqrt(2) / math.sqrt(2)  # logs of 400 and 100: sd log 4 / sqrt 2
    ends = sorted(float(y) for y in bars[(bottom, "base")].get_segments()[0][:, 1])
    assert ends == pytest.approx([1600 * math.exp(-log_half), 1600 * math.exp(log_half)], rel=1e-3)
    styles = {
        line.get_linestyle(): line.get_ydata()[0] for line in top.get_lines() if line.get_linestyle() in ("--", ":")
    }
    assert styles == pytest.approx({"--": 0.2, ":": 0.6})
    assert not screening.plot_axes(report, tmp_path / "a.png")  # a ladder is not a difficulty axis
    report["tasks"] = {n: t | {"axis": []} for n, t in report["tasks"].items()}
    assert not screening.plot_ladder(report, tmp_path / "none.png") and len(drawn) == 1
