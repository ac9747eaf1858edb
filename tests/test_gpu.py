"""Checks that need a CUDA device; skipped elsewhere (CI has none). On a GPU machine, `python gpu_check.py`
runs them right after its probe, before any measurement.
"""

import json
from pathlib import Path

import pytest
import torch
from helpers import torchrun, train_main

from model import GPT, QUERY_MODES, GPTConfig
from nlq.eval.decoding import Decoder
from nlq.run import checkpoint
from nlq.run.config import TrainConfig
from nlq.run.hardware import set_tf32
from nlq.run.step import DeviceBatches, OptimizerStep

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def gpu_args(data, out_dir, **overrides):
    """train.py options of a 2-layer, 128-wide residual_gelu character model on the GPU."""
    args = dict(
        dataset=data,
        out_dir=out_dir,
        query_mode="residual_gelu",
        n_layer=2,
        n_head=4,
        n_embd=128,
        block_size=64,
        vocab_size=65,
        batch_size=8,
        gradient_accumulation_steps=2,
        max_iters=40,
        eval_interval=40,
        eval_iters=4,
        warmup_iters=5,
        learning_rate=1e-3,
    )
    args.update(overrides)
    return [f"--{k}={v}" for k, v in args.items()]


@pytest.mark.parametrize("dtype,compile", [("bfloat16", True), ("float16", False)])
def test_training_on_gpu(char_data, tmp_path, dtype, compile):
    train_main(gpu_args(char_data, tmp_path, device="cuda", dtype=dtype, compile=compile))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    val = [r["val_loss"] for r in records if "val_loss" in r]
    assert val[-1] < val[0] - 0.5
    assert all(r["mfu"] is None or 0 < r["mfu"] < 1 for r in records if "mfu" in r)


@pytest.fixture
def without_tf32():
    """float32 matmuls in full precision for the test (train.py turns TF32 on), then as they were."""
    previous = set_tf32(False)
    yield
    set_tf32(previous)


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_kv_cache_parity_on_gpu(mode, without_tf32):
    torch.manual_seed(0)
    model = (
        GPT(
            GPTConfig(
                block_size=64,
                vocab_size=97,
                n_layer=2,
                n_head=4,
                n_embd=64,
                query_mode=mode,
                pos_embedding="rotary",
                n_kv_head=2,
            )
        )
        .cuda()
        .eval()
    )
    prompt = torch.randint(0, 97, (2, 10), device="cuda")
    assert torch.equal(
        model.generate(prompt, 70, temperature=0), model.generate(prompt, 70, temperature=0, use_cache=False)
    )


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_cuda_graph_decoding_gives_the_eager_paths_tokens(mode, without_tf32):
    """The Decoder's graphs replay what the static cache computes eagerly, and both give GPT.generate's tokens:
    float32 weights, greedy, past a full context (prompt 10 + 70 new tokens in a context of 64), the prompt's
    own graph captured on its second prefill."""
    torch.manual_seed(0)
    config = GPTConfig(block_size=64, vocab_size=97, n_layer=2, n_head=4, n_embd=64, query_mode=mode, n_kv_head=2)
    model = GPT(config).cuda().eval()
    prompt = torch.randint(0, 97, (2, 10), device="cuda")
    expected = model.generate(prompt, 70, temperature=0)
    graphed = Decoder(model, batch=2)
    assert graphed.path == "graph", graphed.why
    for _ in range(2):
        assert torch.equal(graphed.generate(prompt, 70, temperature=0), expected)
    assert graphed.path == "graph" and 1 in graphed.graphs and 10 in graphed.graphs and 64 in graphed.graphs
    assert torch.equal(Decoder(model, batch=2, path="static").generate(prompt, 70, temperature=0), expected)


@pytest.mark.parametrize("mode", ["linear", "residual_gelu"])
def test_the_compiled_step_inside_the_cuda_graph_gives_generates_tokens(mode, without_tf32):
    """The one-token step compiled by torch.compile, then captured: GPT.generate's greedy tokens in float32, past
    a full context, with no fallback taken. Weights of order one, so that no two top logits are near a tie that
    a fused kernel's summation order could break."""
    torch.manual_seed(0)
    config = GPTConfig(block_size=64, vocab_size=97, n_layer=2, n_head=4, n_embd=64, query_mode=mode, n_kv_head=2)
    model = GPT(config).cuda().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1))
    prompt = torch.randint(0, 97, (2, 10), device="cuda")
    expected = model.generate(prompt, 70, temperature=0)
    compiled = Decoder(model, batch=2, path="compiled")
    for _ in range(2):
        assert torch.equal(compiled.generate(prompt, 70, temperature=0), expected)
    assert compiled.path == "compiled" and compiled.why is None and 1 in compiled.graphs
    assert compiled.label == "static KV cache, compiled step, CUDA graphs"


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="FSDP on one GPU exchanges nothing between GPUs: needs two or more"
)
def test_fsdp_bf16_compiled_with_activation_checkpointing_on_gpus(char_data, tmp_path):
    """FSDP2 with bf16 gathered parameters and float32 reduction, compiled blocks and activation
    checkpointing, on 2 GPUs (NCCL); then a resume from its sharded checkpoint."""
    args = gpu_args(
        char_data,
        tmp_path,
        parallelism="fsdp",
        activation_checkpointing=True,
        compile=True,
        gradient_accumulation_steps=4,
        lr_decay_iters=50,
    )
    root = Path(__file__).resolve().parents[1]
    torchrun(root / "train.py", args, 600)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    val = [r["val_loss"] for r in map(json.loads, lines) if "val_loss" in r]
    assert val[-1] < val[0] - 0.5
    assert checkpoint.sharded_latest(tmp_path).name == "step_000040"
    torchrun(root / "train.py", [*args, "--max_iters=50", "--init_from=resume"], 600)
    assert checkpoint.sharded_latest(tmp_path).name == "step_000050"


@pytest.mark.parametrize("mode", ["linear", "residual_gelu"])
def test_an_optimizer_step_never_makes_the_host_wait(mode):
    """torch.cuda's sync debug mode raises on any operation that makes the host wait for the device. After a
    warm-up step, train.py's optimizer step (micro-batches from pageable host memory, staged in pinned
    memory with the next one prefetched; bf16 autocast, the chunked head loss, clipping, the divergence
    guard, fused AdamW) runs under it without one."""
    from nlq.run import parallel

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab_size=65, query_mode=mode)).cuda()
    cfg = TrainConfig(batch_size=4, gradient_accumulation_steps=4, device="cuda", compile=False)
    d = parallel.Dist(enabled=False, rank=0, world_size=1, device="cuda")
    step = OptimizerStep(cfg, d, model, model, torch.bfloat16)
    host = torch.randint(0, 65, (cfg.gradient_accumulation_steps, 4, 65))
    batches = lambda: DeviceBatches(lambda m: (host[m, :, :-1], host[m, :, 1:]), "cuda")  # noqa: E731
    step(0, batches())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        stats = step(1, batches())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(stats).all()
