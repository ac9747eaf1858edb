"""What each query mode costs (bench.py): the training step, prefill and KV-cache decode, each measured in
interleaved rounds beside linear, and the report's table."""

import copy
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Annotated

import torch
import torch.distributed as dist

from model import GPT, QUERY_MODES, GPTConfig
from nlq.bench import anchor
from nlq.common.domains import DEVICE, DTYPE, At, Each, OneOf, Text, check
from nlq.common.errors import ConfigError
from nlq.eval.decoding import PATHS, Decoder
from nlq.eval.latency import prefill_and_decode, timed
from nlq.inference.sampling import decoding_precision
from nlq.run import parallel
from nlq.run.config import TrainConfig
from nlq.run.hardware import dtype_name, peak_flops, resolve_device, resolve_dtype
from nlq.run.step import DeviceBatches, OptimizerStep

ARMS = (*QUERY_MODES, "wide_mlp")  # wide_mlp: linear queries, mlp_ratio 4.75 (model.GPTConfig reads the name)


PRESETS = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
    "tiny": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65),
}


@dataclass
class BenchConfig:
    preset: Annotated[str, OneOf(*PRESETS)] = "gpt2"  # 'gpt2' (GPT-2 small) or 'tiny' (4 x 4 x 128, block 64)
    modes: Annotated[tuple[str, ...], Each(OneOf(*ARMS), nonempty=True)] = ARMS  # linear is the reference
    batch_size: Annotated[int | None, At(1)] = None  # training rows; None: 12, or 1 for gpt2 on CPU
    repeats: Annotated[int, At(1)] = 5  # interleaved rounds
    steps: Annotated[int, At(1)] = 3  # timed training steps per round (after one warm-up step)
    prompt_len: Annotated[int | None, At(1)] = None  # None: 256, or block_size // 2 if smaller
    decode_tokens: Annotated[int | None, At(1)] = None  # None: 64, or what fits after the prompt
    train: bool = True  # time the training step (False: prefill and decode only, nothing compiled)
    recompute: bool = True  # also time generation without the cache (linear only), as nanoGPT generates
    decode_dtype: Annotated[str, DTYPE] = "auto"  # as sample.py decodes (CPU auto: measured on linear)
    decode: Annotated[str, OneOf(*PATHS)] = "auto"  # auto: CUDA graphs on GPU, KV cache on CPU; compiled: step fused
    anchor: bool = False  # also time transformers' GPT-2 generate (static cache, compiled on a GPU) beside linear
    device: Annotated[str, DEVICE] = "auto"  # auto: cuda if available, else cpu
    dtype: Annotated[str, DTYPE] = "auto"  # auto: bf16 (or fp16) on a GPU, float32 on a CPU
    compile: bool | None = None  # None: on for CUDA
    parallelism: Annotated[str, OneOf("none", *parallel.PARALLELISMS)] = "none"  # under torchrun: the step only
    activation_checkpointing: bool = False  # recompute each block's activations in backward, as in train.py
    cpu_peak_flops: Annotated[float | None, At(above=0)] = None  # for MFU on CPU; None: measured
    out: Annotated[str, Text()] = "bench.json"  # where the JSON report goes

    def __post_init__(self):
        check(self)
        if "linear" not in self.modes:
            raise ValueError(f"modes={self.modes!r} is invalid: it must include 'linear', the reference")


class Subject:
    """One query mode's model, optimizer and inputs, kept across rounds (compiled once)."""

    def __init__(self, mode, cfg, d: parallel.Dist, dtype, decode_dtype):
        torch.manual_seed(0)
        device = d.device
        self.model = GPT(GPTConfig(**PRESETS[cfg.preset], query_mode=mode)).to(device)
        self.params = self.model.num_params()
        self.flops = self.model.flops_per_token(self.model.config.block_size)
        tcfg = training_config(cfg, d.world_size)
        wrapped = parallel.wrap(self.model, tcfg, d.enabled, dtype, d.device_ids)
        self.step = OptimizerStep(tcfg, d, wrapped, self.model, dtype)
        self.ctx, self.it = self.step.ctx, 0
        bs, vocab = self.model.config.block_size, self.model.config.vocab_size
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, vocab, (cfg.batch_size, bs), generator=gen).to(device)
        self.prompt = torch.randint(0, vocab, (1, cfg.prompt_len), generator=gen).to(device)
        self.cfg, self.device = cfg, device
        if decode_dtype is not None:  # decoding is timed (one process): a copy of the model in its own dtype
            self.decode_model, self.decode_ctx, self.decode_dtype, self.decode_why = decoding_precision(
                copy.deepcopy(self.model).eval(), device, decode_dtype
            )
            self.decoder = Decoder(self.decode_model, path=cfg.decode)

    def train_step(self):
        """train.py's optimizer step (AdamW with its decay groups, clipping, the divergence guard) on a fixed
        random batch, one micro-batch per process."""
        self.step(self.it, DeviceBatches(lambda micro: (self.x, self.x), self.device))
        self.it += 1

    def inference(self):
        """(prefill seconds, decode tokens/s) for one prompt through the Decoder, as sample.py decodes."""
        return prefill_and_decode(self.decoder, self.prompt, self.cfg.decode_tokens, self.device, self.decode_ctx)

    @torch.no_grad()
    def recompute_rates(self):
        """Tokens/s generating without the cache: as nanoGPT's generate (the training model and dtype, which
        is float32 on a CPU), and in the decode dtype."""
        rates = {}
        for key, model, ctx in (
            ("as_nanogpt", self.model, self.ctx),
            ("decode_dtype", self.decode_model, self.decode_ctx),
        ):
            model.eval()
            with ctx:
                t = timed(
                    lambda m=model: m.generate(self.prompt, self.cfg.decode_tokens, temperature=0, use_cache=False),
                    self.device,
                )
            rates[key] = self.cfg.decode_tokens / t
        self.model.train()
        return rates


def summary(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": values}


def training_config(cfg: BenchConfig, world: int) -> TrainConfig:
    """The training settings bench times: train.py's defaults (GPT-2 small's AdamW, clipping at 1.0) with
    bench's batch, compile, parallelism and activation checkpointing, and one micro-step per process."""
    return TrainConfig(
        batch_size=cfg.batch_size,
        gradient_accumulation_steps=world,
        compile=cfg.compile,
        parallelism="ddp" if cfg.parallelism == "none" else cfg.parallelism,
        activation_checkpointing=cfg.activation_checkpointing,
    )


def settle(cfg: BenchConfig, device_type: str) -> None:
    """Fill the settings left to the device (None) and check the prompt fits the context."""
    block_size = PRESETS[cfg.preset]["block_size"]
    cfg.compile = device_type == "cuda" if cfg.compile is None else cfg.compile
    cfg.batch_size = cfg.batch_size or (1 if cfg.preset == "gpt2" and device_type == "cpu" else 12)
    cfg.prompt_len = cfg.prompt_len or min(256, block_size // 2)
    if cfg.prompt_len >= block_size:
        raise ConfigError(
            f"prompt_len={cfg.prompt_len}: the {cfg.preset} preset's context is {block_size} tokens; give a "
            f"prompt_len below {block_size}, to leave room for the decoded tokens"
        )
    cfg.decode_tokens = cfg.decode_tokens or min(64, block_size - cfg.prompt_len)
    if cfg.prompt_len + cfg.decode_tokens > block_size:
        raise ConfigError(
            f"prompt_len + decode_tokens = {cfg.prompt_len + cfg.decode_tokens} exceeds the {cfg.preset} preset's "
            f"context of {block_size} tokens: lower one of them"
        )


def warm_up(cfg: BenchConfig, d: parallel.Dist, dtype, infer: bool) -> dict:
    """{mode: Subject}, each run once (compilation, allocator, caches); every mode decodes in the dtype
    chosen for linear, which goes first."""
    subjects, decode_dtype = {}, cfg.decode_dtype if infer else None
    for m in sorted(cfg.modes, key=lambda m: m != "linear"):
        say(f"warming up {m} ...")
        subjects[m] = s = Subject(m, cfg, d, dtype, decode_dtype)
        if cfg.train:
            s.train_step()
        if infer:
            decode_dtype = dtype_name(s.decode_dtype)
            s.inference()
            s.inference()  # on a GPU the second captures the prompt's graph
    return subjects


def rounds(cfg: BenchConfig, subjects: dict, device: str, dtype, infer: bool):
    """(raw measurements per mode, the peak FLOP/s per round, its source): every mode in every round,
    interleaved, so a drifting machine affects all modes alike."""
    raw = {m: {"train_s": [], "prefill_s": [], "decode_tok_s": [], "recompute": [], "peak_mem": None} for m in subjects}
    peaks, cuda = [], device.startswith("cuda")  # a CPU's measured peak drifts with its clock and load
    for r in range(cfg.repeats):
        peak, peak_source = peak_flops(device, dtype, cfg.cpu_peak_flops)
        peaks.append(peak)
        for m, s in subjects.items():
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            if cfg.train:
                raw[m]["train_s"].append(
                    timed(lambda s=s: [s.train_step() for _ in range(cfg.steps)], device) / cfg.steps
                )
            if cuda and cfg.train:
                raw[m]["peak_mem"] = torch.cuda.max_memory_allocated(device)
            if infer:
                prefill, decode = s.inference()
                raw[m]["prefill_s"].append(prefill)
                raw[m]["decode_tok_s"].append(decode)
            if infer and cfg.recompute and m == "linear":
                raw[m]["recompute"].append(s.recompute_rates())
        say(f"round {r + 1}/{cfg.repeats} done")
    return raw, peaks, peak_source


def measure(cfg: BenchConfig):
    d = setup(cfg)
    dtype = resolve_dtype(cfg.dtype, d.device_type)
    settle(cfg, d.device_type)
    infer = cfg.parallelism == "none"  # a sharded model decoding one stream measures nothing of use
    if not (cfg.train or infer):
        raise ConfigError("train=False under a parallelism times nothing: a sharded model's decoding is not measured")
    subjects = warm_up(cfg, d, dtype, infer)
    raw, peaks, peak_source = rounds(cfg, subjects, d.device, dtype, infer)
    report = {
        "config": asdict(cfg),
        "device": torch.cuda.get_device_name(d.device) if d.device_type == "cuda" else "cpu",
        "dtype": str(dtype),
        "processes": d.world_size,
        "torch": torch.__version__,
        "peak_flops": summary(peaks) if peaks[-1] else None,
        "peak_source": peak_source,
        "results": results(cfg, subjects, raw, peaks, d.world_size),
    }
    if infer:
        linear = subjects["linear"]
        report["decode_dtype"] = str(linear.decode_dtype)
        report["decode_dtype_why"] = linear.decode_why
        report["decode_path"] = {m: s.decoder.label + (f" ({s.decoder.why})" if s.decoder.why else "")
                                 for m, s in subjects.items()}  # fmt: skip
    if infer and cfg.anchor:
        report["anchor"] = anchor.transformers_generate(PRESETS[cfg.preset], cfg, d.device, linear.decode_dtype)
    if infer and cfg.recompute:
        report["generation"] = generation(cfg, raw["linear"])
    return report


def results(cfg: BenchConfig, subjects: dict, raw: dict, peaks: list, world: int) -> dict:
    """Per mode: step time, tokens/s, MFU, peak memory, prefill and decode, and each ratio to linear."""
    tokens = cfg.batch_size * PRESETS[cfg.preset]["block_size"] * world
    out = {}
    for m, s in subjects.items():
        train = summary(raw[m]["train_s"])
        mfu = [s.flops * tokens / t / (p * world) for t, p in zip(raw[m]["train_s"], peaks)] if peaks[-1] else None
        mfu = mfu if mfu and max(mfu) <= 1 else None  # above 1, the peak is wrong (measured on a busy CPU)
        out[m] = {
            "non_embedding_params": s.params,
            "train_step_s": train,
            "train_tokens_per_s": tokens / train["median"] if train else None,
            "mfu": summary(mfu),
            "peak_mem_bytes": raw[m]["peak_mem"],
            "prefill_s": summary(raw[m]["prefill_s"]),
            "decode_tokens_per_s": summary(raw[m]["decode_tok_s"]),
        }
    # Ratios are paired within each round (both modes measured moments apart), then summarised: on a
    # noisy machine this is far tighter than a ratio of medians.
    paired = {"train_ratio": "train_s", "prefill_ratio": "prefill_s", "decode_ratio": "decode_tok_s"}
    for m, r in out.items():
        for key, metric in paired.items():
            r[key] = summary([a / b for a, b in zip(raw[m][metric], raw["linear"][metric])])
    return out


def generation(cfg: BenchConfig, linear) -> dict:
    """Linear's whole generation of decode_tokens after the prompt, with the KV cache (prefill + decode)
    and without it, per round: tokens/s and the cache's speed-up, paired within each round."""
    n = cfg.decode_tokens
    cached = [n / (p + n / d) for p, d in zip(linear["prefill_s"], linear["decode_tok_s"])]
    out = {"cached_tokens_per_s": summary(cached)}
    for key in ("as_nanogpt", "decode_dtype"):
        rates = [r[key] for r in linear["recompute"]]
        out[f"no_cache_{key}_tokens_per_s"] = summary(rates)
        out[f"speedup_over_no_cache_{key}"] = summary([c / r for c, r in zip(cached, rates)])
    return out


def setup(cfg: BenchConfig) -> parallel.Dist:
    """The device; under torchrun with a parallelism, the process group and this rank's GPU."""
    device = resolve_device(cfg.device)
    if cfg.parallelism == "none":
        return parallel.Dist(False, 0, 1, device)
    if "RANK" not in os.environ:
        raise ConfigError(f"parallelism={cfg.parallelism} needs processes: torchrun --nproc_per_node=N bench.py ...")
    return parallel.init(device)


def say(line: str) -> None:
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(line, file=sys.stderr)


def spread(summary, scale=1.0, digits=1):
    """median [min-max], or n/a"""
    if summary is None:
        return "n/a"
    f = f".{digits}f"
    return f"{summary['median'] * scale:{f}} [{summary['min'] * scale:{f}}-{summary['max'] * scale:{f}}]"


def markdown(report):
    c = report["config"]
    lines = [
        f"{c['preset']} on {report['processes']} x {report['device']} ({report['dtype']}, compile={c['compile']}, "
        f"parallelism {c['parallelism']}), train batch {c['batch_size']} per process, prompt {c['prompt_len']}, "
        f"{c['decode_tokens']} decoded tokens; tokens/s over all processes; median [min-max] over "
        f"{c['repeats']} interleaved rounds; ratios are to linear within each round.",
        "",
        "| mode | params | train ms/step | ratio | tokens/s | MFU | peak mem | prefill ms | ratio "
        "| decode tok/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in report["results"].items():
        t, p, d = r["train_step_s"], r["prefill_s"], r["decode_tokens_per_s"]
        mfu = f"{r['mfu']['median']:.1%}" if r["mfu"] is not None else "n/a"
        mem = f"{r['peak_mem_bytes'] / 2**30:.1f} GiB" if r["peak_mem_bytes"] else "n/a"
        tokens = f"{r['train_tokens_per_s']:,.0f}" if r["train_tokens_per_s"] is not None else "n/a"
        lines.append(
            f"| {m} | {r['non_embedding_params'] / 1e6:.2f}M | {spread(t, 1e3)} "
            f"| {spread(r['train_ratio'], digits=3)} | {tokens} | {mfu} | {mem} "
            f"| {spread(p, 1e3)} | {spread(r['prefill_ratio'], digits=3)} "
            f"| {spread(d)} | {spread(r['decode_ratio'], digits=3)} |"
        )
    if "decode_path" in report:
        paths = sorted(set(report["decode_path"].values()))
        lines += ["", f"Decoding path (nlq/eval/decoding.py): {'; '.join(paths)}."]
    if report.get("anchor", {}).get("tokens_per_s") is None and "anchor" in report:
        lines.append(f"Anchor: transformers' GPT-2 generate {report['anchor']['path']}.")
    elif "anchor" in report:
        a, lin = report["anchor"], report["results"]["linear"]
        n = c["decode_tokens"]
        ours = [n / (p + n / d) for p, d in zip(lin["prefill_s"]["samples"], lin["decode_tokens_per_s"]["samples"])]
        lines.append(
            f"Anchor: transformers {a['transformers']} GPT2LMHeadModel.generate ({a['path']}), prompt "
            f"{c['prompt_len']} + {n} greedy tokens end to end: {spread(a['tokens_per_s'])} tokens/s; linear "
            f"here, the same end to end: {spread(summary(ours))} tokens/s."
        )
    if "generation" in report:
        g, decode_dtype = report["generation"], report["decode_dtype"].removeprefix("torch.")
        lines += [
            "",
            f"Decoding dtype: {report['decode_dtype_why'] or decode_dtype}.",
            f"linear, prompt {c['prompt_len']} + {c['decode_tokens']} new tokens end to end: "
            f"{spread(g['cached_tokens_per_s'])} tokens/s through {report['decode_path']['linear']} "
            f"({decode_dtype}); recomputing the context for each token instead: "
            f"{spread(g['no_cache_as_nanogpt_tokens_per_s'], digits=2)} tokens/s as nanoGPT's generate "
            f"({report['dtype'].removeprefix('torch.')}), the cache {spread(g['speedup_over_no_cache_as_nanogpt'])}x "
            f"faster; {spread(g['no_cache_decode_dtype_tokens_per_s'], digits=2)} tokens/s in {decode_dtype}, "
            f"the cache {spread(g['speedup_over_no_cache_decode_dtype'])}x faster.",
        ]
    return "\n".join(lines)
