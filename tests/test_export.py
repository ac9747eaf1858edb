"""export.py --format=hf / gpt2: the Hugging Face directory loads in transformers with this project's logits
and greedy tokens, in lm-eval with the harness adapter's numbers, and back into this project."""

import json
import os

import numpy as np
import pytest
import torch
from helpers import EXPORT_SHAPES, error_of, export_main, export_model, tiny_args, train_main, zeroshot_main

from model import GPT, GPTConfig
from nlq.data.dataset import write_dataset
from nlq.data.tokenizer import gpt2_encoding
from nlq.interop import hf_export
from nlq.interop.importers import from_pretrained

transformers = pytest.importorskip("transformers")


def greedy(model_fn, x, n):
    for _ in range(n):
        x = torch.cat([x, model_fn(x)[:, -1:].argmax(-1)], dim=1)
    return x


def outputs_of(model, x, names):
    """{name: output} of the named submodules (a block's output, without the export's attention weights)."""
    seen, hooks = {}, []
    for name in names:
        module = model.get_submodule(name)
        hooks.append(
            module.register_forward_hook(
                lambda m, i, o, n=name: seen.__setitem__(n, o[0] if isinstance(o, tuple) else o)
            )
        )
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


def assert_close_relative(actual, expected, rtol=1e-5):
    """Equal within rtol of expected's largest magnitude: tensors of order one or ten, as trained ones are."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=rtol * float(expected.abs().max()))


@pytest.mark.parametrize("shape", sorted(EXPORT_SHAPES))
def test_an_hf_export_gives_this_models_logits_tokens_and_round_trip(tmp_path, shape):
    """At trained scale (weights of order one: every branch moves the output), the export's query MLP,
    every block's output, the logits and the labels= loss equal the project's, relative to their size."""
    model = export_model(**EXPORT_SHAPES[shape])
    hf_export.export(model, {"tokenizer": "gpt2"}, tmp_path / "hf")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    x = torch.randint(0, 50257, (2, 48), generator=torch.Generator().manual_seed(1))
    names = [f"transformer.h.{i}" for i in range(model.config.n_layer)]
    names += [f"{n}.attn.query" for n in names if model.config.query_mode == "residual_gelu"]
    ours, theirs = outputs_of(model, x, names), outputs_of(loaded, x, names)
    for name in names:
        assert_close_relative(theirs[name], ours[name])
    with torch.no_grad():
        logits = model(x)[0]
        assert logits.std() > 0.5  # trained scale: logits far from the initialisation's near-uniform ones
        assert_close_relative(loaded(x).logits, logits)
        assert_close_relative(loaded(x, labels=x).loss, model(x[:, :-1], x[:, 1:])[1])
        prompt = x[:1, :6]
        mine = model.generate(prompt, 10, temperature=0)
        generated = loaded.generate(prompt, max_new_tokens=10, do_sample=False, attention_mask=torch.ones_like(prompt))
        assert torch.equal(generated, mine)
        again = from_pretrained(str(tmp_path / "hf")).eval()  # no code of the export is run
        assert_close_relative(again(x)[0], logits)
    assert not any(".lora_" in k for k in again.state_dict())  # merged on the way out
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=False)
    text = "Queries need not be linear, said the paper."
    assert tok(text)["input_ids"] == gpt2_encoding().encode_ordinary(text)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["auto_map"]["AutoModelForCausalLM"]


@pytest.mark.parametrize("kw", [dict(), dict(tie_embeddings=False, lora_rank=2, activation="gelu_tanh")])
def test_a_linear_model_exports_as_a_plain_gpt2(tmp_path, kw):
    model = export_model(**kw)
    hf_export.export(model, {"tokenizer": "gpt2"}, tmp_path / "gpt2", fmt="gpt2")
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    assert not list((tmp_path / "gpt2").glob("*.py"))  # no remote code
    umask = os.umask(0)
    os.umask(umask)
    modes = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / "gpt2").iterdir()}  # one rule, the directory's
    assert (tmp_path / "gpt2").stat().st_mode & 0o777 == 0o777 & ~umask
    assert modes["model.safetensors"] == 0o666 & ~umask and set(modes.values()) == {0o666 & ~umask}, modes
    x = torch.randint(0, 50257, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close_relative(loaded(x).logits, model(x)[0])
        assert torch.equal(greedy(lambda t: loaded(t).logits, x[:1, :5], 8), model.generate(x[:1, :5], 8, 0))


@pytest.mark.parametrize(
    "kw,named",
    [
        (dict(query_mode="residual_gelu"), "query_mode='residual_gelu'"),
        (dict(pos_embedding="rotary"), "pos_embedding='rotary'"),
        (dict(n_kv_head=1), "n_kv_head=1"),
        (dict(preproj=True, attn_scale=0.3), "preproj=True, attn_scale=0.3"),
    ],
)
def test_what_gpt2_cannot_express_is_refused_in_one_line(tmp_path, kw, named):
    with pytest.raises(hf_export.ExportError, match=f"GPT-2 cannot express {named}: export with --format=hf"):
        hf_export.export(export_model(**kw), {"tokenizer": "gpt2"}, tmp_path / "x", fmt="gpt2")
    assert os.listdir(tmp_path) == []  # nothing written, not even a temporary directory


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    """A tiny run on GPT-2 BPE data, trained by train.py (one process, sharded format), and its data."""
    root = tmp_path_factory.mktemp("bpe")
    enc = gpt2_encoding()
    text = " ".join(f"The {w} sat on the mat and looked at the {v}." for w in ("cat", "dog", "owl") for v in "abcdefg")
    ids = np.array(enc.encode_ordinary(text * 20), dtype=np.int64)
    meta = {"tokenizer": "gpt2", "vocab_size": 50257}
    write_dataset(root / "data", {"train": [ids[: len(ids) * 9 // 10]], "val": [ids[len(ids) * 9 // 10 :]]}, meta)
    args = tiny_args(root / "data", root / "run", vocab_size=50304, query_mode="residual_gelu", max_iters=4)
    train_main([*args, "--parallelism=fsdp"])  # one process: the sharded format
    return root


def test_export_cli_from_a_sharded_run_and_its_refusals(bpe_run, tmp_path):
    run = bpe_run / "run"
    export_main([f"--out_dir={run}", "--format=hf", f"--dest={tmp_path / 'hf'}"])
    model = from_pretrained(str(tmp_path / "hf"))
    assert model.config.query_mode == "residual_gelu"
    cases = [
        ([f"--out_dir={tmp_path / 'nothing'}", "--format=hf", f"--dest={tmp_path / 'a'}"], "holds no checkpoint"),
        ([f"--out_dir={run}", "--format=hf", f"--dest={tmp_path / 'hf'}"], "exists and is not an empty directory"),
        ([f"--out_dir={run}", "--format=hf", f"--dest={tmp_path / 'no' / 'such' / 'x'}"], "does not exist"),
        ([f"--out_dir={run}", "--format=hf"], "pass --dest=DIR"),
        ([f"--out_dir={run}", "--format=gpt2", f"--dest={tmp_path / 'g'}"], "GPT-2 cannot express query_mode"),
    ]
    before = sorted(os.listdir(tmp_path))
    for argv, words in cases:
        assert words in error_of(argv, main=export_main), argv
    assert sorted(os.listdir(tmp_path)) == before  # nothing half-written


def test_a_character_level_run_is_refused_in_one_line(char_data, tmp_path):
    train_main(tiny_args(char_data, tmp_path / "run", max_iters=2))
    message = error_of([f"--out_dir={tmp_path / 'run'}", "--format=hf", f"--dest={tmp_path / 'x'}"], main=export_main)
    assert "character-level run has no transformers tokenizer" in message and not (tmp_path / "x").exists()


def test_lm_eval_on_the_export_gives_the_harness_adapters_numbers(bpe_run, tmp_path):
    """lm-eval's own 'hf' model on the export, against zeroshot.py --harness on the run itself."""
    pytest.importorskip("accelerate")
    import lm_eval
    from lm_eval.tasks import TaskManager

    export_main([f"--out_dir={bpe_run / 'run'}", "--format=hf", f"--dest={tmp_path / 'hf'}"])
    rows = [{"context": "The cat sat on the", "endings": [" mat", " dog", " owl"], "label": 0}] * 2
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "roll.jsonl").write_text(json.dumps({"text": "The owl sat on the mat and looked at the g."}) + "\n")
    for name, kind, fields, metric in [
        ("x_mc", "multiple_choice", "doc_to_text: context\ndoc_to_choice: endings\ndoc_to_target: label\n", "acc"),
        ("x_roll", "loglikelihood_rolling", 'doc_to_text: ""\ndoc_to_target: text\n', "word_perplexity"),
    ]:
        (tmp_path / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / name[2:]}.jsonl\n"
            f"test_split: test\noutput_type: {kind}\n{fields}metric_list:\n  - metric: {metric}\n"
        )
    theirs = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={tmp_path / 'hf'},trust_remote_code=True",
        tasks=["x_mc", "x_roll"],
        task_manager=TaskManager(include_path=str(tmp_path)),
        device="cpu",
    )["results"]
    out = tmp_path / "h.json"
    zeroshot_main(
        [f"--out_dir={bpe_run / 'run'}", "--harness=x_mc,x_roll", f"--harness_include={tmp_path}", f"--out={out}"]
        + ["--device=cpu", "--dtype=float32"]
    )
    ours = json.loads(out.read_text())["results"]
    assert ours["x_mc"]["acc,none"] == theirs["x_mc"]["acc,none"]
    assert ours["x_roll"]["word_perplexity,none"] == pytest.approx(theirs["x_roll"]["word_perplexity,none"], rel=1e-5)


def small_model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=50304))


BPE = {"tokenizer": "gpt2", "vocab_size": 50257}


def test_non_finite_weights_are_not_exported(tmp_path):
    model = small_model()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[3, 2] = float("nan")
    with pytest.raises(hf_export.ExportError, match=r"non-finite weights in 1 tensors \(transformer.h.0.mlp.c_fc"):
        hf_export.export(model, BPE, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []


def test_a_symlinked_dest_is_refused_before_the_model_is_loaded(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    message = error_of([f"--out_dir={tmp_path / 'no-run'}", "--format=hf", f"--dest={tmp_path / 'link'}"], export_main)
    assert "is a symbolic link" in message  # not "holds no checkpoint": the destination is checked first


def test_a_write_that_fails_mid_export_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A full disk surfaces from safetensors' writer as its own error, not an OSError."""
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")

    monkeypatch.setattr(hf_export, "write_nlq", full)
    with pytest.raises(hf_export.ExportError, match="cannot write .*StorageFull.*free space"):
        hf_export.export(small_model(), BPE, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []
