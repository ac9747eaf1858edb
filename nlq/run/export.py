"""A run's checkpoint in another format (export.py): a sharded checkpoint gathered as one file, or the newest
checkpoint as a Hugging Face directory (nlq/interop/hf_export.py)."""

from pathlib import Path

from nlq.common.atomic import check_writable
from nlq.common.errors import UserError
from nlq.interop import hf_export
from nlq.run import checkpoint
from nlq.run.config import TrainConfig
from nlq.run.start import freeze_pretrained
from nlq.run.step import make_optimizer


def export(out_dir, out=None) -> Path:
    """Write the newest intact sharded checkpoint of out_dir as one file; returns its path."""
    source = checkpoint.latest(out_dir, sharded=True)
    if source is None and checkpoint.latest(out_dir) is not None:
        raise UserError(
            f"{out_dir} holds its checkpoint as the one file {checkpoint.latest(out_dir)} already (a run of one "
            "process or DDP): sample, resume or copy it as it is, or export it with --format=hf --dest=DIR"
        )
    if source is None:
        raise UserError(
            f"{out_dir} holds no checkpoint ({checkpoint.CHECKPOINT} or {checkpoint.SHARDED}/{checkpoint.LATEST}): "
            "check --out_dir"
        )
    target = Path(out) if out else Path(out_dir) / checkpoint.CHECKPOINT
    check_writable("--out", target)  # before gathering the whole model
    ckpt = checkpoint.load(source, ("model_args", "config", "iter_num", "origin"))
    model = checkpoint.model_from(ckpt, source)
    cfg = TrainConfig(**{k: v for k, v in ckpt["config"].items() if k in TrainConfig.__dataclass_fields__})
    if cfg.freeze_pretrained:  # the optimizer holds the trainable parameters only, as in training
        freeze_pretrained(model)
    optimizer = make_optimizer(model, cfg, "cpu")
    checkpoint.restore_optimizer(model, optimizer, ckpt)
    meta = {k: v for k, v in ckpt.items() if k not in ("sharded", "keep", "files")}
    if target.exists() and checkpoint.latest(out_dir) == target and target != source:
        newer = checkpoint.load(target, ("iter_num",))["iter_num"]
        if newer > ckpt["iter_num"]:
            raise UserError(
                f"{target} holds step {newer}, newer than the sharded step {ckpt['iter_num']}: "
                "export elsewhere with --out=FILE"
            )
    checkpoint.save({**meta, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, target)
    return target


def export_hf(out_dir, dest, fmt: str) -> Path:
    """The newest intact checkpoint of out_dir as a Hugging Face directory at dest."""
    hf_export.check_destination(Path(dest))  # before loading the model
    source = checkpoint.latest(out_dir)
    if source is None:
        raise UserError(f"{out_dir} holds no checkpoint: check --out_dir")
    model, ckpt = checkpoint.load_model(source)
    return hf_export.export(model.eval(), ckpt.get("tokenizer") or {"tokenizer": "gpt2"}, dest, fmt)
