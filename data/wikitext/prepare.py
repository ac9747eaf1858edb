"""WikiText-103 for the frozen probe of arXiv 2604.10791: the first 2000 train rows longer than 50
characters once stripped (train.bin) and the first 300 such validation rows (val.bin), each as the raw row
(its leading space and trailing newline kept, as the official code trains on sample["text"]), one EOS after
each, in the tokenizer of the model to be probed.

python data/wikitext/prepare.py                                                    # GPT-2 BPE
python data/wikitext/prepare.py --tokenizer EleutherAI/pythia-160m --out_dir data/wikitext_pythia
python data/wikitext/prepare.py --train_file train.jsonl --val_file val.jsonl      # local rows {"text": ...}
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from nlq.common.errors import cli_main
from nlq.data.dataset import refuse_overwrite, write_dataset
from nlq.data.tokenizer import load_tokenizer
from nlq.eval.taskdata import wikitext_lines

HERE = Path(__file__).resolve().parent


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", default="gpt2", help="'gpt2' (offline BPE) or a HF tokenizer name/directory")
    p.add_argument("--train_file", help="local JSONL rows with a 'text' field (default: the hub)")
    p.add_argument("--val_file", help="local JSONL rows with a 'text' field (default: the hub)")
    p.add_argument("--train_lines", type=int, default=2000)
    p.add_argument("--val_lines", type=int, default=300)
    p.add_argument(
        "--min_chars", type=int, default=51, help="at least this many characters (the paper: longer than 50)"
    )
    p.add_argument("--out_dir", default=str(HERE))
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    refuse_overwrite(args.out_dir, args.force)
    meta, encode = load_tokenizer(args.tokenizer)
    splits = {}
    for split, hub_split, path, n in (
        ("train", "train", args.train_file, args.train_lines),
        ("val", "validation", args.val_file, args.val_lines),
    ):
        print(f"reading {split} lines ...", file=sys.stderr)
        lines = wikitext_lines(hub_split, args.min_chars, n, path, option=f"--{split}_file", raw=True)
        if len(lines) < n:
            print(
                f"warning: {split} has {len(lines)} lines of >= {args.min_chars} characters, not {n}", file=sys.stderr
            )
        splits[split] = [np.array(encode(line) + [meta["eos"]]) for line in lines]
    meta = write_dataset(
        args.out_dir, splits, {**meta, "source": args.train_file or "Salesforce/wikitext"}, force=args.force
    )
    print(f"train {meta['tokens']['train']:,} tokens, val {meta['tokens']['val']:,} tokens -> {args.out_dir}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
