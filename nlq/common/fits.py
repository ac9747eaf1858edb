"""Whether a model fits the memory free on a device, checked before any weights are read or made."""

from pathlib import Path

import torch

from nlq.common.errors import ConfigError

GiB = 2**30


def free_bytes(device: str) -> int | None:
    """Memory free for a new model: a GPU's free memory, a CPU's MemAvailable (Linux); None if unknown."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(n: int, bytes_per_param: float, device: str, what: str) -> None:
    """Refuse, in one line with the numbers, a model of n parameters whose what (e.g. weights, gradients and
    AdamW state: bytes_per_param per parameter) exceeds the memory free on device."""
    need, free = n * bytes_per_param, free_bytes(device)
    if free is not None and need > free:
        raise ConfigError(
            f"the model has {n:,} parameters: its {what} need {need / GiB:,.1f} GiB, more than the "
            f"{free / GiB:,.1f} GiB free on {device}; lower n_layer, n_embd or vocab_size (or spread it: "
            "--parallelism=fsdp on more GPUs)"
        )


def decoding_bytes(config, batch: int, prompt_len: int, itemsize: int) -> int:
    """Bytes that decoding batch streams of a prompt_len prompt holds beside the weights: the KV cache (every
    layer's keys and values at the full context), the prefill's largest moment (one layer's activations, the
    MLP's hidden and four residual widths per token, and float32 attention scores, which a CPU's math
    attention makes) and three float32 copies of a step's logits (logits, probabilities, their top-k)."""
    cache = 2 * config.n_layer * batch * config.kv_heads * config.block_size * config.head_dim * itemsize
    prefill = batch * prompt_len * (config.mlp_hidden + 4 * config.n_embd) * itemsize
    scores = batch * config.n_head * prompt_len * prompt_len * 4
    return cache + prefill + scores + 3 * batch * config.vocab_size * 4


def check_decoding_fits(config, batch: int, prompt_len: int, itemsize: int, device: str) -> None:
    """Refuse, in one line with the numbers, batch streams whose decoding_bytes exceed the memory free."""
    need, free = decoding_bytes(config, batch, prompt_len, itemsize), free_bytes(device)
    if free is not None and need > free:
        most = free // decoding_bytes(config, 1, prompt_len, itemsize)  # the bytes are batch times one stream's
        fix = f"give num_samples={most} or fewer" if most else "even one sample does not fit: use a larger machine"
        raise ConfigError(
            f"num_samples={batch}: decoding them needs {need / GiB:,.1f} GiB (KV cache, prefill and logits), more "
            f"than the {free / GiB:,.1f} GiB free on {device}; {fix}"
        )
