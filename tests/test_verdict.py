"""The practitioner's check (verdict.py) and the folder of documents it reads: .md and .txt at any depth,
duplicates dropped and counted, empty and undecodable files skipped with their reason, whole documents held
out (no held-out document contributes a token to training); one tiny verdict end to end (losses read back
from the runs' own logs, the latency table, the review page, a tally); and the one-line refusals."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import error_of, verdict_main

from nlq.data import documents
from nlq.data.dataset import open_split

ROOT = Path(__file__).resolve().parents[1]
WORDS = "river stone cloud market lantern copper window garden ladder winter orchard signal".split()


def folder(root: Path, n=30, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for i in range(n):
        sub = root / ("notes" if i % 2 else "more/deeper")
        sub.mkdir(parents=True, exist_ok=True)
        text = f"Document {i}. " + " ".join(rng.choice(WORDS, size=60))
        (sub / f"d{i:02d}{'.md' if i % 3 else '.txt'}").write_text(text + "\n")
    return root


def test_a_folder_of_documents_holds_out_whole_documents_and_says_what_it_left_out(tmp_path):
    src = folder(tmp_path / "docs")
    (src / "copy.md").write_text((src / "notes" / "d01.md").read_text())  # an exact duplicate
    (src / "empty.txt").write_text("  \n")
    (src / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (src / "blob.md").write_bytes(b"abc\x00def")
    (src / "image.png").write_bytes(b"\x89PNG")
    out = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, ROOT / "data/openwebtext/prepare.py", "--dataset", src, "--out_dir", out,
         "--val_size=0.1", "--test_size=0.1", "--tokenizer=char"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["documents"] == {"train": 24, "val": 3, "test": 3} and meta["duplicates"] == 1
    assert meta["skipped"] == {"empty": 1, "not UTF-8": 1, "binary (NUL bytes)": 1}
    assert "train: 24 documents" in done.stdout and "1 files of other types" in done.stdout
    decode = lambda ids: "".join(meta["chars"][i] for i in ids)  # noqa: E731
    texts = {s: [decode(d) for d in documents.documents_of(open_split(out, s), 0)] for s in ("train", "val", "test")}
    originals = {p.read_text() for p in src.rglob("d*.*")}
    for split, docs in texts.items():
        assert len(docs) == meta["documents"][split] and set(docs) <= originals
    held = set(texts["val"]) | set(texts["test"])
    assert not held & set(texts["train"]) and len(set(texts["train"]) | held) == 30  # every document once


def test_a_folder_without_enough_readable_documents_is_one_line(tmp_path):
    few = folder(tmp_path / "few", n=5)
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "x.md").write_bytes(b"\xff\xfe")
    for src, words in ((few, "holds 5 readable distinct document(s)"), (tmp_path / "none", "0 readable")):
        message = error_of([f"--data={src}", f"--out={tmp_path / 'V'}"], verdict_main)
        assert words in message and "add documents" in message
    assert not (tmp_path / "V").exists()


@pytest.mark.parametrize(
    "arms, words",
    [("linear", "name two arms or more"), ("linear,linear", "each once"), ("linear,quadratic", "neither a query mode")],
)
def test_arms_that_do_not_make_a_comparison_are_one_line(tmp_path, arms, words):
    message = error_of(
        [f"--data={folder(tmp_path / 'docs')}", f"--arms={arms}", f"--out={tmp_path / 'V'}"], verdict_main
    )
    assert words in message and not (tmp_path / "V").exists()


def test_a_report_directory_of_another_verdict_is_refused(tmp_path):
    out = tmp_path / "V"
    out.mkdir()
    (out / "verdict.json").write_text(json.dumps({"data": "elsewhere"}))
    message = error_of([f"--data={folder(tmp_path / 'docs')}", f"--out={out}"], verdict_main)
    assert "holds another verdict" in message and "choose another --out" in message
    (tmp_path / "W").mkdir()
    (tmp_path / "W" / "notes.txt").write_text("mine")
    assert "holds no verdict" in error_of([f"--data={tmp_path / 'docs'}", f"--out={tmp_path / 'W'}"], verdict_main)


def short_folder(root: Path) -> Path:
    """12 distinct documents of 6 to 17 characters with their newline: none longer than TINY's 24-token prompt."""
    root.mkdir(parents=True)
    for i in range(12):
        (root / f"d{i:02d}.txt").write_text("abcdefghijklmnopq"[: 5 + i] + "\n")
    return root


@pytest.mark.parametrize("dry_run", [[], ["--dry_run"]])
def test_a_review_the_test_split_cannot_give_is_refused_before_any_run_with_a_fix_that_works(tmp_path, dry_run):
    src, out = short_folder(tmp_path / "docs"), tmp_path / "V"
    message = error_of([f"--data={src}", f"--out={out}", *TINY, *dry_run], verdict_main)
    assert "the test split holds 0 document(s) longer than the prompt (24 tokens), the review needs 2" in message
    assert not (out / "runs").exists()
    fix = int(re.search(r"lower --prompt_tokens to (\d+) or less", message).group(1))
    test = documents.survey(src, 0.1, 0.1, 2357).splits["test"]  # the verdict's own split of the folder
    assert fix == sorted(len(p.read_text()) for p in test)[0] - 1  # the shorter of its two test documents
    verdict_main([f"--data={src}", f"--out={tmp_path / 'W'}", *TINY, f"--prompt_tokens={fix}", "--dry_run"])


def test_held_out_shares_are_honoured_or_refused_never_capped(tmp_path):
    src = short_folder(tmp_path / "docs")
    folder_ = documents.survey(src, 0.25, 0.2, 2357)
    assert (len(folder_.splits["val"]), len(folder_.splits["test"])) == (3, 3)  # ceil(3.0), ceil(2.4)
    with pytest.raises(documents.DataError, match=r"--test_size=0.6: give the share of documents to hold out"):
        documents.survey(src, 0.1, 0.6, 2357)
    with pytest.raises(documents.DataError, match="hold out 5 and 3 of 12 documents, leaving training less than half"):
        documents.survey(src, 0.4, 0.25, 2357)


TINY = ["--tokenizer=char", "--seeds=1,2", "--n_layer=1", "--n_embd=32", "--n_head=2", "--block_size=48",
        "--max_iters=12", "--lr_decay_iters=12", "--warmup_iters=2", "--eval_interval=6", "--eval_iters=2",
        "--batch_size=4", "--review_items=3", "--prompt_tokens=24", "--new_tokens=16", "--latency_repeats=2",
        "--progress_every=30"]  # fmt: skip


@pytest.mark.slow
def test_a_tiny_verdict_end_to_end_and_its_tally(tmp_path, capsys):
    src, out = folder(tmp_path / "docs", n=40), tmp_path / "V"
    (src / "notes.csv").write_text("a,b\n")  # a file of another type: ignored, and counted in the report
    verdict_main([f"--data={src}", f"--out={out}", *TINY])
    said = dict(re.findall(r"^(train|val|test): (\d+) documents", capsys.readouterr().out, re.M))
    assert set(said) == {"train", "val", "test"} and sum(map(int, said.values())) == 40  # every document, once
    result = json.loads((out / "report.json").read_text())
    for arm in ("linear", "residual_gelu"):
        finals = []
        for seed in (1, 2):
            lines = (out / "runs" / f"{arm}-s{seed}" / "metrics.jsonl").read_text().splitlines()
            finals.append(
                [r["val_loss"] for r in map(json.loads, lines) if r.get("step") == 12 and "val_loss" in r][-1]
            )
        r = result["losses"]["arms"][arm]
        assert r["val_loss_mean"] == pytest.approx(sum(finals) / 2) and r["perplexity"] == pytest.approx(
            math.exp(r["val_loss_mean"])
        )
    lat = result["latency"]["arms"]
    assert lat["linear"]["decode_ratio"]["median"] == 1.0 and lat["residual_gelu"]["decode_ms_per_token"]["median"] > 0
    key = json.loads((out / "review_key.json").read_text())
    assert len(key["items"]) == result["review"]["items"] >= 2 and (out / "review.html").stat().st_size > 0
    for name in ("report.md", "curves.png"):
        assert (out / name).stat().st_size > 0
    report_md = (out / "report.md").read_text()  # beside equal steps, at equal FLOPs (12 steps log no step time)
    for block in report_md.strip().split("\n\n"):  # markdown's blocks: a heading, a table or a paragraph alone
        starts = {line[:1] if line[:1] in "#|" else "text" for line in block.splitlines()}
        assert len(starts) == 1 and (starts != {"#"} or len(block.splitlines()) == 1), block
    assert "At equal training FLOPs: each run read where" in report_md
    assert "Not at equal training time: some run lacks it" in report_md
    assert "; 1 files of other types ignored." in report_md and "measures it again" in report_md
    tables = [b.splitlines()[2:] for b in report_md.split("\n\n") if b.startswith("| arm |")]
    orders = [[row.split(" | ")[0].removeprefix("| ") for row in t] for t in tables]
    assert len(orders) == 3 and orders[0] == orders[1] == orders[2] == ["linear", "residual_gelu"], orders
    # the reviewer's answers: A for every item; the tally unblinds them through the key
    choices = tmp_path / "choices.json"
    choices.write_text(json.dumps({"review": key["review"], "answers": dict.fromkeys(key["items"], "A")}))
    capsys.readouterr()
    verdict_main([f"--tally={choices}", f"--out={out}"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith(f"{len(key['items'])} of {len(key['items'])} items answered")
    tally = json.loads((out / "tally.json").read_text())
    expected = {arm: sum(v["A"] == arm for v in key["items"].values()) for arm in ("linear", "residual_gelu")}
    assert tally["wins"] == expected and tally["ties"] == 0
    # other answers to the same page: refused while the first tally is kept; the same answers again: alike
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"review": key["review"], "answers": dict.fromkeys(key["items"], "B")}))
    message = error_of([f"--tally={other}", f"--out={out}"], verdict_main)
    assert "holds the tally of other answers" in message and "move it aside" in message
    assert json.loads((out / "tally.json").read_text()) == tally
    verdict_main([f"--tally={choices}", f"--out={out}"])
    # the same command again: every run is skipped, the same losses, the same page
    page = (out / "review.html").read_bytes()
    verdict_main([f"--data={src}", f"--out={out}", *TINY, "--latency_repeats=3"])
    assert "start  " not in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text())["losses"] == result["losses"]
    assert (out / "review.html").read_bytes() == page
    # options that would make another page: refused, the page and its key kept
    message = error_of([f"--data={src}", f"--out={out}", *TINY, "--new_tokens=32"], verdict_main)
    assert "holds a review page made with --review_items=3, --prompt_tokens=24, --new_tokens=16" in message
    assert (out / "review.html").read_bytes() == page


def test_a_choices_file_of_another_report_is_one_line(tmp_path):
    out = tmp_path / "V"
    out.mkdir()
    (out / "review_key.json").write_text(
        json.dumps({"review": "r1", "arms": ["a", "b"], "items": {"i": {"A": "a", "B": "b"}}})
    )
    (tmp_path / "c.json").write_text(json.dumps({"review": "r2", "answers": {"i": "A"}}))
    assert "not to this report's 'r1'" in error_of([f"--tally={tmp_path / 'c.json'}", f"--out={out}"], verdict_main)
    assert "holds no review_key.json" in error_of([f"--tally={tmp_path / 'c.json'}", f"--out={tmp_path}"], verdict_main)
    (tmp_path / "d.json").write_text(json.dumps({"review": "r1", "answers": {"i": "A", "zz": "B"}}))
    message = error_of([f"--tally={tmp_path / 'd.json'}", f"--out={out}"], verdict_main)
    assert "answers items this review does not have ('zz')" in message and "'r1'" not in message
    message = error_of([f"--tally={tmp_path / 'gone.json'}", f"--out={out}"], verdict_main)
    assert "gone.json not found: give the answers file the review page exported" in message and "Errno" not in message


def test_the_reports_improvement_has_the_sign_and_scale_of_its_definition(tmp_path):
    """(reference mean - arm mean) / reference mean, paired by seed: an arm ahead of the reference (lower loss)
    positive, one behind negative, each against values computed here; perplexity is exp(mean loss)."""
    from types import SimpleNamespace

    from scipy import stats

    from nlq.comparison.verdict import losses

    final = {"linear": (2.0, 2.2, 2.1), "residual_gelu": (1.9, 2.0, 2.05), "identity": (2.1, 2.3, 2.3)}
    runs = []
    for arm, values in final.items():
        for seed, v in zip((1, 2, 3), values):
            d = tmp_path / f"{arm}-s{seed}"
            d.mkdir()
            (d / "config.json").write_text(json.dumps({"wandb_run_name": arm, "seed": seed, "max_iters": 10}))
            (d / "metrics.jsonl").write_text(json.dumps({"step": 10, "val_loss": v, "train_eval_loss": v}) + "\n")
            runs.append(SimpleNamespace(out_dir=d))
    arms = losses({"runs": runs, "stage1": []}, "linear")["arms"]
    ref = sum(final["linear"]) / 3
    for arm in ("residual_gelu", "identity"):
        expected = (ref - sum(final[arm]) / 3) / ref
        assert arms[arm]["improvement"] == pytest.approx(expected)
        assert arms[arm]["p"] == pytest.approx(stats.ttest_rel(final["linear"], final[arm]).pvalue)
        assert arms[arm]["perplexity"] == pytest.approx(math.exp(sum(final[arm]) / 3))
    assert arms["residual_gelu"]["improvement"] > 0 > arms["identity"]["improvement"]
    low, high = arms["residual_gelu"]["interval"]
    assert low < arms["residual_gelu"]["improvement"] < high and arms["linear"]["improvement"] == 0


def test_links_that_lead_nowhere_and_folders_named_like_documents_are_said(tmp_path, capsys):
    src = folder(tmp_path / "docs")
    (src / "gone.md").symlink_to(src / "nowhere.md")
    (src / "loop1.md").symlink_to(src / "loop2.md")
    (src / "loop2.md").symlink_to(src / "loop1.md")
    (src / "chapter.md").mkdir()
    (src / "chapter.md" / "inside.txt").write_text("a document inside a folder named like one\n")
    (src / "empty.txt").write_text("\n")
    found = documents.survey(src, 0.1, 0.1, 2357)
    assert found.skipped == {"dangling link": 1, "symlink loop": 2, "empty": 1}
    assert sum(len(v) for v in found.splits.values()) == 31  # the 30 and the one inside chapter.md/
    assert (
        "1 folders named like documents, read as folders"
        in documents.summary(
            found, {"documents": {k: len(v) for k, v in found.splits.items()}, "tokens": dict.fromkeys(found.splits, 0)}
        )[-1]
    )
    verdict_main([f"--data={src}", f"--out={tmp_path / 'V'}", *TINY, "--list_skipped", "--dry_run"])
    out = capsys.readouterr().out
    assert f"skipped (dangling link): {src / 'gone.md'}" in out and f"skipped (empty): {src / 'empty.txt'}" in out
    assert documents.skipped_text(found.skipped) == "1 dangling link, 2 symlink loop, 1 empty"


def test_the_arms_are_the_papers_query_modes_and_its_wide_mlp(tmp_path):
    """--arms names query modes on the shared config; wide_mlp is linear W_Q with the paper's 4.75x MLP;
    a .py names a config of one's own, its stem the arm."""
    from nlq.comparison import verdict

    own = tmp_path / "mine.py"
    own.write_text("n_layer = 2\n")
    arms = verdict.arm_list(f"linear, wide_mlp,residual_gelu,{own}", "shared.py")
    assert arms == [
        ("linear", "shared.py", ["--query_mode=linear"]),
        ("wide_mlp", "shared.py", ["--mlp_ratio=4.75"]),
        ("residual_gelu", "shared.py", ["--query_mode=residual_gelu"]),
        ("mine", str(own), []),
    ]


@pytest.mark.parametrize(
    "option, words",
    [("--top_k=0", "--top_k=0: give a number >= 1"),
     ("--new_tokens=0", "--new_tokens=0: give a number >= 1")],
)  # fmt: skip
def test_sampling_options_outside_their_domain_are_named(tmp_path, option, words):
    src = folder(tmp_path / "docs", n=12)
    message = error_of([f"--data={src}", f"--out={tmp_path / 'V'}", option, "--dry_run"], verdict_main)
    assert message == f"error: {words}" and not (tmp_path / "V").exists()


@pytest.mark.parametrize(
    "lengths, fix",
    [
        ([10], "raise --test_size (it holds out 1 document(s)) or add documents"),
        ([30, 1], "raise --test_size (it holds out 2 document(s)) or add documents"),  # a 0-token prompt: no fix
        ([30, 10, 4], "lower --prompt_tokens to 9 or less"),  # the second longest then has a token to continue
    ],
)
def test_a_review_the_test_split_cannot_give_names_a_fix_that_works(tmp_path, lengths, fix):
    from types import SimpleNamespace

    from nlq.comparison import verdict

    paths = []
    for i, n in enumerate(lengths):
        paths.append(tmp_path / f"t{i}.txt")
        paths[-1].write_text("ab" * (n // 2) + "a" * (n % 2))
    assert [len(documents.read_document(p)[0]) for p in paths] == lengths  # one character, one token
    args = SimpleNamespace(prompt_tokens=24, review_items=3)
    with pytest.raises(verdict.VerdictError, match=re.escape(fix)):
        verdict.check_review(args, SimpleNamespace(splits={"test": paths}), list, block_size=48)


def test_a_tune_grid_of_two_axes_runs_every_pair_in_stage_1(tmp_path, capsys):
    """Two --grid options make a grid of their product; stage 1's runs lie where docs/reproduce.md says
    (OUT/runs/tune-ARM-KEY=VALUE,...-sSEED) and score the validation split's first half."""
    src, out = folder(tmp_path / "docs"), tmp_path / "V"
    grid = ["--grid=learning_rate=1e-3,2e-3", "--grid=weight_decay=0,0.1"]
    verdict_main([f"--data={src}", f"--out={out}", "--tokenizer=char", "--tune", *grid, "--dry_run"])
    lines = [x for x in capsys.readouterr().out.splitlines() if "--wandb_group=runs/tune " in x]
    dirs = {re.search(r"--out_dir=(\S+)", x).group(1) for x in lines}
    assert dirs == {
        str(out / "runs" / f"tune-{arm}-learning_rate={lr},weight_decay={wd}-s1")
        for arm in ("linear", "residual_gelu")
        for lr in ("1e-3", "2e-3")
        for wd in ("0", "0.1")
    }
    assert all("--eval_part=first" in x for x in lines) and not out.exists()


def test_a_page_once_written_is_kept_for_the_options_that_made_it(tmp_path):
    """review.write keeps the options that made the page beside its key; the verdict's rerun with the same
    options goes on, one with other options is refused, naming the page's."""
    from argparse import Namespace

    from nlq.comparison import verdict
    from nlq.eval import review

    args = Namespace(review_items=3, prompt_tokens=24, new_tokens=16, temperature=0.8, top_k=200)
    item = {"id": "i1", "prompt": "p", "truth": "t", "linear": "x", "residual_gelu": "y"}
    review.write(tmp_path, [item], ("linear", "residual_gelu"), 1, "a title", verdict.review_options(args))
    verdict.check_page(tmp_path, args)
    made = "made with --review_items=3, --prompt_tokens=24, --new_tokens=16, --temperature=0.8, --top_k=200"
    with pytest.raises(verdict.VerdictError, match=re.escape(made)):
        verdict.check_page(tmp_path, Namespace(**{**vars(args), "new_tokens": 32}))


@pytest.mark.parametrize("new_tokens, prompt, new", [(4, 12, 4), (16, 8, 8), (20, 8, 8)])
def test_the_latency_table_fits_its_prompt_and_continuation_in_the_context(new_tokens, prompt, new):
    """A context of 16: the asked prompt (24) shortened so that the asked continuation fits; a continuation
    that fills the context or more gets half of it, after a prompt of the other half."""
    from argparse import Namespace

    from model import GPT, GPTConfig
    from nlq.comparison import verdict

    shape = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=32)
    models = {mode: GPT(GPTConfig(**shape, query_mode=mode)).eval() for mode in ("linear", "residual_gelu")}
    args = Namespace(prompt_tokens=24, new_tokens=new_tokens, latency_repeats=1)
    found = verdict.measure_latency(args, models, "linear", "cpu")
    assert (found["prompt"], found["new_tokens"]) == (prompt, new) and isinstance(found["prompt"], int)
    assert set(found["arms"]) == {"linear", "residual_gelu"}


def test_stage_2_runs_that_did_not_finish_are_counted_and_the_rerun_named(tmp_path, monkeypatch):
    """--tune: stage 1's two runs finish, one of stage 2's six does not; the verdict stops there, counting it."""
    from argparse import Namespace

    from nlq.comparison import sweep, verdict

    launched = []

    def launch(runs, args, extra, tolerate=None):
        launched.append(runs)
        return (runs if len(launched) == 1 else runs[1:]), {}

    monkeypatch.setattr(sweep, "launch", launch)
    monkeypatch.setattr(sweep, "chosen_points", lambda first, keys: {"linear": {}, "residual_gelu": {}})
    config = str(ROOT / "config" / "verdict.py")
    arms = [(a, config, [f"--query_mode={a}"]) for a in ("linear", "residual_gelu")]
    first = [sweep.runs_with(config, a, [1], tmp_path, o, {}, "tune")[0] for a, _, o in arms]
    args = Namespace(tune=True, seeds="2,3,4")
    with pytest.raises(verdict.VerdictError, match=re.escape("1 stage-2 runs did not finish (above): run the same")):
        verdict.train_all(args, arms, first, ["learning_rate"], tmp_path, [])
    assert [len(r) for r in launched] == [2, 6]  # stage 2: 2 arms x seeds 2, 3, 4
