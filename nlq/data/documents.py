"""A folder of documents (.txt and .md files, read recursively) as a dataset: each file one document, exact
duplicates dropped (the first in path order kept), empty and undecodable files skipped with their reason,
and whole documents held out for validation and for a test split, so that no held-out document contributes
a token to training. Documents are read and encoded one at a time: memory stays flat whatever the folder's
size.
"""

import errno
import hashlib
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nlq.data.dataset import DataError, write_dataset
from nlq.data.tokenizer import EOT, gpt2_encoding

SUFFIXES = (".txt", ".md")
SPLITS = ("train", "val", "test")


@dataclass
class Folder:
    """The documents of a folder, each split's files, and what was left out and why."""

    root: Path
    splits: dict  # split -> [Path]
    skipped: dict = field(default_factory=dict)  # reason -> count
    skipped_paths: dict = field(default_factory=dict)  # reason -> [path], for --list_skipped
    duplicates: int = 0
    other_files: int = 0
    folders_named_like_documents: int = 0  # a directory x.md is read as a folder
    chars: str = ""  # every character of the kept documents, sorted (the character codec's vocabulary)


def is_document_folder(path) -> bool:
    """Whether path is a directory holding .txt or .md files (at any depth)."""
    path = Path(path)
    return path.is_dir() and any(p.suffix.lower() in SUFFIXES for p in path.rglob("*") if p.is_file())


def read_document(path: Path) -> tuple[str | None, str | None]:
    """(text, None), or (None, why it is skipped): not UTF-8, binary (NUL bytes), empty."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"unreadable ({e.strerror})"
    if b"\x00" in data:
        return None, "binary (NUL bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    return (text, None) if text.strip() else (None, "empty")


def survey(root, val_size: float, test_size: float, seed: int, min_documents: int = 10) -> Folder:
    """Every document of root, deduplicated, in sorted path order, split into train / val / test: n_val =
    ceil(val_size x n), at least one (test alike; a size of 0 holds none out), drawn with seed. Sizes that
    would leave training less than half of the documents are refused, not capped."""
    for name, size in (("val_size", val_size), ("test_size", test_size)):
        if not 0 <= size < 0.5:
            raise DataError(f"--{name}={size}: give the share of documents to hold out, from 0 to below 0.5")
    root = Path(root)
    files, kept, seen, skipped, duplicates, chars, named_folders = [], [], set(), {}, 0, set(), 0
    for p in sorted(root.rglob("*")):  # links to folders are not followed
        what = entry_kind(p)
        if what == "file":
            files.append(p)
        elif what == "folder":
            named_folders += p.suffix.lower() in SUFFIXES
        else:
            skipped.setdefault(what, []).append(p)
    for p in files:
        if p.suffix.lower() not in SUFFIXES:
            continue
        text, why = read_document(p)
        if why:
            skipped.setdefault(why, []).append(p)
            continue
        digest = hashlib.sha256(text.encode()).digest()
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        kept.append(p)
        chars |= set(text)
    n = len(kept)
    held = [max(1, math.ceil(size * n)) if size > 0 else 0 for size in (val_size, test_size)]
    if n >= min_documents and held[0] and sum(held) > n / 2:
        raise DataError(
            f"--val_size={val_size} and --test_size={test_size} hold out {held[0]} and {held[1]} of {n} documents, "
            "leaving training less than half: lower them, or add documents"
        )
    if n < min_documents or not held[0]:
        reasons = ", ".join(f"{len(c)} {why}" for why, c in skipped.items()) or "none skipped"
        raise DataError(
            f"{root} holds {n} readable distinct document(s) (.txt, .md; {reasons}; {duplicates} duplicates), too "
            f"few to hold out whole documents for validation and test (at least {min_documents}): add documents"
        )
    order = list(range(n))
    random.Random(seed).shuffle(order)
    val, test = sorted(order[: held[0]]), sorted(order[held[0] : held[0] + held[1]])
    train = sorted(set(order) - set(val) - set(test))
    splits = {"train": [kept[i] for i in train], "val": [kept[i] for i in val], "test": [kept[i] for i in test]}
    other = sum(p.suffix.lower() not in SUFFIXES for p in files)
    counts = {why: len(paths) for why, paths in skipped.items()}
    return Folder(
        root, {k: v for k, v in splits.items() if v}, counts, skipped, duplicates, other, named_folders,
        "".join(sorted(chars)),
    )  # fmt: skip


def entry_kind(p: Path) -> str:
    """'file', 'folder', or why an entry is no document: a dangling link, a symlink loop, a special file."""
    if p.is_symlink():
        try:
            p.stat()
        except OSError as e:
            return "symlink loop" if e.errno == errno.ELOOP else "dangling link"
    if p.is_dir():
        return "folder"
    return "file" if p.is_file() else "not a regular file"


TOKENIZERS = ("gpt2", "char")
END = "\x00"  # the character codec's end of a document: id 0 (no kept document holds a NUL byte)


def codec_of(folder: Folder, tokenizer: str) -> tuple[dict, object]:
    """(meta.json's tokenizer fields, encode(text) -> ids): GPT-2 BPE, or one id per character of the
    folder's documents with id 0 ending each document."""
    if tokenizer == "gpt2":
        enc = gpt2_encoding()
        return {"tokenizer": "gpt2", "vocab_size": enc.n_vocab, "eos": EOT}, enc.encode_ordinary
    chars = END + folder.chars
    lut = {c: i for i, c in enumerate(chars)}
    return {"tokenizer": "char", "chars": chars, "vocab_size": len(chars), "eos": 0}, lambda t: [lut[c] for c in t]


def tokens(paths, encode, eos: int, chunk: int = 1 << 20):
    """Each document's ids followed by the end-of-document id eos, in chunks of about chunk ids."""
    buffer, size = [], 0
    for p in paths:
        text, _ = read_document(p)
        ids = np.asarray(encode(text) + [eos], dtype=np.uint16)
        buffer.append(ids)
        size += len(ids)
        if size >= chunk:
            yield np.concatenate(buffer)
            buffer, size = [], 0
    if buffer:
        yield np.concatenate(buffer)


def write(folder: Folder, tokenizer: str, out_dir, source: str, force: bool) -> dict:
    """The folder as a dataset in out_dir (train.bin, val.bin, test.bin and meta.json); its meta."""
    codec, encode = codec_of(folder, tokenizer)
    return write_dataset(
        out_dir,
        {name: tokens(paths, encode, codec["eos"]) for name, paths in folder.splits.items()},
        {
            **codec,
            "source": source,
            "documents": {name: len(paths) for name, paths in folder.splits.items()},
            "duplicates": folder.duplicates,
            "skipped": folder.skipped,
            "other_files": folder.other_files,  # not .txt / .md: ignored, and counted
        },
        force=force,
    )


def summary(folder: Folder, meta: dict) -> list[str]:
    """What was written and what was left out, a line per split and one for the rest."""
    lines = [
        f"{name}: {meta['documents'][name]:,} documents, {meta['tokens'][name]:,} tokens" for name in folder.splits
    ]
    left = [f"{c} {why}" for why, c in folder.skipped.items()] + [f"{folder.duplicates} exact duplicates"]
    left += [f"{folder.other_files} files of other types"] if folder.other_files else []
    read = f"; {folder.folders_named_like_documents} folders named like documents, read as folders"
    return [*lines, f"left out: {', '.join(left)}" + (read if folder.folders_named_like_documents else "")]


def skipped_lines(folder: Folder) -> list[str]:
    """Every skipped entry by name, with why (--list_skipped)."""
    return [f"skipped ({why}): {p}" for why, paths in folder.skipped_paths.items() for p in paths]


def skipped_text(skipped: dict) -> str:
    """'2 empty, 1 not UTF-8' of a reason -> count dict, or 'none'."""
    return ", ".join(f"{c} {why}" for why, c in skipped.items()) or "none"


def documents_of(ids: np.ndarray, eos: int) -> list[np.ndarray]:
    """A split's documents: its ids cut after each end-of-document id (the id itself dropped)."""
    ends = np.flatnonzero(np.asarray(ids) == eos)
    starts = np.concatenate(([0], ends[:-1] + 1))
    return [np.asarray(ids[a:b]) for a, b in zip(starts, ends)]
