"""Checkpoints: written atomically (atomic.py), read with torch.load(weights_only=True); and the one path
from a checkpoint, or pretrained weights, to a model ready for inference (sample.py, evaluation, bench).
"""

from pathlib import Path

import torch

from atomic import atomic_write
from configurator import ConfigError, UserError

PREFIXES = ("_orig_mod.", "module.")  # torch.compile and DDP wrappers


class CheckpointError(UserError):
    """A checkpoint problem."""


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def save(obj: dict, path) -> None:
    """Write obj to path atomically; a failed write (full disk, ...) keeps the old file and raises WriteError."""
    atomic_write(path, lambda f: torch.save(obj, f), needed_bytes=_nbytes(obj))


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


def _mismatch(path, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"{path} does not match this version's model ({str(e).splitlines()[0]}): "
        "use the version of this project that wrote it"
    )


def model_config(ckpt: dict, path, **overrides):
    """The GPTConfig a checkpoint was trained with; overrides replace fields (dropout)."""
    from model import GPTConfig

    try:
        return GPTConfig(**{**ckpt["model_args"], **overrides})
    except (TypeError, ValueError) as e:  # a field this version lacks, or a value it refuses
        raise _mismatch(path, e) from None


def model_from(ckpt: dict, path, **overrides):
    """The GPT a checkpoint describes, with its weights."""
    from model import GPT

    model = GPT(model_config(ckpt, path, **overrides))
    try:
        model.load_state_dict(clean_state_dict(ckpt["model"]))
    except RuntimeError as e:
        raise _mismatch(path, e) from None
    return model


def load_model(path):
    """(GPT, checkpoint dict) from a training checkpoint."""
    ckpt = load(path)
    return model_from(ckpt, path), ckpt


def load_for_inference(init_from: str, out_dir: str):
    """(model, tokenizer meta) for sample.py, the evaluation and bench: out_dir's checkpoint for
    init_from='resume', else pretrained weights (a GPT-2 or Pythia name or a local HF directory). The
    tokenizer is the run's (kept in its checkpoint) and is checked to fit the model's vocabulary."""
    from model import GPT
    from tokenizer import pretrained_tokenizer, tokenizer_vocab

    if init_from == "resume":
        model, ckpt = load_model(Path(out_dir) / "ckpt.pt")
        meta = ckpt.get("tokenizer") or {"tokenizer": "gpt2"}
    elif GPT.is_pretrained_source(init_from):
        try:
            model = GPT.from_pretrained(init_from)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        meta = pretrained_tokenizer(init_from)
    else:
        raise ConfigError(
            f"init_from={init_from!r} is invalid: use resume, a GPT-2 or Pythia name, or a local HF directory"
        )
    needed = tokenizer_vocab(meta)
    if needed > model.config.vocab_size:
        raise CheckpointError(
            f"the tokenizer ({meta['tokenizer']}) has {needed} ids but the model's vocab_size is "
            f"{model.config.vocab_size}: the checkpoint lacks the tokenizer it was trained with (a nanoGPT "
            "checkpoint?); train it with this project, or pass weights whose vocabulary fits"
        )
    return model, meta
