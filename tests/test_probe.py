import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import Successor, analyze_skip_main, encode_chars, train_main, zeroshot_main

from configurator import parse
from model import GPT, GPTConfig
from nlq.data.dataset import DataError, open_split, write_dataset
from nlq.data.tokenizer import EOT, gpt2_encoding
from nlq.eval import scoring, taskdata
from nlq.inference.zeroshot import lambada, multiple_choice, paper_cut, perplexity
from nlq.interop.importers import from_pretrained
from nlq.run import checkpoint
from nlq.run.config import TrainConfig

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokens")
    g = torch.Generator().manual_seed(0)
    write_dataset(
        out,
        {
            "train": [torch.randint(0, 80, (5000,), generator=g).numpy()],
            "val": [torch.randint(0, 80, (1000,), generator=g).numpy()],
        },
        {"tokenizer": "gpt2", "vocab_size": 80},
    )
    return out


def pretrained(tmp_path, kind):
    torch.manual_seed(0)
    if kind == "gpt2":
        hf = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=80)
        )
    else:
        hf = transformers.GPTNeoXForCausalLM(
            transformers.GPTNeoXConfig(
                vocab_size=80,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                max_position_embeddings=64,
                rotary_pct=0.25,
            )
        )
    path = tmp_path / kind
    hf.save_pretrained(path)
    return path


def probe_args(data_dir, out_dir, init_from, **kw):
    args = dict(
        init_from=init_from,
        dataset=data_dir,
        out_dir=out_dir,
        freeze_pretrained=True,
        preproj=True,
        content_skip=True,
        block_size=32,
        batch_size=4,
        gradient_accumulation_steps=1,
        max_iters=3,
        lr_decay_iters=5,  # one schedule, also for a test that resumes up to step 5
        eval_interval=3,
        eval_iters=1,
        warmup_iters=1,
        learning_rate=1e-2,
        weight_decay=0.0,
        device="cpu",
        compile=False,
        cpu_peak_flops=1e11,
    )
    args.update(kw)
    return [f"--{k}={v}" for k, v in args.items()]


@pytest.mark.parametrize("kind", ["gpt2", "neox"])
def test_frozen_probe_trains_only_the_new_parameters(data_dir, tmp_path, kind, capsys):
    path = pretrained(tmp_path, kind)
    train_main(probe_args(data_dir, tmp_path / "run", path))
    assert "trainable" in capsys.readouterr().out
    before = from_pretrained(str(path)).state_dict()
    after = checkpoint.load(tmp_path / "run" / "ckpt.pt")["model"]
    frozen = [k for k in after if not GPT.is_added(k)]
    added = [k for k in after if GPT.is_added(k)]
    assert frozen and added
    assert all(torch.equal(after[k], before[k]) for k in frozen)
    fresh = from_pretrained(str(path), dict(preproj=True, content_skip=True))
    assert all(after[k].shape == fresh.state_dict()[k].shape for k in added)
    assert not torch.equal(after["transformer.h.0.skip.weight"], torch.zeros_like(after["transformer.h.0.skip.weight"]))

    train_main(probe_args(data_dir, tmp_path / "run", "resume", max_iters=5))  # resume keeps the import's shape
    assert checkpoint.load(tmp_path / "run" / "ckpt.pt")["iter_num"] == 5


def test_lora_probe_and_probe_errors(data_dir, tmp_path):
    path = pretrained(tmp_path, "gpt2")
    train_main(probe_args(data_dir, tmp_path / "lora", path, preproj=False, content_skip=False, lora_rank=4))
    state = checkpoint.load(tmp_path / "lora" / "ckpt.pt")["model"]
    assert any("lora_attn" in k for k in state) and not any(".skip." in k for k in state)
    # On a bf16 base, LoRA's weights and AdamW state stay float32 (as PEFT keeps adapters); the rest is bf16.
    bf16 = probe_args(data_dir, tmp_path / "bf16", path, lora_rank=4, param_dtype="bfloat16")
    train_main(bf16)
    ckpt = checkpoint.load(tmp_path / "bf16" / "ckpt.pt")
    dtypes = {k: v.dtype for k, v in ckpt["model"].items() if v.is_floating_point()}
    assert all((d == torch.float32) == (".lora_" in k) for k, d in dtypes.items()), dtypes
    moments = [s["exp_avg"].dtype for s in ckpt["optimizer"]["state"].values()]
    assert torch.float32 in moments and torch.bfloat16 in moments  # LoRA's, and the pre-projection's and skip's
    train_main([*bf16, "--init_from=resume", "--max_iters=5"])
    assert checkpoint.load(tmp_path / "bf16" / "ckpt.pt")["iter_num"] == 5

    for args, message in [
        (probe_args(data_dir, tmp_path / "a", "scratch", vocab_size=80), "needs pretrained weights"),
        (probe_args(data_dir, tmp_path / "b", path, preproj=False, content_skip=False), "leaves nothing to train"),
    ]:
        with pytest.raises(SystemExit) as e:
            train_main(args)
        assert message in str(e.value.code)


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("*.py")), ids=lambda p: p.stem)
def test_every_config_file_parses_and_builds(path):
    """A renamed field, a bad value or an impossible shape in any shipped config fails here, not on a GPU."""
    cfg, model_cfg = parse([str(path)], TrainConfig, GPTConfig)
    if cfg.init_from == "scratch":
        with torch.device("meta"):
            assert GPT(model_cfg).num_params() > 0
    else:  # a probe: its pretrained shape comes from the weights, the config sets what is added
        assert cfg.freeze_pretrained and (model_cfg.preproj or model_cfg.content_skip or model_cfg.lora_rank)


def test_scoring_on_items_with_known_answers():
    model = Successor()
    items = [{"text": "uvwxyz abc"}, {"text": "uvwxyz abd"}, {"text": "ghij klm"}]
    assert lambada(model, encode_chars, items, batch_size=2) == {
        "acc": pytest.approx(1 / 3),
        "n": 3,
        "skipped": 0,
    }
    items = [
        {"context": "abc", "endings": ["x", "de", "dx", "zz"], "label": 1},  # both scores right
        {"context": "mno", "endings": ["pqr", "a", "pa"], "label": 0},  # both right
        {"context": "mno", "endings": ["pq", "a"], "label": 1},  # both wrong
        # one bad step (-20) against three in 14 characters (-60, but -4.3 per character)
        {"context": "mno", "endings": ["a", "pqrstuvwxyzaaa"], "label": 1},
    ]
    result = multiple_choice(model, encode_chars, items, batch_size=3, protocol="standard")
    assert result == {"acc": 0.5, "acc_norm": 0.75, "n": 4}
    lines = ["the quick brown fox", "jumps over the lazy dog and a long tail " * 3]
    ppl = perplexity(Successor(uniform=True), encode_chars, lines, max_len=20, batch_size=2)
    assert ppl["ppl"] == pytest.approx(27) and ppl["ppl_tokens"] == pytest.approx(27) and ppl["n"] == 2
    # 'abcdef' follows the successor rule: one bad step in 5 costs ~20 nats, averaged per line vs per token.
    ppl = perplexity(model, encode_chars, ["abcdef", "abcdxf"], max_len=20, batch_size=2)
    assert math.log(ppl["ppl"]) == pytest.approx((0 + 40 / 5) / 2, rel=1e-3)


def test_probe_recipe_lines_and_bf16_parameters(tmp_path):
    """The official probe's data (one line per row, padding ignored) and precision (bf16 parameters and
    Adam state): the run trains, saves bf16 weights, and resumes."""
    g = torch.Generator().manual_seed(0)
    lines = [torch.randint(1, 80, (int(n),), generator=g).tolist() + [0] for n in torch.randint(5, 40, (200,))]
    flat = [t for line in lines for t in line]
    cut = 3 * len(flat) // 4
    meta = {"tokenizer": "gpt2", "vocab_size": 80, "eos": 0}
    write_dataset(tmp_path / "d", {"train": [flat[:cut]], "val": [flat[cut:]]}, meta)
    args = [
        f"--dataset={tmp_path / 'd'}", "--sampling=lines", "--param_dtype=bfloat16", "--n_layer=2", "--n_head=2",
        "--n_embd=32", "--block_size=32", "--vocab_size=80", "--batch_size=4", "--gradient_accumulation_steps=1",
        "--max_iters=6", "--lr_decay_iters=6", "--eval_interval=3", "--eval_iters=1", "--device=cpu",
        "--compile=False", "--cpu_peak_flops=1e11", f"--out_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    train_main([*args[:-1], "--max_iters=3", args[-1]])
    ckpt = checkpoint.load(tmp_path / "run" / "ckpt.pt")
    assert all(v.dtype == torch.bfloat16 for k, v in ckpt["model"].items() if v.is_floating_point())
    train_main([*args, "--init_from=resume"])
    losses = [
        json.loads(x)["loss"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"loss"' in x
    ]
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)


def test_the_papers_rule_is_mean_log_prob_per_token_not_sum_nor_per_character():
    """'_' makes no token here, so characters and tokens differ. After 'z' the successor model expects ' a b
    c ...'; every unexpected character costs about 20 nats. Ending 0: ' x' plus ten silent '_' (2 tokens,
    -20: -10 per token, -1.7 per character); ending 1: ' abx' (4 tokens, -20: -5 per token and character).
    The sums tie (the first wins), per character picks 0, per token (the paper) picks 1."""
    encode = lambda s: encode_chars(s.replace("_", ""))  # noqa: E731
    items = [{"context": "z", "endings": [" x" + "_" * 10, " abx"], "label": 1}]
    paper = multiple_choice(Successor(), encode, items, batch_size=2, protocol="paper")
    standard = multiple_choice(Successor(), encode, items, batch_size=2, protocol="standard")
    assert paper == {"acc": 1.0, "n": 1, "skipped": 0}
    assert standard == {"acc": 0.0, "acc_norm": 0.0, "n": 1}


def test_the_papers_arc_and_wikitext_selection(tmp_path, monkeypatch):
    row = {"question": "What is 2+2?", "choices": {"text": ["4", "5"], "label": ["A", "B"]}, "answerKey": "A"}
    (tmp_path / "arc.jsonl").write_text(json.dumps(row) + "\n")
    (paper,) = taskdata.items("arc_easy", str(tmp_path / "arc.jsonl"), protocol="paper")
    (standard,) = taskdata.items("arc_easy", str(tmp_path / "arc.jsonl"), protocol="standard")
    assert paper["context"] + paper["endings"][0] == "What is 2+2? 4"  # question + " " + choice
    assert standard["context"] == "Question: What is 2+2?\nAnswer:"
    datasets = pytest.importorskip("datasets")
    splits = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: splits.append(split) or [row])
    list(taskdata.items("arc_easy", protocol="paper")), list(taskdata.items("arc_easy", protocol="standard"))
    assert splits == ["validation", "test"]  # the paper's code scores the validation split

    texts = ["", " = Title = \n", " " + "a" * 60 + " \n", "", " short\n", "b" * 70 + "\n", " " + "c" * 80 + "\n"]
    (tmp_path / "wiki.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    path = str(tmp_path / "wiki.jsonl")
    # paper: rows among the first 6 (blank ones counted), raw; standard: the first 2 qualifying lines, stripped
    assert taskdata.wikitext_paper_rows(6, 50, path) == [" " + "a" * 60 + " \n", "b" * 70 + "\n"]
    assert taskdata.wikitext_lines("validation", 50, 3, path) == ["a" * 60, "b" * 70, "c" * 80]


def test_eval_cli_on_local_files(data_dir, tmp_path, monkeypatch):
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=64)
    ).save_pretrained(tmp_path / "gpt2_full")  # the real vocabulary, so GPT-2 BPE fits
    files = {
        "lambada": [{"text": "the cat sat on the mat"}, {"text": "one two three four"}],
        "hellaswag": [{"ctx": "He opened the door", "endings": ["and left.", "a", "b", "c"], "label": "0"}],
        "arc_easy": [
            {"question": "What is 2+2?", "choices": {"text": ["4", "5"], "label": ["A", "B"]}, "answerKey": "A"}
        ],
        "wikitext": [{"text": " = Title = \n"}, {"text": "A line of article text that is long enough to count here."}],
    }
    args = [
        f"--init_from={tmp_path / 'gpt2_full'}",
        f"--out={tmp_path / 'eval.json'}",
        "--device=cpu",
        "--wikitext_min_tokens=5",
    ]
    for task, rows in files.items():
        (tmp_path / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        args.append(f"--{task}_file={tmp_path / f'{task}.jsonl'}")
    zeroshot_main(args)
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["protocol"] == "paper" and written["precision"] == "bfloat16"  # its code's weights
    results = written["results"]
    assert results["lambada"]["n"] == 2 and results["hellaswag"]["n"] == 1 and results["wikitext"]["n"] == 1
    assert results["wikitext"]["ppl"] > 1 and 0 <= results["arc_easy"]["acc"] <= 1
    assert "acc_norm" not in results["hellaswag"]  # the paper's code reports one accuracy
    zeroshot_main([*args, "--protocol=standard", "--tasks=hellaswag"])
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["protocol"] == "standard" and {"acc", "acc_norm"} <= set(written["results"]["hellaswag"])
    assert written["precision"] == "float32"

    (tmp_path / "bad.jsonl").write_text(json.dumps({"sentence": "x"}) + "\n")
    (tmp_path / "cut.jsonl").write_text('{"text": "a b"}\n{"text": \n{"text": "c d"}\n')
    small = pretrained(tmp_path, "gpt2")  # vocab 80: GPT-2 BPE ids do not fit
    train_main(probe_args(data_dir, tmp_path / "run", small, max_iters=1, eval_interval=1))
    datasets = pytest.importorskip("datasets")

    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    before = (tmp_path / "eval.json").read_text()
    for extra, message in [
        (["--tasks=squad"], "tasks=('squad',) is invalid"),
        (["--init_from=resume", f"--out_dir={tmp_path / 'run'}"], "the model's vocab_size is 80"),
        ([f"--lambada_file={tmp_path / 'bad.jsonl'}", "--tasks=lambada"], "lacks ['text']"),
        ([f"--lambada_file={tmp_path / 'cut.jsonl'}", "--tasks=lambada"], "cut.jsonl line 2 is not valid JSON"),
        (["--lambada_file=None", "--tasks=lambada"], "pass a local JSONL copy with --lambada_file"),
        (["--limit=0"], "limit=0 is invalid"),
        ([f"--out={tmp_path / 'nowhere' / 'e.json'}"], "not writable"),
        ([f"--out={tmp_path}"], "is a directory: name a file"),
    ]:
        with pytest.raises(SystemExit) as e:
            zeroshot_main(args + extra)
        assert str(e.value.code).startswith("error: ") and "\n" not in str(e.value.code)
        assert message in str(e.value.code)
    assert (tmp_path / "eval.json").read_text() == before  # a failed evaluation overwrote nothing


def test_wikitext_prepare_from_local_files(tmp_path):
    rows = [" = Heading = ", " " + "x" * 50 + " ", " " + "A" * 51, "short", "B" * 60 + " words", "C" * 70]
    for split in ("train", "val"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"text": r + "\n"}) + "\n" for r in rows))
    r = subprocess.run(
        [
            sys.executable,
            ROOT / "data/wikitext/prepare.py",
            "--train_file",
            tmp_path / "train.jsonl",
            "--val_file",
            tmp_path / "val.jsonl",
            "--train_lines",
            "2",
            "--out_dir",
            tmp_path / "out",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    enc = gpt2_encoding()
    # > 50 characters once stripped, the first 2 only, the raw rows (" text\n" as WikiText holds them)
    expected = enc.encode_ordinary(" " + "A" * 51 + "\n") + [EOT] + enc.encode_ordinary("B" * 60 + " words\n") + [EOT]
    assert open_split(tmp_path / "out", "train").tolist() == expected
    assert "warning: val has 3 lines of >= 51 characters, not 300" in r.stderr  # fewer qualifying lines than asked

    model_only = tmp_path / "model_only"  # a model directory saved without its tokenizer
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16)).save_pretrained(model_only)
    r = subprocess.run(
        [sys.executable, ROOT / "data/wikitext/prepare.py", "--tokenizer", model_only, "--out_dir", tmp_path / "x"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == (  # after hub.py's offline notice, if any
        f"error: {model_only} holds no tokenizer files (tokenizer.json, tokenizer_config.json, vocab.json, "
        "tokenizer.model, spiece.model): pass a tokenizer directory"
    )
    assert not (tmp_path / "x").exists()


def test_skip_norm_analysis(data_dir, tmp_path, capsys):
    path = pretrained(tmp_path, "gpt2")
    train_main(probe_args(data_dir, tmp_path / "run", path, max_iters=1, eval_interval=1))
    state = checkpoint.load(tmp_path / "run" / "ckpt.pt")["model"]
    capsys.readouterr()
    analyze_skip_main([f"--out_dir={tmp_path / 'run'}", f"--png={tmp_path / 'n.png'}"])
    out = capsys.readouterr().out
    for i in range(2):
        assert f"| {i} | {state[f'transformer.h.{i}.skip.weight'].norm().item():.4f} |" in out
    assert (tmp_path / "n.png").read_bytes()[:4] == b"\x89PNG"
    train_main(probe_args(data_dir, tmp_path / "plain", path, max_iters=1, eval_interval=1, content_skip=False))
    with pytest.raises(SystemExit) as e:
        analyze_skip_main([f"--out_dir={tmp_path / 'plain'}", "--png="])
    assert "has no content skip" in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        analyze_skip_main([f"--out_dir={tmp_path / 'run'}", f"--png={tmp_path / 'nowhere' / 'n.png'}"])
    assert str(e.value.code).startswith("error: --png") and "not writable" in str(e.value.code)


def test_the_official_codes_edge_rows_are_skipped_and_counted_under_the_paper_protocol(tmp_path):
    """arXiv 2604.10791's 07_benchmarks.py: a LAMBADA passage without a space (no last word) or whose context
    and word exceed 512 tokens is skipped, as is an ARC row whose answerKey is none of its labels; the
    count of skipped rows is reported. The standard protocol refuses such rows in one line instead."""
    model = Successor()
    passages = [{"text": "uvwxyz abc"}, {"text": "nospace"}, {"text": "a" * 600 + " abc"}, {"text": "ghij klm"}]
    # kept: "uvwxyz abc" (z -> space -> a b c: right) and "ghij klm" (j -> k, not space: wrong)
    assert lambada(model, encode_chars, passages, 2) == {"acc": 0.5, "n": 2, "skipped": 2}
    with pytest.raises(DataError, match="has no space"):
        lambada(model, encode_chars, passages, 2, protocol="standard")
    rows = [
        {"question": "xyz", "choices": {"text": ["q", "a"], "label": ["A", "B"]}, "answerKey": "B"},
        {"question": "xyz", "choices": {"text": ["q", "a"], "label": ["A", "B"]}, "answerKey": "E"},
    ]
    (tmp_path / "arc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = list(taskdata.items("arc_easy", str(tmp_path / "arc.jsonl"), protocol="paper"))
    assert items[1] == {"skip": "answerKey 'E' is not among the labels ['A', 'B']"}
    # xyz + " a": z -> space -> a, right; " q" is not
    assert multiple_choice(model, encode_chars, items, 2) == {"acc": 1.0, "n": 1, "skipped": 1}
    with pytest.raises(DataError, match="answerKey 'E' is not among the labels"):
        multiple_choice(model, encode_chars, items, 2, protocol="standard")


def official_choice_scores(model, encode, context, endings):
    """arXiv 2604.10791's evaluate_hellaswag / evaluate_arc_easy scoring, written out: the text tokenized
    whole and cut to its first 512 tokens, one forward each, log_softmax and the sum in the logits' dtype,
    over the tokens after the context's own length, divided by their number (at least 1)."""
    scores = []
    for ending in endings:
        ids = torch.tensor(encode(context + ending)[:512])[None]
        ctx_len = len(encode(context))
        with torch.no_grad():
            logits = model(ids)[0]
        shift_logits, shift_labels = logits[0, ctx_len - 1 : -1], ids[0, ctx_len:]
        lp = torch.log_softmax(shift_logits, dim=-1).gather(1, shift_labels[:, None]).squeeze(1)
        scores.append(lp.sum().item() / max(len(shift_labels), 1))
    return scores


def test_the_paper_protocol_scores_choices_in_bf16_and_cuts_the_text_at_512_tokens():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=640, vocab_size=50304)).eval()
    model.to(torch.bfloat16)  # as its code loads the weights
    encode = gpt2_encoding().encode_ordinary
    words = "the cat sat on a mat and then went out to see the dog in the park".split()
    endings = [" " + " ".join(words[i : i + 9]) for i in range(4)]  # 10 tokens each
    for n_ctx in (200, 505, 515):  # whole, cut inside the endings, cut before them
        context = " ".join(words[i % len(words)] for i in range(n_ctx))
        assert abs(len(encode(context)) - n_ctx) <= 1
        reference = official_choice_scores(model, encode, context, endings)
        expected = max(range(4), key=reference.__getitem__)
        for label in range(4):
            item = {"context": context, "endings": endings, "label": label}
            got = multiple_choice(model, encode, [item], batch_size=4, protocol="paper")["acc"]
            assert got == float(label == expected), (n_ctx, label, reference)
        if n_ctx == 515:
            assert reference == [0.0] * 4  # nothing of any ending is left: the first wins
    requests = [(encode(" ".join(words[:5])), encode(e)) for e in endings]
    native = [lp for lp, _ in scoring.loglikelihoods(model, requests, 4, native=True)]
    widened = [lp for lp, _ in scoring.loglikelihoods(model, requests, 4)]
    assert all(lp == torch.tensor(lp).bfloat16().item() for lp in native)  # rounded to bf16, as its sum is
    assert native != widened


def test_the_paper_protocols_512_token_rules_at_their_edge():
    """LAMBADA: a context and word of 512 tokens in all are scored, 513 skipped. Choices: the text is cut to
    its first 512 tokens, so a context of 510 keeps two ending tokens, 511 one, 512 none."""
    model = Successor()
    passages = [{"text": "a" * 508 + " bcd"}, {"text": "a" * 509 + " bcd"}]  # 508 + 4 (" bcd") = 512; 513
    assert lambada(model, encode_chars, passages, 2)["skipped"] == 1
    assert lambada(model, encode_chars, passages[:1], 2) == {"acc": 0.0, "n": 1, "skipped": 0}
    ending = [7, 8]
    for n_ctx, kept in ((510, [7, 8]), (511, [7]), (512, []), (513, [])):
        context, cut = paper_cut(list(range(n_ctx)), ending)
        assert (len(context), cut) == (min(n_ctx, 512), kept)


def test_the_scoring_encoder_refuses_what_the_model_cannot_see_at_its_edge():
    """zeroshot and the harness adapter encode items through scoring.checked_encoder: a character outside a
    character vocabulary, or an id at or past the model's vocab_size (ids 0..vocab_size - 1 exist), is one
    error naming it; 'e' is id 4 of the vocabulary 'abcde'."""
    meta = {"tokenizer": "char", "chars": "abcde"}
    assert scoring.checked_encoder(meta, 5)("abe") == [0, 1, 4] and scoring.checked_encoder(meta, 5)("") == []
    with pytest.raises(DataError, match=r"^the tokenizer \(char\) gives id 4 but the model has vocab_size=4: "):
        scoring.checked_encoder(meta, 4)("abe")
    with pytest.raises(DataError, match=r"^an item cannot be encoded with the model's tokenizer: characters \['z'\]"):
        scoring.checked_encoder(meta, 5)("abz")
