"""harness.ProjectLM: lm-evaluation-harness tasks on this project's models, offline, on tasks defined here
from local JSONL files, with the bigram model whose answers are known by construction."""

import json
import math

import pytest

lm_eval = pytest.importorskip("lm_eval")

from helpers import Successor, encode_chars, tiny_args  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import harness  # noqa: E402
import train  # noqa: E402
import zeroshot  # noqa: E402

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
    ours = zeroshot.multiple_choice(Successor(), encode_chars, spaced, batch_size=3, protocol="standard")
    assert results["nlq_mc"]["acc,none"] == pytest.approx(ours["acc"])
    # loglikelihood's acc is greedy reproduction of the target: LAMBADA's rule
    lambada = zeroshot.lambada(Successor(), encode_chars, LL_ITEMS, batch_size=2)
    assert results["nlq_ll"]["acc,none"] == pytest.approx(lambada["acc"]) == pytest.approx(1 / 3)


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
    train.main(tiny_args(char_data, tmp_path / "run", max_iters=2, eval_interval=2))
    out = tmp_path / "h.json"
    args = [f"--out_dir={tmp_path / 'run'}", "--device=cpu", f"--out={out}", f"--harness_include={tasks_dir}"]
    zeroshot.main([*args, "--harness=nlq_mc"])
    written = json.loads(out.read_text())
    assert written["protocol"] == "lm-evaluation-harness" and 0 <= written["results"]["nlq_mc"]["acc,none"] <= 1
    for task, message in [
        ("no_such_task", "harness task(s) ['no_such_task'] unknown"),
        ("nlq_ll", "an item cannot be encoded with the model's tokenizer: characters ['x', 'z']"),
    ]:
        with pytest.raises(SystemExit) as e:
            zeroshot.main([*args, f"--harness={task}"])
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)
