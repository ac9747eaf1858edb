"""The head and its loss: peak memory and time of GPT.head_loss (chunks of model.LOSS_CHUNK tokens, the
gradients computed in the forward) against cross-entropy over the whole logits, as nanoGPT computes it.

    python bench_head.py                                   # GPT-2 small's head, 4 x 1024 tokens
    python bench_head.py --tokens=12288 --dtype=bfloat16   # a GPU micro-batch, under bf16 autocast

Each variant runs a forward and backward of the head and loss alone (input N x d, weight vocab x d), in
interleaved rounds; memory is the peak allocated above what existed before (on a CPU from the profiler's
allocator events, on a GPU from torch.cuda's peak statistics).
"""

import statistics
import time
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Annotated

import torch
import torch.nn.functional as F

from configurator import parse
from model import GPT
from nlq.common.atomic import atomic_write_json
from nlq.common.domains import DEVICE, At, OneOf, Text, check
from nlq.common.errors import cli_main
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


def run(argv):
    (cfg,) = parse(argv, HeadBenchConfig, doc=__doc__, prog="bench_head.py")
    report = measure(cfg)
    print(f"{cfg.tokens} tokens x {cfg.n_embd} -> {cfg.vocab_size}, {cfg.dtype}, {report['device']}:")
    for name, seconds in report["seconds"].items():
        print(
            f"  {name}: peak {report['peak_bytes'][name] / 2**30:.2f} GiB, forward + backward median "
            f"{statistics.median(seconds) * 1e3:.0f} ms [{min(seconds) * 1e3:.0f}-{max(seconds) * 1e3:.0f}] "
            f"over {cfg.rounds} interleaved rounds"
        )
    atomic_write_json(cfg.out, report)
    print(f"results: {cfg.out}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
