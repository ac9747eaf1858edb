"""OpenWebText (or any text corpus) in GPT-2 BPE: train.bin / val.bin + meta.json.

python data/openwebtext/prepare.py --num_proc 16                      # the hub's OpenWebText
python data/openwebtext/prepare.py --dataset corpus.jsonl --text_field body --out_dir data/mine
python data/openwebtext/prepare.py --dataset book.txt --out_dir data/book      # one local text file
python data/openwebtext/prepare.py --dataset my_docs/ --out_dir data/docs --val_size=0.05 --test_size=0.05

Local data: a folder of documents (.txt and .md files at any depth, one document each: exact duplicates
dropped, empty and undecodable files skipped and counted, whole documents held out for val.bin and test.bin;
nlq/data/documents.py), a .json/.jsonl/.parquet file or a directory of them, or a single .txt file (one
document per blank-line-separated paragraph). Each document becomes encode_ordinary(text) + [EOT 50256].
Without a validation split in the source, --val_size of the documents are held out with seed 2357
(nanoGPT's split: 0.0005), at least one and at most a tenth of them, so a small corpus never loses a third
of itself to validation; a folder of documents also holds out --test_size of them (default: --val_size).

Tokenising: num_proc worker processes each take a contiguous run of documents at a time (a shard),
encode it with tiktoken and write its ids to a temporary file beside the output; the shards are appended
to the split's file in order as they finish, so the output is the same whatever num_proc, and memory
stays at a few batches of documents per worker whatever the corpus size.
Current `datasets` releases no longer run loading scripts; a hub dataset that has one is read from the
hub's parquet conversion instead.
"""

import argparse
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from nlq.common import hub
from nlq.common.domains import Number
from nlq.common.errors import cli_main
from nlq.data import documents
from nlq.data.dataset import DataError, refuse_overwrite, write_dataset
from nlq.data.tokenizer import EOT, gpt2_encoding

HERE = Path(__file__).resolve().parent


MIN_DOCUMENTS = 10  # fewer cannot give a validation split that is both non-empty and a small part

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}
VAL_SPLIT_NAMES = ("validation", "val", "test")


def load_source(name: str, num_proc: int):
    path = Path(name)
    if not path.exists():
        hub.offline()  # before datasets is imported: it reads the switch once
    import datasets

    if path.exists():
        files = sorted(str(p) for p in path.iterdir()) if path.is_dir() else [str(path)]
        suffixes = {Path(f).suffix for f in files}
        if len(suffixes) != 1 or (suffix := suffixes.pop()) not in LOCAL_BUILDERS:
            raise DataError(f"--dataset {name}: expected files of one type among {', '.join(LOCAL_BUILDERS)}")
        kw = {}
        if suffix == ".txt":  # a directory: one document per file; one file: one per paragraph
            kw = {"sample_by": "document" if path.is_dir() else "paragraph"}
        try:
            return datasets.load_dataset(LOCAL_BUILDERS[suffix], data_files=files, num_proc=num_proc, **kw)
        except Exception as e:  # a damaged line or file: the library's cause is the useful part
            cause = e.__cause__ or e
            raise DataError(
                f"--dataset {name} cannot be read as {suffix} ({type(cause).__name__}: "
                f"{str(cause).splitlines()[0] if str(cause) else ''}): repair or remove the damaged file or line"
            ) from None
    try:
        return datasets.load_dataset(name, num_proc=num_proc)
    except Exception as e:  # a loading script, or another format the library no longer reads
        print(
            f"load_dataset({name!r}) failed ({str(e).splitlines()[0]}); trying its parquet conversion", file=sys.stderr
        )
    try:
        return datasets.load_dataset(name, revision="refs/convert/parquet", num_proc=num_proc)
    except Exception as e:
        raise DataError(
            f"cannot load {name} from the hub ({type(e).__name__}); offline, pass a local file or directory: "
            "--dataset corpus.jsonl (with --text_field) or --dataset book.txt"
        ) from None


def split(ds, val_size: float, seed: int):
    """{'train': ..., 'val': ...}: the source's own validation split if it has one, else a held-out part."""
    val_name = next((n for n in VAL_SPLIT_NAMES if n in ds), None)
    if "train" in ds and val_name:
        return {"train": ds["train"], "val": ds[val_name]}
    n = len(ds["train"])
    if n < MIN_DOCUMENTS:
        raise DataError(
            f"the source holds {n} document(s), too few to hold out a validation split (at least {MIN_DOCUMENTS}): "
            "give more text, or a single .txt file with blank lines between paragraphs"
        )
    n_val = min(max(1, math.ceil(val_size * n)), n // 10)  # at least one document, at most a tenth
    parts = ds["train"].train_test_split(test_size=n_val, seed=seed, shuffle=True)
    return {"train": parts["train"], "val": parts["test"]}


SHARDS_PER_PROCESS = 8  # enough shards to keep every worker busy until the end
BATCH = 1000  # documents read and encoded at a time
_WORKER = {}  # a worker process's split and text field, set once by its initializer


def _start_worker(ds, text_field):
    _WORKER.update(ds=ds, field=text_field, enc=gpt2_encoding())


def _tokenize_shard(job):
    """Encode documents [start, stop) of the worker's split into the file path; returns path."""
    start, stop, path = job
    enc, ds, field = _WORKER["enc"], _WORKER["ds"], _WORKER["field"]
    with open(path, "wb") as f:
        for i in range(start, stop, BATCH):
            ids = []
            for text in ds[i : min(i + BATCH, stop)][field]:  # faster here than encode_ordinary_batch
                if not isinstance(text, str):
                    raise DataError(f"a document has {field}={text!r}, not text: clean the source or pick --text_field")
                ids += enc.encode_ordinary(text)
                ids.append(EOT)
            f.write(np.array(ids, dtype=np.uint16).tobytes())
    return path


def stream_tokens(ds, text_field, num_proc, scratch, chunk=2**24):
    """A split's token ids, in document order, in chunks of at most chunk ids."""
    n = len(ds)
    shards = max(1, min(n, num_proc * SHARDS_PER_PROCESS))
    bounds = [n * k // shards for k in range(shards + 1)]
    jobs = [(a, b, os.path.join(scratch, f"{k:05d}.bin")) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    with multiprocessing.Pool(num_proc, initializer=_start_worker, initargs=(ds, text_field)) as pool:
        for path in pool.imap(_tokenize_shard, jobs):  # in order; later shards wait on disk
            ids = np.memmap(path, dtype=np.uint16, mode="r") if os.path.getsize(path) else np.zeros(0, np.uint16)
            for i in range(0, len(ids), chunk):
                yield ids[i : i + chunk]
            del ids
            os.remove(path)


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="Skylion007/openwebtext", help="hub name, or a local file/directory")
    p.add_argument("--text_field", default="text")
    p.add_argument("--out_dir", default=str(HERE))
    p.add_argument("--num_proc", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--val_size", type=Number(), default=0.0005)
    p.add_argument("--test_size", type=Number(), help="a folder of documents: the share held out as test.bin")
    p.add_argument(
        "--tokenizer", default="gpt2", choices=documents.TOKENIZERS,
        help="a folder of documents: GPT-2 BPE, or one id per character (small models on a CPU)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=2357)
    p.add_argument("--force", action="store_true", help="overwrite an existing dataset")
    args = p.parse_args(argv)
    refuse_overwrite(args.out_dir, args.force)  # fail before hours of work, not after
    if documents.is_document_folder(args.dataset):
        return prepare_folder(args)
    if args.test_size is not None or args.tokenizer != "gpt2":
        option = "--test_size" if args.test_size is not None else "--tokenizer"
        raise DataError(f"{option} is for a folder of .txt/.md documents; {args.dataset} is not one")
    ds = load_source(args.dataset, args.num_proc)
    columns = ds["train"].column_names
    if args.text_field not in columns:
        raise DataError(f"--text_field {args.text_field!r} is not a column of {args.dataset}: columns are {columns}")
    parts = split(ds, args.val_size, args.seed)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".tokens-", dir=args.out_dir)  # same disk as the output
    try:
        meta = write_dataset(
            args.out_dir,
            {n: stream_tokens(d, args.text_field, args.num_proc, scratch) for n, d in parts.items()},
            {
                "tokenizer": "gpt2",
                "vocab_size": gpt2_encoding().n_vocab,
                "source": args.dataset,
                "text_field": args.text_field,
                "documents": {n: len(d) for n, d in parts.items()},
            },
            force=args.force,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"train {meta['tokens']['train']:,} tokens, val {meta['tokens']['val']:,} tokens -> {args.out_dir}")
    warn_if_small(meta)


def prepare_folder(args) -> dict:
    """A folder of documents: train.bin, val.bin and test.bin of whole documents (nlq/data/documents.py)."""
    test_size = args.val_size if args.test_size is None else args.test_size
    folder = documents.survey(args.dataset, args.val_size, test_size, args.seed, MIN_DOCUMENTS)
    meta = documents.write(folder, args.tokenizer, args.out_dir, str(args.dataset), args.force)
    print("\n".join(documents.summary(folder, meta)) + f" -> {args.out_dir}")
    warn_if_small(meta)
    return meta


def warn_if_small(meta: dict, block_size: int = 1024) -> None:
    """A warning with the numbers when the validation split holds fewer tokens than a few contexts."""
    if meta["tokens"]["val"] < 10 * block_size:
        print(
            f"warning: val holds {meta['tokens']['val']:,} tokens, fewer than 10 windows of {block_size}: "
            "validation losses will be noisy (raise --val_size, or prepare more text)",
            file=sys.stderr,
        )


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
