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

from nlq.common.errors import UserError, cli_main
from nlq.interop import hf_export
from nlq.run.export import export, export_hf


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
