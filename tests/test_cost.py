"""What a run's tokens cost (nlq/comparison/cost.py) and the comparisons at equal cost: a run read where it
had spent a budget, on hand-made curves; measured and priced seconds per token; a report's step ratios in
each of its layouts; compare's table at equal FLOPs and equal time against values computed here."""

import json
import statistics
from pathlib import Path

import pytest
from helpers import error_of
from scipy import stats

from model import GPTConfig, training_flops_per_token
from nlq.comparison import compare, cost
from nlq.comparison.compare import Run

SHARED_REPORT = Path(__file__).resolve().parents[2] / "shared" / "gpu" / "2026-12-04" / "gpu_check.json"
MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 8, "block_size": 8, "vocab_size": 11}


def run(name, arm, seed, curve, ms=None, **config):
    """A run with evaluations (tokens, val_loss) and, where ms is given, step records of those times (100
    tokens a step)."""
    records = [{"step": t // 100, "val_loss": v, "tokens": t} for t, v in curve]
    records += [{"step": s, "loss": 1.0, "ms": m, "tokens": (s + 1) * 100} for s, m in enumerate(ms or [])]
    return Run(name, {"wandb_run_name": arm, "seed": seed, **MODEL, **config}, records)


def test_a_run_is_read_where_it_had_spent_the_budget():
    """A costs 2 a token, B 3: by the step compared (200 tokens) A spent 400 and B 600, so both are read at
    400: A at its 200 tokens (2.0), B at 133.3 tokens, a third of the way from 2.5 (100) to 1.5 (200)."""
    a = run("a", "base", 1, [(0, 4.0), (100, 3.0), (200, 2.0)])
    b = run("b", "nlq", 1, [(0, 4.0), (100, 2.5), (200, 1.5)])
    budget, read = cost.at_equal_cost([a, b], 2, {"a": 2.0, "b": 3.0}, ["val_loss"])
    assert budget == 400
    assert read["a"] == pytest.approx({"val_loss": 2.0, "tokens": 200})
    assert read["b"] == pytest.approx({"val_loss": 2.5 - (1 / 3), "tokens": 400 / 3})


def test_a_curve_is_read_linearly_between_its_points_and_nowhere_beyond_them():
    curve = [(100, 3.0), (200, 2.0), (400, 1.0)]
    assert [cost.value_at(curve, x) for x in (100, 150, 200, 300, 400)] == pytest.approx([3.0, 2.5, 2.0, 1.5, 1.0])
    assert cost.value_at(curve, 99) is None and cost.value_at(curve, 401) is None
    assert cost.value_at([(100, 3.0)], 100) == 3.0 and cost.value_at([(100, 3.0)], 101) is None  # one evaluation
    assert cost.value_at([], 0) is None


def test_seconds_per_token_is_the_median_of_the_logged_steps_and_prices_scale_the_baselines():
    base = run("b1", "base", 1, [(0, 4.0), (100, 3.0)], ms=[10, 30, 20])  # 0.1, 0.3, 0.2 ms a token
    nlq = run("n1", "nlq", 1, [(0, 4.0), (100, 3.0)], ms=[50, 50, 50], query_mode="residual_gelu")
    assert cost.measured_seconds_per_token(base) == pytest.approx(0.2e-3)
    per = cost.per_token([base, nlq], "base")
    assert per["seconds"] == pytest.approx({"b1": 0.2e-3, "n1": 0.5e-3})
    assert per["flops"]["n1"] == training_flops_per_token(GPTConfig(**MODEL, query_mode="residual_gelu"), 8)
    # priced: a baseline token costs 1, an arm's its step's ratio to the baseline arm's in the report
    priced = cost.per_token([base, nlq], "base", {"linear": 1.1, "residual_gelu": 1.1 * 1.16})
    assert priced["priced"] == pytest.approx({"b1": 1.0, "n1": 1.16}) and priced["seconds"] == per["seconds"]
    with pytest.raises(cost.CostError, match="the prices name no residual_gelu"):
        cost.per_token([base, nlq], "base", {"linear": 1.0, "identity": 1.0})
    assert "seconds" not in cost.per_token([base, run("x", "x", 1, [(0, 4.0), (100, 3.0)])], "base")


def test_a_reports_step_ratios_in_each_layout(tmp_path):
    """train.py's loop first, then the step costs, then bench.py's results (compiled before eager)."""
    report = {
        "steps": {
            "probe": {"result": {"versions": {"torch": "2.11"}}},
            "train_step": {"result": {"results": {"linear": {"train_step_s": {"median": 0.025}},
                                                  "residual_gelu": {"train_step_s": {"median": 0.030}}}}},
            "train_loop": {"result": {"linear": {"ms_per_step": 50.0}, "residual_gelu": {"ms_per_step": 58.0}}},
            "other_arms": {"result": {"results": {"linear": {"train_step_s": {"median": 0.040}},
                                                  "identity": {"train_step_s": {"median": 0.041}},
                                                  "wide_mlp": {"train_step_s": {"median": 0.044}}}}},
            "gpu_tests": {"result": None},
            # decoding only, as bench.py writes it (no step timed), alone and two to a step: nothing to price
            "decode": {"result": {"results": {"linear": {"train_step_s": None}, "wide_mlp": {"train_step_s": None}}}},
            "decode_compiled": {"result": {"graph": {"results": {"linear": {"train_step_s": None}}}}},
        }
    }  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(report))
    prices = cost.read_prices(tmp_path / "r.json")
    assert prices == pytest.approx({"linear": 1.0, "residual_gelu": 58 / 50, "identity": 41 / 40, "wide_mlp": 1.1})
    (tmp_path / "b.json").write_text(json.dumps(report["steps"]["other_arms"]["result"]))  # a bench.py JSON
    assert cost.read_prices(tmp_path / "b.json")["wide_mlp"] == pytest.approx(1.1)
    decode_only = {"linear": {"train_step_s": {"median": 2.0}}, "residual_gelu": {"train_step_s": {"median": 3.0}},
                   "identity": {"decode_tokens_per_s": {"median": 900.0}}}  # fmt: skip
    (tmp_path / "d.json").write_text(json.dumps({"results": decode_only}))  # an arm bench.py timed no step of
    assert cost.read_prices(tmp_path / "d.json") == pytest.approx({"linear": 1.0, "residual_gelu": 1.5})
    (tmp_path / "bad.json").write_text(json.dumps({"results": {"identity": {"train_step_s": {"median": 1}}}}))
    with pytest.raises(cost.CostError, match="times no arm beside linear's step"):
        cost.read_prices(tmp_path / "bad.json")
    wide = run("w", "wide", 1, [(0, 4.0)], query_mode="linear", mlp_ratio=4.75)
    assert (
        cost.priced_arm(wide, prices) == "wide_mlp"
        and cost.priced_arm(run("r", "identity", 1, [(0, 4.0)]), prices) == "identity"
    )


@pytest.mark.parametrize("bad, shown", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("0", "0")])
def test_a_report_with_a_step_time_that_is_no_price_is_refused(tmp_path, bad, shown):
    """JSON reads NaN and Infinity as floats: a ratio made of one would be a price of nan or inf (and a zero
    step one of inf). The report is refused in one line naming the arm and the value, not priced."""
    (tmp_path / "r.json").write_text(
        '{"results": {"linear": {"train_step_s": {"median": 2.0}}, "identity": {"train_step_s": {"median": %s}}}}' % bad
    )
    with pytest.raises(cost.CostError, match=rf"--prices=.*r.json: identity's step time is {shown}: .* finite"):
        cost.read_prices(tmp_path / "r.json")


@pytest.mark.skipif(not SHARED_REPORT.is_file(), reason="the H200 report lies beside the repository only here")
def test_the_h200_reports_price_of_the_nonlinear_query_is_its_train_loop():
    loop = json.loads(SHARED_REPORT.read_text())["steps"]["train_loop"]["result"]
    ratio = loop["residual_gelu"]["ms_per_step"] / loop["linear"]["ms_per_step"]
    assert cost.read_prices(SHARED_REPORT)["residual_gelu"] == pytest.approx(ratio) and 1.1 < ratio < 1.2


def test_compares_table_at_equal_flops_and_time_from_values_computed_here():
    """Two seeds an arm. nlq's steps take twice the baseline's time: at equal time it is read at half its
    tokens. Its FLOPs per token are the model's own, so at equal FLOPs the baseline is read where it had spent
    nlq's FLOPs at 200 tokens, or nlq where it had spent the baseline's, whichever is less."""
    curve = {1: [(0, 4.0), (100, 3.0), (200, 2.6)], 2: [(0, 4.0), (100, 3.2), (200, 2.8)]}
    nlq_curve = {1: [(0, 4.0), (100, 2.9), (200, 2.5)], 2: [(0, 4.0), (100, 3.0), (200, 2.6)]}
    runs = [run(f"b{s}", "baseline", s, c, ms=[10, 10]) for s, c in curve.items()]
    runs += [run(f"n{s}", "nlq", s, c, ms=[20, 20], query_mode="residual_gelu") for s, c in nlq_curve.items()]
    lines = compare.table(runs, "baseline", 2)
    time_at = lines.index(next(line for line in lines if line.startswith("At equal training time")))
    row = next(line for line in lines[time_at:] if line.startswith("| nlq |"))
    base_vals, nlq_vals = [2.6, 2.8], [2.9, 3.0]  # nlq read at 100 tokens, the baseline at its 200
    gain = (statistics.mean(base_vals) - statistics.mean(nlq_vals)) / statistics.mean(base_vals)
    p = stats.ttest_rel(base_vals, nlq_vals).pvalue
    assert f"| {gain:+.2%} |" in row and f"| {p:.3g} (paired) |" in row and "| 100 |" in row
    assert "spent 0.02 seconds" in lines[time_at]  # 200 tokens at 0.1 ms a token, the least spent by step 2
    flops = {arm: training_flops_per_token(GPTConfig(**MODEL, query_mode=q), 8) for arm, q in
             (("baseline", "linear"), ("nlq", "residual_gelu"))}  # fmt: skip
    budget = 200 * min(flops.values())
    assert any(line.startswith(f"At equal training FLOPs: each run read where it had spent {budget:.3g} FLOPs")
               for line in lines)  # fmt: skip


def test_compare_refuses_a_prices_file_that_is_not_a_report(tmp_path):
    (tmp_path / "p.json").write_text("[1, 2]")
    message = error_of([str(tmp_path), f"--prices={tmp_path / 'p.json'}"], main=__import__("helpers").compare_main)
    assert "times no arm beside linear's step" in message


def test_runs_of_other_lengths_are_compared_each_at_its_end(tmp_path):
    """The baseline's 200 tokens against nlq's 100 (equal time at twice the step cost): each at its own last
    evaluation, paired by seed, against values computed here; the tokens each saw are kept."""
    runs = [run("b1", "baseline", 1, [(0, 4.0), (200, 2.6)]), run("b2", "baseline", 2, [(0, 4.0), (200, 2.8)])]
    runs += [run("n1", "nlq", 1, [(0, 4.0), (100, 2.5)]), run("n2", "nlq", 2, [(0, 4.0), (100, 2.8)])]
    lines = compare.table(compare.at_end(runs), "baseline", None)
    assert lines[0].startswith("validation loss at each run's last evaluation (steps 1, 2)")
    row = next(line for line in lines if line.startswith("| nlq |"))
    gain = (2.7 - 2.65) / 2.7
    assert f"| {gain:+.2%} |" in row and f"{stats.ttest_rel([2.6, 2.8], [2.5, 2.8]).pvalue:.3g} (paired)" in row
    assert row.endswith("| 100 |") and next(line for line in lines if line.startswith("| baseline |")).endswith(
        "| 200 |"
    )
    with pytest.raises(compare.CompareError, match="leave --step out"):
        compare.at_end(runs, 2)


def test_runs_at_their_end_keep_their_step_times_batches_and_earlier_evaluations():
    """--at_end relabels each run's last evaluation, nothing else: the baseline (200 tokens at 0.1 ms a token)
    and a wide-MLP arm (100 tokens at 0.2 ms) both spent 0.02 s, so at equal time each is read at its end;
    at equal FLOPs the wide arm's 100 tokens set the budget and the baseline is read on its curve between its
    evaluations at 100 and 200 tokens; the batches are checked at their common logged steps."""
    base = run("b1", "baseline", 1, [(0, 4.0), (100, 3.0), (200, 2.6)], ms=[10, 10])
    nlq = run("n1", "nlq", 1, [(0, 4.0), (100, 2.5)], ms=[20], mlp_ratio=8.0)
    for r, prints in ((base, ["x", "y"]), (nlq, ["x"])):
        for s, f in enumerate(prints):
            r.steps[s]["fingerprint"] = f
    lines = compare.table(compare.at_end([base, nlq]), "baseline", None)
    time_at = lines.index(next(line for line in lines if line.startswith("At equal training time")))
    assert "spent 0.02 seconds" in lines[time_at]
    assert next(line for line in lines[time_at:] if line.startswith("| nlq |")).endswith("| 100 |")
    flops = {r: training_flops_per_token(GPTConfig(**MODEL, mlp_ratio=r), 8) for r in (4.0, 8.0)}
    tokens = 100 * flops[8.0] / flops[4.0]  # the baseline's tokens at the wide arm's FLOPs
    assert 100 < tokens < 200
    flops_at = lines.index(next(line for line in lines if line.startswith("At equal training FLOPs")))
    base_row = next(line for line in lines[flops_at:] if line.startswith("| baseline |"))
    expected = 3.0 + (2.6 - 3.0) * (tokens - 100) / 100
    assert f"| {expected:.4f} |" in base_row and base_row.endswith(f"| {tokens:,.0f} |")
    assert lines[-1] == "all 2 runs trained on identical batches (fingerprints equal at 1 common logged steps)"
    assert not any("no step times logged" in line for line in lines)


def test_logs_without_tokens_name_the_missing_axis_and_keep_the_equal_step_table():
    """Metrics written before train.py recorded tokens seen: the table at equal steps stands, and equal FLOPs
    is named as not computable (the runs logged no tokens) rather than failing the report."""
    runs = [Run(f"{arm}{s}", {"wandb_run_name": arm, "seed": s, **MODEL}, [{"step": 0, "val_loss": 4.0},
            {"step": 2, "val_loss": 3.0 - 0.1 * (arm == "nlq") + 0.01 * s}]) for arm in ("baseline", "nlq")
            for s in (1, 2)]  # fmt: skip
    lines = compare.table(runs, "baseline", 2)
    assert any(line.startswith("| nlq |") for line in lines)
    assert "Not at equal training FLOPs: baseline1, baseline2, nlq1 logged no tokens seen at step 2" in lines


def test_seconds_per_token_is_the_median_step_over_the_tokens_of_a_step():
    """Step times of 10, 40 and 20 ms at 100 tokens a step (the logs count tokens seen so far): 0.1, 0.4 and
    0.2 ms a token, whose median is 0.2 ms (their mean would be 0.233, their least 0.1, their most 0.4)."""
    r = run("b", "base", 1, [(0, 4.0), (100, 3.0)], ms=[10, 40, 20])
    assert cost.measured_seconds_per_token(r) == pytest.approx(0.2e-3, rel=1e-12)
    r.steps[3] = {"step": 3, "loss": 1.0, "ms": 30, "tokens": 200}  # 50 tokens a step by step 3: 0.6 ms a token
    assert cost.measured_seconds_per_token(r) == pytest.approx((0.2e-3 + 0.4e-3) / 2, rel=1e-12)


def test_prices_are_read_against_the_comparisons_own_baseline_whatever_arm_it_is():
    """The baseline here is an identity-query arm: its token costs 1, the nonlinear query's its step's ratio
    to identity's in the report, 1.2 / 0.8 = 1.5 (not to linear's, 1.2)."""
    ident = run("i1", "ident", 1, [(0, 4.0), (100, 3.0)], query_mode="identity")
    nlq = run("n1", "nlq", 1, [(0, 4.0), (100, 3.0)], query_mode="residual_gelu")
    prices = {"linear": 1.0, "identity": 0.8, "residual_gelu": 1.2}
    assert cost.per_token([nlq, ident], "ident", prices)["priced"] == pytest.approx({"i1": 1.0, "n1": 1.5})
    assert cost.per_token([nlq, ident], "nlq", prices)["priced"] == pytest.approx({"i1": 0.8 / 1.2, "n1": 1.0})


def test_step_costs_layout_and_the_reports_that_price_nothing(tmp_path):
    """gpu_check's step_costs result (ms per variant) prices by its medians: 23 / 20 = 1.15. A report of linear
    alone, one that is not JSON, and one whose prices miss two arms are refused, each saying why."""
    (tmp_path / "v.json").write_text(
        json.dumps({"steps": {"step_costs": {"result": {"variants": {
            "linear": {"ms": {"median": 20.0, "min": 1.0}}, "residual_gelu": {"ms": {"median": 23.0, "max": 99.0}}}}}}})
    )  # fmt: skip
    assert cost.read_prices(tmp_path / "v.json") == pytest.approx({"linear": 1.0, "residual_gelu": 1.15})
    (tmp_path / "alone.json").write_text(json.dumps({"results": {"linear": {"train_step_s": {"median": 1.0}}}}))
    with pytest.raises(cost.CostError, match="times no arm beside linear's step"):
        cost.read_prices(tmp_path / "alone.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(cost.CostError, match=r"bad.json cannot be read as JSON \(.*\): name a bench.py"):
        cost.read_prices(tmp_path / "bad.json")
    runs = [run("b", "base", 1, [(0, 4.0)]), run("i", "ident", 1, [(0, 4.0)], query_mode="identity")]
    runs.append(run("w", "wide", 1, [(0, 4.0)], mlp_ratio=4.75))
    with pytest.raises(cost.CostError, match="the prices name no identity, wide_mlp: price them"):
        cost.per_token(runs, "base", {"linear": 1.0, "residual_gelu": 1.2})


def test_only_timed_steps_with_tokens_give_seconds_per_token():
    """Steps of 0.5 ms (a short step still counts), 0 ms, no time, and 20 ms without tokens: only the first
    counts, 0.5 ms over its 100 tokens."""
    r = run("b", "base", 1, [(0, 4.0), (100, 3.0)])
    r.steps = {0: {"step": 0, "ms": 0.5, "tokens": 100}, 1: {"step": 1, "ms": 0, "tokens": 200},
               2: {"step": 2, "ms": None, "tokens": 300}, 3: {"step": 3, "ms": 20.0}}  # fmt: skip
    assert cost.measured_seconds_per_token(r) == pytest.approx(0.5e-3 / 100)


def test_a_run_without_the_step_or_the_budget_is_named_not_a_traceback():
    """A run that has no evaluation at the step compared, and one whose curve starts after the budget, are
    CostErrors naming the run; two evaluations at the same tokens read as the first of them."""
    a = run("a", "base", 1, [(0, 4.0), (200, 2.0)])
    late = run("late", "nlq", 1, [(200, 2.5)])
    with pytest.raises(cost.CostError, match="late logged no tokens seen at step 1"):
        cost.at_equal_cost([a, late], 1, {"a": 1.0, "late": 1.0}, ["val_loss"])
    with pytest.raises(cost.CostError, match="late has no evaluations around 200 to read between"):
        cost.at_equal_cost([a, late], 2, {"a": 1.0, "late": 2.0}, ["val_loss"])
    assert cost.value_at([(100, 3.0), (100, 2.0), (200, 1.0)], 100) == 3.0


def timed(name, arm, seed, start, ms, **config):
    """A run whose two logged steps took ms each, its clock starting at start (seconds)."""
    r = run(name, arm, seed, [(0, 4.0), (200, 3.0 - 0.01 * seed)], ms=[ms, ms], **config)
    for s, rec in r.steps.items():
        rec["time"] = start + (s + 1) * ms / 1e3
    return r


def test_the_equal_time_tables_are_headed_by_what_their_numbers_are_and_say_when_times_were_not_side_by_side():
    """--prices: the measured table said '(priced by --prices ...)' and the priced one followed unheaded. Now the
    measured table says it is measured, the priced one that it is priced; and runs of nlq that trained hours after
    the baseline's (steps 1.6x slower only because the machine was busier then) are said not side by side."""
    base = [timed(f"b{s}", "baseline", s, 0.0, 10) for s in (1, 2)]
    later = [timed(f"n{s}", "nlq", s, 3600.0, 16, query_mode="residual_gelu") for s in (1, 2)]
    lines = compare.table(base + later, "baseline", 2, prices={"linear": 1.0, "residual_gelu": 1.1})
    measured = next(i for i, line in enumerate(lines) if line.startswith("At equal training time"))
    priced = next(i for i, line in enumerate(lines) if line.startswith("At equal time at the prices' step ratios"))
    assert "(each run's step times as it logged them)" in lines[measured] and "--prices" not in lines[measured]
    assert "(priced by --prices: each arm's step at its ratio to linear's)" in lines[priced]
    assert lines[measured + 1].startswith("Not timed side by side: no run of nlq trained while one of baseline did")
    assert "--prices=FILE" in lines[measured + 1]
    together = [timed(f"n{s}", "nlq", s, 0.005, 16, query_mode="residual_gelu") for s in (1, 2)]
    lines = compare.table(base + together, "baseline", 2)
    at = next(i for i, line in enumerate(lines) if line.startswith("At equal training time"))
    assert lines[at + 1] == "Every arm trained while baseline did (timed side by side, under the same load)"
    unclocked = [run(f"n{s}", "nlq", s, [(0, 4.0), (200, 2.9)], ms=[16, 16]) for s in (1, 2)]
    lines = compare.table(base + unclocked, "baseline", 2)
    at = next(i for i, line in enumerate(lines) if line.startswith("At equal training time"))
    assert lines[at + 1].startswith("Whether the arms' steps were timed side by side cannot be told (some log keeps")
