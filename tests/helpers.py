"""Helpers the tests share: the commands run as a user runs them, a tiny run's command line, its records, its
one-line errors, torchrun."""

import contextlib
import hashlib
import io
import json
import os
import random
import runpy
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from model import GPT, QUERY_MODES, GPTConfig, LoRA
from nlq.data.tokenizer import codec

ROOT = Path(__file__).resolve().parents[1]
# The one bound on a test's waiting: a hang guard, not a speed bound. A process that still makes progress,
# however busy the machine, is never stopped by it; only one that stopped making progress reaches it.
HANG_S = 3600


def wait_until(condition, what: str, process=None) -> None:
    """Poll condition() until it holds; fail, naming what, if process exits first or HANG_S passes."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert process is None or process.poll() is None, f"the process exited before {what}"
        assert time.monotonic() < deadline, f"no {what} after {HANG_S} s: the process hangs"
        time.sleep(0.2)


def command(script):
    """The root script run in this process as `python SCRIPT ARGS` runs it: its file executed as __main__ with
    sys.argv set (parsing, the library call, one-line errors and exit status alike), without the start-up of
    a new interpreter. Tests of a command use it; tests of the library import nlq."""

    def main(argv=()):
        saved = sys.argv
        sys.argv = [str(ROOT / script), *map(str, argv)]
        try:
            runpy.run_path(str(ROOT / script), run_name="__main__")
        finally:
            sys.argv = saved

    return main


train_main, sample_main, compare_main = command("train.py"), command("sample.py"), command("compare.py")
sweep_main, screen_main, verdict_main = command("sweep.py"), command("screen.py"), command("verdict.py")
export_main, zeroshot_main, bench_main = command("export.py"), command("zeroshot.py"), command("bench.py")
bench_head_main, bench_data_main = command("bench_head.py"), command("bench_data.py")
gpu_check_main, analyze_skip_main = command("gpu_check.py"), command("analyze_skip.py")


# An arm's config file for sweep tests: a 1-layer, 16-wide model, 8 steps of 2 rows ({data}: the dataset).
ARM = """
dataset = {data!r}
n_layer, n_head, n_embd, block_size, vocab_size = 1, 2, 16, 16, 65
batch_size, gradient_accumulation_steps = 2, 1
max_iters, lr_decay_iters, eval_interval, eval_iters, warmup_iters = 8, 8, 4, 1, 2
device, compile, cpu_peak_flops, dtype = "cpu", False, 1e13, "float32"
"""


def tiny_args(data_dir, out_dir, **overrides):
    """train.py options of a 2-layer, 32-wide character model: 8 steps of 4 x 4 rows, evaluated every 4."""
    args = dict(
        dataset=data_dir,
        out_dir=out_dir,
        n_layer=2,
        n_head=2,
        n_embd=32,
        block_size=32,
        vocab_size=65,
        batch_size=4,
        gradient_accumulation_steps=4,
        max_iters=8,
        lr_decay_iters=8,
        eval_interval=4,
        eval_iters=2,
        warmup_iters=2,
        learning_rate=1e-3,
        device="cpu",
        dtype="float32",  # not 'auto', which measures bf16 against float32 on CPUs with native bf16
        compile=False,
        cpu_peak_flops=1e11,
    )
    args.update(overrides)
    return [f"--{k}={v}" for k, v in args.items()]


def records(out_dir, key):
    """{step: record} of the records of metrics.jsonl that have key."""
    lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if key in r}


def error_of(argv, main=train_main, status=1):
    """The one-line error a script ends with, and its exit status (1; a divergence's is Diverged's)."""
    err = io.StringIO()
    with pytest.raises(SystemExit) as e, contextlib.redirect_stderr(err):
        main([str(a) for a in argv])
    code = e.value.code
    message = str(code) if isinstance(code, str) else err.getvalue().strip().splitlines()[-1]
    assert (1 if isinstance(code, str) else code) == status, (code, message)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def killed_at_random(script, rounds, seconds):
    """Run a Python script that prints 'ready' then writes checkpoints forever, SIGKILL it after a random
    time in the range seconds, rounds times; yields after each kill."""
    rng = random.Random(0)
    for _ in range(rounds):
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(*seconds))
        p.send_signal(signal.SIGKILL)
        p.wait()
        yield


def snapshot(directory):
    """{file name: sha256} of the files of a directory."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(directory).iterdir() if p.is_file()}


def torchrun(script, args, timeout, *launcher_flags, fails=False, nproc=2):
    """(stdout, stderr) of `torchrun --standalone --nproc_per_node=NPROC FLAGS script ARGS`, which must
    succeed (or, with fails=True, fail). A hang kills the launcher's session and the workers (torchrun
    starts them in sessions of their own), then fails the test with the output so far."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *launcher_flags]
    p = subprocess.Popen(
        [*cmd, str(script), *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        subprocess.run(["pkill", "-9", "-f", str(script)])
        out, err = p.communicate()
        pytest.fail(f"the 2-process job did not finish in {timeout} s; its output ends:\n{(out + err)[-3000:]}")
    assert (p.returncode != 0) == fails, err[-3000:]
    return out, err


class Successor(torch.nn.Module):
    """A bigram model over characters that predicts each letter's successor (z -> space -> a) with
    probability near 1, or, uniform=True, every character equally: answers known by construction."""

    chars = " " + string.ascii_lowercase
    meta = {"tokenizer": "char", "chars": chars}

    def __init__(self, uniform=False):
        super().__init__()
        n = len(self.chars)
        table = torch.zeros(n, n) if uniform else torch.full((n, n), -20.0)
        if not uniform:
            for i in range(n):
                table[i, (i + 1) % n] = 0.0
        self.table = torch.nn.Parameter(table)
        self.config = SimpleNamespace(block_size=16)

    def forward(self, idx):
        return self.table[idx], None

    def generate(self, idx, max_new_tokens, temperature=0.0, vocab_limit=None):
        """Greedy: each new character is the successor of the last."""
        for _ in range(max_new_tokens):
            idx = torch.cat([idx, self.table[idx[:, -1:]].argmax(-1)], dim=1)
        return idx


def encode_chars(text):
    return codec(Successor.meta)[0](text)


EXPORT_TINY = dict(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=50304)  # GPT-2's padded vocabulary
EXPORT_SHAPES = {  # every query mode (a new one too: the export's own code must learn it), every option once
    **{mode: dict(query_mode=mode) for mode in QUERY_MODES},
    "rotary_gqa_parallel_untied_bias": dict(
        query_mode="residual_gelu",
        pos_embedding="rotary",
        rotary_pct=0.5,
        n_kv_head=2,
        parallel_residual=True,
        tie_embeddings=False,
        bias=True,
        activation="gelu_tanh",
    ),  # fmt: skip
    "probe_lora": dict(query_mode="linear", preproj=True, content_skip=True, lora_rank=3),
    "nlq_probe_lora_rotary": dict(
        query_mode="residual_gelu", preproj=True, content_skip=True, lora_rank=2, pos_embedding="rotary"
    ),
}


def export_model(trained=True, **kw) -> GPT:
    """A model of EXPORT_TINY's size with kw, in eval mode, its weights at the scale of a trained model
    (at_trained_scale) unless trained=False (the initialisation's, with nonzero biases, skip and LoRA B)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**EXPORT_TINY, **kw)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRA):  # a trained adapter: B no longer zero, so merging it matters
                m.B.normal_(std=0.05)
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".skip." in name:
                p.normal_(std=0.05)  # nonzero biases and skip: wrong names would show
    return at_trained_scale(model) if trained else model


def at_trained_scale(model: GPT) -> GPT:
    """Weights of order one, as training leaves them, so that every branch reaches the output: matrices
    N(0, 1/fan_in) (unit-size activations), embeddings N(0, 1), norm gains 1 + N(0, 0.2), biases N(0, 0.2).
    At the initialisation's 0.02 a wrong branch (a tanh GELU in the query MLP) moves the logits by less
    than float32 tolerances."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if name.startswith(("transformer.wte", "transformer.wpe")) else p.size(1) ** -0.5
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            else:
                p.copy_(1 + torch.randn(p.shape, generator=gen) * 0.2)
    return model
