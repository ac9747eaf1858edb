"""The synthetic tasks: each generator's defining property checked on its output by a reference written
here, determinism by seed, the examples dataset and its batches, the loss over targets only, accuracy and
the key-blind floor on hand-made examples, tokens to the midpoint on a hand-made curve, the choice of a
grid point by accuracy, and the one-line refusals."""

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import compare_main, error_of, records, tiny_args, train_main

from model import chunk_loss
from nlq.comparison import tuning
from nlq.comparison.compare import Run
from nlq.comparison.stats import METRICS
from nlq.data import tasks
from nlq.data.dataset import DataError
from nlq.data.examples import open_examples, write_examples, write_task
from nlq.data.floor import key_blind_floor
from nlq.data.loader import ExampleBatches, example_rows
from nlq.eval.accuracy import accuracy, class_counts, macro_accuracy, midpoint, tokens_to_reach

ROOT = Path(__file__).resolve().parents[1]
PREPARE = ROOT / "data" / "synthetic_tasks" / "prepare.py"
SMALL = {  # a setting of each task small enough to check every example
    "in-context-recall": dict(vocab_size=16, seq_len=32),
    "fuzzy-in-context-recall": dict(vocab_size=16, seq_len=48, k_motif_size=3, v_motif_size=2),
    "noisy-in-context-recall": dict(vocab_size=32, seq_len=32, noise_vocab_size=8, frac_noise=0.4),
    "selective-copying": dict(vocab_size=10, seq_len=24, num_tokens_to_copy=5),
    "memorization": dict(vocab_size=33, seq_len=16, noise_vocab_size=0),
    "mqar": dict(vocab_size=64, seq_len=32, num_kv_pairs=6),
}


def make(task, n=200, seed=3, targets=None, **settings):
    out, vocab, form = tasks.generate(task, {**SMALL[task], **settings}, n, n, seed, targets)
    return out, vocab, form


def scored_runs(y):
    """[(first position, last position)] of each run of consecutive scored positions of one example."""
    idx = np.flatnonzero(y != tasks.IGNORE)
    runs, start = [], None
    for i, t in enumerate(idx):
        if start is None:
            start = t
        if i == len(idx) - 1 or idx[i + 1] != t + 1:
            runs.append((start, t))
            start = None
    return runs


def earlier_pair(x, key, value, before):
    """Whether tokens x hold key immediately followed by value, ending before position `before`."""
    k, v = len(key), len(value)
    return any(
        list(x[u : u + k]) == list(key) and list(x[u + k : u + k + v]) == list(value)
        for u in range(0, before - k - v + 1)
    )


@pytest.mark.parametrize("task", ["in-context-recall", "noisy-in-context-recall"])
@pytest.mark.parametrize("multi_query", [True, False])
def test_a_recall_target_is_the_value_an_earlier_occurrence_of_its_key_had(task, multi_query):
    out, vocab, _ = make(task, multi_query=multi_query)
    x, y = out["test"]
    for row_x, row_y in zip(x, y):
        runs = scored_runs(row_y)
        assert runs and all(a == b for a, b in runs)  # one token a value
        for t, _ in runs:  # position t holds the key, its target the value
            key, value = row_x[t], row_y[t]
            assert vocab.keys[0] <= key < vocab.keys[1] and vocab.values[0] <= value < vocab.values[1]
            assert earlier_pair(row_x, [key], [value], before=t), (row_x, t)
        if not multi_query:  # one probe, the last position, after the copy token
            assert runs == [(len(row_x) - 1, len(row_x) - 1)] and row_x[-2] == dict(vocab.special)["copy"]


def test_a_fuzzy_recall_target_is_the_value_motif_an_earlier_occurrence_of_its_key_motif_had():
    k = SMALL["fuzzy-in-context-recall"]["k_motif_size"]
    out, vocab, _ = make("fuzzy-in-context-recall")
    x, y = out["test"]
    pad = dict(vocab.special)["pad"]
    for row_x, row_y in zip(x, y):
        runs = scored_runs(row_y)
        assert runs
        for a, b in runs:
            key, value = row_x[a - k + 1 : a + 1], row_y[a : b + 1]
            assert all(vocab.keys[0] <= t < vocab.keys[1] for t in key)  # the test form's keys are k tokens long
            assert earlier_pair(row_x, key, value, before=a - k + 1), (row_x, a, b)
        assert not np.isin(row_y, [pad]).any()
    train_x, _ = out["train"]
    assert (train_x[:, 0] == pad).any()  # shorter motifs in training leave room that is padded


@pytest.mark.parametrize("split", ["train", "test"])
def test_noise_and_padding_are_never_targets(split):
    out, vocab, form = make("noisy-in-context-recall")
    assert form == "all"
    x, y = out[split]
    noise = (x >= vocab.noise[0]) & (x < vocab.noise[1])
    assert noise.mean() > 0.2  # the setting's 40 % of pairs are noise
    assert not ((y >= vocab.noise[0]) & (y < vocab.noise[1])).any()
    # the training form predicts every other next token
    if split == "train":
        nxt = np.concatenate([x[:, 1:], y[:, -1:]], axis=1)
        clean = ~((nxt >= vocab.noise[0]) & (nxt < vocab.noise[1]))
        assert (y[clean] == nxt[clean]).all()


def test_selective_copying_copies_the_content_in_order():
    out, vocab, _ = make("selective-copying")
    n = SMALL["selective-copying"]["num_tokens_to_copy"]
    blank, copy = dict(vocab.special)["blank"], dict(vocab.special)["copy"]
    for split in ("train", "test"):
        x, y = out[split]
        for row_x, row_y in zip(x, y):
            head = list(row_x).index(copy)
            content = [t for t in row_x[:head] if t != blank]
            assert len(content) == n and head == len(row_x) - n - 1
            assert list(row_y[head + 1 :]) == content and (row_y[: head + 1] == tasks.IGNORE).all()
            assert (row_x[head + 1 :] == blank).all()


def test_the_memorization_map_is_the_same_in_every_example_and_split():
    out, vocab, _ = make("memorization")
    facts = {}
    for split in ("train", "test"):
        x, y = out[split]
        assert (x[:, 1::2] == dict(vocab.special)["insert"]).all() and (y[:, 0::2] == tasks.IGNORE).all()
        for key, value in zip(x[:, 0::2].ravel(), y[:, 1::2].ravel()):
            assert facts.setdefault(int(key), int(value)) == value
    assert len(facts) == vocab.keys[1] - vocab.keys[0]  # 200 examples of 8 pairs see all 16 keys
    other, _, _ = make("memorization", seed=4)
    assert not np.array_equal(other["test"][1], out["test"][1])


def test_mqar_asks_every_key_once_after_the_pairs():
    out, vocab, form = make("mqar")
    assert form == "probed"
    pairs = SMALL["mqar"]["num_kv_pairs"]
    for split in ("train", "test"):
        x, y = out[split]
        for row_x, row_y in zip(x, y):
            keys, values = row_x[0 : 2 * pairs : 2], row_x[1 : 2 * pairs : 2]
            assert len(set(keys)) == pairs and len(set(values)) == pairs
            asked = np.flatnonzero(row_y != tasks.IGNORE)
            assert len(asked) == pairs and (asked >= 2 * pairs).all() and (asked % 2 == 0).all()
            assert sorted(row_x[asked]) == sorted(keys)
            for t in asked:
                assert row_y[t] == values[list(keys).index(row_x[t])]


@pytest.mark.parametrize("task", list(SMALL))
def test_every_task_is_a_function_of_its_seed(task):
    a, _, _ = make(task, n=20, seed=7)
    b, _, _ = make(task, n=20, seed=7)
    c, _, _ = make(task, n=20, seed=8)
    for split in ("train", "test"):
        assert all(np.array_equal(p, q) for p, q in zip(a[split], b[split]))
        assert not np.array_equal(a[split][0], c[split][0])
        assert a[split][0].shape == (20, SMALL[task]["seq_len"]) == a[split][1].shape


def test_the_prepared_dataset_is_the_generators_output_with_its_meta(tmp_path):
    done = subprocess.run(
        [sys.executable, PREPARE, "--task=mqar", f"--out_dir={tmp_path / 'd'}", "--num_kv_pairs=6", "--seq_len=32",
         "--num_train_examples=50", "--num_test_examples=40", "--seed=9"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = dict(vocab_size=64, seq_len=32, num_kv_pairs=6)
    out, vocab, _ = tasks.generate("mqar", settings, 50, 40, 9)
    data = open_examples(tmp_path / "d")
    assert np.array_equal(data.train.inputs, out["train"][0]) and np.array_equal(data.test.targets, out["test"][1])
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["roles"] == {"keys": [1, 32], "values": [32, 64]} and meta["examples"] == {"train": 50, "test": 40}
    assert meta["floor"] == key_blind_floor(*out["test"], **tasks.key_blind_view("mqar", settings, out["test"][0]))
    assert meta["floor"]["rule"]["token"] == "earliest_unasked"


def test_a_mad_lab_directory_without_meta_is_read_as_is(tmp_path):
    """MAD-Lab's own layout: inputs.npy and targets.npy per split, -100 unscored, no meta.json."""
    x = np.array([[1, 5, 2, 6, 1, 5], [2, 7, 2, 7, 3, 4]])
    y = np.full_like(x, -100)
    y[:, 3] = [5, 7]
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        np.save(tmp_path / split / "inputs.npy", x)
        np.save(tmp_path / split / "targets.npy", y)
    data = open_examples(tmp_path)
    assert data.meta["vocab_size"] == 8 and data.seq_len == 6


def mad_lab_memory_dataset(path):
    """MAD-Lab's MemoryDataset on disk: 16 examples of length 6, ids up to 7, position 3 scored."""
    x = np.tile(np.array([[1, 5, 2, 6, 1, 5], [2, 7, 2, 7, 3, 4]]), (8, 1))
    y = np.full_like(x, -100)
    y[:, 3] = x[:, 3]
    for split in ("train", "test"):
        (path / split).mkdir(parents=True)
        np.save(path / split / "inputs.npy", x)
        np.save(path / split / "targets.npy", y)
    return path


def test_a_run_on_mad_labs_data_takes_its_vocabulary_and_length_from_the_data(tmp_path, capsys):
    """Without meta.json and without vocab_size or block_size set, the model is sized to the data (8 ids, 6
    positions) and the run says so; set, they are kept."""
    data = mad_lab_memory_dataset(tmp_path / "mad")
    unset = [a for a in tiny_args(data, tmp_path / "r") if not a.startswith(("--vocab_size", "--block_size"))]
    train_main([*unset, "--max_iters=2", "--lr_decay_iters=2", "--eval_interval=2"])
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (config["vocab_size"], config["block_size"]) == (8, 6)
    assert all(0 <= r["val_acc_macro"] <= 1 for r in records(tmp_path / "r", "val_acc").values())
    assert "mad is a dataset of examples: vocab_size=8 and block_size=6 from its data" in capsys.readouterr().out
    train_main([*unset, "--vocab_size=16", "--max_iters=2", "--lr_decay_iters=2", "--eval_interval=2",
                f"--out_dir={tmp_path / 'r2'}"])  # fmt: skip
    config = json.loads((tmp_path / "r2" / "config.json").read_text())
    assert (config["vocab_size"], config["block_size"]) == (16, 6)


def test_mad_labs_disk_dataset_layout_is_named_in_its_refusal(tmp_path):
    (tmp_path / "disk" / "train").mkdir(parents=True)
    (tmp_path / "disk" / "train" / "data_idx.csv").write_text(",doc_idx,doc_path\n")
    message = error_of(tiny_args(tmp_path / "disk", tmp_path / "r"))
    assert "is in MAD-Lab's DiskDataset layout (text documents and data_idx.csv)" in message
    assert "MemoryDataset" in message and not (tmp_path / "r").exists()


def test_a_training_split_with_one_example_that_scores_nothing_is_refused_in_one_line(tmp_path):
    """Two training examples score a position, the third none (all -100): that row would give no loss (0 / 0),
    so the split is refused, naming the fix; the same rows with a target in each are read."""
    x = np.array([[1, 5, 2, 6], [2, 7, 2, 7], [3, 4, 3, 4]])
    y = np.full_like(x, -100)
    y[:2, 3] = [6, 7]
    for split, targets in (("train", y), ("test", y[:2])):
        (tmp_path / split).mkdir()
        np.save(tmp_path / split / "inputs.npy", x[: len(targets)])
        np.save(tmp_path / split / "targets.npy", targets)
    with pytest.raises(DataError, match=r"/train: an example has no target \(every one is -100\).*remove it"):
        open_examples(tmp_path)
    y[2, 3] = 4
    np.save(tmp_path / "train" / "targets.npy", y)
    assert len(open_examples(tmp_path).train) == 3


def test_batches_are_epochs_of_permutations_whatever_the_split_of_a_step():
    split = SimpleNamespace(inputs=np.arange(10)[:, None] * np.ones((1, 3), int), targets=np.full((10, 3), -100))
    split.targets[:, 1] = 1
    batches = ExampleBatches(split, batch_size=2, grad_accum=2, seed=5)
    seen = [int(r) for step in range(5) for r in batches.offsets(step)]  # 20 rows: two epochs of 10
    assert sorted(seen[:10]) == list(range(10)) == sorted(seen[10:]) and seen[:10] != seen[10:]
    whole = torch.cat([batches.get(3, m)[0] for m in range(2)])
    by_rank = torch.cat([batches.get(3, 0, rank=r, world_size=2)[0] for r in range(2)])
    assert torch.equal(whole, by_rank) and whole[:, 0].tolist() == [int(r) for r in batches.offsets(3)]
    again = ExampleBatches(split, batch_size=2, grad_accum=2, seed=5)
    assert [int(r) for r in again.offsets(4)] == seen[16:]  # a resume at step 4 reads the same rows
    _, y = batches.get(0, 0)
    assert (y[:, [0, 2]] == -1).all() and (y[:, 1] == 1).all()  # -100 becomes the loss's ignored -1


def test_the_loss_is_over_the_targets_only():
    """A model that puts all its mass on every target has zero loss, whatever it predicts where nothing is
    scored: the features are one-hot logits through an identity head."""
    out, _, _ = make("in-context-recall", n=8)
    split = SimpleNamespace(inputs=out["test"][0], targets=out["test"][1])
    _, y = example_rows(split, np.arange(8))
    y = y.reshape(-1)
    vocab = 16
    rng = torch.Generator().manual_seed(0)
    logits = torch.randn(len(y), vocab, generator=rng) * 5  # anything at unscored positions
    scored = y != -1
    logits[scored] = -1e4
    logits[scored, y[scored]] = 1e4
    total, _, _ = chunk_loss(logits, torch.eye(vocab), y)
    assert scored.sum() > 8 and float(total) == pytest.approx(0.0, abs=1e-3)


def test_accuracy_per_token_and_per_example_on_a_hand_made_batch():
    targets = torch.tensor([[-1, 3, -1, 2], [-1, -1, 1, 0], [-1, -1, -1, -1]])
    predicted = torch.tensor([[0, 3, 0, 2], [0, 0, 1, 1], [0, 0, 0, 0]])
    logits = torch.nn.functional.one_hot(predicted, 4).float()
    # scored: 2 + 2 tokens, 3 right; example 0 all right, example 1 not, example 2 scores nothing
    assert accuracy(logits, targets) == (3, 4, 1, 2)


@pytest.mark.parametrize(
    "task, settings",
    [
        ("in-context-recall", dict(vocab_size=24, seq_len=32)),
        ("in-context-recall", dict(vocab_size=24, seq_len=32, multi_query=False)),
        ("in-context-recall", dict(vocab_size=30, seq_len=32, frac_noise=0.4, noise_vocab_size=6)),
        ("noisy-in-context-recall", dict(vocab_size=30, seq_len=32, frac_noise=0.4, noise_vocab_size=6)),
        ("mqar", dict(vocab_size=64, seq_len=32, num_kv_pairs=4)),
        ("fuzzy-in-context-recall", dict(vocab_size=40, seq_len=48, frac_noise=0.4, noise_vocab_size=6)),
        ("memorization", dict(vocab_size=40, seq_len=16, frac_noise=0.4, noise_vocab_size=6)),
    ],
)
def test_each_role_draws_its_ids_from_its_own_range(task, settings):
    """Over seeds: the roles (keys, values, noise, specials) are disjoint ranges inside the vocabulary; every
    probed answer is a value, asked by its key (at the same input position on recall and MQAR, one before on
    memorization); noise ids appear where noise was asked for, and are never an answer."""
    for seed in range(4):
        out, vocab, form = tasks.generate(task, settings, 16, 16, seed)
        roles = vocab.roles()
        ranges = {r: range(*roles[r]) for r in ("keys", "values", "noise") if r in roles}
        ids = [i for r in ranges.values() for i in r] + [v for v in roles.values() if isinstance(v, int)]
        assert len(ids) == len(set(ids)) and all(0 <= i < settings["vocab_size"] for i in ids), roles
        for split, (x, y) in out.items():
            if split == "train" and form == "all":  # MAD's training form scores every position of the pairs
                continue
            scored = y != -100
            assert scored.any(axis=1).all(), split
            assert np.isin(y[scored], ranges["values"]).all(), split
            # the key asked stands at the answer's input position, except: memorization puts an insert token
            # there, after the key; fuzzy recall scores the value motif's tokens one after another
            if task == "memorization":
                assert np.isin(np.roll(x, 1, axis=1)[scored], ranges["keys"]).all(), split
            elif task != "fuzzy-in-context-recall":
                assert np.isin(x[scored], ranges["keys"]).all(), split
            if "noise" in ranges:
                assert np.isin(x, ranges["noise"]).any() and not np.isin(y[scored], ranges["noise"]).any()


def test_the_key_blind_floor_on_hand_made_examples():
    """Answers 5, 6, 7 (every scored target's id). Example 0: at its scored position the context showed 5
    twice (once after key 1, once with no key before it) and 6 once (after key 5), target 5. Example 1: 6
    (no key) and 7 (after key 1) once each, target 7. Example 2: no answer shown at either scored position:
    every rule guesses the split's most scored answer (5), wrong for target 6, right for target 5."""
    i = -100
    inputs = np.array([[5, 1, 5, 6, 1, 0], [6, 1, 7, 2, 3, 0], [1, 2, 3, 4, 1, 0]])
    targets = np.array([[i, i, i, i, 5, i], [i, i, i, i, 7, i], [i, i, i, 6, i, 5]])
    floor = key_blind_floor(inputs, targets)
    by_hand = {  # per example's scored positions, the chance each rule's guess is right
        "most_frequent": [[1], [1 / 2], [0, 1]],  # 5 shown most / a tie of 6 and 7
        "uniform": [[1 / 2], [1 / 2], [0, 1]],  # two answers shown in each
        "most_keys": [[1 / 2], [1], [0, 1]],  # 5 and 6 one key each / only 7 has a key
        "uniform_keys": [[1 / 2], [1], [0, 1]],
    }
    for rule, chances in by_hand.items():
        token = np.mean([p for example in chances for p in example])
        example = np.mean([np.prod(example) for example in chances])
        assert floor["rules"][rule] == pytest.approx({"token": token, "example": example}), rule
    assert floor["token"] == pytest.approx(2.5 / 4) and floor["example"] == pytest.approx(1.5 / 3)


def k(*pairs_then_query, target):
    """A split of two recall examples: key, answer pairs, then the key asked, its target the answer asked for;
    and a companion in which no answer is shown and 5, 6 and 8 are each asked once, so that every one of them
    is an answer id of the split. Its most scored answer is the target (twice), which the companion's three
    positions guess: one right, for every rule alike."""
    x = np.array([t for pair in pairs_then_query[:-1] for t in pair] + [pairs_then_query[-1]])
    y = np.full(len(x), -100)
    y[-1] = target
    companion_y = np.full(len(x), -100)
    companion_y[:3] = (5, 6, 8)
    return np.stack([x, np.zeros_like(x)]), np.stack([y, companion_y])


@pytest.mark.parametrize(
    "example, winner, chance",
    [
        # 5 shown three times with key 1, 6 once with key 2, 8 once with key 3: asked 5
        (k((1, 5), (1, 5), (1, 5), (2, 6), (3, 8), 1, target=5), "most_frequent", 1.0),
        # 5 with keys 1 and 3, 6 with key 2: asked 6 (uniform 1/2, uniform over keys 1/3, the others 0)
        (k((1, 5), (3, 5), (2, 6), 2, target=6), "uniform", 1 / 2),
        # 5 shown three times with key 1, 6 with keys 2 and 3: asked 6 (most_frequent 0, uniform 1/2)
        (k((1, 5), (1, 5), (1, 5), (2, 6), (3, 6), 2, target=6), "most_keys", 1.0),
        # 5 with four keys, 6 with three, 8 with one: asked 6 (uniform 1/3, uniform over keys 3/8)
        (
            k((1, 5), (2, 5), (3, 5), (4, 5), (9, 6), (10, 6), (11, 6), (12, 8), 9, target=6),
            "uniform_keys",
            3 / 8,
        ),  # fmt: skip
    ],
)
def test_the_floor_is_the_best_rule_on_a_split_where_that_rule_wins(example, winner, chance):
    floor = key_blind_floor(*example)
    assert floor["rule"]["token"] == winner and floor["token"] == pytest.approx((chance + 1) / 4), floor["rules"]


def test_on_mqar_the_floor_drops_the_keys_asked_and_never_counts_a_filler():
    """Zoology's layout: pairs (1, 5), (2, 6), (3, 7) first, then the keys asked in the pairs' order, with a
    filler 5 between the queries. Answering the earliest pair not yet asked is right every time; the other
    rules see each value shown once (1/3 a query). Were the fillers counted, 5 would be the most frequent
    answer from the second query on (1/9)."""
    i = -100
    x = np.array([[1, 5, 2, 6, 3, 7, 1, 5, 2, 5, 3, 0]])
    y = np.array([[i, i, i, i, i, i, 5, i, 6, i, 7, i]])
    view = tasks.key_blind_view("mqar", {"vocab_size": 16, "seq_len": 12, "num_kv_pairs": 3}, x)
    floor = key_blind_floor(x, y, **view)
    assert floor["rule"] == {"token": "earliest_unasked", "example": "earliest_unasked"}
    assert floor["token"] == 1.0 and floor["example"] == 1.0
    for rule in ("most_frequent", "uniform", "most_keys", "uniform_keys"):
        assert floor["rules"][rule] == pytest.approx({"token": 1 / 3, "example": 1 / 27}), rule
    assert key_blind_floor(x, y)["rules"]["most_frequent"]["token"] == pytest.approx(1 / 9)  # the filler counted


def test_once_every_key_was_asked_the_earliest_unasked_rule_guesses_the_most_scored_answer():
    """Pairs (1, 5) and (2, 6), both asked, then a key asked a second time: no pair is left unasked, so the
    third guess is the split's most scored answer, 5 (five of nine targets). It is right where key 1 is asked
    again (examples 0 and 2) and wrong where key 2 is (example 1)."""
    i = -100
    x = np.array([[1, 5, 2, 6, 1, 0, 2, 0, 1], [1, 5, 2, 6, 1, 0, 2, 0, 2], [1, 5, 2, 6, 1, 0, 2, 0, 1]])
    y = np.array([[i, i, i, i, 5, i, 6, i, 5], [i, i, i, i, 5, i, 6, i, 6], [i, i, i, i, 5, i, 6, i, 5]])
    pairs = np.array([[[1, 5], [2, 6]]] * 3)
    floor = key_blind_floor(x, y, pairs=pairs)
    assert floor["rules"]["earliest_unasked"] == pytest.approx({"token": 8 / 9, "example": 2 / 3})


@pytest.mark.parametrize("seed", [0, 1])
def test_the_mqar_floor_follows_the_rule_computed_without_the_project(seed):
    """On generated MQAR (default power-law gaps), the earliest-unasked rule recomputed here from the arrays
    alone: the floor equals it and lies well above guessing among the pairs (1 / num_kv_pairs)."""
    settings = {"vocab_size": 64, "seq_len": 24, "num_kv_pairs": 6}
    out, _, _ = tasks.generate("mqar", settings, 1, 400, seed)
    x, y = out["test"]
    right = total = 0
    for row, target in zip(x, y):
        pairs = list(zip(row[0:12:2], row[1:12:2]))
        asked = set()
        for t in np.flatnonzero(target != -100):
            guess = next(v for key, v in pairs if key not in asked)
            right, total = right + (guess == target[t]), total + 1
            asked.add(row[t])
    floor = key_blind_floor(x, y, **tasks.key_blind_view("mqar", settings, x))
    assert floor["token"] == pytest.approx(right / total) and floor["token"] > 1 / 6 + 0.2


def test_where_no_answer_was_seen_the_floor_guesses_the_most_scored_answer():
    """Memorization's case, all fallback: no answer id (3, 8, 9) ever appears in an input, so every guess is the
    split's most scored answer, 8 (three of five targets): 3/5. Guessing the smallest answer id (3), the largest
    (9) or uniformly among the three would give 1/5, 1/5 or 1/3."""
    i = -100
    inputs = np.array([[0, 1, 2, 1], [1, 1, 0, 2], [2, 0, 0, 1], [1, 2, 1, 0], [0, 0, 2, 2], [2, 2, 1, 1]])
    targets = np.array([[i, i, i, 3], [i, i, 8, i], [i, i, i, 8], [i, 8, i, i], [i, i, i, 9], [i, i, i, i]])
    floor = key_blind_floor(inputs, targets)
    assert floor["token"] == pytest.approx(3 / 5) and floor["example"] == pytest.approx(3 / 5)
    # an example that scores nothing counts in neither mean, wherever it stands
    floor = key_blind_floor(inputs[::-1], targets[::-1])
    assert floor["token"] == pytest.approx(3 / 5) and floor["example"] == pytest.approx(3 / 5)


def test_mads_macro_accuracy_on_a_hand_made_batch():
    """torchmetrics' default for MulticlassAccuracy (MAD's metric): each class's recall, averaged over the
    classes that are a target or a prediction. Targets 1, 1, 2 / 3, 3; predictions 1, 2, 2 / 4, 2: class 1
    1/2, class 2 1/1, class 3 0/2, class 4 (only predicted) 0: (0.5 + 1 + 0 + 0) / 4, where per token 2/5."""
    i = -100
    targets = torch.tensor([[1, 1, 2, i], [3, 3, i, i]])
    predicted = torch.tensor([[1, 2, 2, 0], [4, 2, 0, 0]])
    logits = torch.nn.functional.one_hot(predicted, 6).float()
    counts = class_counts(logits, targets, 6)
    assert macro_accuracy(counts) == pytest.approx(0.375) and accuracy(logits, targets)[:2] == (2, 5)


def test_a_prediction_outside_the_datas_ids_is_wrong_and_no_class():
    """A model of 9 ids scored against data of 5 (ids 0-4). Targets 1, 1, 2 / 3, 3, 1; predictions 1, 2, 2 /
    7, 3, 4: the 7 is wrong for its class-3 target and belongs to no class (8 falls on unscored positions).
    Class 1 is 1/3 right, class 2 1/1, class 3 1/2, class 4 (predicted once) 0: (1/3 + 1 + 1/2 + 0) / 4."""
    i = -100
    targets = torch.tensor([[1, 1, 2, i], [3, 3, i, 1]])
    predicted = torch.tensor([[1, 2, 2, 8], [7, 3, 8, 4]])
    logits = torch.nn.functional.one_hot(predicted, 9).float()
    right, scored, *_ = accuracy(logits, targets)
    counts = class_counts(logits, targets, 5)
    assert counts.shape == (3, 5) and (right, scored) == (3, 6)
    assert counts.tolist() == [[0, 1, 1, 1, 0], [0, 3, 1, 2, 0], [0, 1, 2, 1, 1]]
    assert macro_accuracy(counts) == pytest.approx((1 / 3 + 1 + 1 / 2 + 0) / 4)


def test_a_run_on_prepared_task_data_without_vocab_size_is_sized_to_it(tmp_path, capsys):
    """data/synthetic_tasks/prepare.py's directory (meta.json with vocab_size 16, examples of 32 tokens) and
    no vocab_size or block_size: the model has the data's 16 ids and 32 positions, and the evaluation's macro
    accuracy is computed (a 50,304-id model predicting ids beyond the data's died there)."""
    path = tmp_path / "icr"
    write_task(path, "in-context-recall", dict(vocab_size=16, seq_len=32), num_train=32, num_test=16, seed=1)
    unset = [a for a in tiny_args(path, tmp_path / "r") if not a.startswith(("--vocab_size", "--block_size"))]
    train_main([*unset, "--max_iters=2", "--lr_decay_iters=2", "--eval_interval=2"])
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (config["vocab_size"], config["block_size"]) == (16, 32)
    assert all(0 <= r["val_acc_macro"] <= 1 for r in records(tmp_path / "r", "val_acc").values())
    assert "icr is a dataset of examples: vocab_size=16 and block_size=32 from its data" in capsys.readouterr().out


def test_tokens_to_the_midpoint_on_a_hand_made_curve():
    assert midpoint(0.2) == pytest.approx(0.6)
    curve = [(0, 0.2), (100, 0.3), (200, 0.5), (300, 0.9), (400, 0.95)]
    assert tokens_to_reach(curve, 0.6) == pytest.approx(225.0)  # a quarter of the way from 200 to 300
    assert tokens_to_reach(curve, 0.1) == 0.0
    assert tokens_to_reach(curve, 0.99) is None
    assert tokens_to_reach([(0, 0.2), (50, 0.7), (100, 0.4), (150, 0.8)], 0.6) == pytest.approx(40.0)  # first


def run_of(arm, lr, seed, acc, stage="tune", steps=10):
    config = {"wandb_run_name": arm, "seed": seed, "learning_rate": lr, "max_iters": steps}
    config |= {"wandb_group": f"x/{stage}", "block_size": 8, "batch_size": 2, "gradient_accumulation_steps": 1}
    records = [{"step": steps, "val_loss": 1.0 - acc, "val_acc": acc, "val_example_acc": acc / 2}]
    return Run(f"{stage}-{arm}-{lr}-s{seed}", config, records)


def test_a_grid_point_is_chosen_by_highest_accuracy():
    runs = [run_of("base", 1e-3, 1, 0.4), run_of("base", 3e-3, 1, 0.8), run_of("base", 1e-2, 1, 0.6)]
    assert tuning.choose(runs, ["learning_rate"], METRICS["val_acc"])["base"]["chosen"] == {"learning_rate": 3e-3}
    # the loss (1 - acc here) is lowest at the same point: choosing by loss agrees, by design of the example
    assert tuning.choose(runs, ["learning_rate"])["base"]["chosen"] == {"learning_rate": 3e-3}
    diverged = Run("d", {**runs[1].config, "seed": 2}, [{"step": 5, "val_loss": 1.0, "val_acc": 0.9}])
    chosen = tuning.choose([*runs, diverged], ["learning_rate"], METRICS["val_acc"])["base"]
    assert chosen["chosen"] == {"learning_rate": 1e-2}  # 3e-3's mean is -inf with a run that never finished


def test_a_two_stage_report_by_accuracy_states_points_of_difference():
    runs = [run_of(a, 1e-3, 1, 0.5) for a in ("base", "nlq")]
    runs += [run_of("base", 1e-3, s, 0.50 + 0.01 * s, "report") for s in (2, 3, 4)]
    runs += [run_of("nlq", 1e-3, s, 0.60 + 0.01 * s + 0.001 * (s == 3), "report") for s in (2, 3, 4)]
    result = tuning.report(runs, ["learning_rate"], "base", METRICS["val_acc"])
    nlq = result["arms"]["nlq"]
    assert nlq["improvement"] == pytest.approx(0.1 + 0.001 / 3) and nlq["val_acc_mean"] == pytest.approx(
        0.63 + 0.001 / 3
    )
    assert nlq["interval"][0] < nlq["improvement"] < nlq["interval"][1]
    table = "\n".join(tuning.markdown(result))
    assert "test accuracy per scored token" in table and "+10.03 pts" in table


@pytest.mark.parametrize(
    "args, words",
    [
        (["--task=mqar", "--num_kv_pairs=40"], "holds 31 distinct keys"),
        (["--task=mqar", "--num_kv_pairs=8", "--seq_len=24"], "seq_len >= 4 x num_kv_pairs = 32"),
        (["--task=selective-copying", "--num_tokens_to_copy=16", "--seq_len=32"], "seq_len >= 2 x num_tokens"),
        (["--task=noisy-in-context-recall", "--vocab_size=18", "--noise_vocab_size=16"], "leaves 2 ids"),
        (["--task=noisy-in-context-recall", "--vocab_size=17", "--noise_vocab_size=16"], "leaves 1 ids"),
        (["--task=in-context-recall", "--frac_noise=0.2"], "needs noise ids"),
        (["--task=fuzzy-in-context-recall", "--k_motif_size=9"], "a motif holds distinct ids"),
        (["--task=in-context-recall", "--num_kv_pairs=3"], "not a setting of in-context-recall"),
        (["--task=mqar", "--train_targets=all"], "scores its answers only"),
    ],
)
def test_a_task_setting_that_cannot_be_built_is_one_line(tmp_path, args, words):
    done = subprocess.run(
        [sys.executable, PREPARE, f"--out_dir={tmp_path / 'd'}", *args], capture_output=True, text=True
    )
    assert done.returncode != 0 and done.stderr.startswith("error: ") and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "d").exists()


@pytest.fixture(scope="module")
def mqar_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("mqar")
    out, vocab, form = tasks.generate("mqar", dict(vocab_size=32, seq_len=16, num_kv_pairs=4), 64, 32, 1)
    write_examples(path, out, {"task": "mqar", "vocab_size": 32, "seq_len": 16, "roles": vocab.roles()})
    return path


def example_args(data, out_dir, **kw):
    return tiny_args(data, out_dir, block_size=16, vocab_size=32, **kw)


def test_training_on_examples_logs_accuracy_and_every_arm_reads_the_same_rows(mqar_data, tmp_path):

    for mode in ("linear", "residual_gelu"):
        train_main(example_args(mqar_data, tmp_path / mode, query_mode=mode))
    evals = {mode: records(tmp_path / mode, "val_acc") for mode in ("linear", "residual_gelu")}
    steps = {mode: records(tmp_path / mode, "fingerprint") for mode in evals}
    assert sorted(evals["linear"]) == [0, 4, 8]
    for step, rec in evals["linear"].items():
        assert 0 <= rec["val_example_acc"] <= rec["val_acc"] <= 1 and rec["tokens"] == step * 4 * 4 * 16
    prints = {mode: [r["fingerprint"] for r in steps[mode].values()] for mode in steps}
    assert prints["linear"] == prints["residual_gelu"] and len(set(prints["linear"])) == len(prints["linear"])


def test_examples_longer_than_block_size_are_one_line(mqar_data, tmp_path):
    message = error_of(tiny_args(mqar_data, tmp_path / "r", block_size=8, vocab_size=32))
    assert "its examples are 16 tokens, longer than block_size=8: set block_size >= 16" in message


def test_accuracy_of_a_text_dataset_is_one_line(char_data, tmp_path):

    train_main(tiny_args(char_data, tmp_path / "text"))
    message = error_of([str(tmp_path / "text"), "--metric=val_acc", "--png="], compare_main)
    assert "records no val_acc" in message and "--metric=val_loss" in message


def test_points_tied_on_accuracy_are_told_apart_by_their_loss():
    """Three learning rates at 100 %: the one of lowest final validation loss is chosen, not the first."""
    runs = [run_of("base", lr, 1, 1.0) for lr in (1e-3, 2e-3, 4e-3)]
    for r, loss in zip(runs, (0.30, 0.10, 0.20)):
        r.evals[10]["val_loss"] = loss
    choice = tuning.choose(runs, ["learning_rate"], METRICS["val_acc"])["base"]
    assert choice["chosen"] == {"learning_rate": 2e-3}


@pytest.mark.parametrize("vocab_size, seq_len, c", [(3, 4, 1), (10, 24, 4), (16, 40, 16)])
def test_selective_copying_writes_out_its_content_in_order_after_the_copy_token(vocab_size, seq_len, c):
    """Over seeds: the blank and the copy token are the vocabulary's last two ids; every other input id is
    content; the targets, after the copy token only, are the content tokens in the order they stand (one
    content token included)."""
    blank, copy = vocab_size - 2, vocab_size - 1
    for seed in range(3):
        x, y, _ = tasks.selective_copying(np.random.default_rng(seed), 8, vocab_size, seq_len, c)
        assert x.shape == y.shape == (8, seq_len) and ((x >= 0) & (x < vocab_size)).all()
        for xi, yi in zip(x, y):
            at = int(np.flatnonzero(xi == copy)[0])
            assert at == seq_len - c - 1 and (xi[at + 1 :] == blank).all()
            content = [int(v) for v in xi[:at] if v != blank]
            assert len(content) == c and [int(v) for v in yi[yi != -100]] == content
            assert (yi[: at + 1] == -100).all()


def test_meta_counts_the_test_inputs_that_training_also_holds(tmp_path):
    """A setting small enough that inputs repeat: meta.json's count is the test rows found among the
    training rows, counted here as tuples."""
    settings = dict(vocab_size=16, seq_len=6)
    meta, _ = write_task(tmp_path / "d", "memorization", settings, 200, 50, 3)
    data = open_examples(tmp_path / "d")
    train = {tuple(row) for row in data.train.inputs.tolist()}
    repeated = sum(tuple(row) in train for row in data.test.inputs.tolist())
    assert 0 < repeated < 50 and meta["test_inputs_in_train"] == repeated
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["test_inputs_in_train"] == repeated


def hand_made_split(n, seq_len, scored_at=1):
    x = np.arange(n * seq_len, dtype=np.int64).reshape(n, seq_len) % 7
    y = np.full((n, seq_len), -100, dtype=np.int64)
    y[:, scored_at] = 3
    return x, y


@pytest.mark.parametrize(
    "damage, words",
    [
        ("no_test_targets", "test/targets.npy not found: an examples dataset holds train/ and test/ inputs.npy and"),
        ("targets_shorter", "must be one shape, examples x seq_len, with at least one example"),
        ("test_longer", "the splits' examples differ in length ({'train': 8, 'test': 9}): make them one seq_len"),
        ("float_inputs", "holds float64, not integer ids"),
        ("id_beyond_vocab", "ids outside 0..7 (meta.json's vocab_size): the data is damaged"),
    ],
)
def test_a_damaged_examples_dataset_is_refused_naming_what_is_wrong(tmp_path, damage, words):
    splits = {"train": hand_made_split(4, 8), "test": hand_made_split(3, 9 if damage == "test_longer" else 8)}
    write_examples(tmp_path, splits, {"vocab_size": 8})
    if damage == "no_test_targets":
        (tmp_path / "test" / "targets.npy").unlink()
    elif damage == "targets_shorter":
        np.save(tmp_path / "train" / "targets.npy", splits["train"][1][:, :7])
    elif damage == "float_inputs":
        np.save(tmp_path / "train" / "inputs.npy", splits["train"][0].astype(np.float64))
    elif damage == "id_beyond_vocab":
        x = splits["test"][0].copy()
        x[0, 0] = 8
        np.save(tmp_path / "test" / "inputs.npy", x)
    with pytest.raises(DataError, match=re.escape(words)):
        open_examples(tmp_path)


def test_examples_are_not_written_over_unless_asked(tmp_path):
    """A second write into a dataset's directory is refused and leaves the first; with force it replaces it."""
    first = {"train": hand_made_split(4, 8), "test": hand_made_split(3, 8)}
    write_examples(tmp_path, first, {"vocab_size": 8})
    second = {"train": hand_made_split(2, 8, scored_at=2), "test": hand_made_split(2, 8)}
    with pytest.raises(DataError, match="already exist: pass --force to overwrite"):
        write_examples(tmp_path, second, {"vocab_size": 8})
    assert np.array_equal(open_examples(tmp_path).train.targets, first["train"][1])
    write_examples(tmp_path, second, {"vocab_size": 8}, force=True)
    assert np.array_equal(open_examples(tmp_path).train.targets, second["train"][1])


def test_a_directory_without_meta_json_takes_its_vocabulary_from_its_largest_id(tmp_path):
    """MAD-Lab's MemoryDataset output: no meta.json; the vocabulary is the largest id of either array + 1."""
    x, y = hand_made_split(4, 8)
    y[2, 5] = 11  # a target id above every input id (inputs are 0..6)
    write_examples(tmp_path, {"train": (x, y), "test": hand_made_split(3, 8)}, {"vocab_size": 12})
    (tmp_path / "meta.json").unlink()
    assert open_examples(tmp_path).meta["vocab_size"] == 12


def test_in_context_recall_trains_on_every_next_token_unless_told_as_mad_does():
    """MAD's generator, called as MAD calls it: the training targets are the whole sequence shifted by one."""
    x, y, _ = tasks.in_context_recall(np.random.default_rng(0), 8, vocab_size=16, seq_len=16, train=True)
    assert np.array_equal(y[:, :-1], x[:, 1:])


def test_mqar_asks_every_key_of_its_range():
    """Zoology's keys are drawn from the whole lower half of the vocabulary but id 0: over 200 examples of 4
    pairs, every key id 1..31 is asked somewhere (a range cut short by one id would leave 31 unasked)."""
    out, vocab, _ = tasks.generate("mqar", dict(vocab_size=64, seq_len=16, num_kv_pairs=4), 200, 8, 0)
    x, y = out["train"]
    assert vocab.roles()["keys"] == [1, 32] and set(x[y != -100].tolist()) == set(range(1, 32))


def test_the_per_example_floor_is_the_best_rule_per_example_not_the_best_per_token():
    """Answers 5 and 6; keys 1, 2, 3; 5 shown three times with key 1, 6 twice with keys 2 and 3. Examples 1 and
    3 ask once for 6, example 2 three times for 5. By hand, per token and per example (the product of an
    example's chances, averaged over examples):
    most_frequent (5): 0, 1 1 1, 0 -> 3/5 and 1/3; most_keys (6): 1, 0 0 0, 1 -> 2/5 and 2/3;
    uniform (1/2 each): 5/2 / 5 = 1/2 and (1/2 + 1/8 + 1/2) / 3 = 3/8;
    uniform_keys (5: 1/3, 6: 2/3): (2/3 + 1 + 2/3) / 5 = 7/15 and (2/3 + 1/27 + 2/3) / 3 = 37/81.
    So the token floor is most_frequent's 3/5 and the example floor most_keys' 2/3."""
    context = [1, 5, 1, 5, 1, 5, 2, 6, 3, 6, 4]
    inputs = np.array([context + [8, 9]] * 3)
    targets = np.full_like(inputs, -100)
    targets[0, 10] = targets[2, 10] = 6
    targets[1, 10:13] = 5
    floor = key_blind_floor(inputs, targets)
    expected = {
        "most_frequent": (3 / 5, 1 / 3),
        "most_keys": (2 / 5, 2 / 3),
        "uniform": (1 / 2, 3 / 8),
        "uniform_keys": (7 / 15, 37 / 81),
    }
    for rule, (token, example) in expected.items():
        assert floor["rules"][rule] == pytest.approx({"token": token, "example": example}), rule
    assert floor["rule"] == {"token": "most_frequent", "example": "most_keys"}
    assert floor["token"] == pytest.approx(3 / 5) and floor["example"] == pytest.approx(2 / 3)


def test_every_rank_and_micro_step_reads_the_rows_one_process_reads():
    """A step of 4 micro-steps of 2 examples: over 1, 2 or 4 ranks (4, 2 or 1 micro-steps each), rank r's
    micro-step m holds rows (r x micro-steps per rank + m) x 2 onward of the step's batch, so that the
    ranks' rows in rank order are the one-process rows, inputs and targets alike."""
    n = 24
    split = SimpleNamespace(inputs=np.arange(n)[:, None] * np.ones((1, 3), int), targets=np.full((n, 3), -100))
    split.targets[:, 2] = np.arange(n) % 7
    batches = ExampleBatches(split, batch_size=2, grad_accum=4, seed=11)
    for step in (0, 2, 3):  # the third step crosses into the second epoch (24 rows, 8 a step)
        batch = [int(r) for r in batches.offsets(step)]
        one = [batches.get(step, m) for m in range(4)]
        assert torch.cat([x for x, _ in one])[:, 0].tolist() == batch
        for world in (2, 4):
            parts = [batches.get(step, m, rank=r, world_size=world) for r in range(world) for m in range(4 // world)]
            for (x, y), (x1, y1) in zip(parts, one):
                assert torch.equal(x, x1) and torch.equal(y, y1), (step, world)
            assert torch.cat([y for _, y in parts])[:, 2].tolist() == [r % 7 for r in batch]


def small_split(n=6, dtype=np.uint16):
    """n examples of 3 ids stored narrow, as a prepared dataset stores them: inputs i, i, i; targets -100,
    i % 5, -100."""
    inputs = (np.arange(n)[:, None] * np.ones((1, 3), int)).astype(dtype)
    targets = np.full((n, 3), -100, dtype=np.int16)
    targets[:, 1] = np.arange(n) % 5
    return SimpleNamespace(inputs=inputs, targets=targets)


def test_example_rows_are_int64_and_an_id_past_the_vocabulary_is_refused_through_every_reader():
    """Whatever the stored width, a batch is int64 (the embedding's index type); an id of 5 in a vocabulary
    of 5 is refused on the host, by example_rows and by ExampleBatches.get alike; get's defaults are one
    process."""
    split = small_split()
    x, y = example_rows(split, np.array([4, 1]))
    assert x.dtype == y.dtype == torch.int64 and x.tolist() == [[4, 4, 4], [1, 1, 1]] and y.tolist()[0] == [-1, 4, -1]
    with pytest.raises(DataError, match="a batch holds token id 5, past the dataset's vocab_size=5"):
        example_rows(split, np.array([5]), vocab_size=5)
    batches = ExampleBatches(split, batch_size=6, grad_accum=1, seed=0, vocab_size=5)
    with pytest.raises(DataError, match="a batch holds token id 5, past the dataset's vocab_size=5"):
        batches.get(0, 0)
    two = ExampleBatches(small_split(8), batch_size=2, grad_accum=2, seed=3)
    for micro in (0, 1):
        assert torch.equal(two.get(1, micro)[0], two.get(1, micro, rank=0, world_size=1)[0])


def test_each_seed_orders_the_epochs_its_own_way_and_every_epoch_is_whole_however_many():
    """Five epochs of 6 examples, 4 rows a step (steps cross epochs): every epoch visits each example once,
    the epochs' orders are not all alike, and another seed gives another order; a 16-hex-digit fingerprint,
    as the token loader's, names each step's batch."""
    batches = ExampleBatches(small_split(), batch_size=4, grad_accum=1, seed=1)
    stream = [int(r) for step in range(8) for r in batches.offsets(step)]  # 32 rows: 5 epochs and 2 rows
    epochs = [stream[i : i + 6] for i in range(0, 30, 6)]
    assert all(sorted(e) == list(range(6)) for e in epochs) and len({tuple(e) for e in epochs}) > 1
    other = ExampleBatches(small_split(), batch_size=4, grad_accum=1, seed=2)
    assert [int(r) for step in range(8) for r in other.offsets(step)] != stream
    prints = {batches.fingerprint(step) for step in range(8)}
    assert len(prints) == 8 and all(re.fullmatch("[0-9a-f]{16}", p) for p in prints)
