"""Synthetic tasks that isolate what attention must do: MAD's (Poli et al., arXiv 2403.17844) in-context
recall, fuzzy and noisy in-context recall, selective copying and memorization, and Zoology's (Arora et al.,
arXiv 2312.04927) multi-query associative recall (MQAR). One function per task, its settings as arguments;
each returns (inputs, targets), two int64 arrays of n examples x seq_len, for a causal language model:
targets[i, t] is what position t must predict from inputs[i, :t + 1], IGNORE where nothing is scored.

`train=False` gives the test form, scored at the probed positions only; `train=True` gives the training
form: with targets='all' the whole next-token sequence (as MAD trains), with 'probed' only the positions
the test scores (as Zoology trains). Noise tokens and padding are never targets in either form (MAD's
training form has them predict noise: nothing can be learned there).

Compression, MAD's sixth task, is left out: its model is an encoder-decoder (a sequence model compresses
the sequence into one token's state, a separate decoder reconstructs every token from that state alone), and
a causal language model has no such bottleneck: predicting each input token at its own position is copying.
"""

import inspect
from dataclasses import dataclass
from itertools import permutations

import numpy as np

IGNORE = -100  # targets not scored (MAD's and Zoology's value; the model ignores it in its loss)
TARGETS = ("all", "probed")


class TaskError(ValueError):
    """A task setting that cannot be built: the message says which setting and what would fit."""


@dataclass(frozen=True)
class Vocab:
    """Where each role's ids lie: keys [k0, k1), values [v0, v1), noise [n0, n1), specials by name."""

    keys: tuple
    values: tuple
    noise: tuple = (0, 0)
    special: tuple = ()  # (name, id) pairs

    def roles(self) -> dict:
        roles = {"keys": list(self.keys), "values": list(self.values)}
        if self.noise[1] > self.noise[0]:
            roles["noise"] = list(self.noise)
        return roles | {name: i for name, i in self.special}


def recall_vocab(vocab_size: int, multi_query: bool, noise_vocab_size: int, frac_noise: float, extra: int = 0):
    """MAD's layout for the recall tasks: keys in the lower half and values in the upper half of the ids left
    after the specials (the copy prefix vocab_size - 1 when a single query is probed, plus `extra` more
    below it) and the noise ids, which come after the values."""
    if not 0 <= frac_noise < 1:
        raise TaskError(f"frac_noise={frac_noise}: give a share from 0 to below 1")
    if frac_noise > 0 and noise_vocab_size < 1:
        raise TaskError(f"frac_noise={frac_noise} needs noise ids: give noise_vocab_size >= 1")
    specials = (0 if multi_query else 1) + extra
    plain = vocab_size - specials - noise_vocab_size
    if plain < 4:  # two keys and two values at least: with one value there is nothing to recall
        raise TaskError(
            f"vocab_size={vocab_size} leaves {plain} ids for keys and values after {specials} special and "
            f"{noise_vocab_size} noise ids, fewer than 4 (two keys, two values): raise vocab_size or lower "
            "noise_vocab_size"
        )
    names = (["copy"] if not multi_query else []) + (["pad"] if extra else [])
    special = tuple((name, vocab_size - 1 - i) for i, name in enumerate(names))
    return Vocab((0, plain // 2), (plain // 2, plain), (plain, plain + noise_vocab_size), special)


def finish(tokens: list, scored: list, train: bool, targets: str, seq_len: int, pad_id=None):
    """One example from its seq_len + 1 tokens and, per token, whether it is a probed answer (True), may be
    predicted in the training form (None) or is never a target (False: noise, padding): the shifted
    inputs and targets of the form asked for."""
    assert len(tokens) == seq_len + 1 == len(scored), (len(tokens), seq_len)
    x = np.asarray(tokens[:-1], dtype=np.int64)
    y = np.asarray(tokens[1:], dtype=np.int64)
    keep = [s is True or (s is None and train and targets == "all") for s in scored[1:]]
    return x, np.where(keep, y, IGNORE)


def in_context_recall(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 16,
    seq_len: int = 128,
    multi_query: bool = True,
    frac_noise: float = 0.0,
    noise_vocab_size: int = 0,
    train: bool = False,
    targets: str = "all",
):
    """Key-value pairs (a key's value is the same wherever it recurs in an example, drawn afresh for each
    example), noise pairs in place of a pair with probability frac_noise. multi_query: every value whose key
    occurred earlier is probed, and the last pair always repeats an earlier key; else only the final pair,
    after the copy prefix token, is probed. A multi-query example starts with a lone value token (the pairs
    then end exactly at seq_len + 1 tokens; MAD's are one token short instead)."""
    vocab = recall_vocab(vocab_size, multi_query, noise_vocab_size, frac_noise)
    if seq_len < 4 or seq_len % 2:
        raise TaskError(f"seq_len={seq_len}: in-context recall needs an even length of at least 4 (two pairs)")
    body = seq_len // 2 - 1  # pairs before the probe: seq_len + 1 tokens with the probe and the lone first token
    xs, ys = [], []
    for _ in range(n):
        tokens, scored, values = [], [], {}
        if multi_query:  # a lone value first (a window into a stream of pairs): seq_len + 1 tokens in all
            tokens.append(int(rng.integers(*vocab.values)))
            scored.append(None)
        kept = rng.integers(body)  # one pair before the probe is never noise: there is a key to ask
        for i in range(body):
            if frac_noise and i != kept and rng.random() < frac_noise:
                tokens += list(rng.integers(*vocab.noise, size=2))
                scored += [False, False]
                continue
            k = int(rng.integers(*vocab.keys))
            repeat = k in values
            v = values.setdefault(k, int(rng.integers(*vocab.values)))
            tokens += [k, v]
            scored += [None, True if (repeat and multi_query) else None]
        if not multi_query:
            tokens.append(vocab.special[0][1])
            scored.append(None)
        k = int(rng.choice(list(values)))
        tokens += [k, values[k]]
        scored += [None, True]
        x, y = finish(tokens, scored, train, targets, seq_len)
        xs.append(x)
        ys.append(y)
    return np.stack(xs), np.stack(ys), vocab


def motifs(ids: tuple, size: int) -> np.ndarray:
    """Every motif of `size` distinct ids from [ids[0], ids[1]), as rows (MAD's permutations of the key or
    value vocabulary)."""
    return np.array(list(permutations(range(*ids), size)), dtype=np.int64)


def fuzzy_in_context_recall(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 16,
    seq_len: int = 128,
    k_motif_size: int = 3,
    v_motif_size: int = 3,
    multi_query: bool = True,
    frac_noise: float = 0.0,
    noise_vocab_size: int = 0,
    train: bool = False,
    targets: str = "all",
):
    """In-context recall whose keys and values are motifs of 1 to k_motif_size (v_motif_size) distinct tokens:
    a key is recognised from several tokens. The test form's keys are all k_motif_size long (MAD's). One
    probe pair is planted at a random place and asked again at the end; the sequence is left-padded to
    seq_len with the pad token, never a target."""
    vocab = recall_vocab(vocab_size, multi_query, noise_vocab_size, frac_noise, extra=1)
    n_keys, n_values = vocab.keys[1] - vocab.keys[0], vocab.values[1] - vocab.values[0]
    if not 1 <= k_motif_size <= n_keys or not 1 <= v_motif_size <= n_values:
        raise TaskError(
            f"k_motif_size={k_motif_size}, v_motif_size={v_motif_size}: a motif holds distinct ids, and there are "
            f"{n_keys} key and {n_values} value ids (vocab_size={vocab_size}): raise vocab_size or lower the sizes"
        )
    longest = k_motif_size + v_motif_size
    if seq_len < 3 * longest + 2:
        raise TaskError(f"seq_len={seq_len}: fuzzy recall needs at least 3 x (k + v motif) + 2 = {3 * longest + 2}")
    key_sizes = range(1, k_motif_size + 1) if train else [k_motif_size]
    keys = {s: motifs(vocab.keys, s) for s in key_sizes}
    values = {s: motifs(vocab.values, s) for s in range(1, v_motif_size + 1)}
    pad = dict(vocab.special)["pad"]

    def draw(table):
        rows = table[int(rng.choice(list(table)))]
        return tuple(int(t) for t in rows[rng.integers(len(rows))])

    xs, ys = [], []
    for _ in range(n):
        probe_k, probe_v = draw(keys), draw(values)
        tail = 1 + len(probe_k) + len(probe_v) - (1 if multi_query else 0)  # [copy] probe key, probe value
        body = seq_len + 1 - tail
        plant = rng.integers(body - 2 * longest + 1)  # where the probe pair first occurs: it always fits before
        # the loop ends (a pair adds at most `longest` tokens to a body still below plant)
        tokens, scored, seen, planted = [], [], {}, False
        while len(tokens) <= body - longest:
            if not planted and len(tokens) >= plant:
                k, v, planted = probe_k, probe_v, True
            elif frac_noise and rng.random() < frac_noise:
                size = len(draw(keys)) + len(draw(values))
                tokens += list(rng.integers(*vocab.noise, size=size))
                scored += [False] * size
                continue
            else:
                k = draw(keys)
                v = probe_v if k == probe_k else seen.get(k) or draw(values)
                planted |= k == probe_k
            ask = k in seen and multi_query
            seen[k] = v
            tokens += [*k, *v]
            scored += [None] * len(k) + [True if ask else None] * len(v)
        end = [vocab.special[0][1]] if not multi_query else []
        tokens += [*end, *probe_k, *probe_v]
        scored += [None] * (len(end) + len(probe_k)) + [True] * len(probe_v)
        fill = seq_len + 1 - len(tokens)
        tokens, scored = [pad] * fill + tokens, [False] * fill + scored
        x, y = finish(tokens, scored, train, targets, seq_len)
        xs.append(x)
        ys.append(y)
    return np.stack(xs), np.stack(ys), vocab


def noisy_in_context_recall(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 32,
    seq_len: int = 128,
    noise_vocab_size: int = 16,
    frac_noise: float = 0.2,
    multi_query: bool = True,
    train: bool = False,
    targets: str = "all",
):
    """In-context recall with a share frac_noise of its pairs replaced by tokens of a noise vocabulary
    (MAD's noisy recall: its defaults)."""
    if frac_noise <= 0:
        raise TaskError(f"frac_noise={frac_noise}: noisy recall needs a share of noise above 0")
    return in_context_recall(rng, n, vocab_size, seq_len, multi_query, frac_noise, noise_vocab_size, train, targets)


def selective_copying(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 16,
    seq_len: int = 256,
    num_tokens_to_copy: int = 16,
    train: bool = False,
    targets: str = "probed",
):
    """num_tokens_to_copy content tokens scattered in order among blank tokens, then the copy token, then
    blanks at whose positions the content is to be written out in order (MAD's alignment: the k-th blank
    after the copy token predicts the k-th content token). Only the copies are ever targets."""
    if vocab_size < 3:
        raise TaskError(f"vocab_size={vocab_size}: selective copying needs a blank, a copy token and content ids")
    c = num_tokens_to_copy
    if c < 1 or seq_len < 2 * c + 2:
        raise TaskError(
            f"seq_len={seq_len}, num_tokens_to_copy={c}: the content, a blank, the copy token and the copies "
            f"need seq_len >= 2 x num_tokens_to_copy + 2 = {2 * c + 2}"
        )
    blank, copy = vocab_size - 2, vocab_size - 1
    vocab = Vocab((0, 0), (0, vocab_size - 2), special=(("blank", blank), ("copy", copy)))
    head = seq_len - c - 1  # content and blanks before the copy token
    xs, ys = [], []
    for _ in range(n):
        content = rng.integers(0, vocab_size - 2, size=c)
        places = np.sort(rng.choice(head, size=c, replace=False))
        x = np.full(seq_len, blank, dtype=np.int64)
        x[places] = content
        x[head] = copy
        y = np.full(seq_len, IGNORE, dtype=np.int64)
        y[head + 1 :] = content
        xs.append(x)
        ys.append(y)
    return np.stack(xs), np.stack(ys), vocab


def memorization_map(vocab_size: int, noise_vocab_size: int, seed: int) -> tuple[np.ndarray, Vocab]:
    """The fixed key -> value map of the memorization task (every example and split uses it): each key id
    of the lower half gets a value id of the upper half, drawn once from the seed."""
    plain = vocab_size - 1 - noise_vocab_size
    if plain < 4:
        raise TaskError(
            f"vocab_size={vocab_size} leaves {plain} ids for keys and values after the insert token and "
            f"{noise_vocab_size} noise ids, fewer than 4 (two keys, two values): raise vocab_size"
        )
    vocab = Vocab(
        (0, plain // 2), (plain // 2, plain), (plain, plain + noise_vocab_size), (("insert", vocab_size - 1),)
    )
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(MAP_KEY,)))
    return rng.permutation(np.arange(plain // 2, plain))[: plain // 2], vocab  # a distinct value per key


def memorization(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 256,
    seq_len: int = 32,
    kv_map: np.ndarray | None = None,
    vocab: Vocab | None = None,
    frac_noise: float = 0.0,
    train: bool = False,
    targets: str = "probed",
):
    """Pairs (key, insert token); at the insert token the key's value under one fixed map is predicted: the
    facts live in the weights, not in the context (MAD's memorization). Only the values are targets."""
    if seq_len < 2 or seq_len % 2:
        raise TaskError(f"seq_len={seq_len}: memorization needs an even length (key, insert) pairs")
    if not 0 <= frac_noise < 1 or (frac_noise and vocab.noise[1] == vocab.noise[0]):
        raise TaskError(f"frac_noise={frac_noise}: give a share below 1, and noise_vocab_size >= 1 with it")
    insert = dict(vocab.special)["insert"]
    keys = rng.integers(*vocab.keys, size=(n, seq_len // 2))
    x = np.empty((n, seq_len), dtype=np.int64)
    y = np.full((n, seq_len), IGNORE, dtype=np.int64)
    x[:, 0::2], x[:, 1::2] = keys, insert
    y[:, 1::2] = kv_map[keys - vocab.keys[0]]
    if frac_noise:
        noisy = rng.random((n, seq_len // 2)) < frac_noise
        noisy[np.arange(n), rng.integers(seq_len // 2, size=n)] = False  # one pair is kept
        cells = np.repeat(noisy, 2, axis=1)
        x[cells] = rng.integers(*vocab.noise, size=int(cells.sum()))
        y[cells] = IGNORE
    return x, y, vocab


def mqar(
    rng: np.random.Generator,
    n: int,
    vocab_size: int = 64,
    seq_len: int = 64,
    num_kv_pairs: int = 8,
    power_a: float = 0.01,
    random_non_queries: bool = True,
    train: bool = False,
    targets: str = "probed",
):
    """Zoology's multi-query associative recall: num_kv_pairs pairs of distinct keys (ids 1 .. vocab/2 - 1)
    and distinct values (vocab/2 .. vocab - 1) first, then every key asked once, at even places of the rest
    drawn without replacement with a power law favouring short gaps (power_a; 1 is uniform); the query key's
    position predicts its value. The other places hold random ids (random_non_queries) or 0. Only the
    queries are targets in either form (Zoology's training)."""
    half = vocab_size // 2
    if not 1 <= num_kv_pairs <= half - 1:
        raise TaskError(
            f"num_kv_pairs={num_kv_pairs}: vocab_size={vocab_size} holds {max(half - 1, 0)} distinct keys "
            "(ids 1 .. vocab_size / 2 - 1): raise vocab_size or lower num_kv_pairs"
        )
    context = 2 * num_kv_pairs
    space = (seq_len - context) // 2  # even places for the queries
    if seq_len % 2 or space < num_kv_pairs:
        raise TaskError(
            f"seq_len={seq_len}, num_kv_pairs={num_kv_pairs}: the pairs and one query per key need an even "
            f"seq_len >= 4 x num_kv_pairs = {4 * num_kv_pairs}"
        )
    if not power_a > 0:
        raise TaskError(f"power_a={power_a}: give a power above 0 (1 is uniform gaps)")
    keys = np.argsort(rng.random((n, half - 1)), axis=1)[:, :num_kv_pairs] + 1
    values = np.argsort(rng.random((n, vocab_size - half)), axis=1)[:, :num_kv_pairs] + half
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    gaps = np.stack([rng.choice(space, size=num_kv_pairs, replace=False, p=p / p.sum()) for _ in range(n)])
    x = rng.integers(vocab_size, size=(n, seq_len)) if random_non_queries else np.zeros((n, seq_len), np.int64)
    x[:, 0:context:2], x[:, 1:context:2] = keys, values
    y = np.full((n, seq_len), IGNORE, dtype=np.int64)
    rows = np.arange(n)[:, None]
    x[rows, context + 2 * gaps] = keys
    y[rows, context + 2 * gaps] = values
    vocab = Vocab((1, half), (half, vocab_size))
    return x.astype(np.int64), y, vocab


def key_blind_view(task: str, settings: dict, inputs: np.ndarray) -> dict:
    """What the key-blind floor (nlq/data/floor.py) knows of a task's layout, as its keyword arguments. MQAR
    lays its pairs out first (keys at even, values at odd places of the first 2 x num_kv_pairs): only those
    values are answers shown ('shown'; the random fillers after them may carry a value's id), and the pairs
    in their order ('pairs'). Every other task shows its answers as answer ids (the floor's default)."""
    if task != "mqar":
        return {}
    n_pairs = settings.get("num_kv_pairs", inspect.signature(mqar).parameters["num_kv_pairs"].default)
    inputs = np.asarray(inputs)
    shown = np.zeros(inputs.shape, dtype=bool)
    shown[:, 1 : 2 * n_pairs : 2] = True
    return {"shown": shown, "pairs": np.stack([inputs[:, 0 : 2 * n_pairs : 2], inputs[:, 1 : 2 * n_pairs : 2]], -1)}


MAP_KEY, TRAIN_KEY, TEST_KEY = 0, 1, 2  # spawn keys of the seed's streams: the memorization map, each split
TASKS = {  # name: (function, the keyword settings it takes beyond vocab_size and seq_len)
    "in-context-recall": (in_context_recall, ("multi_query", "frac_noise", "noise_vocab_size")),
    "fuzzy-in-context-recall": (
        fuzzy_in_context_recall,
        ("k_motif_size", "v_motif_size", "multi_query", "frac_noise", "noise_vocab_size"),
    ),
    "noisy-in-context-recall": (noisy_in_context_recall, ("noise_vocab_size", "frac_noise", "multi_query")),
    "selective-copying": (selective_copying, ("num_tokens_to_copy",)),
    "memorization": (memorization, ("frac_noise", "noise_vocab_size")),
    "mqar": (mqar, ("num_kv_pairs", "power_a", "random_non_queries")),
}
DEFAULT_TARGETS = {  # the training form each source trains with
    "in-context-recall": "all",
    "fuzzy-in-context-recall": "all",
    "noisy-in-context-recall": "all",
    "selective-copying": "probed",
    "memorization": "probed",
    "mqar": "probed",
}


def generate(task: str, settings: dict, num_train: int, num_test: int, seed: int, targets: str | None = None):
    """({'train': (inputs, targets), 'test': (inputs, targets)}, the Vocab, the training form), deterministic
    from the seed (each split from its own stream of it)."""
    if task not in TASKS:
        raise TaskError(f"task={task!r}: one of {', '.join(TASKS)}")
    targets = targets or DEFAULT_TARGETS[task]
    if targets not in TARGETS:
        raise TaskError(f"train_targets={targets!r}: one of {', '.join(TARGETS)}")
    if targets == "all" and DEFAULT_TARGETS[task] != "all":
        raise TaskError(
            f"train_targets='all' is MAD's training form of the recall tasks; {task} scores its answers only"
        )
    fn, _ = TASKS[task]
    kwargs = dict(settings)
    if task == "memorization":
        noise = kwargs.pop("noise_vocab_size", 0)
        kwargs["kv_map"], kwargs["vocab"] = memorization_map(kwargs["vocab_size"], noise, seed)
    out = {}
    for split, n, key in (("train", num_train, TRAIN_KEY), ("test", num_test, TEST_KEY)):
        if n < 1:
            raise TaskError(f"num_{split}_examples={n}: give at least 1")
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))
        x, y, vocab = fn(rng, n, train=split == "train", targets=targets, **kwargs)
        out[split] = (x, y)
    return out, vocab, targets
