"""Sample from a trained model (out_dir/ckpt.pt) or from GPT-2 / Pythia weights, with the KV cache.

    python sample.py --out_dir=out-shakespeare-char --start="ROMEO:" --num_samples=3
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --temperature=0 --max_new_tokens=64

The tokenizer is the one the run was trained with (its dataset's meta.json, stored in the checkpoint);
GPT-2 weights use GPT-2 BPE. temperature=0 is greedy decoding (one sample: every greedy sample is the same).
"""

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from checkpoint import load_for_inference
from configurator import ConfigError, cli_main, parse
from hardware import autocast, resolve_device, resolve_dtype
from tokenizer import codec, tokenizer_vocab


@dataclass
class SampleConfig:
    init_from: str = "resume"  # 'resume' (out_dir/ckpt.pt), 'gpt2'..'gpt2-xl', a Pythia name or a local HF directory
    out_dir: str = "out"  # the run to sample from, with init_from=resume
    start: str = "\n"  # the prompt, or FILE:path to read it from a file
    num_samples: int = 3  # samples drawn as one batch
    max_new_tokens: int = 500  # tokens generated per sample
    temperature: float = 0.8  # 0: greedy; below 1 sharper, above 1 flatter
    top_k: int | None = 200  # sample among the top_k most likely tokens; None: all
    seed: int = 1337  # the sampling generator's seed
    use_cache: bool = True  # KV cache; False recomputes the whole context per token (as nanoGPT)
    device: str = "auto"  # 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'
    dtype: str = "auto"  # 'auto', 'float32', 'bfloat16', 'float16'
    compile: bool = False  # accepted for nanoGPT's command lines; decoding here is not compiled

    def __post_init__(self):
        for field in ("num_samples", "max_new_tokens"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}={getattr(self, field)} is invalid: it must be >= 1")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k={self.top_k} is invalid: use a positive integer, or None for no cut")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} is invalid: use 0 (greedy) or more")


def read_prompt(start: str) -> str:
    if not start.startswith("FILE:"):
        return start
    path = Path(start[5:])
    if not path.is_file():
        raise ConfigError(f"start=FILE:{path}: no such file")
    return path.read_text(encoding="utf-8")


def generate(cfg: SampleConfig):
    """The samples as strings, and the generated tokens per second."""
    prompt = read_prompt(cfg.start)  # before loading a model: a typo costs no minutes
    if not prompt:
        raise ConfigError("the prompt is empty: pass --start=TEXT")
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device.split(":")[0])
    num_samples = cfg.num_samples
    if cfg.temperature == 0 and num_samples > 1:
        print(f"greedy decoding (temperature=0) gives one sample, not {num_samples} identical ones", file=sys.stderr)
        num_samples = 1
    model, meta = load_for_inference(cfg.init_from, cfg.out_dir)
    model.eval().to(device)
    encode, decode = codec(meta)
    try:
        ids = encode(prompt)
    except ValueError as e:
        raise ConfigError(f"the prompt cannot be encoded: {e}") from None
    block_size = model.config.block_size
    if len(ids) > block_size:
        raise ConfigError(
            f"the prompt has {len(ids)} tokens, more than the model's context of {block_size}: shorten it"
        )
    x = torch.tensor([ids], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    t0 = time.perf_counter()
    with autocast(device, dtype):  # all samples decode as one batch: each step reads the weights once for all
        y = model.generate(
            x.expand(num_samples, -1),
            cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            use_cache=cfg.use_cache,
            generator=generator,
            vocab_limit=tokenizer_vocab(meta),
        )
    rate = num_samples * cfg.max_new_tokens / (time.perf_counter() - t0)
    return [decode(row.tolist()) for row in y], rate


def run(argv):
    (cfg,) = parse(argv, SampleConfig, doc=__doc__, prog="sample.py")
    samples, rate = generate(cfg)
    for s in samples:
        print(s)
        print("---------------")
    print(f"{rate:.1f} tokens/s", file=sys.stderr)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
