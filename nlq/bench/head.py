"""The head and its loss measured (bench_head.py): peak memory and time of GPT.head_loss against cross-entropy over
the whole logits, as nanoGPT computes it."""

import time
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Annotated

import torch
import torch.nn.functional as F

from model import GPT
from nlq.common.domains import DEVICE, At, OneOf, Text, check
from nlq.run.hardware import autocast, resolve_device
from nlq.run.memory import measured_peak_bytes


@dataclass
class HeadBenchConfig:
    n_embd: Annotated[int, At(1)] = 768  # the head's input width
    vocab_size: Annotated[int, At(2)] = 50304  # its output width
    tokens: Annotated[int, At(1)] = 4096  # tokens of one micro-batch
    rounds: Annotated[int, At(1)] = 5  # interleaved rounds
    device: Annotated[str, DEVICE] = "auto"  # auto: cuda if available, else cpu
    dtype: Annotated[str, OneOf("float32", "bfloat16")] = "float32"  # bfloat16: under autocast, as training
    out: Annotated[str, Text()] = "bench_head.json"  # where the JSON report goes

    def __post_init__(self):
        check(self)


def whole_logits(head, x, targets):
    return F.cross_entropy(head.lm_head(x).float(), targets, ignore_index=-1)


VARIANTS = {"whole logits": whole_logits, "GPT.head_loss": GPT.head_loss}


def peak_bytes(step, device: str) -> int:
    if not device.startswith("cuda"):
        return measured_peak_bytes(step)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def measure(cfg: HeadBenchConfig) -> dict:
    device = resolve_device(cfg.device)
    torch.manual_seed(0)
    head = SimpleNamespace(lm_head=torch.nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False, device=device))
    x = torch.randn(cfg.tokens, cfg.n_embd, device=device, requires_grad=True)
    targets = torch.randint(0, cfg.vocab_size, (cfg.tokens,), device=device)
    ctx = autocast(device, getattr(torch, cfg.dtype))

    def step(fn):
        x.grad = head.lm_head.weight.grad = None
        with ctx:
            loss = fn(head, x, targets)
        loss.backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    report = {"config": asdict(cfg), "device": device, "seconds": {n: [] for n in VARIANTS}}
    report["peak_bytes"] = {name: peak_bytes(lambda fn=fn: step(fn), device) for name, fn in VARIANTS.items()}
    for _ in range(cfg.rounds):
        for name, fn in VARIANTS.items():
            start = time.perf_counter()
            step(fn)
            report["seconds"][name].append(time.perf_counter() - start)
    return report
