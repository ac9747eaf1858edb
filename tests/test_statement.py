"""A confirmatory screen's statement (screen.py --statement): read and refused in one line before any run, the
screen run exactly as stated (fixed seeds, no seed added by a rule), and each stated comparison called or not
by Holm over the stated comparisons, computed here by hand."""

import json
import subprocess

import pytest
from helpers import error_of, screen_main
from test_screen import tiny_screen

from nlq.comparison import statement


def write(tmp_path, name="confirm", **changes):
    """A statement of the tiny screen (tests/test_screen.py's arms base and nlq, settings mq and mq32) in
    tmp_path/results/name/statement.json."""
    arms, screen_file = tiny_screen(tmp_path)[:2], str(tmp_path / "screen.json")
    body = {"arms": arms, "baseline": "base", "screen": screen_file, "settings": ["mq", "mq32"],
            "comparisons": ["nlq:mq:tokens", "nlq:mq32:accuracy"], "tune_seeds": [100], "seeds": [101, 102, 103],
            "alpha": 0.05, "stage1": "tuned again on seed 100: no earlier screen ran these settings"}  # fmt: skip
    path = tmp_path / "results" / name / "statement.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body | changes))
    return path


def test_a_stated_screen_runs_its_seeds_for_every_arm_and_setting_and_adds_none(tmp_path, capsys):
    path = write(tmp_path)
    screen_main([f"--statement={path}", f"--out_root={tmp_path / 'R'}", "--dry_run"])
    out = capsys.readouterr().out
    starts = [line for line in out.splitlines() if line.startswith("start")]
    assert len(starts) == 2 * 2 * 2  # stage 1: 2 arms x 2 settings x 2 grid points on tune seed 100
    assert all("-s100" in line for line in starts)
    assert "stage 2: each arm's chosen point per setting x seeds [101, 102, 103]" in out
    assert "more seeds" not in out  # no round of extra seeds: the stated seeds are every seed
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"baseline": "wide"}, "baseline wide is not one of its arms (base, nlq)"),
        ({"settings": ["mq", "nope"]}, "settings ['mq', 'nope']: each once, of screen"),
        ({"settings": ["mq", "mq"]}, "each once"),
        ({"comparisons": ["nlq:mq"]}, "comparison 'nlq:mq' is not ARM:SETTING:MEASURE"),
        ({"comparisons": ["base:mq:tokens"]}, "comparison base:mq:tokens: name an arm compared (nlq)"),
        ({"comparisons": ["nlq:mq:loss"]}, "a measure (accuracy, tokens, flops, seconds, priced)"),
        ({"comparisons": ["nlq:mq:tokens", "nlq:mq:tokens"]}, "each comparison once"),
        ({"seeds": [101, 100]}, "seeds and tune_seeds: whole numbers >= 0, each once, apart"),
        ({"seeds": []}, "seeds must be a non-empty list"),
        ({"alpha": 1.5}, "alpha=1.5: give the family's level, between 0 and 1"),
        ({"extra": 1}, "a statement holds exactly arms, baseline"),
        ({"arms": [1, 2]}, "arms, settings and comparisons are lists of names (strings)"),
        ({"stage1": ""}, "stage1 must be a non-empty str"),
        ({"ladder": "n_embd=8"}, "--ladder=n_embd=8: give n_embd or n_layer=V1,V2,... with two sizes or more"),
        (
            {"ladder": "n_embd=8,16"},
            "comparison nlq:mq:tokens: name an arm compared (nlq), a setting it runs (mq-n_embd=8",
        ),
        ({"ladder": 8}, "ladder must be a non-empty str"),
        ({"continue_to": 0}, "continue_to=0: a whole multiple of the budget, 1 up"),
        ({"continue_to": "5"}, "continue_to must be a non-empty int"),
        ({"grid": []}, "grid must be a non-empty list"),
        ({"grid": [3]}, 'grid is a list of axes, each "KEY=V1,V2,..." (a string)'),
        ({"grid": ["lr=1e-3,2e-3"]}, "--grid=lr=1e-3,2e-3: no config has a key 'lr'"),
        ({"grid": ["learning_rate="]}, "--grid=learning_rate=: give the key's values once each"),
    ],
)
def test_a_statement_the_screen_cannot_run_is_one_line_before_any_run(tmp_path, changes, words):
    path = write(tmp_path, **changes)
    if "extra" not in changes:
        assert set(json.loads(path.read_text())) - set(statement.OPTIONAL) == set(statement.FIELDS)
    assert words in error_of([f"--statement={path}", f"--out_root={tmp_path / 'R'}"], main=screen_main)
    assert not (tmp_path / "R").exists()


def test_a_stated_ladder_runs_every_setting_at_each_size_and_its_comparisons_name_a_size(tmp_path, capsys):
    path = write(tmp_path, ladder="n_embd=8,32", comparisons=["nlq:mq-n_embd=32:tokens", "nlq:mq32-n_embd=8:accuracy"])
    screen_main([f"--statement={path}", f"--out_root={tmp_path / 'R'}", "--dry_run"])
    out = capsys.readouterr().out
    starts = [line for line in out.splitlines() if line.startswith("start")]
    assert len(starts) == 2 * 2 * 2 * 2  # stage 1: 2 sizes x 2 settings x 2 arms x 2 grid points
    assert sum("mq-n_embd=32/" in line and "--n_embd=32 --n_head=4 " in line for line in starts) == 4
    assert "  mq32-n_embd=8 (n_embd=8, n_head=1): " in out
    assert "--ladder: the statement" in error_of([f"--statement={path}", "--ladder=n_embd=8,16"], main=screen_main)


def test_a_stated_multiple_carries_the_short_runs_on_and_the_default_is_three(tmp_path, capsys):
    """continue_to, where stated, is the multiple every short stage-2 run carries on to; unstated, 3 (the
    screen's default), and --continue_to beside a statement is refused (above)."""
    for stated, said in (({"continue_to": 5}, 5), ({}, 3)):
        (tmp_path / f"c{said}").mkdir()  # each in a results/ of its own: their seeds are the same
        path = write(tmp_path / f"c{said}", **stated)
        screen_main([f"--statement={path}", f"--out_root={tmp_path / f'R{said}'}", "--dry_run"])
        assert f"continuations (--continue_to={said}): each stage-2 run short" in capsys.readouterr().out


def test_a_stated_grid_is_stage_ones_and_the_page_names_it(tmp_path, capsys):
    """A grid stated (three learning rates, where the tiny screen has two) is every point stage 1 runs, for every
    arm and setting; --grid beside the statement is refused (below)."""
    path = write(tmp_path, grid=["learning_rate=5e-4,1e-3,2e-3"])
    screen_main([f"--statement={path}", f"--out_root={tmp_path / 'R'}", "--dry_run"])
    starts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("start")]
    assert len(starts) == 2 * 2 * 3
    for rate in ("5e-4", "1e-3", "2e-3"):
        assert sum(f"tune-nlq-learning_rate={rate}-s100" in line for line in starts) == 2  # once per setting
    s = statement.read(path, lambda arms: ["base", "nlq"], lambda screen: ["mq", "mq32"])
    assert "Stage 1 on the grid learning_rate=5e-4,1e-3,2e-3: tuned again" in statement.markdown(s, [])[2]


def test_seeds_a_recorded_screen_used_are_refused_and_options_that_would_change_it_too(tmp_path):
    write(tmp_path, "earlier", seeds=[90, 102], tune_seeds=[89])
    path = write(tmp_path)
    message = error_of([f"--statement={path}", f"--out_root={tmp_path / 'R'}"], main=screen_main)
    assert f"seed 102 was used by {tmp_path / 'results' / 'earlier' / 'statement.json'}" in message
    path = write(tmp_path, seeds=[201, 202])
    for option in ("--seeds=5,6", "--max_extra_seeds=2", "--baseline=nlq", "--settings=mq", "--overall=mq",
                   "--continue_to=5", "--grid=learning_rate=1e-3,2e-3"):  # fmt: skip
        name = option.split("=")[0]
        assert f"{name}: the statement {path} sets it" in error_of([f"--statement={path}", option], main=screen_main)
    arms = tiny_screen(tmp_path)[:2]
    assert "names the arms; give no config files" in error_of([*arms, f"--statement={path}"], main=screen_main)


def test_each_stated_comparison_is_called_by_holm_over_the_stated_ones():
    """Three stated comparisons with p 0.01, 0.03 and 0.04: Holm by hand gives 0.03, 0.06, 0.06, so at 0.05 only
    the first is called; a cost whose pairs hold a bound has no p and is not called, whatever the others."""
    s = statement.Statement(path="s.json", arms=[], baseline="base", screen="default", settings=["a", "b"],
                            comparisons=["nlq:a:tokens", "nlq:b:accuracy", "id:a:accuracy", "id:b:tokens"],
                            tune_seeds=[1], seeds=[2, 3], alpha=0.05, stage1="tuned again")  # fmt: skip
    results = {
        "a": {"arms": {"nlq": {"tokens_to_midpoint": {"ratio": {"ratio": 0.5, "p": 0.01}}},
                       "id": {"improvement": -0.1, "p": 0.04}}},
        "b": {"arms": {"nlq": {"improvement": 0.2, "p": 0.03},
                       "id": {"tokens_to_midpoint": {"ratio": {"ratio": None, "bounds": 2, "n": 2}}}}},
    }  # fmt: skip
    rows = {r["comparison"]: r for r in statement.called(s, results)}
    assert [rows[c]["p_holm"] for c in ("nlq:a:tokens", "nlq:b:accuracy", "id:a:accuracy")] == pytest.approx(
        [0.03, 0.06, 0.06]
    )
    assert [rows[c]["called"] for c in s.comparisons] == [True, False, False, False]
    assert rows["id:b:tokens"]["p_holm"] is None
    lines = statement.markdown(s, list(rows.values()))
    assert "| nlq:a:tokens | 0.50x (50 % sooner) | 0.01 | 0.03 | called |" in lines
    assert "| id:b:tokens | 2 pair(s) hold a bound: no ratio | — | — | not called |" in lines
    assert "| nlq:b:accuracy | +20.0 pts | 0.03 | 0.06 | not called |" in lines


@pytest.mark.slow
def test_a_stated_screen_end_to_end_answers_what_was_stated_first_and_keeps_its_records(tmp_path, capsys):
    """The tiny screen run from its statement: the page, beside the statement, opens with the stated comparisons,
    each called or not on the report's own p values adjusted by Holm over the two stated (by hand here), before
    everything reported; every arm ran exactly the stated seeds on every setting. Its records rebuild the report
    byte for byte, and on another machine (another --out_root, the first one gone) the same command runs nothing
    and writes the same page."""
    path = write(tmp_path, comparisons=["nlq:mq:accuracy", "nlq:mq32:accuracy"], continue_to=1)
    root, folder = tmp_path / "R", path.parent
    screen_main([f"--statement={path}", f"--out_root={root}"])
    report = json.loads((folder / "screen.json").read_text())
    ps = [report["settings"][s]["arms"]["nlq"]["p"] for s in ("mq", "mq32")]
    known = sorted(p for p in ps if p is not None)  # a p the runs cannot give (no spread) stays None
    m, holm, running = len(known), {}, 0.0
    for k, p in enumerate(known):
        running = max(running, min(1.0, (m - k) * p))
        holm[p] = running
    assert [r["p_holm"] for r in report["statement"]] == pytest.approx([holm.get(p) for p in ps])
    assert [r["called"] for r in report["statement"]] == [p is not None and holm[p] < 0.05 for p in ps]
    page = (folder / "screen.md").read_text()
    lines = page.splitlines()
    assert lines[2] == "## Stated before the run (statement.json, beside this page)"
    assert lines[0].startswith("# The synthetic screen")
    assert all(report["settings"][s]["seeds"] == [101, 102, 103] for s in ("mq", "mq32"))
    kept = sorted(p.relative_to(folder / "records").as_posix() for p in (folder / "records").rglob("*.json"))
    assert len(kept) == 2 * (2 * 2 + 3 * 2)  # per setting: stage 1's 2 arms x 2 rates, stage 2's 3 seeds x 2 arms
    assert sum(p.stat().st_size for p in (folder / "records").rglob("*.json")) < 2e6
    screen_main([f"--rebuild={folder}", f"--out_root={tmp_path / 'rebuilt'}"])
    assert (tmp_path / "rebuilt" / "screen.md").read_text() == page
    subprocess.run(["rm", "-rf", str(root)])
    capsys.readouterr()
    screen_main([f"--statement={path}", f"--out_root={tmp_path / 'elsewhere'}"])
    assert "start  " not in capsys.readouterr().out and (folder / "screen.md").read_text() == page
