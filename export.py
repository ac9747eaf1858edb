"""Turn a run's sharded checkpoint (written under parallelism='fsdp') into the single file out_dir/ckpt.pt:
the same state (weights, AdamW state, step, config, tokenizer) that a one-process or DDP run writes, for
tools that read one file (nanoGPT's, your own) and as a DDP resume point. sample.py, zeroshot.py and
train.py's resume read sharded checkpoints directly; this is for everything else.

    python export.py --out_dir=out-owt-xl-nlq              # -> out-owt-xl-nlq/ckpt.pt
    python export.py --out_dir=out-owt-xl-nlq --out=xl.pt  # elsewhere

The whole model and its optimizer state are gathered in this process's memory (about 16 bytes per
parameter in float32: 43 GB for 2.7B parameters).
"""

import argparse
from pathlib import Path

import checkpoint
from atomic import check_writable
from errors import UserError, cli_main
from start import freeze_pretrained
from train import TrainConfig, make_optimizer


def export(out_dir, out=None) -> Path:
    """Write the newest intact sharded checkpoint of out_dir as one file; returns its path."""
    source = checkpoint.latest(out_dir, sharded=True)
    if source is None:
        raise UserError(
            f"{out_dir} holds no sharded checkpoint ({checkpoint.SHARDED}/{checkpoint.LATEST}): check --out_dir"
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


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True, help="the run whose sharded checkpoint to export")
    p.add_argument("--out", default=None, help="the file to write (default: out_dir/ckpt.pt)")
    args = p.parse_args(argv)
    ckpt_path = export(args.out_dir, args.out)
    print(f"wrote {ckpt_path}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
