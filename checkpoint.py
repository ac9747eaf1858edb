"""Checkpoints: written atomically, read with torch.load(weights_only=True).

A checkpoint is written to a temporary file in the same directory, synced and renamed over the old
one, so a crash or SIGKILL at any moment leaves either the old checkpoint or the new one, never a
partial file under the final name.
"""

import os
from pathlib import Path

import torch

PREFIXES = ("_orig_mod.", "module.")  # torch.compile and DDP wrappers


class CheckpointError(Exception):
    """A checkpoint problem, explained in one line."""


def save(obj: dict, path) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path, required=("model", "model_args")) -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} not found: no run has saved a checkpoint there (check out_dir, or train first)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(
            f"{path} cannot be read ({type(e).__name__}): it is truncated or not a checkpoint "
            "of this project; restore it or start again with init_from=scratch"
        ) from None
    missing = [k for k in required if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}: not a checkpoint of this project")
    return ckpt


def clean_state_dict(state: dict) -> dict:
    """Parameter names without torch.compile / DDP wrapper prefixes."""
    out = {}
    for k, v in state.items():
        while k.startswith(PREFIXES):  # wrappers nest in either order: module._orig_mod.x, _orig_mod.module.x
            k = k.split(".", 1)[1]
        out[k] = v
    return out


def load_model(path):
    """(GPT, checkpoint dict) from a training checkpoint."""
    from model import GPT, GPTConfig

    ckpt = load(path)
    try:
        model = GPT(GPTConfig(**ckpt["model_args"]))
        model.load_state_dict(clean_state_dict(ckpt["model"]))
    except (TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} does not match this version's model ({str(e).splitlines()[0]})") from None
    return model, ckpt
