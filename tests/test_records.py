"""A screen's records (nlq/comparison/records.py): each run's record keeps everything the report reads of its run
directory (the report from records equals the report from the directories, on every cost axis and with a
continuation), a rebuilt report is said identical or not, and a damaged record or one made under another statement
is one line."""

import json

import pytest
from helpers import error_of, screen_main
from test_screen import FLOOR, run, timed

from nlq.comparison import records, screening
from nlq.comparison import screen as screen_lib
from nlq.comparison.compare import Run
from nlq.comparison.sweep import Run as Planned
from nlq.run.rundir import read_metrics


def on_disk(r, out_dir, extra_steps=0):
    """The hand-made run r written as train.py leaves it: config.json and metrics.jsonl (its step records timed at
    1 ms a step and stamped with a clock), evaluations continued flat for extra_steps more."""
    out_dir.mkdir(parents=True)
    (out_dir / "config.json").write_text(json.dumps(r.config | {"out_dir": str(out_dir)}))
    evals = [{"step": s, **e} for s, e in sorted(r.evals.items())]
    last = evals[-1]
    evals += [last | {"step": last["step"] + k, "tokens": last["tokens"] + 100 * k} for k in range(1, extra_steps + 1)]
    clock = 1e9 + 100 * r.seed
    steps = [{"step": e["step"], "loss": 1.0, "ms": 1.0 + r.seed, "tokens": 100 * (e["step"] + 1), "time": clock + s}
             for s, e in enumerate(evals)]  # fmt: skip
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [*steps, *evals]))


def hand_made_screen(tmp_path):
    """tests/test_screen.py's hand-made setting mq on disk under tmp_path/R: stage 1 (seed 1) and stage 2 (seeds
    2, 3) of base (linear) and nlq (residual_gelu), base-s3 short of the midpoint and carried on (its continuation
    reaches it, 0.6, at step 5: 500 tokens). Returns (the planned runs, the out_root)."""
    out_root = tmp_path / "R"
    runs = [timed(r, 1) for r in [run(a, 1, [0.2, 0.3, 0.5, 0.9, 0.95], "tune") for a in ("base", "nlq")]]
    runs += [run("base", 2, [0.2, 0.3, 0.5, 0.7, 0.9]), run("base", 3, [0.2, 0.3, 0.4, 0.5, 0.55])]
    runs += [run("nlq", 2, [0.2, 0.5, 0.7, 0.9, 0.95]), run("nlq", 3, [0.4, 0.8, 0.9, 0.95, 0.97])]
    planned = []
    for r in runs:
        r.config["query_mode"] = "residual_gelu" if r.arm == "nlq" else "linear"
        out_dir = out_root / "mq" / r.name
        on_disk(r, out_dir)
        planned.append(Planned(r.arm, r.seed, "c.py", out_dir, 4))
    later = run("base", 3, [0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9])
    later.config["max_iters"] = 12
    on_disk(later, out_root / "continued" / "mq" / "report-base-s3", extra_steps=4)  # to step 12: 3x the budget
    return planned, out_root


def keeper(tmp_path, out_root, tag=None, folder="kept"):
    args = screen_lib.parser().parse_args(["a.py", "b.py"])
    args.jobs = 1
    return screen_lib.Keeper(tmp_path / folder, tag, out_root, args)


def test_the_report_from_records_is_the_report_from_the_run_directories(tmp_path):
    """Every figure of a setting's report (tokens, FLOPs, seconds and priced time to the midpoint, who first, the
    ratios, the curves, the choices) read from the records equals the one read from the run directories, a
    continuation read to 2x its budget as screen.py reads it (its evaluations to step 8 of 12)."""
    planned, out_root = hand_made_screen(tmp_path)
    from_dirs = [Run.from_dir(p.out_dir) for p in planned]
    cont_dir = out_root / "continued" / "mq" / "report-base-s3"
    cont_records = [x for x in read_metrics(cont_dir / "metrics.jsonl") if x["step"] <= 8]
    continued = {str(out_root / "mq" / "report-base-s3"): Run("c", json.loads((cont_dir / "config.json").read_text()),
                                                               cont_records)}  # fmt: skip
    prices = {"linear": 1.0, "residual_gelu": 1.5}
    keep = keeper(tmp_path, out_root)
    keep.write(planned, multiple=2)
    runs, later = keep.read_all([keep.name_of(p) for p in planned])
    assert [r.name for r in runs] == [f"mq/{p.out_dir.name}" for p in planned]
    assert list(later) == ["mq/report-base-s3"] and max(later["mq/report-base-s3"].evals) == 8
    want = screening.setting_report(from_dirs, ["learning_rate"], "base", FLOOR, prices, continued)
    got = screening.setting_report(runs, ["learning_rate"], "base", FLOOR, prices, later)
    assert set(want["cost_axes"]) == {"tokens", "flops", "seconds", "priced"}
    assert got == want
    assert want["arms"]["base"]["tokens_to_midpoint"]["values"] == [250.0, 500.0]  # seed 3: on its continuation
    sizes = [p.stat().st_size for p in (tmp_path / "kept" / "records" / "mq").iterdir()]
    assert len(sizes) == 6 and max(sizes) < 4000  # no step lines: config, evaluations and a summary


def test_a_rebuild_is_said_identical_and_a_changed_record_is_not(tmp_path, capsys):
    planned, out_root = hand_made_screen(tmp_path)
    keep = keeper(tmp_path, out_root)
    keep.write(planned, multiple=3)
    inputs = {"records": [keep.name_of(p) for p in planned], "baseline": "base", "keys": ["learning_rate"],
              "prices": None, "overall": None, "floors": {"mq": FLOOR},
              "tasks": {"mq": {"task": "mqar", "settings": {}, "axis": []}}, "command": ["screen.py"],
              "screen": "default"}  # fmt: skip
    (keep.folder / "report_inputs.json").write_text(json.dumps(inputs))
    report, lines = screen_lib.report_of(inputs, keep.read_all(inputs["records"]), None)
    screen_lib.publish(report, lines, keep.folder)
    screen_main([f"--rebuild={keep.folder}", f"--out_root={tmp_path / 'again'}"])
    out = capsys.readouterr().out
    for name in ("screen.md", "screen.json", "screen.png", "curves.png"):
        assert f"{name}: identical to {keep.folder / name}" in out
        assert (tmp_path / "again" / name).read_bytes() == (keep.folder / name).read_bytes()
    assert "## Budget" in (tmp_path / "again" / "screen.md").read_text()
    path = records.path_of(keep.folder, "mq", "report-nlq-s2")
    record = json.loads(path.read_text())
    record["evals"][2]["val_acc"] = 0.65  # nlq-s2 reaches the midpoint later
    path.write_text(json.dumps(record))
    message = error_of([f"--rebuild={keep.folder}", f"--out_root={tmp_path / 'third'}"], main=screen_main)
    assert "the rebuilt screen.md, screen.json, curves.png differ from" in message  # its accuracy at the budget: as was
    message = error_of([f"--rebuild={keep.folder}", f"--out_root={keep.folder}"], main=screen_main)
    assert f"--out_root={keep.folder} holds a screen: give a folder of its own" in message


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[: len(text) // 2], "is damaged ("),
        (lambda text: json.dumps(json.loads(text) | {"version": 0}), "is damaged (not a version-1 record"),
        (lambda text: json.dumps(json.loads(text) | {"name": "report-nlq-s3"}), "names run mq/report-nlq-s3"),
        (lambda text: json.dumps(json.loads(text) | {"evals": []}), "holds no evaluation yet"),
        (lambda text: json.dumps(json.loads(text) | {"statement": "0" * 64}), "made under another statement"),
    ],
)
def test_a_damaged_record_or_one_of_another_statement_is_one_line(tmp_path, damage, words):
    planned, out_root = hand_made_screen(tmp_path)
    keep = keeper(tmp_path, out_root)
    keep.write(planned, multiple=1)
    path = records.path_of(keep.folder, "mq", "report-nlq-s2")
    path.write_text(damage(path.read_text()))
    with pytest.raises(records.RecordError) as e:
        keep.read_all([keep.name_of(p) for p in planned])
    assert words in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
