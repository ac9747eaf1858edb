"""power.py: the seeds a stated comparison needs, from an earlier screen's report (its paired seeds' spread on the
measure's own scale), and its one-line refusals."""

import json
import math
import statistics

import pytest
from helpers import command, error_of
from test_screen import FLOOR, REACHED, reaching

from nlq.comparison import screening
from nlq.comparison.stats import seeds_for_power

power_main = command("power.py")


def report_file(tmp_path, nlq_seed4=None):
    """A screen report of setting 'recall': base, nlq and ident reaching the midpoint at REACHED's tokens on seeds
    2-4 (nlq's seed 4 replaced by nlq_seed4, a run of its own), through JSON as the screen writes it."""
    runs = [reaching(a, 1, 200, "tune") for a in REACHED if a != "wide"]
    runs += [reaching(a, s, t) for a in ("base", "nlq", "ident") for s, t in zip((2, 3, 4), REACHED[a])]
    if nlq_seed4:
        runs = [nlq_seed4 if (r.arm, r.seed) == ("nlq", 4) else r for r in runs]
    result = screening.setting_report(runs, ["learning_rate"], "base", FLOOR)
    path = tmp_path / "screen.json"
    path.write_text(json.dumps({"baseline": "base", "settings": {"recall": result}}))
    return path


def table(capsys):
    return [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| nlq") or line.startswith("| ident")
    ]


def test_the_seeds_come_from_the_paired_log_ratios_spread_at_the_holm_level(tmp_path, capsys):
    """nlq's tokens over base's, seed by seed: 100/300, 200/400, 200/300. Their log ratios' mean and sd, by hand;
    two comparisons stated, so each is planned at 0.05 / 2; the estimate and half of it on the log scale."""
    power_main([report_file(tmp_path), "--compare=nlq:recall:tokens,ident:recall:accuracy"])
    rows = table(capsys)
    logs = [math.log(a / b) for a, b in zip(REACHED["nlq"], REACHED["base"])]
    mean, sd = statistics.mean(logs), statistics.stdev(logs)
    for row, effect in zip(rows[:2], (mean, mean / 2)):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == "nlq:recall:tokens" and cells[2] == f"{sd:.3g} in log, 3"
        assert cells[1] == f"{math.exp(mean):.2f}x ({100 * (1 - math.exp(mean)):.0f} % sooner)"
        assert cells[4] == str(seeds_for_power(effect, sd, 0.025, 0.8, 200))
    assert rows[1].split("|")[4].strip().startswith(f"half: {math.exp(mean / 2):.2f}x")


def test_an_accuracy_is_planned_on_its_paired_differences_in_points(tmp_path, capsys):
    """nlq against base at the budget, each curve's last point: base ends at 0.9, 0.6 (it reaches the midpoint at
    its last evaluation) and 0.9 on seeds 2-4; nlq at 0.9, 0.9 and, its seed 4 replaced, 0.95: differences 0,
    +0.3, +0.05 points, by hand."""
    from test_screen import run

    path = report_file(tmp_path, run("nlq", 4, [0.2, 0.2, 0.6, 0.9, 0.95]))
    power_main([path, "--compare=nlq:recall:accuracy", "--effects=estimate,0.1", "--alpha=0.05"])
    diffs = [0.0, 0.3, 0.05]
    rows = table(capsys)
    assert rows[0].split("|")[3].strip() == f"{100 * statistics.stdev(diffs):.2g} pts, 3"
    expected = [seeds_for_power(statistics.mean(diffs), statistics.stdev(diffs), 0.05, 0.8, 200),
                seeds_for_power(0.1, statistics.stdev(diffs), 0.05, 0.8, 200)]  # fmt: skip
    assert [row.split("|")[5].strip() for row in rows] == [str(n) if n else "over 200: out of reach, do not call it"
                                                            for n in expected]  # fmt: skip


@pytest.mark.parametrize(
    "options, words",
    [
        (["--compare=nlq:recall"], "'nlq:recall' is not ARM:SETTING:MEASURE"),
        (["--compare=nlq:mqar:tokens"], "the report has no setting mqar; it has recall"),
        (["--compare=base:recall:tokens"], "base is no arm compared on recall; give one of ident, nlq"),
        (["--compare=nlq:recall:loss"], "no measure loss; give one of accuracy, tokens, flops, seconds, priced"),
        (["--compare=nlq:recall:tokens,nlq:recall:tokens"], "nlq:recall:tokens is named twice"),
        (["--compare=nlq:recall:tokens", "--effects=big"], "--effects: 'big' is not estimate, half or a number"),
        (["--compare=nlq:recall:tokens", "--effects=1"], "a ratio to the baseline's, above 0 and not 1"),
        (["--compare=nlq:recall:accuracy", "--effects=2"], "a difference in points, between 0 and 1"),
        (["--compare=nlq:recall:tokens", "--most=1"], "--most=1: give the most seeds affordable, 2 or more"),
    ],
)
def test_a_comparison_the_report_cannot_plan_is_one_line(tmp_path, options, words):
    assert words in error_of([report_file(tmp_path), *options], main=power_main)


def test_a_cost_with_bounds_or_a_file_that_is_no_report_is_one_line(tmp_path):
    from test_screen import run

    never = run("nlq", 4, [0.2, 0.3, 0.4, 0.5, 0.55])  # never reaches the midpoint: a bound
    path = report_file(tmp_path, never)
    assert "1 of 3 pairs hold a bound: no spread" in error_of([path, "--compare=nlq:recall:tokens"], main=power_main)
    (tmp_path / "x.json").write_text("[1]")
    assert "not a screen report" in error_of([tmp_path / "x.json", "--compare=a:b:tokens"], main=power_main)
    assert "not a readable screen report" in error_of([tmp_path / "no.json", "--compare=a:b:c"], main=power_main)
