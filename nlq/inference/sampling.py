"""Sampling from a trained model (sample.py): the decoding precision per device, the prompt, generation with
the KV cache."""

import copy
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch

from model import ROW_KERNELS
from nlq.common.domains import DEVICE, DTYPE, AnyText, At, OneOf, Text, check
from nlq.common.errors import ConfigError
from nlq.common.fits import check_decoding_fits
from nlq.data.tokenizer import codec, tokenizer_vocab
from nlq.eval.decoding import PATHS, Decoder
from nlq.run.checkpoint import load_for_inference
from nlq.run.hardware import (
    choose_cpu_dtype,
    choose_row_kernel,
    dtype_name,
    machine_cached,
    resolve_device,
    resolve_dtype,
)


@dataclass
class SampleConfig:
    init_from: Annotated[str, Text()] = "resume"  # resume (out_dir's checkpoint), FILE.pt, gpt2.., Pythia or a HF dir
    out_dir: Annotated[str, Text()] = "out"  # the run to sample from, with init_from=resume
    start: Annotated[str, AnyText()] = "\n"  # the prompt, or FILE:path to read it from a file
    num_samples: Annotated[int, At(1)] = 3  # samples drawn as one batch
    max_new_tokens: Annotated[int, At(1)] = 500  # tokens generated per sample
    temperature: Annotated[float, At(0)] = 0.8  # 0: greedy; below 1 sharper, above 1 flatter
    top_k: Annotated[int | None, At(1)] = 200  # sample among the top_k most likely tokens; None: all
    seed: Annotated[int, At(0, 2**63 - 1)] = 1337  # the sampling generator's seed
    use_cache: bool = True  # KV cache; False recomputes the whole context per token (as nanoGPT)
    device: Annotated[str, DEVICE] = "auto"  # auto: cuda if available, else cpu
    dtype: Annotated[str, DTYPE] = "auto"  # on a CPU, the weights' dtype (auto: measured)
    decode: Annotated[str, OneOf(*PATHS)] = "auto"  # auto: CUDA graphs on GPU, KV cache on CPU; compiled: step fused
    compile: bool = False  # accepted for nanoGPT's command lines; --decode=compiled compiles the decode step

    def __post_init__(self):
        check(self)
        if not self.use_cache and self.decode != "auto":
            raise ValueError(
                f"decode={self.decode!r} decodes through a KV cache and use_cache=False recomputes without one: "
                "drop one of them"
            )


COMPILING_ON_CPU = (
    "decode=compiled on a CPU: torch.compile first builds the decode step, a minute or more with no output, left out "
    "of the tokens/s; --decode=cache (auto's choice on a CPU) starts at once"
)


def read_prompt(start: str) -> str:
    if not start.startswith("FILE:"):
        return start
    path = Path(start[5:])
    if path.is_dir():
        raise ConfigError(f"start=FILE:{path} is a directory: name the file that holds the prompt")
    if not path.is_file():
        raise ConfigError(f"start=FILE:{path}: no such file")
    return path.read_text(encoding="utf-8")


def decoding_precision(model, device: str, name: str, rows: int = 1):
    """(model, autocast context, dtype, why or None) to decode rows streams with. The weights themselves are cast,
    on a GPU as on a CPU: a decode step reads every weight once, so bf16 weights halve the bytes it reads, where
    autocast would read float32 and cast on every call (and a CUDA graph would replay the casts, autocast's
    cache of them being gone when its context ends). dtype=auto on a CPU
    measures one decode step of rows tokens in float32 and bf16 (hardware.choose_cpu_dtype): bf16 is faster
    only on CPUs with native bf16 and where this PyTorch's kernels use it. model is cast in place."""
    device_type = device.split(":")[0]
    if device_type != "cpu":
        dtype = resolve_dtype(name, device_type)
        return model.to(dtype), nullcontext(), dtype, None
    if name != "auto":
        dtype = resolve_dtype(name, "cpu")
        model, why = model.to(dtype), None
    else:
        model, dtype, why = measured_dtype(model, rows)
    kernel = row_kernel(model, dtype) if rows == 1 else None
    return model, nullcontext(), dtype, "; ".join(w for w in (why, kernel) if w) or None


def measured_dtype(model, rows: int):
    """(model in the dtype a decode step of rows tokens is faster in on this CPU, that dtype, how chosen)."""
    models = {torch.float32: model.float()}
    tokens = torch.zeros(rows, 1, dtype=torch.long)

    @torch.no_grad()
    def decode_step(dtype):
        if dtype not in models:
            models[dtype] = copy.deepcopy(model).to(dtype)
        models[dtype](tokens, last_only=True)

    dtype, why = choose_cpu_dtype(decode_step, what=f"a decode step of {rows} token(s)")
    return models[dtype], dtype, why


def row_kernel(model, dtype) -> str:
    """Sets the kernel of model's one-row products to the faster on this CPU (hardware.choose_row_kernel),
    measured on a decode step of one token once per machine, dtype and width and kept
    (~/.cache/nonlinear-queries/cpu_row_kernel.json): every arm of a width decodes through the same kernel.
    Returns how it was chosen."""
    tokens = torch.zeros(1, 1, dtype=torch.long)

    @torch.no_grad()
    def decode_step(kernel):
        model.use_row_kernel(kernel)
        model(tokens, last_only=True)

    what = f"a decode step of 1 token in {dtype_name(dtype)} at n_embd={model.config.n_embd}"
    kernel, why = machine_cached(
        "cpu_row_kernel", what, lambda: list(choose_row_kernel(decode_step, what)), valid=is_kernel_choice
    )
    model.use_row_kernel(kernel)
    return why


def is_kernel_choice(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and value[0] in ROW_KERNELS and isinstance(value[1], str)


def generate(cfg: SampleConfig):
    """The samples as strings, and the generated tokens per second."""
    prompt = read_prompt(cfg.start)  # before loading a model: a typo costs no minutes
    if not prompt:
        raise ConfigError("the prompt is empty: pass --start=TEXT")
    device = resolve_device(cfg.device)
    resolve_dtype(cfg.dtype, device.split(":")[0])  # a typo costs no minutes either
    if cfg.decode == "compiled" and not device.startswith("cuda"):
        print(COMPILING_ON_CPU, file=sys.stderr)
    num_samples = cfg.num_samples
    if cfg.temperature == 0 and num_samples > 1:
        print(f"greedy decoding (temperature=0) gives one sample, not {num_samples} identical ones", file=sys.stderr)
        num_samples = 1
    model, meta = load_for_inference(cfg.init_from, cfg.out_dir)
    encode, decode = codec(meta)
    try:  # the prompt is checked before the decode precision is measured (seconds for GPT-2 on a CPU)
        ids = encode(prompt)
    except ValueError as e:
        raise ConfigError(f"the prompt cannot be encoded: {e}") from None
    block_size = model.config.block_size
    if len(ids) > block_size:
        raise ConfigError(
            f"the prompt has {len(ids)} tokens, more than the model's context of {block_size}: shorten it"
        )
    itemsize = model.lm_head.weight.element_size()  # the checkpoint's dtype: at most what decoding casts to
    check_decoding_fits(model.config, num_samples, len(ids), itemsize, device)
    model, ctx, _, why = decoding_precision(model.eval().to(device), device, cfg.dtype, num_samples)
    if why:
        print(f"dtype=auto: {why}", file=sys.stderr)
    x = torch.tensor([ids], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    args = dict(temperature=cfg.temperature, top_k=cfg.top_k, generator=generator, vocab_limit=tokenizer_vocab(meta))
    decoder = Decoder(model, num_samples, cfg.decode) if cfg.use_cache else None
    t0 = time.perf_counter()
    with ctx:  # all samples decode as one batch: each step reads the weights once for all
        if decoder:
            y = decoder.generate(x.expand(num_samples, -1), cfg.max_new_tokens, **args)
        else:
            y = model.generate(x.expand(num_samples, -1), cfg.max_new_tokens, use_cache=False, **args)
    y = y.cpu()  # the device's work done before the clock is read
    setup = decoder.setup_s if decoder else 0.0  # compiling the step and capturing graphs: once, not per token
    rate = num_samples * cfg.max_new_tokens / (time.perf_counter() - t0 - setup)
    path = decoder.label + (f" ({decoder.why})" if decoder.why else "") if decoder else "no cache (recomputed)"
    if setup:
        path += f"; {decoder.setup_words} took {setup:.1f} s, left out of the tokens/s"
    print(f"decoding: {path}", file=sys.stderr)
    return [decode(row.tolist()) for row in y], rate
