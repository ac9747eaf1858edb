"""Sample from a trained model (out_dir/ckpt.pt) or from GPT-2 weights, with the KV cache.

    python sample.py --out_dir=out-shakespeare-char --start="ROMEO:" --num_samples=3
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --temperature=0 --max_new_tokens=64

The tokenizer is the one the run was trained with (its dataset's meta.json, stored in the checkpoint);
GPT-2 weights use GPT-2 BPE. temperature=0 is greedy decoding.
"""

import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

import checkpoint
from configurator import ConfigError, parse
from hardware import resolve_device, resolve_dtype
from model import GPT
from tokenizer import codec, pretrained_tokenizer


@dataclass
class SampleConfig:
    init_from: str = "resume"  # 'resume' (out_dir/ckpt.pt), 'gpt2'..'gpt2-xl', or a local HF directory
    out_dir: str = "out"
    start: str = "\n"  # the prompt, or FILE:path to read it from a file
    num_samples: int = 3
    max_new_tokens: int = 500
    temperature: float = 0.8
    top_k: int | None = 200
    seed: int = 1337
    use_cache: bool = True
    device: str = "auto"
    dtype: str = "auto"


def load(cfg: SampleConfig):
    """(model, encode, decode)."""
    if cfg.init_from == "resume":
        model, ckpt = checkpoint.load_model(Path(cfg.out_dir) / "ckpt.pt")
        encode, decode = codec(ckpt.get("tokenizer") or {"tokenizer": "gpt2"})
    elif GPT.is_pretrained_source(cfg.init_from):
        try:
            model = GPT.from_pretrained(cfg.init_from)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        encode, decode = codec(pretrained_tokenizer(cfg.init_from))
    else:
        raise ConfigError(
            f"init_from={cfg.init_from!r} is invalid: use resume, a GPT-2 or Pythia name, or a local HF directory"
        )
    return model, encode, decode


def generate(cfg: SampleConfig):
    """The samples as strings, and the generated tokens per second."""
    device = resolve_device(cfg.device)
    try:
        ptdtype = resolve_dtype(cfg.dtype, device.split(":")[0])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    model, encode, decode = load(cfg)
    model.eval().to(device)
    prompt = cfg.start
    if prompt.startswith("FILE:"):
        path = Path(prompt[5:])
        if not path.is_file():
            raise ConfigError(f"start=FILE:{path}: no such file")
        prompt = path.read_text(encoding="utf-8")
    try:
        ids = encode(prompt)
    except ValueError as e:
        raise ConfigError(f"the prompt cannot be encoded: {e}") from None
    block_size = model.config.block_size
    if not ids:
        raise ConfigError("the prompt is empty: pass --start=TEXT")
    if len(ids) > block_size:
        raise ConfigError(
            f"the prompt has {len(ids)} tokens, more than the model's context of {block_size}: shorten it"
        )
    x = torch.tensor([ids], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    ctx = nullcontext() if ptdtype == torch.float32 else torch.autocast(device.split(":")[0], dtype=ptdtype)
    t0 = time.perf_counter()
    with ctx:  # all samples decode as one batch: each step reads the weights once for all of them
        y = model.generate(
            x.expand(cfg.num_samples, -1),
            cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            use_cache=cfg.use_cache,
            generator=generator,
        )
    rate = cfg.num_samples * cfg.max_new_tokens / (time.perf_counter() - t0)
    return [decode(row.tolist()) for row in y], rate


def main(argv=None):
    try:
        (cfg,) = parse(sys.argv[1:] if argv is None else argv, SampleConfig)
        samples, rate = generate(cfg)
    except (ConfigError, checkpoint.CheckpointError) as e:
        sys.exit(f"error: {e}")
    for s in samples:
        print(s)
        print("---------------")
    print(f"{rate:.1f} tokens/s", file=sys.stderr)


if __name__ == "__main__":
    main()
