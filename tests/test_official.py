"""arXiv 2603.13381's own artifacts: its checkpoints load wherever a checkpoint is read, its initialisation and
its batch order are replayed. The official model is written here from its documented layout (model.py of
github.com/MarkoKarbevski/beyond_query_linearity: module names, registration order, init), not imported."""

import hashlib
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import compare_main, error_of, records, sample_main, tiny_args, train_main, zeroshot_main

from model import GPT, GPTConfig
from nlq.common.errors import UserError
from nlq.comparison.compare import Run
from nlq.data.loader import TrainBatches
from nlq.interop import schema
from nlq.paper import official
from nlq.run import checkpoint
from nlq.run.config import TrainConfig
from nlq.run.inputs import evaluation_windows, open_data
from nlq.run.step import make_optimizer
from nlq.run.trainer import Trainer

MODES = ["original", "identity", "residual", "residual_gelu"]
OURS = {  # the official names of the query modules -> this project's
    "residual_rmsnorm_input": "query.rms",
    "residual_in": "query.w1",
    "residual_out": "query.w2",
    "residual_layernorm_output": "query.ln",
}


def official_args(mode="residual_gelu", tied=True, bias=False, d=32, heads=4, hidden=None, vocab=96, **kw):
    scale = (1.0 if mode == "original" else 0.5) / math.sqrt(d // heads)
    args = dict(block_size=64, vocab_size=vocab, n_layer=2, num_heads=heads, n_embd=d, head_size=d // heads,
                tie_weights=tied, bias=bias, dropout=0.0, scale=scale, query_mode=mode,
                mlp_hidden_size=hidden or 4 * d, learning_rate=6e-4, max_iters=60002, lr_decay_iters=60002)  # fmt: skip
    return {**args, **kw}


class OfficialAttention(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, bias, self.a = a["n_embd"], a["bias"], a
        self.c_attn = nn.Linear(d, (2 if a["query_mode"] in ("identity", "residual_gelu") else 3) * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        if a["query_mode"] == "residual_gelu":
            self.residual_rmsnorm_input = nn.RMSNorm(d, eps=1e-5)
            self.residual_layernorm_output = nn.LayerNorm(d, bias=bias)
            self.residual_in = nn.Linear(d, d // 2, bias=bias)
            self.residual_out = nn.Linear(d // 2, d, bias=bias)

    def forward(self, x):
        B, T, d = x.shape
        mode, H = self.a["query_mode"], self.a["num_heads"]
        if mode in ("identity", "residual_gelu"):
            k, v = self.c_attn(x).split(d, dim=2)
            f = lambda: self.residual_layernorm_output(  # noqa: E731
                self.residual_out(F.gelu(self.residual_in(self.residual_rmsnorm_input(x))))
            )
            q = x if mode == "identity" else x + f()
        else:
            q, k, v = self.c_attn(x).split(d, dim=2)
            q = x + q if mode == "residual" else q
        q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * self.a["scale"]
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, d))


class OfficialBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, h = a["n_embd"], a["mlp_hidden_size"]
        self.ln_1 = nn.LayerNorm(d, bias=a["bias"])
        self.attn = OfficialAttention(a)
        self.ln_2 = nn.LayerNorm(d, bias=a["bias"])
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(d, h, bias=a["bias"]), c_proj=nn.Linear(h, d, bias=a["bias"])))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class OfficialGPT(nn.Module):
    """The official layout and initialisation: modules in its order, then N(0, 0.02) for every Linear and
    Embedding in module order (biases zero), then N(0, 0.02 / sqrt(2 n_layer)) for every c_proj weight."""

    def __init__(self, a):
        super().__init__()
        d = a["n_embd"]
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(a["vocab_size"], d),
                wpe=nn.Embedding(a["block_size"], d),
                h=nn.ModuleList(OfficialBlock(a) for _ in range(a["n_layer"])),
                ln_f=nn.LayerNorm(d, bias=a["bias"]),
            )
        )
        self.lm_head = nn.Linear(d, a["vocab_size"], bias=False)
        if a["tie_weights"]:
            self.transformer.wte.weight = self.lm_head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a["n_layer"]))

    def forward(self, idx):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.size(1)))
        for block in tr.h:
            x = block(x)
        return self.lm_head(tr.ln_f(x))


def ours(name: str) -> str:
    for old, new in OURS.items():
        name = name.replace(f"attn.{old}.", f"attn.{new}.")
    return name


def write_official(path, a, trained=True, compiled=False, **extra):
    """An official checkpoint: its model after one AdamW step (grouped as its configure_optimizers does)."""
    torch.manual_seed(0)
    ref = OfficialGPT(a)
    params = [p for p in ref.parameters()]
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95),
    )  # fmt: skip
    if trained:
        x = torch.randint(0, a["vocab_size"], (2, 16))
        F.cross_entropy(ref(x).flatten(0, 1), x.flatten()).backward()
        opt.step()
    state = {("_orig_mod." if compiled else "") + k: v for k, v in ref.state_dict().items()}
    ckpt = dict(model=state, optimizer=opt.state_dict(), model_args=a, iter_num=3000, best_val_loss=3.5,
                config=dict(eval_interval=1000, batch_size=12, dataset="openwebtext"))  # fmt: skip
    ckpt.update(extra)
    torch.save(ckpt, path)
    return ref, opt


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tied,bias,hidden", [(True, False, None), (False, True, 144), (True, True, 139)])
def test_an_official_checkpoint_gives_its_models_logits(tmp_path, mode, tied, bias, hidden):
    a = official_args(mode, tied, bias, hidden=hidden)
    ref, _ = write_official(tmp_path / "ckpt.pt", a, compiled=tied)
    model, ckpt = checkpoint.load_model(tmp_path / "ckpt.pt")
    assert model.config.mlp_hidden == a["mlp_hidden_size"] and ckpt["iter_num"] == 3000
    x = torch.randint(0, 96, (3, 64))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], ref(x), atol=1e-5, rtol=0)


def test_head_size_is_ignored_as_the_official_forward_ignores_it(tmp_path):
    a = official_args("original", d=48, heads=4, head_size=68)  # its forward splits n_embd by num_heads
    ref, _ = write_official(tmp_path / "ckpt.pt", a)
    model, _ = checkpoint.load_model(tmp_path / "ckpt.pt")
    x = torch.randint(0, 96, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], ref(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tied,bias", [(True, False), (False, True)])
def test_official_initialisation_is_bitwise_its_models(mode, tied, bias):
    a = official_args(mode, tied, bias)
    torch.manual_seed(1337)  # its train.py, before the model is built
    ref = OfficialGPT(a)
    model = GPT(GPTConfig(**official.model_fields(a, "test")))
    official.initialise(model, seed=1337)
    theirs = {ours(k): v for k, v in ref.state_dict().items()}
    for name, p in model.state_dict().items():
        assert torch.equal(p, theirs[name]), name
    other = GPT(GPTConfig(**official.model_fields(a, "test")))
    official.initialise(other, seed=1338)
    assert not torch.equal(other.transformer.wpe.weight, model.transformer.wpe.weight)


def test_official_initialisation_refuses_what_its_model_cannot_build():
    model = GPT(GPTConfig(block_size=16, vocab_size=32, n_layer=1, n_head=2, n_embd=16, pos_embedding="rotary"))
    with pytest.raises(official.OfficialError, match="pos_embedding"):
        official.initialise(model)


def test_its_adamw_state_continues_under_our_names(tmp_path):
    a = official_args("residual_gelu", tied=False, bias=True)
    ref, opt = write_official(tmp_path / "ckpt.pt", a)
    model, ckpt = checkpoint.load_model(tmp_path / "ckpt.pt")
    mine = make_optimizer(model, TrainConfig(weight_decay=0.5), "cpu")
    checkpoint.restore_optimizer(model, mine, ckpt)
    by_name = {ours(n): p for n, p in ref.named_parameters()}
    for name, p in model.named_parameters():
        theirs = opt.state[by_name[name]]
        assert torch.equal(mine.state[p]["exp_avg"], theirs["exp_avg"]), name
        assert torch.equal(mine.state[p]["exp_avg_sq"], theirs["exp_avg_sq"]), name
    assert mine.param_groups[0]["weight_decay"] == 0.1 and mine.param_groups[0]["fused"]  # its wd, our kernel


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda c: c["model_args"].update(rope=True), "model_args has rope"),
        (lambda c: c["model_args"].update(query_mode="tanh"), "query_mode='tanh'"),
        (lambda c: c.pop("model"), "lacks model"),
        (lambda c: c["model"].pop("transformer.ln_f.weight"), "lacks the weights transformer.ln_f.weight"),
        (lambda c: c.clear() or c.update(weights=torch.zeros(2)), "nor of the paper's official code"),
        (lambda c: None, "truncated"),
    ],
)
def test_a_foreign_or_incomplete_official_checkpoint_is_one_line(tmp_path, change, words):
    write_official(tmp_path / "ckpt.pt", official_args(), trained=False)
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    change(ckpt)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    if words == "truncated":
        (tmp_path / "ckpt.pt").write_bytes((tmp_path / "ckpt.pt").read_bytes()[:5000])
    before = (tmp_path / "ckpt.pt").read_bytes()
    message = error_of([f"--init_from={tmp_path / 'ckpt.pt'}", "--max_new_tokens=2"], main=sample_main)
    assert words in message and (tmp_path / "ckpt.pt").read_bytes() == before


def test_sample_and_an_official_run_directory(tmp_path, capsys):
    """sample.py reads an official file by path and an official run directory by out_dir (its newest)."""
    a = official_args("residual_gelu", vocab=50304)
    write_official(tmp_path / "ckpt_50000.pt", a, trained=False)
    write_official(tmp_path / "ckpt.pt", a, trained=False, iter_num=60000)
    common = ["--num_samples=1", "--max_new_tokens=3", "--start=Hello", "--device=cpu", "--compile=False"]
    sample_main([f"--init_from={tmp_path / 'ckpt_50000.pt'}", *common])
    sample_main([f"--out_dir={tmp_path}", *common])
    assert capsys.readouterr().out.count("Hello") == 2
    import json

    (tmp_path / "lambada.jsonl").write_text(json.dumps({"text": "the cat sat on the mat"}) + "\n")
    out = tmp_path / "eval.json"
    args = [f"--init_from={tmp_path / 'ckpt.pt'}", "--tasks=lambada", f"--lambada_file={tmp_path / 'lambada.jsonl'}"]
    zeroshot_main([*args, f"--out={out}", "--device=cpu"])
    assert json.loads(out.read_text())["results"]["lambada"]["n"] == 1


def test_train_starts_from_an_official_checkpoint_and_continues_its_step(char_data, tmp_path, capsys):
    a = official_args("residual_gelu", vocab=65, d=32)
    a["block_size"] = 32
    write_official(tmp_path / "official.pt", a)
    args = tiny_args(char_data, tmp_path / "run", max_iters=3004, lr_decay_iters=3004, eval_interval=2)
    train_main([*args, f"--init_from={tmp_path / 'official.pt'}", "--init_continue=True"])
    assert f"continuing the AdamW state and step of {tmp_path / 'official.pt'} at step 3000" in capsys.readouterr().out
    steps = sorted(records(tmp_path / "run", "loss"))
    assert steps == [3000, 3001, 3002, 3003]
    saved = checkpoint.load(tmp_path / "run" / "ckpt.pt")
    assert saved["model_args"]["query_mode"] == "residual_gelu" and saved["origin"] == str(tmp_path / "official.pt")
    states = saved["optimizer"]["state"]
    assert all(int(s["step"]) == 1 + 4 for s in states.values())  # its one step, then ours 3000..3003
    fresh = tmp_path / "fresh"
    train_main([*tiny_args(char_data, fresh, max_iters=1), f"--init_from={tmp_path / 'official.pt'}"])
    assert sorted(records(fresh, "loss")) == [0]


# ---- batch order --------------------------------------------------------------------------------------


def test_official_rows_replay_the_one_shot_draw_in_any_order():
    tokens = np.zeros(50_000, dtype=np.uint16)
    reference = torch.randint(len(tokens) - 1024, (4200, 480), generator=torch.Generator().manual_seed(42)).numpy()
    batches = TrainBatches(tokens, block_size=8, batch_size=12, grad_accum=40, seed=0, sampling="official")
    for step in (0, 1, 4100, 7, 4199, 8):  # forward, far ahead, and back
        assert np.array_equal(batches.offsets(step), reference[step]), step


@pytest.mark.parametrize("batch_size,accum,world", [(12, 40, 1), (12, 40, 4), (24, 20, 2), (480, 1, 1)])
def test_official_micro_batches_read_its_columns(batch_size, accum, world):
    tokens = np.arange(60_000, dtype=np.int64)  # a window's first token is its offset
    row = torch.randint(len(tokens) - 1024, (3, 480), generator=torch.Generator().manual_seed(42)).numpy()[2]
    batches = TrainBatches(tokens, 8, batch_size, accum, seed=0, sampling="official")
    firsts = []
    for rank in range(world):
        for micro in range(accum // world):
            x, _ = batches.get(2, micro, rank, world)
            firsts.append(x[:, 0].numpy())
    assert np.array_equal(np.concatenate(firsts), row)  # micro-batch j of 12 = its columns 12j .. 12j + 11


def test_official_order_refuses_another_shape(char_data, tmp_path):
    message = error_of(tiny_args(char_data, tmp_path, sampling="official"))
    assert "sampling='official' replays the official 480 rows, this run has 16" in message
    message = error_of(tiny_args(char_data, tmp_path, eval_order="official"))
    assert "eval_order='official' replays the official 2400 rows, this run has 8" in message


def test_official_evaluations_read_its_kth_rows(char_data, tmp_path, monkeypatch):
    seen = []

    def fake_evaluate(self, tokens, offsets):
        seen.append((tokens is self.data.val, offsets.copy()))
        return 1.0

    monkeypatch.setattr(Trainer, "evaluate", fake_evaluate)
    train_main(tiny_args(char_data, tmp_path, eval_order="official", eval_iters=600, max_iters=4))
    gen = torch.Generator().manual_seed(42)
    n_train, n_val = (len(np.memmap(char_data / f"{s}.bin", dtype=np.uint16)) for s in ("train", "val"))
    train_rows = torch.randint(n_train - 1024, (600, 2400), generator=gen).numpy()
    val_rows = torch.randint(n_val - 1024, (600, 2400), generator=gen).numpy()
    expected = [(True, val_rows[0]), (False, train_rows[0]), (True, val_rows[1]), (False, train_rows[1])]
    assert len(seen) == 4 and all(a == b and np.array_equal(x, y) for (a, x), (b, y) in zip(seen, expected))


# ---- its loss logs in compare.py ----------------------------------------------------------------------


def write_official_logs(run_dir, train_losses, vals):
    """Its train.py's logs: tensor.pt row = step (column 0), eval rows k = step k * 1000: (count, mean, std)."""
    run_dir.mkdir()
    train_log = torch.zeros(3003, 3)
    for step, loss in train_losses.items():
        train_log[step, 0] = loss
    evals = {"eval_val_tensor.pt": torch.zeros(61, 3), "eval_train_tensor.pt": torch.zeros(61, 3)}
    for k, v in enumerate(vals):
        evals["eval_val_tensor.pt"][k] = torch.tensor([200, v, 0.1])
        evals["eval_train_tensor.pt"][k] = torch.tensor([200, v - 0.01, 0.1])
    torch.save(train_log, run_dir / "tensor.pt")
    for name, t in evals.items():
        torch.save(t, run_dir / name)


def our_run(run_dir, vals):
    import json

    run_dir.mkdir()
    config = dict(wandb_run_name="nlq", seed=1, query_mode="residual_gelu", n_layer=2, n_head=2, n_embd=8)
    (run_dir / "config.json").write_text(json.dumps({**config, "block_size": 8, "vocab_size": 11}))
    lines = [{"step": s, "val_loss": v, "tokens": s * 10} for s, v in vals.items()]
    lines += [{"step": 0, "loss": 5.0, "last_micro_loss": 10.8}, {"step": 1, "loss": 5.0, "last_micro_loss": 10.8}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_compare_overlays_an_official_run_as_an_arm_and_baseline(tmp_path, capsys):

    write_official_logs(tmp_path / "official", {0: 10.9, 1: 10.5, 2000: 4.0}, [10.95, 4.5, 4.0])
    our_run(tmp_path / "ours", {0: 10.9, 1000: 4.4, 2000: 3.96})
    compare_main([str(tmp_path / "ours"), f"--reference={tmp_path / 'official'}:paper", "--baseline=paper", "--png="])
    out = capsys.readouterr().out
    assert "validation loss at step 2000" in out  # its rows 0..2 are steps 0, 1000, 2000
    assert "| paper | — | 4.0000 | 1 | +0.00% |" in out
    assert "| nlq | 0.00M | 3.9600 | 1 | +1.00% |" in out  # (4 - 3.96) / 4
    assert "one micro-batch's" in out
    assert "steps 0..1 (2 in common): last micro-batch loss minus its logged loss, mean |d| 0.2000, max 0.3000" in out
    run = Run.from_official(str(tmp_path / "official"))
    assert run.arm == "official" and sorted(run.steps) == [0, 1, 2000] and run.steps[1]["loss"] == pytest.approx(10.5)
    assert run.evals[1000]["tokens"] == 1000 * 491_520 and run.evals[1000]["train_eval_loss"] == pytest.approx(4.49)
    a = official_args("identity", tied=False)  # its ckpt.pt beside the logs gives the parameter count
    write_official(tmp_path / "official" / "ckpt.pt", a, trained=False)
    n = 2 * (3 * 32 * 32 + 2 * 32 * 128 + 2 * 32) + 32 + 96 * 32  # blocks (K/V + proj, MLP, 2 LN), ln_f, untied head
    assert Run.from_official(str(tmp_path / "official")).non_embedding_params() == n


def edit_log(path, change):
    t = torch.load(path, weights_only=True)
    torch.save(change(t), path)


@pytest.mark.parametrize(
    "damage, words",
    [
        ("truncated", "eval_val_tensor.pt cannot be read"),
        ("foreign", "eval_val_tensor.pt is not an official loss log"),
        ("missing", "eval_val_tensor.pt not found"),
        ("fewer train-eval rows", "eval_train_tensor.pt has 40 rows and eval_val_tensor.pt 61"),
        ("a NaN count", r"counts \(column 0\) must be finite and >= 0"),
        ("a negative count", r"counts \(column 0\) must be finite and >= 0"),
        ("no evaluation", "eval_val_tensor.pt holds no evaluation yet"),
        ("a truncated ckpt.pt", r"ckpt.pt cannot be read \(\w+Error\): truncated or not a checkpoint"),
    ],
)
def test_a_damaged_official_log_is_one_line(tmp_path, damage, words):
    """Never truncated by zip, never a row dropped silently because its count is NaN or negative."""

    write_official_logs(tmp_path / "official", {0: 10.9}, [10.95, 4.5, 4.0])
    log = tmp_path / "official" / "eval_val_tensor.pt"
    if damage == "truncated":
        log.write_bytes(log.read_bytes()[:100])
    elif damage == "foreign":
        torch.save({"not": "a log"}, log)
    elif damage == "missing":
        log.unlink()
    elif damage == "no evaluation":  # a run killed before its first evaluation was written
        edit_log(log, lambda t: t.zero_())
    elif damage == "a truncated ckpt.pt":  # its ckpt.pt (read for the parameter count) cut by a full disk
        write_official(tmp_path / "official" / "ckpt.pt", official_args(), trained=False)
        (tmp_path / "official" / "ckpt.pt").write_bytes((tmp_path / "official" / "ckpt.pt").read_bytes()[:5000])
    elif damage == "fewer train-eval rows":
        edit_log(tmp_path / "official" / "eval_train_tensor.pt", lambda t: t[:40])
    else:
        edit_log(
            log,
            lambda t: t.index_put_(
                (torch.tensor([1]), torch.tensor([0])), torch.tensor(math.nan if "NaN" in damage else -200.0)
            ),
        )
    message = error_of([f"--reference={tmp_path / 'official'}", "--png="], main=compare_main)
    assert re.search(words, message), message  # the exception's class named when a file cannot be read


def test_an_unwritten_train_eval_row_is_no_loss_of_zero(tmp_path):

    write_official_logs(tmp_path / "official", {0: 10.9}, [10.95, 4.5])
    edit_log(tmp_path / "official" / "eval_train_tensor.pt", lambda t: t.index_fill_(0, torch.tensor([1]), 0.0))
    run = Run.from_official(str(tmp_path / "official"))
    assert run.evals[1000]["val_loss"] == pytest.approx(4.5) and math.isnan(run.evals[1000]["train_eval_loss"])
    one_batch = torch.tensor([[1.0, 4.49, 0.0]])  # (count, mean, std) of an evaluation of eval_iters=1
    edit_log(tmp_path / "official" / "eval_train_tensor.pt", lambda t: t.index_copy_(0, torch.tensor([1]), one_batch))
    run = Run.from_official(str(tmp_path / "official"))
    assert run.evals[1000]["train_eval_loss"] == pytest.approx(4.49)


def test_prepare_writes_the_bytes_of_nanogpts_openwebtext_procedure(tmp_path):
    """The replayed offsets address the official bins' tokens only if the bins are the same bytes: nanoGPT's
    procedure (which the official Data_Handling.ipynb runs) is written out here on a local corpus."""
    import json
    import subprocess
    import sys

    datasets = pytest.importorskip("datasets")
    from nlq.data.tokenizer import gpt2_encoding

    docs = [f"Document {i}: {'a tale of two cities ' * (i % 5 + 1)}\n\nThe end {i}." for i in range(2001)]
    src = tmp_path / "owt.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out = tmp_path / "out"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, root / "data/openwebtext/prepare.py", "--dataset", src, "--out_dir", out, "--num_proc", "2"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    # nanoGPT: train_test_split(test_size=0.0005, seed=2357, shuffle=True), 'test' renamed 'val', each
    # document encode_ordinary(text) + [eot], the split's documents concatenated in order as uint16.
    split = datasets.load_dataset("json", data_files=str(src))["train"].train_test_split(
        test_size=0.0005, seed=2357, shuffle=True
    )
    enc = gpt2_encoding()
    for ours, theirs in (("train", "train"), ("val", "test")):
        ids = [t for d in split[theirs]["text"] for t in enc.encode_ordinary(d) + [enc.eot_token]]
        assert (out / f"{ours}.bin").read_bytes() == np.array(ids, dtype=np.uint16).tobytes(), ours
    assert len(split["test"]) == 2  # ceil(0.0005 x 2001): the held-out count is nanoGPT's too


def test_the_last_micro_batchs_loss_is_logged_as_the_official_code_logs_a_steps(char_data, tmp_path):
    """Step 0's record holds the mean over its 4 micro-batches and the loss of the last one alone, which is
    what the official train.py logs: both recomputed here from the same initial weights and batches."""
    train_main(tiny_args(char_data, tmp_path, max_iters=1, init_order="official", seed=5))
    rec = records(tmp_path, "loss")[0]
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=65)
    model = GPT(cfg)
    official.initialise(model, seed=5)
    batches = TrainBatches(np.memmap(char_data / "train.bin", dtype=np.uint16), 32, 4, 4, seed=1337)
    with torch.no_grad():
        micro = [model(*batches.get(0, m))[1].item() for m in range(4)]
    assert rec["last_micro_loss"] == pytest.approx(micro[3], abs=1e-6)
    assert rec["loss"] == pytest.approx(sum(micro) / 4, abs=1e-6) and micro[3] != pytest.approx(rec["loss"], abs=1e-4)


# The official configs' values (configs/configs_tied|untied/*.py of its repository), as facts:
# (query_mode, tie_weights, mlp_hidden_size, scale x sqrt(64), learning_rate, min_lr, weight_decay, lr_decay_iters)
OFFICIAL_CONFIGS = {
    "owt_baseline": ("original", True, 3072, 1.0, 6e-4, 6e-5, 0.1, 60002),  # config_tiedw_original
    "owt_wide_mlp": ("original", True, 3648, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._original_mlp_4_75_times
    "owt_nlq": ("residual_gelu", True, 3072, 0.5, 8e-4, 8e-5, 0.1, 60002),  # ..._residual_gelu
    "owt_nlq_tuned": ("residual_gelu", True, 3072, 0.5, 3e-3, 3e-5, 2**-5, 60002),  # ..._2-5wd_3e-3lr_3e-5
    "owt_residual": ("residual", True, 3072, 0.5, 6e-4, 6e-5, 0.1, 60002),  # config_tiedw_residual
    "owt_identity_official": ("identity", False, 3072, 0.5, 6e-4, 6e-5, 2**-5, 600000),  # config_untiedw_identity
    "owt_mlp350": ("original", True, 2688, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._original_smaller_mlp
    "owt_mlp433": ("original", True, 3328, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._mlp_4_33_times
    "owt_mlp450": ("original", True, 3456, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._mlp_4_5_times
    "owt_mlp4625": ("original", True, 3552, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._mlp_4_625_times
    "owt_mlp500": ("original", True, 3840, 1.0, 6e-4, 6e-5, 0.1, 60002),  # ..._mlp_5times
}


def official_last_evaluation(max_iters: int, eval_interval: int = 1000) -> tuple[int, int]:
    """(the step of its last evaluation, the steps trained before it), by running its train.py's loop as its
    source reads: evaluate when iter_num % eval_interval == 0, train step iter_num, iter_num += 1, stop once
    iter_num > max_iters."""
    iter_num, trained, last = 0, 0, None
    while True:
        if iter_num % eval_interval == 0:
            last = (iter_num, trained)
        trained += 1
        iter_num += 1
        if iter_num > max_iters:
            return last


@pytest.mark.parametrize("theirs, ours", [(60_002, "config/owt_baseline.py"), (105_001, "docs")])
def test_max_iters_here_ends_at_its_last_evaluation(theirs, ours):
    """Its configs' max_iters (60002; the identity arm's 105001) end, here, at its last evaluation: a run
    here of max_iters steps evaluates at max_iters, after as many steps as it had trained there."""
    step, trained = official_last_evaluation(theirs)
    assert step == trained
    if ours == "docs":
        page = (Path(__file__).resolve().parents[1] / "docs" / "check-against-the-paper.md").read_text()
        assert f"add `--max_iters={step}`" in page
    else:
        from configurator import parse

        assert parse([ours], TrainConfig, GPTConfig)[0].max_iters == step


@pytest.mark.parametrize("name", sorted(OFFICIAL_CONFIGS))
def test_the_papers_arms_are_its_official_configs(name):
    from configurator import parse

    cfg, m = parse([f"config/{name}.py"], TrainConfig, GPTConfig)
    mode, tied, hidden, scale, lr, min_lr, wd, decay = OFFICIAL_CONFIGS[name]
    assert (m.query_mode, m.tie_embeddings, m.mlp_hidden) == (schema.OFFICIAL_MODES[mode], tied, hidden)
    assert m.scale == pytest.approx(scale / 8) and m.n_embd == 768 and m.n_head == 12 and m.n_layer == 12
    schedule = (cfg.learning_rate, cfg.min_lr, cfg.weight_decay, cfg.lr_decay_iters)
    assert schedule == pytest.approx((lr, min_lr, wd, decay))
    assert (cfg.batch_size * cfg.gradient_accumulation_steps, cfg.warmup_iters, cfg.eval_interval) == (480, 2000, 1000)
    assert (cfg.init_order, cfg.sampling, cfg.eval_order, cfg.seed) == ("official", "official", "official", 1337)


def test_its_own_index_files_beside_the_bins_are_used_and_checked(char_data, tmp_path):
    """Its .npy files (np.save of its draws) are read where they lie; ones drawn for other bins are refused."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(char_data, data)
    n_train = len(np.memmap(data / "train.bin", dtype=np.uint16))
    rows = torch.randint(n_train - 1024, (6, 480), generator=torch.Generator().manual_seed(42)).numpy()
    # Its shape, (600000, 480) int64, as a sparse file: only the rows written take disk space.
    table = np.lib.format.open_memmap(data / "train_indices.npy", mode="w+", dtype=np.int64, shape=(600_000, 480))
    table[:6] = rows
    table.flush()
    cfg = dict(dataset=str(data), sampling="official", batch_size=12)
    batches = open_data(TrainConfig(**cfg, max_iters=6), 8).batches
    assert np.array_equal(batches.offsets(5), rows[5]) and np.array_equal(batches.offsets(4), rows[4])
    table[5, 100] = (table[5, 100] + 1) % (n_train - 1024)  # one offset of row 5 changed, still in range
    table.flush()
    with pytest.raises(UserError, match="row 5 differs from the official draw for these bins"):
        open_data(TrainConfig(**cfg, max_iters=6), 8)
    assert open_data(TrainConfig(**cfg, max_iters=5), 8)  # a run of 5 steps never reads row 5
    table[0] += 1  # drawn over other token counts
    table.flush()
    del table
    args = tiny_args(data, tmp_path / "run", sampling="official", batch_size=12, gradient_accumulation_steps=40)
    assert "train_indices.npy is not the official index array for these bins" in error_of(args)
    (data / "train_indices.npy").write_bytes(b"\x93NUMPY junk")
    assert "is not a readable .npy array" in error_of(args)
    (data / "train_indices.npy").write_bytes(b"")
    assert "is not a readable .npy array" in error_of(args) and "an empty or truncated .npy file" in error_of(args)


def test_a_prefix_of_its_index_file_serves_the_steps_it_covers_and_every_offset_is_checked(char_data, tmp_path):
    """Its first rows alone (np.save of a shorter draw) serve a run of that many steps, and say what is short
    otherwise; an offset out of range in any later row is refused (a negative one wrapped to the end)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(char_data, data)
    n_train = len(np.memmap(data / "train.bin", dtype=np.uint16))
    rows = torch.randint(n_train - 1024, (6, 480), generator=torch.Generator().manual_seed(42)).numpy()
    np.save(data / "train_indices.npy", rows)
    cfg = dict(dataset=str(data), sampling="official", batch_size=12)
    batches = open_data(TrainConfig(**cfg, max_iters=6), 8).batches
    assert np.array_equal(batches.offsets(5), rows[5])
    with pytest.raises(UserError, match="holds the first 6 rows of the official indices, the run needs 7"):
        open_data(TrainConfig(**cfg, max_iters=7), 8)
    for bad in (-1, n_train - 1024):  # one below 0, one past the last window's start
        damaged = rows.copy()
        damaged[4, 100] = bad
        np.save(data / "train_indices.npy", damaged)
        planted = f"holds offsets from {bad} to" if bad < 0 else f"to {bad}, outside 0..{bad - 1}"
        with pytest.raises(UserError, match=planted):
            open_data(TrainConfig(**cfg, max_iters=6), 8)


def test_the_replayed_run_resumes_bit_for_bit_and_its_fingerprints_are_its_rows(char_data, tmp_path):
    official_run = dict(sampling="official", eval_order="official", init_order="official", batch_size=12)
    shape = dict(block_size=8, gradient_accumulation_steps=40, eval_iters=200, max_iters=6, eval_interval=3)
    train_main(tiny_args(char_data, tmp_path / "full", **official_run, **shape))
    train_main(tiny_args(char_data, tmp_path / "split", **official_run, **{**shape, "max_iters": 3}))
    train_main(tiny_args(char_data, tmp_path / "split", init_from="resume", **official_run, **shape))
    full, split = records(tmp_path / "full", "loss"), records(tmp_path / "split", "loss")
    assert [full[s]["loss"] for s in range(6)] == [split[s]["loss"] for s in range(6)]
    assert records(tmp_path / "full", "val_loss") == records(tmp_path / "split", "val_loss")
    tokens = np.memmap(char_data / "train.bin", dtype=np.uint16)
    rows = torch.randint(len(tokens) - 1024, (6, 480), generator=torch.Generator().manual_seed(42)).numpy()
    for s in range(6):  # the fingerprint is the hash of the step's windows: its row's
        windows = np.ascontiguousarray(tokens[rows[s][:, None] + np.arange(9)])
        assert split[s]["fingerprint"] == hashlib.blake2b(windows.tobytes(), digest_size=8).hexdigest()


def test_model_args_with_every_optional_key_absent_take_the_official_codes_defaults():
    """Its model.py's GPTConfig (github.com/MarkoKarbevski/beyond_query_linearity, commit 1bf4bd1): block_size
    1024, vocab_size 50304, tie_weights True, dropout 0, bias False, query_mode 'original', mlp_hidden_size
    4 * 768 (a constant, whatever n_embd), and scale sqrt(1 / head_size) evaluated when the class is defined,
    with head_size's default 64: 1/8 at any head size. Its norms' eps is 1e-5 and its GELU exact."""
    fields = official.model_fields({"n_layer": 1, "num_heads": 2, "n_embd": 32}, "test")
    config = GPTConfig(**fields)
    assert (config.block_size, config.vocab_size, config.tie_embeddings, config.dropout, config.bias) == (
        1024, 50304, True, 0.0, False,
    )  # fmt: skip
    assert (config.query_mode, config.mlp_hidden, config.scale) == ("linear", 3072, 0.125)
    assert (config.norm_eps, config.activation) == (1e-5, "gelu")


def test_the_official_evaluation_tables_hold_600_evaluations_and_1024_token_windows():
    """Its eval_*_indices are 600 rows of 2400 offsets: evaluations at steps 0, k, ..., max_iters need
    max_iters // k + 1 rows, so max_iters = 599 k fits and 600 k does not; a window is 1024 + 1 tokens, so
    block_size 1024 fits and 1025 does not; n_eval must be its 2400 rows exactly."""
    n = 5000  # tokens per split: more than one window
    cfg = dict(eval_order="official", eval_interval=10, eval_iters=200, batch_size=12)
    evaluation_windows(TrainConfig(**cfg, max_iters=5990), 1024, n, n, "")
    with pytest.raises(ValueError, match="holds 600 evaluations, fewer than max_iters / eval_interval"):
        evaluation_windows(TrainConfig(**cfg, max_iters=6000), 1024, n, n, "")
    with pytest.raises(ValueError, match=r"block_size <= 1024 \(it is 1025\)"):
        evaluation_windows(TrainConfig(**cfg, max_iters=10), 1025, n, n, "")
    with pytest.raises(ValueError, match="more than 1024 tokens per split"):
        evaluation_windows(TrainConfig(**cfg, max_iters=10), 8, 1024, 1024, "")
    evaluation_windows(TrainConfig(**cfg, max_iters=10), 8, 1025, 1025, "")
    with pytest.raises(ValueError, match="replays the official 2400 rows, this run has 2412"):
        evaluation_windows(TrainConfig(**{**cfg, "eval_iters": 201}, max_iters=10), 8, n, n, "")


def test_an_official_index_file_holds_at_most_its_full_count_of_rows(tmp_path):
    """Its train_indices.npy is (600000, 480); a file of its first rows is a prefix, one row more is no file of
    its (loader.official_table with a full count of 5 rows of 3 offsets here)."""
    from nlq.data.loader import official_table

    first = np.array([4, 0, 9])
    for n in (1, 5, 6, 0):
        np.save(tmp_path / "t.npy", np.tile(first, (n, 1)))
        if n in (1, 5):
            assert official_table(tmp_path / "t.npy", (5, 3), lambda: first, high=10).shape == (n, 3)
        else:
            with pytest.raises(UserError, match="is not the official index array for these bins"):
                official_table(tmp_path / "t.npy", (5, 3), lambda: first, high=10)


def test_an_official_checkpoint_with_weights_of_another_shape_is_one_line(char_data, tmp_path):
    """Its model_args say one shape, a weight has another (a damaged or edited file): train.py starting
    from it, and continuing it, end in one line naming the file, not a size-mismatch traceback."""
    a = official_args(mode="original", vocab=96)
    write_official(tmp_path / "official.pt", a)
    ckpt = torch.load(tmp_path / "official.pt", weights_only=True)
    ckpt["model"]["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(7, 32)
    torch.save(ckpt, tmp_path / "official.pt")
    args = tiny_args(char_data, tmp_path / "run", vocab_size=96, block_size=64)
    message = error_of([*args, f"--init_from={tmp_path / 'official.pt'}"])
    assert "official.pt's weights do not fit its own model_args" in message and "size mismatch" in message
    message = error_of([*args, f"--init_from={tmp_path / 'official.pt'}", "--init_continue=True"])
    assert (
        "official.pt is an official checkpoint" in message and "size mismatch for transformer.h.0.mlp.c_fc" in message
    )
