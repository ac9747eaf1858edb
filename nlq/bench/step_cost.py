"""Where a training step's time goes, measured in one process in interleaved rounds (gpu_check.py's steps):

- query_cost: linear's step against residual_gelu's, and the device kernels that take each step's time
  (torch.profiler): where the nonlinear query's price goes;
- step_ablation: train.py's step (OptimizerStep over host batches staged by DeviceBatches, the divergence
  guard, the chunked head loss, the batch fingerprint) against the same step with each of those switched off;
- micro_batch: linear's step at several micro-batch sizes: tokens/s, MFU and peak memory, until memory runs out.

Each variant runs `steps` optimizer steps per round, every variant once per round, so a drifting clock hits all
alike; a variant that changes the compiled graph (the loss) compiles once, then each round replays it.
"""

import statistics
from contextlib import contextmanager

import numpy as np
import torch

from model import GPT, GPTConfig
from nlq.bench.cost import PRESETS
from nlq.data.loader import TrainBatches
from nlq.eval.latency import timed
from nlq.run import parallel
from nlq.run.config import TrainConfig
from nlq.run.hardware import peak_flops, resolve_dtype
from nlq.run.step import DeviceBatches, OptimizerStep


@contextmanager
def switched(owner, name: str, value):
    """owner.name = value for the duration (a class attribute the compiled graph reads: dynamo recompiles)."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


class Trainee:
    """A model and train.py's optimizer step over batches read from host memory, as train.py reads them."""

    def __init__(self, preset: str, mode: str, device: str, compile_: bool, batch: int):
        torch.manual_seed(0)
        self.shape = PRESETS[preset]
        self.model = GPT(GPTConfig(**self.shape, query_mode=mode)).to(device)
        self.dtype = resolve_dtype("auto", device.split(":")[0])
        d = parallel.Dist(False, 0, 1, device)
        tcfg = TrainConfig(batch_size=batch, gradient_accumulation_steps=1, compile=compile_)  # train.py's defaults
        wrapped = parallel.wrap(self.model, tcfg, False, self.dtype, None)
        self.step = OptimizerStep(tcfg, d, wrapped, self.model, self.dtype)
        tokens = np.random.default_rng(0).integers(0, self.shape["vocab_size"], 4_000_000).astype(np.uint16)
        self.batches = TrainBatches(tokens, self.shape["block_size"], batch, 1, seed=0)
        self.device, self.it, self.batch = device, 0, batch
        self.tokens = batch * self.shape["block_size"]
        self.flops = self.model.flops_per_token(self.shape["block_size"]) * self.tokens

    def run(self, staging=True, fingerprint=True):
        """One optimizer step as train.py's loop takes it (its batch staged, its fingerprint hashed on the host
        while the device computes), or with staging or the fingerprint left out."""
        it = self.it
        if staging:
            batch = DeviceBatches(lambda micro: self.batches.get(it, micro), self.device)
        else:
            x, y = self.batches.get(it, 0)
            x, y = x.to(self.device), y.to(self.device)
            batch = lambda micro: (x, y)  # noqa: E731
        self.step(it, batch)
        if fingerprint:
            self.batches.fingerprint(it)
        self.it += 1


def plain_step(optimizer):
    """The divergence guard's step without its checks: AdamW's step and the gradients cleared."""

    def step(it, loss, norm):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def interleaved(variants: dict, rounds: int, steps: int, device: str) -> dict:
    """{name: seconds per step, each round's} of variants {name: one step}, warmed up twice, then interleaved."""
    for fn in variants.values():
        for _ in range(2):
            fn()
    seconds = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            seconds[name].append(timed(lambda fn=fn: [fn() for _ in range(steps)], device) / steps)
    return seconds


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": values}


def ratios(seconds: dict, reference: str) -> dict:
    """{name: {ms, ratio to the reference paired within each round}}."""
    return {
        name: {
            "ms": summary([1e3 * s for s in v]),
            "ratio": summary([a / b for a, b in zip(v, seconds[reference])]),
        }
        for name, v in seconds.items()
    }


def kernel_times(fn, device: str) -> list:
    """Every device kernel of a call of fn (name, ms, calls), heaviest first, by torch.profiler over two calls; on a
    CPU its operators' own time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device.startswith("cuda") else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(2):
            fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
    key = "device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)
    return [{"name": e.key[:120], "ms": getattr(e, key) / 1e3 / 2, "calls": e.count // 2} for e in events]


def kernel_difference(kernels: list, reference: list, n: int = 12) -> dict:
    """Where a step's extra time goes, kernel by kernel: each side's summed kernel time (busy ms per step; against
    the wall's ms, what is left is the device waiting on the host) and the n kernel names whose time changed most
    (a kernel only one side has counts from zero: compiled kernels are named after what they fuse)."""
    mine, theirs = ({k["name"]: k for k in ks} for ks in (kernels, reference))
    changes = [
        {
            "name": name,
            "ms": mine.get(name, {}).get("ms", 0.0) - theirs.get(name, {}).get("ms", 0.0),
            "calls": mine.get(name, {}).get("calls", 0),
            "reference_calls": theirs.get(name, {}).get("calls", 0),
        }
        for name in mine.keys() | theirs.keys()
    ]
    changes.sort(key=lambda c: (-abs(c["ms"]), c["name"]))
    return {
        "busy_ms": sum(k["ms"] for k in kernels),
        "reference_busy_ms": sum(k["ms"] for k in reference),
        "largest_changes": changes[:n],
    }


def query_cost(preset: str, device: str, compile_: bool, rounds: int = 3, steps: int = 3, batch: int = 12) -> dict:
    """linear's and residual_gelu's steps: ms per step, the ratio to linear, each one's heaviest kernels, and
    residual_gelu's kernel time against linear's, kernel by kernel."""
    linear = Trainee(preset, "linear", device, compile_, batch)
    nlq = Trainee(preset, "residual_gelu", device, compile_, batch)
    variants = {"linear": linear.run, "residual_gelu": nlq.run}
    out = ratios(interleaved(variants, rounds, steps, device), "linear")
    kernels = {name: kernel_times(fn, device) for name, fn in variants.items()}
    for name in variants:
        out[name]["kernels"] = kernels[name][:12]
    difference = kernel_difference(kernels["residual_gelu"], kernels["linear"])
    return {"batch": batch, "tokens_per_step": linear.tokens, "variants": out, "difference": difference}


def step_ablation(preset: str, device: str, compile_: bool, rounds: int = 3, steps: int = 3, batch: int = 12) -> dict:
    """train.py's step against it with one addition off each: the guard, the staging, the fingerprint, the
    chunked loss (then nanoGPT's whole-logits loss)."""
    t = Trainee(preset, "linear", device, compile_, batch)
    guarded = t.step.guard.step

    def no_guard():
        with switched(t.step.guard, "step", plain_step(t.step.optimizer)):
            t.run()

    def whole_logits_loss():
        with switched(GPT, "chunked_loss", False):
            t.run()

    variants = {
        "train.py's step": t.run,
        "no divergence guard": no_guard,
        "no staging (pageable copy)": lambda: t.run(staging=False),
        "no fingerprint": lambda: t.run(fingerprint=False),
        "whole-logits loss (nanoGPT's)": whole_logits_loss,
    }
    out = ratios(interleaved(variants, rounds, steps, device), "train.py's step")
    assert t.step.guard.step == guarded
    return {"batch": batch, "tokens_per_step": t.tokens, "variants": out}


def micro_batch(preset: str, device: str, compile_: bool, sizes=(8, 12, 16, 24, 32), steps: int = 3) -> dict:
    """linear's step at each micro-batch size until one runs out of memory: ms, tokens/s, MFU, peak memory."""
    cuda = device.startswith("cuda")
    peak, source = peak_flops(device, resolve_dtype("auto", device.split(":")[0]), cached=True)
    out = {"peak_flops": peak, "peak_source": source, "sizes": {}}
    for size in sizes:
        try:
            t = Trainee(preset, "linear", device, compile_, size)
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            seconds = interleaved({"step": t.run}, 3, steps, device)["step"]
        except torch.OutOfMemoryError:
            out["sizes"][size] = "out of memory"
            break
        s = statistics.median(seconds)
        out["sizes"][size] = {
            "ms": 1e3 * s,
            "tokens_per_s": t.tokens / s,
            "mfu": t.flops / s / peak if peak else None,
            "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
        }
        del t
        if cuda:
            torch.cuda.empty_cache()
    timed_sizes = {k: v for k, v in out["sizes"].items() if isinstance(v, dict)}
    out["best"] = max(timed_sizes, key=lambda k: timed_sizes[k]["tokens_per_s"]) if timed_sizes else None
    return out


def markdown(result: dict) -> str:
    """step_costs' and micro_batch's results as tables."""
    if "sizes" in result:
        lines = ["| micro-batch | ms/step | tokens/s | MFU | peak memory |", "|---|---|---|---|---|"]
        for size, r in result["sizes"].items():
            if not isinstance(r, dict):
                lines.append(f"| {size} | {r} | | | |")
                continue
            mfu = f"{r['mfu']:.1%}" if r["mfu"] else "n/a"
            mem = f"{r['peak_mem_gib']:.1f} GiB" if r["peak_mem_gib"] else "n/a"
            lines.append(f"| {size} | {r['ms']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | {mem} |")
        return "\n".join(lines + [f"best: {result['best']}"])
    lines = []
    for part in ("query", "ablation"):
        reference = next(iter(result[part]["variants"]))
        lines += ["", f"| {part}: micro-batch {result[part]['batch']} | ms/step | / {reference} |", "|---|---|---|"]
        for name, r in result[part]["variants"].items():
            ms, ratio = r["ms"], r["ratio"]
            lines.append(
                f"| {name} | {ms['median']:.2f} [{ms['min']:.2f}-{ms['max']:.2f}] | {ratio['median']:.3f} "
                f"[{ratio['min']:.3f}-{ratio['max']:.3f}] |"
            )
    for name, r in result["query"]["variants"].items():
        top = ", ".join(f"{k['name'][:60]} {k['ms']:.2f} ms x{k['calls']}" for k in r["kernels"][:6])
        lines.append(f"{name}'s heaviest kernels per step: {top}")
    d = result["query"]["difference"]
    changes = ", ".join(
        f"{c['name'][:60]} {c['ms']:+.2f} ms (x{c['calls']} against x{c['reference_calls']})"
        for c in d["largest_changes"][:6]
    )
    lines.append(
        f"kernel time per step, residual_gelu against linear: {d['busy_ms']:.2f} against "
        f"{d['reference_busy_ms']:.2f} ms; largest changes: {changes}"
    )
    return "\n".join(lines)
