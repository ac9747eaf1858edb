"""A run's checkpoint in another format.

--format=pt (the default): a sharded checkpoint (written under parallelism='fsdp') as the single file
out_dir/ckpt.pt, the same state (weights, AdamW state, step, config, tokenizer) that a one-process or DDP run
writes, for tools that read one file and as a DDP resume point (sample.py, zeroshot.py and train.py's resume
read sharded checkpoints directly). The whole model and its optimizer state are gathered in this process's
memory (about 16 bytes per parameter in float32: 43 GB for 2.7B parameters).

--format=hf / gpt2: the newest checkpoint of out_dir (single file, sharded, or an official one of arXiv
2603.13381) as a Hugging Face directory that transformers, lm-eval and the Hub load (nlq/interop/hf_export.py): 'hf' for
any model, with its modeling code (trust_remote_code=True); 'gpt2' a plain GPT2LMHeadModel where GPT-2 can
express the model.

    python export.py --out_dir=out-owt-xl-nlq                               # -> out-owt-xl-nlq/ckpt.pt
    python export.py --out_dir=out-owt-xl-nlq --out=xl.pt                   # elsewhere
    python export.py --out_dir=out-owt-nlq --format=hf --dest=hf-owt-nlq    # a Hugging Face directory
    python export.py --out_dir=out-owt-baseline --format=gpt2 --dest=hf-owt-baseline
"""

import argparse
from pathlib import Path

from nlq.common.atomic import check_writable
from nlq.common.errors import UserError, cli_main
from nlq.interop import hf_export
from nlq.run import checkpoint
from nlq.run.start import freeze_pretrained
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


def export_hf(out_dir, dest, fmt: str) -> Path:
    """The newest intact checkpoint of out_dir as a Hugging Face directory at dest."""
    hf_export.check_destination(Path(dest))  # before loading the model
    source = checkpoint.latest(out_dir)
    if source is None:
        raise UserError(f"{out_dir} holds no checkpoint: check --out_dir")
    model, ckpt = checkpoint.load_model(source)
    return hf_export.export(model.eval(), ckpt.get("tokenizer") or {"tokenizer": "gpt2"}, dest, fmt)


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True, help="the run whose checkpoint to export")
    p.add_argument("--format", default="pt", choices=("pt", *hf_export.FORMATS), help="pt, hf or gpt2 (above)")
    p.add_argument("--out", default=None, help="pt: the file to write (default: out_dir/ckpt.pt)")
    p.add_argument("--dest", default=None, help="hf, gpt2: the directory to write (new, or empty)")
    args = p.parse_args(argv)
    if args.format == "pt":
        if args.dest:
            raise UserError("--dest is for --format=hf or gpt2: --format=pt writes --out")
        print(f"wrote {export(args.out_dir, args.out)}")
        return
    if not args.dest or args.out:
        raise UserError(f"--format={args.format} writes a directory: pass --dest=DIR (not --out)")
    print(f"wrote {export_hf(args.out_dir, args.dest, args.format)}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
