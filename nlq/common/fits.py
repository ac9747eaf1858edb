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
