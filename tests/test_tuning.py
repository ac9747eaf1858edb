"""The fair comparison (tuning.py, sweep.py --grid, compare.py --tune): each arm's point is the argmin of its
stage-1 losses, stage 2 is reported alone on fresh seeds, Holm's adjustment, the budgets, the grid-edge
warnings and the figure's data, all against numbers worked out here by hand; then the sweep end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ARM, compare_main, error_of, sweep_main, tiny_args, train_main

from nlq.comparison import tuning
from nlq.comparison.compare import Run
from nlq.comparison.stats import holm
from nlq.comparison.sweep import Run as Planned

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=65, batch_size=2, gradient_accumulation_steps=1)


def fake(arm, stage, seed, lr, final, max_iters=8, **extra):
    """A run as compare reads it: its recorded config and an evaluation at step 0 and (unless final is
    None: it diverged) at max_iters."""
    config = dict(SHAPE, wandb_run_name=arm, wandb_group=f"R/{stage}", seed=seed, query_mode="linear")
    config.update(learning_rate=lr, max_iters=max_iters, **extra)
    records = [{"step": 0, "val_loss": 4.2}] + ([{"step": max_iters, "val_loss": final}] if final is not None else [])
    return Run(f"{arm}-{stage}-{lr}-s{seed}", config, records)


def test_holm_against_a_worked_example():
    # sorted: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the running 0.06; 0.5 capped at... x1
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": None}) == {"a": 0.03, "c": 0.06, "b": 0.06, "d": None}
    assert holm({"a": 0.4, "b": 0.6}) == {"a": 0.8, "b": 0.8}  # 0.4 x 2 = 0.8; 0.6 x 1 = 0.6 -> 0.8
    assert holm({"a": 0.7, "b": 0.9})["a"] == 1.0  # capped


def test_the_choice_is_the_argmin_of_the_mean_over_tune_seeds_and_a_diverged_run_is_the_worst():
    runs = [
        fake("base", "tune", 1, 1e-3, 3.0),
        fake("base", "tune", 2, 1e-3, 3.2),  # mean 3.1
        fake("base", "tune", 1, 3e-3, 2.9),
        fake("base", "tune", 2, 3e-3, 3.4),  # mean 3.15
        fake("nlq", "tune", 1, 1e-3, 3.1),
        fake("nlq", "tune", 2, 1e-3, 3.1),  # mean 3.1
        fake("nlq", "tune", 1, 3e-3, 2.5),
        fake("nlq", "tune", 2, 3e-3, None),  # diverged: the point counts as the worst, never chosen
    ]
    choice = tuning.choose(runs, ["learning_rate"])
    assert choice["base"]["chosen"] == {"learning_rate": 1e-3} and choice["nlq"]["chosen"] == {"learning_rate": 1e-3}
    rows = {r["point"]["learning_rate"]: r for r in choice["nlq"]["points"]}
    assert rows[3e-3]["diverged"] == 1 and rows[3e-3]["val_loss_mean"] == math.inf
    assert rows[1e-3]["val_loss_mean"] == pytest.approx(3.1)


def test_a_choice_at_an_end_of_the_grid_says_so():
    rows = [{"point": {"learning_rate": v, "weight_decay": w}} for v in (1e-4, 1e-3, 1e-2) for w in (0.0, 0.1)]
    assert tuning.at_grid_edge(rows, {"learning_rate": 1e-2, "weight_decay": 0.0}) == [
        "extend the grid: learning_rate=0.01 is the largest tried",
        "extend the grid: weight_decay=0.0 is the smallest tried",
    ]
    assert tuning.at_grid_edge(rows[:2], {"learning_rate": 1e-4, "weight_decay": 0.1}) == [
        "extend the grid: weight_decay=0.1 is the largest tried"
    ]  # one learning rate tried: no edge to speak of


def two_stage_runs():
    """Stage 1: base is best at 1e-3, nlq at 3e-3, wide at 3e-3; stage 2 on seeds 5, 6 at those points."""
    runs = []
    for arm, best in (("base", 1e-3), ("nlq", 3e-3), ("wide", 3e-3)):
        for lr in (1e-3, 3e-3):
            runs.append(fake(arm, "tune", 1, lr, 3.0 if lr == best else 3.5))
    finals = {"base": (3.00, 3.10), "nlq": (2.94, 3.05), "wide": (2.99, 3.11)}
    for arm, (a, b) in finals.items():
        lr = 1e-3 if arm == "base" else 3e-3
        runs += [fake(arm, "report", 5, lr, a), fake(arm, "report", 6, lr, b)]
    return runs


def test_the_report_is_of_stage_2_alone_against_the_baselines_tuned_point():
    result = tuning.report(two_stage_runs(), ["learning_rate"], "base")
    assert result["tune_seeds"] == [1] and result["seeds"] == [5, 6] and result["step"] == 8
    nlq = result["arms"]["nlq"]
    assert nlq["chosen"] == {"learning_rate": 3e-3} and nlq["n"] == 2
    assert nlq["val_loss_mean"] == pytest.approx((2.94 + 3.05) / 2)  # stage 2's losses only, not its 3.0 in stage 1
    assert nlq["improvement"] == pytest.approx((3.05 - 2.995) / 3.05)  # (base mean - arm mean) / base mean
    # paired by seed: differences 0.06 and 0.05, mean 0.055, sd 0.00707; t(1) 97.5 % = 12.706
    half = 12.706205 * (2 * 0.005**2) ** 0.5 / 2**0.5  # t x sd / sqrt(n), sd = sqrt(sum (d - mean)^2 / (n - 1))
    assert nlq["interval"] == pytest.approx([(0.055 - half) / 3.05, (0.055 + half) / 3.05], rel=1e-4)
    ps = {arm: result["arms"][arm]["p"] for arm in ("nlq", "wide")}
    assert {arm: result["arms"][arm]["p_holm"] for arm in ps} == pytest.approx(holm(ps))
    assert result["arms"]["base"]["p_holm"] is None and result["arms"]["base"]["improvement"] == 0
    # 2 tune runs of 8 steps x 2 rows x 16 tokens; FLOPs by GPT-2's count: 3 x (2 x weights + 4 L T d), with
    # weights the token table (tied, so the head) 65 x 16 and the block's 16 x 48 + 16 x 16 + 2 x 16 x 64
    weights = 65 * 16 + 16 * 48 + 16 * 16 + 2 * 16 * 64
    per_token = 3 * (2 * weights + 4 * 1 * 16 * 16)
    assert nlq["budget"] == {"runs": 2, "tokens": 2 * 256, "flops": 2 * 256 * per_token}
    assert nlq["at_grid_edge"] == ["extend the grid: learning_rate=0.003 is the largest tried"]
    lines = "\n".join(tuning.markdown(result))
    assert "| nlq | learning_rate=0.003 | 2.9950 ± 0.0778 | 2 |" in lines and "on fresh seeds [5, 6]" in lines
    json.dumps(result, allow_nan=False)  # machine-readable: no infinity or NaN


def test_a_stage_2_run_on_a_tune_seed_or_without_the_baseline_is_refused():
    runs = two_stage_runs() + [fake("nlq", "report", 1, 3e-3, 2.9)]
    with pytest.raises(tuning.TuningError, match="reports seed 1, a tune seed: a choice reported on the seeds"):
        tuning.report(runs, ["learning_rate"], "base")
    without_base = [r for r in two_stage_runs() if not (r.arm == "base" and tuning.stage_of(r) == "report")]
    with pytest.raises(tuning.TuningError, match="the baseline 'base' has no stage-2 runs"):
        tuning.report(without_base, ["learning_rate"], "base")
    longer = two_stage_runs() + [fake("wide", "report", 7, 3e-3, 3.0, max_iters=16)]
    with pytest.raises(tuning.TuningError, match=r"train for different lengths \(\[8, 16\] steps\)"):
        tuning.report(longer, ["learning_rate"], "base")
    off_point = two_stage_runs() + [fake("wide", "report", 7, 1e-3, 3.0)]
    with pytest.raises(tuning.TuningError, match="is not at wide's chosen point"):
        tuning.report(off_point, ["learning_rate"], "base")


def test_the_figures_data_from_hand_made_runs():
    data = tuning.figure_data(tuning.report(two_stage_runs(), ["learning_rate"], "base"))
    curve = data["curves"]["learning_rate"]["nlq"]
    assert curve["values"] == [1e-3, 3e-3] and curve["mean"] == [3.5, 3.0] and curve["chosen"] == 3e-3
    assert curve["low"] == curve["high"] == [3.5, 3.0]  # one tune seed: no spread
    gain, interval = data["improvement"]["wide"]
    assert gain == pytest.approx((3.05 - 3.05) / 3.05) and interval is not None
    # the loss axis: lowest loss to the upper quartile of the 6 means (3.0 x 3, 3.5 x 3): position
    # 1 + 0.75 x 5 = 4.75 of the sorted means, between 3.5 and 3.5
    assert data["span"]["learning_rate"] == (3.0, 3.5)


def test_a_learning_rate_that_blew_up_does_not_set_the_figures_loss_axis():
    """wide at 1e-2 ends at 9.0 (near the loss at initialisation): the sorted means 3, 3, 3, 3.5, 3.5, 3.5, 9
    have their upper quartile at position 1 + 0.75 x 6 = 5.5, between 3.5 and 3.5, so the axis stops at 3.5
    and the 9.0 is drawn at the top edge rather than flattening the curves near their optima."""
    runs = two_stage_runs() + [fake("wide", "tune", 1, 1e-2, 9.0)]
    data = tuning.figure_data(tuning.report(runs, ["learning_rate"], "base"))
    assert data["curves"]["learning_rate"]["wide"]["mean"] == [3.5, 3.0, 9.0]
    assert data["span"]["learning_rate"] == (3.0, 3.5)


def arms(tmp_path, data):
    (tmp_path / "mini_base.py").write_text(ARM.format(data=str(data)))
    (tmp_path / "mini_nlq.py").write_text(ARM.format(data=str(data)) + 'query_mode = "residual_gelu"\n')
    return [str(tmp_path / "mini_base.py"), str(tmp_path / "mini_nlq.py")]


@pytest.mark.parametrize(
    "options, words",
    [
        (["--grid=lerning_rate=1e-3"], "no config has a key 'lerning_rate'"),
        (["--grid=data_seed=1,2"], "data_seed cannot be a grid key: it changes the data order"),
        (["--grid=learning_rate="], "give the key's values once each"),
        (["--grid=learning_rate=1e-3,1e-3"], "give the key's values once each"),
        (["--grid=learning_rate=-1,1e-3", "--tune_seeds=9"], "learning_rate=-1.0 is invalid"),
        (["--grid=learning_rate=1e-3", "--seeds=1,2"], "--tune_seeds=S go together"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=2", "--seeds=2,3"], "--tune_seeds and --seeds share [2]"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=9", "--tune_iters=8"], "--tune_iters=8: give a number"),
        (["--executor=slurm", "--slurm_gpus=8"], "trains on one GPU of each job"),
        (["--executor=submitit_local", "--slurm_partition=gpu"], "is an option of --executor=slurm"),
        (["--executor=slurm", "--gpus=0,1"], "the scheduler places jobs"),
        (["--executor=slurm", "--slurm_gpus=1", "--slurm_time=0"], "--slurm_time=0: give a number >= 1"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=9", "--tune_iters=0"], "--tune_iters=0: give stage 1's number"),
        (["--grid=device=cpu,cuda", "--tune_seeds=9"], "device is not a tuning choice"),
        (["--grid=eval_only=True,False", "--tune_seeds=9"], "eval_only is not a tuning choice"),
        (["--grid=dry_run=0,1", "--tune_seeds=9"], "dry_run is not a tuning choice"),
        (["--grid=eval_part=first,second", "--tune_seeds=9"], "eval_part cannot be a grid key: the sweep sets it"),
        (["--grid=lr_decay_iters=4,8", "--tune_seeds=9", "--tune_iters=4"], "drop one of them"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=9", "--json=/proc/r.json"], "does not take new files"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=9", "--png=/no/such/dir/f.png"], "does not exist"),
        (["--md=/tmp"], "is a directory"),
        (["--grid=learning_rate=1e-3", "--tune_seeds=9", "--metric=val_acc"], "a token dataset; accuracy is measured"),
    ],
)
def test_bad_grids_and_executor_options_are_one_line_and_start_nothing(char_data, tmp_path, options, words):
    base, nlq = arms(tmp_path, char_data)
    root = tmp_path / "R"
    assert words in error_of([base, nlq, f"--out_root={root}", *options], main=sweep_main)
    assert not root.exists()


def final(run_dir) -> float:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r["val_loss"] for r in map(json.loads, lines) if r.get("step") == 8 and "val_loss" in r][-1]


def test_a_two_stage_sweep_end_to_end_chooses_reports_fresh_seeds_and_continues(char_data, tmp_path, capsys):
    base, nlq = arms(tmp_path, char_data)
    root = tmp_path / "R"
    command = [base, nlq, "--grid=learning_rate=1e-3,1e-2", "--tune_seeds=1", "--seeds=2,3", f"--out_root={root}"]
    command += [f"--json={root / 'result.json'}", f"--md={root / 'table.md'}", f"--png={root / 'lr.png'}"]
    sweep_main(command)
    result = json.loads((root / "result.json").read_text())
    best = {}
    for arm in ("base", "nlq"):  # the argmin of stage 1, read here from its runs' own logs
        losses = {lr: final(root / f"tune-{arm}-learning_rate={lr}-s1") for lr in ("1e-3", "1e-2")}
        best[arm] = min(losses, key=losses.get)
        assert result["arms"][arm]["chosen"] == {"learning_rate": float(best[arm])}
        for seed in (2, 3):
            assert (root / f"{arm}-learning_rate={best[arm]}-s{seed}" / "ckpt.pt").is_file()
        assert result["arms"][arm]["n"] == 2
    assert result["seeds"] == [2, 3] and result["tune_seeds"] == [1]
    assert (root / "lr.png").stat().st_size > 0 and "| nlq |" in (root / "table.md").read_text()
    # each seed its own data order and windows, shared by every arm of that seed; stage 1 chooses on the first
    # half of the validation split, stage 2 reports on the second
    assert result["batches"].startswith("the runs of each seed trained on identical batches (3 seeds")
    for run_dir in root.iterdir():
        if run_dir.is_dir():
            config = json.loads((run_dir / "config.json").read_text())
            assert config["data_seed"] == 1337 + config["seed"]
            assert config["eval_part"] == ("first" if run_dir.name.startswith("tune-") else "second")
    # A crash before one stage-2 run ended: the same command runs that run alone, and the result is the same.
    subprocess.run(["rm", "-rf", str(root / f"nlq-learning_rate={best['nlq']}-s3")], check=True)
    capsys.readouterr()
    sweep_main(command)
    out = capsys.readouterr().out
    assert out.count("start  ") == 1 and f"start nlq learning_rate={best['nlq']} seed 3 (missing)" in out
    again = json.loads((root / "result.json").read_text())
    assert again["arms"]["nlq"]["chosen"] == result["arms"]["nlq"]["chosen"]
    # compare.py alone redoes it from the directories, as for a sweep run by other means
    done = subprocess.run(
        [sys.executable, ROOT / "compare.py", *map(str, root.iterdir()), "--tune=learning_rate", "--png=",
         f"--json={tmp_path / 'again.json'}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "again.json").read_text()) == again


def test_the_submitit_path_runs_both_stages_as_jobs_and_a_rerun_submits_nothing(char_data, tmp_path, capsys):
    """--executor=submitit_local: the path a SLURM sweep takes (job arrays through submitit), on this machine.
    Each stage is submitted as jobs, the choice is the argmin read here from the runs' logs, and the same
    command again submits nothing."""
    pytest.importorskip("submitit")
    base, nlq = arms(tmp_path, char_data)
    root = tmp_path / "R"
    command = [base, nlq, "--grid=learning_rate=1e-3,1e-2", "--tune_seeds=1", "--seeds=2", f"--out_root={root}"]
    command += ["--executor=submitit_local", f"--json={root / 'result.json'}", "--png=", "--progress_every=1"]
    sweep_main(command)
    out = capsys.readouterr().out
    assert out.count("submitted job") == 6  # 2 arms x 2 points x 1 tune seed, then 2 arms x 1 fresh seed
    result = json.loads((root / "result.json").read_text())
    for arm in ("base", "nlq"):
        losses = {lr: final(root / f"tune-{arm}-learning_rate={lr}-s1") for lr in ("1e-3", "1e-2")}
        best = min(losses, key=losses.get)
        assert result["arms"][arm]["chosen"] == {"learning_rate": float(best)}
        assert (root / f"{arm}-learning_rate={best}-s2" / "ckpt.pt").is_file()
        assert "step 8: val loss" in (root / f"{arm}-learning_rate={best}-s2" / "train.log").read_text()
    assert set(json.loads((root / "submitit" / "jobs.json").read_text())) == {
        p.name for p in root.iterdir() if (p / "metrics.jsonl").exists()
    }
    sweep_main(command)
    assert "submitted job" not in capsys.readouterr().out


def test_the_report_does_not_depend_on_the_order_of_the_runs():
    """Runs listed in any order (as a shell glob, wandb or a hand give them) give the same choice, pairs and
    numbers: stage 2's seeds are paired by seed, not by position."""
    import random

    runs = two_stage_runs()
    expected = tuning.report(runs, ["learning_rate"], "base")
    for seed in range(5):
        shuffled = runs[:]
        random.Random(seed).shuffle(shuffled)
        assert tuning.report(shuffled, ["learning_rate"], "base") == expected


def test_the_two_stage_report_warns_when_runs_saw_different_batches(tmp_path, capsys):
    """compare.py --tune checks the batch fingerprints of both stages, as the one-stage table does."""
    for run in two_stage_runs():
        d = tmp_path / run.name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(run.config))
        prints = ["a", "b", "X" if run.name == "nlq-report-0.003-s6" else "c"]
        steps = [{"step": s, "loss": 3.0, "fingerprint": f} for s, f in enumerate(prints)]
        evals = [run.evals[s] for s in sorted(run.evals)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps + evals))
    compare_main([*map(str, tmp_path.iterdir()), "--tune=learning_rate", "--baseline=base", "--png="])
    assert "WARNING: the runs trained on different batches (first at step 2" in capsys.readouterr().out


def test_compare_tunes_over_two_grid_keys_given_as_a_list(tmp_path):
    """compare.py --tune='learning_rate, weight_decay' (a space after the comma, as typed): each arm's point
    is the argmin over both keys, and stage 2 is read at that point."""
    best = {"base": (1e-3, 0.1), "nlq": (3e-3, 0.0)}
    runs = []
    for arm, point in best.items():
        for lr in (1e-3, 3e-3):
            for wd in (0.0, 0.1):
                runs.append(fake(arm, "tune", 1, lr, 3.0 if (lr, wd) == point else 3.4, weight_decay=wd))
        runs += [fake(arm, "report", s, point[0], 3.0 - 0.02 * (arm == "nlq") + 0.01 * s, weight_decay=point[1])
                 for s in (5, 6)]  # fmt: skip
    for run in runs:
        d = tmp_path / "runs" / run.name.replace(".", "_") / f"wd{run.config['weight_decay']}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(run.config))
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run.evals.values()))
    out = tmp_path / "result.json"
    dirs = [str(p) for p in sorted((tmp_path / "runs").glob("*/*"))]
    compare_main([*dirs, "--tune=learning_rate, weight_decay", "--baseline=base", f"--json={out}", "--png="])
    arms = json.loads(out.read_text())["arms"]
    for arm, (lr, wd) in best.items():
        assert arms[arm]["chosen"] == {"learning_rate": lr, "weight_decay": wd}
    assert arms["nlq"]["val_loss_mean"] == pytest.approx(2.98 + 0.055)


def test_compare_tune_refuses_two_sweeps_or_a_copy_and_warns_of_a_key_not_varied():
    runs = two_stage_runs()
    other = fake("base", "report", 7, 1e-3, 3.0)
    other.config["wandb_group"] = "S/report"  # another sweep's run
    with pytest.raises(tuning.TuningError, match="the runs come from 2 sweeps"):
        tuning.report(runs + [other], ["learning_rate"], "base")
    copy = fake("nlq", "report", 5, 3e-3, 2.94)
    copy.name = "elsewhere/nlq-report-0.003-s5"
    with pytest.raises(tuning.TuningError, match="are the same run .arm nlq, stage report, seed 5"):
        tuning.report(runs + [copy], ["learning_rate"], "base")
    for r in runs:
        r.config["weight_decay"] = 0.1
    lines = tuning.markdown(tuning.report(runs, ["learning_rate", "weight_decay"], "base"))
    assert "warning: no run varies weight_decay (every run has weight_decay=0.1): nothing was tuned over it" in lines
    assert "each arm at the learning_rate, weight_decay that stage 1 chose" in lines[0]  # two keys, as typed
    assert any(line.startswith("| nlq | learning_rate=0.003, weight_decay=0.1 |") for line in lines)


def test_an_arm_whose_every_grid_point_diverged_stops_the_comparison_with_what_to_try():
    runs = [r for r in two_stage_runs() if not (r.arm == "nlq" and tuning.stage_of(r) == "tune")]
    runs += [fake("nlq", "tune", 1, lr, None) for lr in (1e-3, 3e-3)]
    with pytest.raises(tuning.TuningError) as e:
        tuning.report(runs, ["learning_rate"], "base")
    assert str(e.value) == (
        "every grid point of nlq diverged or did not finish in stage 1 (2 points): nothing to choose; add smaller "
        "learning rates to the grid (or check its runs' train.log), then run again"
    )


def test_a_finished_run_that_lost_its_last_evaluation_or_config_is_restored_by_a_rerun(char_data, tmp_path):
    """A kill between the last checkpoint and its record, or a copy that missed config.json: the run's sweep
    status is unfinished, and the rerun (init_from=auto) restores both without training a step."""
    run = tmp_path / "r"
    args = tiny_args(char_data, run, init_from="auto")
    train_main(args)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    final = [r for r in records if r.get("step") == 8 and "val_loss" in r][-1]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r != final))
    (run / "config.json").unlink()
    assert Planned("a", 1, "c.py", run, 8).status() == "unfinished"
    train_main(args)
    restored = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in restored if r.get("step") == 8 and "val_loss" in r] == [final]  # recomputed: the same
    assert len(restored) == len(records)  # nothing trained again: no step's record added
    assert json.loads((run / "config.json").read_text())["max_iters"] == 8
    assert Planned("a", 1, "c.py", run, 8).status() == "finished"


def test_a_budget_counts_every_factor_of_the_tokens_each_run_spends():
    """Two tune runs of other shapes: 16 positions x 3 rows x 5 micro-steps x 7 steps = 1,680 tokens and
    32 x 2 x 1 x 11 = 704; FLOPs each at its own context (GPT-2's count: 3 x (2 x weights + 4 L T d)), the
    weights being the tied token table 65 x 16 and the block's 16 x 48 + 16 x 16 + 2 x 16 x 64."""
    a = fake("nlq", "tune", 1, 1e-3, 3.0, max_iters=7, batch_size=3, gradient_accumulation_steps=5)
    b = fake("nlq", "tune", 2, 1e-3, 3.0, max_iters=11, block_size=32)
    weights = 65 * 16 + 16 * 48 + 16 * 16 + 2 * 16 * 64
    per_token = {T: 3 * (2 * weights + 4 * 1 * T * 16) for T in (16, 32)}
    assert tuning.budget([a, b]) == {
        "runs": 2,
        "tokens": 1_680 + 704,
        "flops": 1_680 * per_token[16] + 704 * per_token[32],
    }


def test_the_figure_draws_each_arms_curve_its_choice_the_points_off_the_axis_and_stage_two(monkeypatch):
    """two_stage_runs with wide's 1e-2 blown up (9.0). Stage 1's panel: per arm, in sorted order and the colour
    cycle's order, its means at 1e-3, 3e-3 (and 1e-2), its spread filled in its colour, its chosen point ringed,
    and 9.0 drawn as a triangle at the axis's top: the span 3.0-3.5 padded by 8 % of 0.5 (0.04) each side. The
    learning rate is on a log axis with the rates as ticks. Stage 2's panel: each arm's improvement in % at
    x = 0, 1, 2 with its 95 % interval as error bars, a grey line at 0."""
    import matplotlib.colors as mcolors

    from nlq.common import figures

    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.update(fig=fig, path=path))
    result = tuning.report(two_stage_runs() + [fake("wide", "tune", 1, 1e-2, 9.0)], ["learning_rate"], "base")
    tuning.plot(result, "figure.png")
    fig = drawn["fig"]
    assert drawn["path"] == "figure.png" and tuple(fig.get_size_inches()) == pytest.approx((11.0, 4.2))
    stage1, stage2 = fig.axes
    means = {"base": [3.0, 3.5], "nlq": [3.5, 3.0], "wide": [3.5, 3.0, 9.0]}
    colours = {arm: f"C{i}" for i, arm in enumerate(sorted(means))}
    lines = {line.get_label(): line for line in stage1.get_lines()}
    for arm, ys in means.items():
        line = lines[arm]
        rates = [1e-3, 3e-3, 1e-2][: len(ys)]
        assert list(line.get_xdata()) == rates and list(line.get_ydata()) == ys and line.get_marker() == "o"
        assert mcolors.same_color(line.get_color(), colours[arm])
        ring = [
            x
            for x in stage1.get_lines()
            if x.get_markersize() == 12 and mcolors.same_color(x.get_color(), colours[arm])
        ]
        assert len(ring) == 1 and list(ring[0].get_xdata()) == [result["arms"][arm]["chosen"]["learning_rate"]]
        assert list(ring[0].get_ydata()) == [3.0] and ring[0].get_markerfacecolor() == "none"
        off = [
            x for x in stage1.get_lines() if x.get_marker() == "^" and mcolors.same_color(x.get_color(), colours[arm])
        ]
        assert len(off) == 1 and off[0].get_markersize() == 9 and not off[0].get_clip_on()
        assert list(off[0].get_xdata()) == ([1e-2] if arm == "wide" else [])
        assert list(off[0].get_ydata()) == pytest.approx([3.54] if arm == "wide" else [])
    fills = stage1.collections
    assert len(fills) == 3 and all(f.get_alpha() == pytest.approx(0.15) for f in fills)
    assert [mcolors.to_hex(f.get_facecolor()[0][:3]) for f in fills] == [mcolors.to_hex(c) for c in colours.values()]
    assert stage1.get_ylim() == pytest.approx((2.96, 3.54))
    assert stage1.get_xscale() == "log" and list(stage1.get_xticks()) == [1e-3, 3e-3, 1e-2]
    assert [t.get_text() for t in stage1.get_xticklabels()] == ["0.001", "0.003", "0.01"]
    assert stage1.get_xlabel() == "learning_rate" and stage1.get_ylabel() == "final val loss (▲: above the axis)"
    assert stage1.get_title() == "stage 1: val loss against learning_rate (tune seeds)"
    assert [t.get_text() for t in stage1.get_legend().get_texts()] == ["base", "nlq", "wide"]
    for i, (arm, bars) in enumerate(zip(["base", "nlq", "wide"], stage2.containers)):
        gain, interval = result["arms"][arm]["improvement"], result["arms"][arm]["interval"]
        point, caps, bar = bars.lines
        assert list(point.get_xdata()) == [i] and list(point.get_ydata()) == pytest.approx([gain * 100])
        if interval is None:
            assert arm == "base" and caps == () and bar == ()
            continue
        (segments,) = bar
        assert [c.get_markersize() for c in caps] == [8, 8]  # capsize 4: a cap marker twice as wide
        (low, high) = segments.get_segments()[0]
        assert [low[1], high[1]] == pytest.approx([interval[0] * 100, interval[1] * 100])
    (zero,) = stage2.get_lines()[-1:]
    assert (
        list(zero.get_ydata()) == [0, 0]
        and mcolors.same_color(zero.get_color(), "grey")
        and zero.get_linewidth() == 0.8
    )
    assert [t.get_text() for t in stage2.get_xticklabels()] == ["base", "nlq", "wide"]
    assert all(t.get_rotation() == 30 for t in stage2.get_xticklabels())
    assert stage2.get_ylabel() == "improvement over tuned base (%)"
    assert stage2.get_title() == "stage 2: fresh seeds, 95 % interval"


def hand_result(metric="val_acc"):
    """A report's dict written here, not computed: three arms at points of a 3-rate grid, one with a tune run
    that did not finish, one tied in stage 1 with its runner-up, one ahead of its runner-up within the noise,
    one with a larger tuning budget."""
    key = f"{metric}_mean"

    def arm(lr, mean, std, n, gain, interval, p, p_holm, runs, tokens, flops, **extra):
        rows = [{"point": {"learning_rate": x}, "values": [0.5], key: 0.5, "diverged": 0} for x in (1e-3, 2e-3, 4e-3)]
        return {
            "chosen": {"learning_rate": lr}, "n": n, key: mean, f"{metric}_std": std, "improvement": gain,
            "interval": interval, "p": p, "test": "paired t" if p is not None else "", "p_holm": p_holm,
            "budget": {"runs": runs, "tokens": tokens, "flops": flops}, "at_grid_edge": [], "margin": None,
            "stage1": rows,
        } | extra  # fmt: skip

    nlq_rows = arm(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)["stage1"]
    nlq_rows[2] = {"point": {"learning_rate": 4e-3}, "values": [0.9, None], key: None, "diverged": 1}
    return {
        "baseline": "base", "metric": metric, "keys": ["learning_rate"], "step": 100, "tune_seeds": [1],
        "seeds": [2, 3], "warnings": ["warning: no run varies weight_decay (every run has weight_decay=0.1)"],
        "arms": {
            "base": arm(1e-3, 0.5, 0.1, 2, 0.0, None, None, None, 3, 1000, 2.5e6),
            "nlq": arm(
                4e-3, 0.9, None, 1, 0.4, [0.1, 0.7], 0.0123, 0.0246, 3, 1000, 2.5e6, stage1=nlq_rows,
                at_grid_edge=["extend the grid: learning_rate=0.004 is the largest tried"],
                margin={"runner_up": {"learning_rate": 2e-3}, "margin": 0.0, "noise": 0.05, "within_noise": True},
            ),
            "wide": arm(
                2e-3, 0.45, 0.05, 2, -0.05, [-0.2, 0.1], 0.5, 0.5, 4, 1500, 3.75e6,
                margin={"runner_up": {"learning_rate": 1e-3}, "margin": 0.02, "noise": 0.05, "within_noise": True},
            ),
        },
    }  # fmt: skip


def test_the_stage_2_table_its_warnings_and_notes_read_as_written_here():
    """markdown() of hand_result, line for line: the arms worst first (an accuracy: lowest first), each
    number in its format (points with a sign, a dash where there is none), the budgets' warning, the grid
    edge, the tie, the choice within the noise, the unfinished tune run, then the result's own warnings."""
    assert tuning.markdown(hand_result()) == [
        "stage 2: test accuracy per scored token at step 100 on fresh seeds [2, 3], each arm at the learning_rate "
        "that stage 1 chose on seeds [1]; improvement over base's tuned point (in points; positive: higher "
        "accuracy), its 95 % interval and t-test p, and p adjusted for the arms compared (Holm)",
        "",
        "| arm | chosen | accuracy | n | vs tuned baseline | 95 % interval | p | p (Holm) "
        "| tuning: runs, tokens, FLOPs |",
        "|---|---|---|---|---|---|---|---|---|",
        "| wide | learning_rate=0.002 | 0.4500 ± 0.0500 | 2 | -5.00 pts | [-20.00 pts, +10.00 pts] | 0.5 (paired t) "
        "| 0.5 | 4, 1,500, 3.75e+06 |",
        "| base | learning_rate=0.001 | 0.5000 ± 0.1000 | 2 | +0.00 pts | — | — | — | 3, 1,000, 2.5e+06 |",
        "| nlq | learning_rate=0.004 | 0.9000 | 1 | +40.00 pts | [+10.00 pts, +70.00 pts] | 0.0123 (paired t) "
        "| 0.0246 | 3, 1,000, 2.5e+06 |",
        "",
        "warning: the arms' tuning budgets differ (runs, tokens): the comparison is not on equal terms",
        "warning: nlq: extend the grid: learning_rate=0.004 is the largest tried",
        "note: nlq: its choice tied with learning_rate=0.002 in stage 1 (the lower validation loss decided)",
        "note: nlq: 1 of 2 tune runs at {'learning_rate': 0.004} did not finish (counted as the worst value)",
        "note: wide: its choice was 0.02 ahead of learning_rate=0.001 in stage 1, within the spread of its stage-2 "
        "seeds (0.05): the two points are not told apart",
        "warning: no run varies weight_decay (every run has weight_decay=0.1)",
    ]


def test_a_loss_table_is_relative_highest_loss_first_and_a_one_point_grid_says_nothing_was_tuned():
    """The same hand-made report as a validation loss (lower is better): the gains read as percentages of
    the baseline, the arms from the highest loss (base 0.5 > wide 0.45; nlq 0.9 is the highest), budgets
    alike, no margin worth a note, and every arm's stage 1 a single point."""
    result = hand_result("val_loss")
    for r in result["arms"].values():
        r.update(budget={"runs": 3, "tokens": 1000, "flops": 2.5e6}, at_grid_edge=[], stage1=r["stage1"][:1])
        r["margin"] = r["margin"] and r["margin"] | {"within_noise": False}
    result["warnings"] = []
    assert tuning.arm_order(result) == ["nlq", "base", "wide"]
    lines = tuning.markdown(result)
    assert "(relative; positive: lower loss)" in lines[0] and lines[0].startswith("stage 2: validation loss at")
    assert lines[2].split(" | ")[2] == "val loss"
    assert lines[4:] == [
        "| nlq | learning_rate=0.004 | 0.9000 | 1 | +40.00% | [+10.00%, +70.00%] | 0.0123 (paired t) | 0.0246 "
        "| 3, 1,000, 2.5e+06 |",
        "| base | learning_rate=0.001 | 0.5000 ± 0.1000 | 2 | +0.00% | — | — | — | 3, 1,000, 2.5e+06 |",
        "| wide | learning_rate=0.002 | 0.4500 ± 0.0500 | 2 | -5.00% | [-20.00%, +10.00%] | 0.5 (paired t) | 0.5 "
        "| 3, 1,000, 2.5e+06 |",
        "note: the grid has one point: nothing was tuned",
    ]


ACC = tuning.METRICS["val_acc"]


def fake_acc(arm, stage, seed, lr, acc, loss=3.0, max_iters=8, **extra):
    """fake() with a test accuracy at its last step (None: the record holds none)."""
    run = fake(arm, stage, seed, lr, loss, max_iters, **extra)
    if acc is not None:
        run.evals[max_iters]["val_acc"] = acc
    return run


@pytest.mark.parametrize(
    "group, stage",
    [("screen/recall/tune", "tune"), ("R/report", "report"), ("tune", "tune"), ("R/other", None), ("", None),
     (None, None)],
)  # fmt: skip
def test_a_runs_stage_is_the_last_part_of_its_group_and_nothing_else(group, stage):
    run = fake("base", "tune", 1, 1e-3, 3.0)
    run.config["wandb_group"] = group
    assert tuning.stage_of(run) == stage


def test_one_sweep_is_one_group_before_its_stage_and_each_refusal_names_the_runs():
    """screen/recall and screen/mqar are two sweeps (the part before the stage is the whole sweep's name, not
    its first word); a run with no group is '(none)'; a copy names the run it repeats; one run's key is not
    varied."""
    a, b, c = fake("base", "tune", 1, 1e-3, 3.0), fake("base", "report", 2, 1e-3, 3.0), fake("nlq", "tune", 1, 1e-3, 3)
    a.config["wandb_group"], b.config["wandb_group"], c.config["wandb_group"] = (
        "screen/recall/tune",
        "screen/mqar/report",
        None,
    )
    with pytest.raises(tuning.TuningError) as e:
        tuning.check_one_sweep([a, b, c], ["learning_rate"])
    assert str(e.value) == (
        f"the runs come from 3 sweeps (screen/recall: e.g. {a.name}; screen/mqar: e.g. {b.name}; (none): e.g. "
        f"{c.name}): compare one sweep's runs at a time"
    )
    first, copy = fake("nlq", "report", 5, 3e-3, 2.94), fake("nlq", "report", 5, 3e-3, 2.94)
    copy.name = "elsewhere/nlq"
    with pytest.raises(tuning.TuningError) as e:
        tuning.check_one_sweep([first, copy], ["learning_rate"])
    assert str(e.value) == (
        f"{first.name} and elsewhere/nlq are the same run (arm nlq, stage report, seed 5, {{'learning_rate': "
        "0.003}): a copy of a sweep's directory? give each run once"
    )
    assert tuning.check_one_sweep([first], ["learning_rate"]) == [
        "warning: no run varies learning_rate (every run has learning_rate=0.003): nothing was tuned over it"
    ]


def test_a_grid_key_a_run_does_not_record_is_named():
    run = fake("base", "tune", 1, 1e-3, 3.0)
    with pytest.raises(tuning.TuningError) as e:
        tuning.point_of(run, ["learning_rate", "warmup", "beta9"])
    assert str(e.value) == f"{run.name} records no warmup, beta9: not a key of its config"


def test_a_grid_sorts_numbers_first_then_the_rest_by_name_and_a_tie_goes_to_the_first():
    """A grid may hold numbers, None (train.py's default) and names. All four points end at 3.0: the rows go
    6e-5, 1e-4 (numbers, by value, not as text), then None, 'cos' ('None' < 'cos'), and the choice is the
    first, 6e-5. A loss that ties needs nothing more to decide."""
    runs = [fake("base", "tune", 1, 1e-3, 3.0, min_lr=v) for v in ("cos", 1e-4, None, 6e-5)]
    choice = tuning.choose(runs, ["min_lr"])["base"]
    assert [row["point"]["min_lr"] for row in choice["points"]] == [6e-5, 1e-4, None, "cos"]
    assert choice["chosen"] == {"min_lr": 6e-5}


def test_an_accuracy_tie_goes_to_the_lower_loss_and_every_refusal_reads_the_accuracy():
    """Two rates at accuracy 1.0: the one with the lower final loss (2.0 against 2.5) is chosen, the later
    one in grid order. A stage-2 run whose last record has a loss but no accuracy did not finish, read by
    the accuracy; so does a NaN loss on the loss."""
    tune = [fake_acc("base", "tune", 1, 1e-3, 1.0, loss=2.5), fake_acc("base", "tune", 1, 2e-3, 1.0, loss=2.0)]
    choice = tuning.choose(tune, ["learning_rate"], ACC)["base"]
    assert choice["chosen"] == {"learning_rate": 2e-3}
    assert [row["val_loss_mean"] for row in choice["points"]] == [2.5, 2.0]
    fresh = [fake_acc("base", "report", 2, 2e-3, 0.9), fake_acc("base", "report", 3, 2e-3, None)]
    with pytest.raises(tuning.TuningError) as e:
        tuning.report(tune + fresh, ["learning_rate"], "base", ACC)
    assert str(e.value) == f"{fresh[1].name} did not reach its last step: finish (or rerun) it before reporting"
    assert tuning.final_value(fresh[1], ACC) == -math.inf
    assert tuning.final_value(fake("base", "report", 3, 2e-3, math.nan)) == math.inf
    unfinished = fake_acc("base", "tune", 1, 4e-3, None, loss=None)  # its point's accuracy is -inf: JSON's None
    result = tuning.report([*tune, unfinished, fresh[0]], ["learning_rate"], "base", ACC)
    assert result["arms"]["base"]["stage1"][2]["val_acc_mean"] is None
    json.dumps(result, allow_nan=False)


def test_stage_2_refusals_say_what_is_wrong_and_what_to_do():
    runs = two_stage_runs()
    with pytest.raises(tuning.TuningError) as e:
        tuning.report([r for r in runs if tuning.stage_of(r) == "tune"], ["learning_rate"], "base")
    assert str(e.value) == (
        "6 stage-1 (tune) and 0 stage-2 (report) runs: a two-stage comparison needs both (their wandb_group ends "
        "in /tune or /report, as sweep.py --grid sets it)"
    )
    stray = fake("other", "report", 5, 1e-3, 3.0)
    with pytest.raises(tuning.TuningError) as e:
        tuning.report(runs + [stray], ["learning_rate"], "base")
    assert str(e.value) == "other has stage-2 runs but no stage-1 runs: its point was chosen elsewhere"
    on_tune_seed = fake("nlq", "report", 1, 3e-3, 2.9)
    with pytest.raises(tuning.TuningError) as e:
        tuning.report(runs + [on_tune_seed], ["learning_rate"], "base")
    assert str(e.value) == (
        f"{on_tune_seed.name} reports seed 1, a tune seed: a choice reported on the seeds that made it is biased "
        "in its favour; report on fresh seeds"
    )


def test_a_report_on_one_fresh_seed_has_no_spread_and_its_baseline_no_test():
    runs = [r for r in two_stage_runs() if r.seed != 6]
    arms = tuning.report(runs, ["learning_rate"], "base")["arms"]
    assert arms["nlq"]["val_loss_std"] is None and arms["nlq"]["margin"] is None
    assert (arms["base"]["p"], arms["base"]["test"], arms["base"]["interval"]) == (None, "", None)


def test_the_margin_is_the_choices_lead_over_the_runner_up_against_the_stage_2_spread():
    """Accuracy: chosen 0.90, runner-up 0.85 (0.70 is further, -inf diverged): 0.05 ahead, against the
    standard deviation of 0.88 and 0.92, 0.02 x sqrt(2) = 0.0283: told apart. Loss: 2.0 chosen, 3.0 next, a
    lead of 1.0 against stage 2's 1.0, 2.0, 3.0 (sd exactly 1.0): within the noise, the edge included."""
    points = [(1, 0.70), (2, 0.90), (4, 0.85), (8, -math.inf)]
    choice = {"chosen": {"lr": 2}, "points": [{"point": {"lr": x}, "val_acc_mean": m} for x, m in points]}
    assert tuning.margin(choice, [0.88, 0.92], ACC) == {
        "runner_up": {"lr": 4},
        "margin": pytest.approx(0.05),
        "noise": pytest.approx(0.02 * 2**0.5),
        "within_noise": False,
    }
    loss = {"chosen": {"lr": 1}, "points": [{"point": {"lr": 1}, "val_loss_mean": 2.0}, {"point": {"lr": 2},
            "val_loss_mean": 3.0}, {"point": {"lr": 4}, "val_loss_mean": 5.0}]}  # fmt: skip
    assert tuning.margin(loss, [1.0, 2.0, 3.0], tuning.LOSS) == {
        "runner_up": {"lr": 2}, "margin": 1.0, "noise": 1.0, "within_noise": True
    }  # fmt: skip
    assert tuning.margin(loss, [1.0], tuning.LOSS) is None  # one stage-2 run: no spread
    assert tuning.margin({"chosen": {"lr": 1}, "points": loss["points"][:1]}, [1.0, 2.0], tuning.LOSS) is None


def test_finite_writes_what_json_cannot_hold_as_none():
    row = {"point": {"lr": 1}, "values": [3.0, math.inf], "val_loss_mean": math.inf, "diverged": 1}
    assert tuning.finite(row) == {"point": {"lr": 1}, "values": [3.0, None], "val_loss_mean": None, "diverged": 1}
    row = {"point": {"lr": 1}, "values": [-math.inf, 0.5], "val_acc_mean": -math.inf, "val_loss_mean": math.inf}
    assert tuning.finite(row, ACC) == row | {"values": [None, 0.5], "val_acc_mean": None, "val_loss_mean": None}
    assert tuning.finite({"values": [1.0], "val_acc_mean": 1.0}, ACC) == {"values": [1.0], "val_acc_mean": 1.0}


def test_the_axis_span_by_hand_for_a_loss_and_an_accuracy():
    """Loss: the finite means 3.0, 3.2, 3.5, 4.0 (None and inf left out); their upper quartile, inclusive, at
    position 1 + 0.75 x 3 = 3.25: 3.5 + 0.25 x 0.5 = 3.625; the best low end 2.9. Accuracy: means 0.5, 0.7,
    0.9, 1.0, lower quartile at 1.75: 0.5 + 0.75 x 0.2 = 0.65, up to the best high end 1.0. Two means are
    enough; all alike or no best end there is nothing to show."""
    nan, inf = math.nan, math.inf
    loss = {"a": {"mean": [3.0, None, 3.5], "low": [2.9, None, inf]}, "b": {"mean": [3.2, inf, 4.0], "low": [nan]}}
    assert tuning.loss_span(loss) == pytest.approx((2.9, 3.625))
    acc = {"a": {"mean": [0.5, 0.9], "high": [0.6, None]}, "b": {"mean": [0.7, 1.0], "high": [1.0, -inf]}}
    assert tuning.loss_span(acc, ACC) == pytest.approx((0.65, 1.0))
    assert tuning.loss_span({"a": {"mean": [3.0, 4.0], "low": [2.9]}}) == pytest.approx((2.9, 3.75))
    assert tuning.loss_span({"a": {"mean": [3.0, 4.0], "low": [None]}}) is None
    assert tuning.loss_span({"a": {"mean": [3.0], "low": [2.9]}}) is None
    assert tuning.loss_span({"a": {"mean": [1.0, 1.0], "high": [1.0]}}, ACC) is None  # every point at 100 %
    assert tuning.loss_span({"a": {"mean": [3.0, 3.0], "low": [3.0]}}) is None


def two_key_result():
    """A report's dict written here: accuracy over learning_rate x weight_decay, base chosen at (1e-3, 0.1),
    nlq at (2e-3, 0.0); nlq's (1e-3, 0.0) never finished either tune run."""

    def rows(means):
        out = []
        for (lr, wd), m in means.items():
            values = [None, None] if m is None else [m - 0.05, m + 0.05]
            out.append({"point": {"learning_rate": lr, "weight_decay": wd}, "values": values, "val_acc_mean": m})
        return out

    base = {(1e-3, 0.0): 0.6, (1e-3, 0.1): 0.8, (2e-3, 0.0): 0.5, (2e-3, 0.1): 0.7}
    nlq = {(1e-3, 0.0): None, (1e-3, 0.1): 0.85, (2e-3, 0.0): 0.95, (2e-3, 0.1): 0.2}
    return {
        "metric": "val_acc", "keys": ["learning_rate", "weight_decay"], "baseline": "base",
        "arms": {
            "base": {"chosen": {"learning_rate": 1e-3, "weight_decay": 0.1}, "stage1": rows(base),
                     "improvement": 0.0, "interval": None},
            "nlq": {"chosen": {"learning_rate": 2e-3, "weight_decay": 0.0}, "stage1": rows(nlq),
                    "improvement": 0.15, "interval": [0.05, 0.25]},
        },
    }  # fmt: skip


def test_the_figures_curves_hold_the_other_keys_at_the_arms_choice():
    """Along learning_rate base is read at weight_decay 0.1 (0.8, 0.7), nlq at 0.0 (its unfinished point
    has no mean and no spread, then 0.95); along weight_decay base at 1e-3, nlq at 2e-3. The accuracy axis
    along learning_rate: means 0.8, 0.7, 0.95, lower quartile at position 1.5 of the sorted: 0.75, up to the
    best run, 1.0."""
    data = tuning.figure_data(two_key_result())
    lr, wd = data["curves"]["learning_rate"], data["curves"]["weight_decay"]
    assert lr["base"] == {"values": [1e-3, 2e-3], "mean": [0.8, 0.7], "low": pytest.approx([0.75, 0.65]),
                          "high": pytest.approx([0.85, 0.75]), "chosen": 1e-3}  # fmt: skip
    assert lr["nlq"]["mean"] == [None, 0.95] and lr["nlq"]["low"][0] is None and lr["nlq"]["high"][0] is None
    assert wd["base"]["values"] == [0.0, 0.1] and wd["base"]["mean"] == [0.6, 0.8]
    assert wd["nlq"]["mean"] == [0.95, 0.2] and wd["nlq"]["chosen"] == 0.0
    assert data["span"]["learning_rate"] == pytest.approx((0.75, 1.0))
    assert data["improvement"] == {"base": (0.0, None), "nlq": (0.15, [0.05, 0.25])} and data["metric"] == "val_acc"


def drawn_figure(monkeypatch, result):
    from nlq.common import figures

    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.update(fig=fig))
    tuning.plot(result, "figure.png")
    return drawn["fig"]


def test_an_accuracy_figure_marks_points_below_its_axis_and_states_gains_in_points(monkeypatch):
    """two_key_result: a panel per key and stage 2's last. Along weight_decay nlq's 0.2 at 0.1 lies below
    the axis (means 0.6, 0.8, 0.95, 0.2: lower quartile at 1.75 of the sorted, 0.2 + 0.75 x 0.4 = 0.5, up to
    1.0, padded by 8 % of 0.5): drawn as a downward triangle at the bottom, 0.46. A weight decay of 0 puts
    that axis on a linear scale; learning rates are on a log one. Points and rings are circles."""
    import matplotlib.colors as mcolors

    fig = drawn_figure(monkeypatch, two_key_result())
    lr_ax, wd_ax, stage2 = fig.axes
    assert tuple(fig.get_size_inches()) == pytest.approx((16.5, 4.2))
    assert lr_ax.get_xscale() == "log" and wd_ax.get_xscale() == "linear"
    assert wd_ax.get_ylim() == pytest.approx((0.46, 1.04))
    assert wd_ax.get_ylabel() == "final accuracy (▼: below the axis)" and wd_ax.get_xlabel() == "weight_decay"
    off = [x for x in wd_ax.get_lines() if x.get_marker() == "v" and mcolors.same_color(x.get_color(), "C1")]
    assert [list(off[0].get_xdata()), list(off[0].get_ydata())] == [[0.1], pytest.approx([0.46])]  # nlq's
    rings = [x for x in wd_ax.get_lines() if x.get_markersize() == 12]
    assert [x.get_marker() for x in rings] == ["o", "o"]
    fill = wd_ax.collections[1].get_paths()[0].vertices[:, 1]  # nlq's spread, from its lows to its highs
    assert (fill.min(), fill.max()) == pytest.approx((0.15, 1.0))
    assert stage2.get_ylabel() == "improvement over tuned base (points)"
    (_, nlq_bars) = stage2.containers
    point, _, _ = nlq_bars.lines
    assert point.get_marker() == "o" and list(point.get_ydata()) == pytest.approx([15.0])


@pytest.mark.parametrize(
    "key, values, scale",
    [("learning_rate", (1e-3, 2e-3), "log"), ("grad_clip", (0.25, 2.5), "log"), ("grad_clip", (0.25, 2.0), "linear"),
     ("weight_decay", (0.0, 0.1), "linear")],
)  # fmt: skip
def test_a_key_is_drawn_on_a_log_axis_when_it_is_a_rate_or_spans_a_factor_of_ten(monkeypatch, key, values, scale):
    """And where every point ties at 100 % there is no span: the axis is left alone, no point is off it,
    and the label says nothing of triangles."""
    rows = [{"point": {key: v}, "values": [1.0], "val_acc_mean": 1.0} for v in values]
    arm = {"chosen": {key: values[0]}, "stage1": rows, "improvement": 0.0, "interval": None}
    result = {"metric": "val_acc", "keys": [key], "baseline": "base", "arms": {"base": arm}}
    ax = drawn_figure(monkeypatch, result).axes[0]
    assert ax.get_xscale() == scale and ax.get_ylabel() == "final accuracy"
    assert not [x for x in ax.get_lines() if x.get_marker() == "v" and len(x.get_xdata())]


def test_a_runner_up_on_two_grid_keys_is_named_by_both():
    result = hand_result()
    result["arms"]["wide"]["margin"]["runner_up"] = {"learning_rate": 1e-3, "weight_decay": 0.1}
    assert (
        "note: wide: its choice was 0.02 ahead of learning_rate=0.001, weight_decay=0.1 in stage 1, within the "
        "spread of its stage-2 seeds (0.05): the two points are not told apart"
    ) in tuning.markdown(result)
