"""Tiny shakespeare cut into a folder of documents, for verdict.py's walk-through (docs/your-text.md): every
--speeches consecutive speeches (blocks between blank lines) one .txt file, in order.

python data/shakespeare_docs/prepare.py --input=tinyshakespeare.txt --out_dir=data/shakespeare_docs/docs
python verdict.py --data=data/shakespeare_docs/docs --arms=linear,residual_gelu --out=verdict-shakespeare

Without --input it downloads tiny shakespeare (data/shakespeare_char's source) once, into this folder.
"""

import argparse
from pathlib import Path

from nlq.common.atomic import atomic_write_text
from nlq.common.errors import UserError, cli_main
from nlq.data.textprep import TINY_SHAKESPEARE_URL, read_text

HERE = Path(__file__).resolve().parent


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="a local copy of tiny shakespeare (default: downloaded)")
    p.add_argument("--out_dir", default=str(HERE / "docs"), help="the folder of documents")
    p.add_argument("--speeches", type=int, default=40, help="speeches per document")
    args = p.parse_args(argv)
    if args.speeches < 1:
        raise UserError(f"--speeches={args.speeches}: give 1 or more")
    out = Path(args.out_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: choose another --out_dir (documents are never overwritten)")
    text = read_text(args.input, HERE / "input.txt", TINY_SHAKESPEARE_URL)
    speeches = [s.strip() for s in text.split("\n\n") if s.strip()]
    out.mkdir(parents=True, exist_ok=True)
    docs = [speeches[i : i + args.speeches] for i in range(0, len(speeches), args.speeches)]
    for n, doc in enumerate(docs, 1):
        atomic_write_text(out / f"part_{n:04d}.txt", "\n\n".join(doc) + "\n")
    print(f"{len(speeches):,} speeches in {len(docs)} documents of {args.speeches} -> {out}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
