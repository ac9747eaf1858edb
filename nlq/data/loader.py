"""Batch order: the windows of every optimizer step are a pure function of (data seed, step).

Nothing here shares a random state with model initialisation or with the process, so every query
mode, model seed, parameter count, world size and resume point sees the same tokens at the same step.
A step's global batch has batch_size * grad_accum rows; with W ranks each doing grad_accum / W micro-
steps, rank r's micro-step m reads rows [(r * grad_accum / W + m) * batch_size, ... + batch_size).
"""

import hashlib
import os

import numpy as np
import torch

from nlq.common.safe_load import numpy_array
from nlq.data.dataset import DataError

# Spawn keys of numpy SeedSequences derived from the data seed: independent streams per use.
TRAIN_KEY, VAL_KEY, TRAIN_EVAL_KEY, EPOCH_KEY = 0, 1, 2, 3
SAMPLINGS = ("random", "permutation", "lines", "official")
# arXiv 2603.13381's batch order (its Generate_Indices.ipynb and train.py's get_batch): a CPU torch generator
# seeded 42 draws randint(n_train - 1024, (600000, 480)) and step it reads row it, micro-step m of 12 rows its
# columns 12m .. 12m + 11; a second generator seeded 42 draws randint(n_train - 1024, (600, 2400)), then
# randint(n_val - 1024, (600, 2400)), and the k-th evaluation reads row k of each, 200 batches of 12.
OFFICIAL_SEED, OFFICIAL_WINDOW, OFFICIAL_ROWS, OFFICIAL_STEPS, OFFICIAL_EVAL = 42, 1024, 480, 600_000, (600, 2400)


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def windows(tokens: np.ndarray, offsets: np.ndarray, block_size: int, vocab_size: int | None = None):
    """Inputs and next-token targets (int64 tensors) for windows starting at offsets; with vocab_size, every
    id is checked to be below it (check_ids)."""
    rows = np.asarray(tokens[offsets[:, None] + np.arange(block_size + 1)], dtype=np.int64)
    check_ids(rows, vocab_size)
    rows = torch.from_numpy(rows)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def line_rows(tokens: np.ndarray, spans: np.ndarray, block_size: int, pad: int, vocab_size: int | None = None):
    """One line per row: inputs and next-token targets of each [start, end) span, cut to block_size tokens
    and padded to block_size; padded targets are -1, which the loss ignores."""
    x = torch.full((len(spans), block_size), pad, dtype=torch.int64)
    y = torch.full((len(spans), block_size), -1, dtype=torch.int64)
    for i, (start, end) in enumerate(spans):
        line = np.asarray(tokens[start : min(end, start + block_size)], dtype=np.int64)
        check_ids(line, vocab_size)
        line = torch.from_numpy(line)
        x[i, : len(line) - 1], y[i, : len(line) - 1] = line[:-1], line[1:]
    return x, y


def check_ids(rows: np.ndarray, vocab_size: int | None) -> None:
    """Every id a batch reads is below vocab_size, on the host and before the device sees it (an id past the
    embedding is a device-side assert on a GPU). The dataset's largest ids were checked at the start, but
    from a cache (.max_ids.json, keyed by the bins' size and mtime) that a copy keeping both can fool."""
    if vocab_size is not None and rows.size and int(rows.max()) >= vocab_size:
        raise DataError(
            f"a batch holds token id {int(rows.max())}, past the dataset's vocab_size={vocab_size} (its bins "
            "changed since their ids were counted): rerun the dataset's prepare script with --force"
        )


class OfficialRows:
    """Row `step` of the official training indices without the 2.3 GB array: torch's CPU randint draws
    serially, so drawing the rows one after another gives bitwise the one-shot draw (tests/test_official.py);
    a row far ahead is reached by drawing and dropping the rows before it (about 0.4 s per 60k rows). With
    table (its train_indices.npy, checked by official_table), rows are read from it instead."""

    def __init__(self, n_tokens: int, table: np.ndarray | None = None):
        self.high, self.table = n_tokens - OFFICIAL_WINDOW, table
        self.gen, self.next_row = None, 0

    def row(self, step: int) -> np.ndarray:
        if self.table is not None:
            return np.asarray(self.table[step], dtype=np.int64)
        if self.gen is None or step < self.next_row:
            self.gen, self.next_row = torch.Generator().manual_seed(OFFICIAL_SEED), 0
        while self.next_row < step:
            n = min(step - self.next_row, 4096)
            torch.randint(self.high, (n, OFFICIAL_ROWS), generator=self.gen)
            self.next_row += n
        self.next_row += 1
        return torch.randint(self.high, (1, OFFICIAL_ROWS), generator=self.gen)[0].numpy()


def official_train_table(data_dir, n_tokens: int, steps: int) -> np.ndarray | None:
    """Its train_indices.npy beside the bins, if there (see official_table), else None: the rows are replayed.
    A prefix of it (fewer rows) serves a run of at most that many steps."""
    path = os.path.join(data_dir, "train_indices.npy")
    shape, high = (OFFICIAL_STEPS, OFFICIAL_ROWS), n_tokens - OFFICIAL_WINDOW
    table = official_table(path, shape, lambda: OfficialRows(n_tokens).row(0), high)
    if table is not None and len(table) < steps:
        raise DataError(
            f"{path} holds the first {len(table):,} rows of the official indices, the run needs {steps:,} "
            "(max_iters): lower max_iters, or remove it (the order is replayed)"
        )
    if table is not None:
        check_replayed(table, n_tokens, steps, path)
    return table


def check_replayed(table: np.ndarray, n_tokens: int, steps: int, path) -> None:
    """Every row of the table a run of `steps` steps reads equals the official draw for these bins (the
    replay, 4096 rows at a time: about a second per 60k steps); the first that does not is named."""
    gen, high = torch.Generator().manual_seed(OFFICIAL_SEED), n_tokens - OFFICIAL_WINDOW
    for start in range(0, steps, 4096):
        n = min(4096, steps - start)
        replay = torch.randint(high, (n, OFFICIAL_ROWS), generator=gen).numpy()
        bad = np.flatnonzero((np.asarray(table[start : start + n]) != replay).any(axis=1))
        if bad.size:
            row = start + int(bad[0])
            raise DataError(
                f"{path}: row {row} differs from the official draw for these bins (step {row} would read other "
                "windows): the file is damaged or edited; remove it (the order is replayed)"
            )


def official_eval_offsets(n_train: int, n_val: int, data_dir=None) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) window offsets of every official evaluation: row k is the k-th evaluation's 2400. Its own
    eval_train_indices.npy / eval_val_indices.npy beside the bins in data_dir (or a prefix of them) must
    equal them."""
    gen = torch.Generator().manual_seed(OFFICIAL_SEED)
    train = torch.randint(n_train - OFFICIAL_WINDOW, OFFICIAL_EVAL, generator=gen).numpy()
    val = torch.randint(n_val - OFFICIAL_WINDOW, OFFICIAL_EVAL, generator=gen).numpy()
    for name, rows, n in (("eval_train_indices.npy", train, n_train), ("eval_val_indices.npy", val, n_val)):
        path = os.path.join(data_dir, name) if data_dir is not None else ""
        table = official_table(path, OFFICIAL_EVAL, lambda: rows[0], n - OFFICIAL_WINDOW)  # noqa: B023 (called at once)
        if table is not None and not np.array_equal(table, rows[: len(table)]):
            raise DataError(f"{path} differs from the official evaluation indices in a later row: remove it")
    return train, val


def official_table(path, shape: tuple, first_row, high: int) -> np.ndarray | None:
    """An official .npy index file (its Generate_Indices.ipynb writes them beside the bins, where its train.py
    reads them), memory-mapped without pickle, or None if there is none. Its columns, its first row
    (first_row(): the replay's) and its number of rows (the full count, or fewer: a prefix) must be what the
    replay draws for these bins, and every offset must lie in 0..high - 1 (a negative one would wrap to the
    end of the tokens, one past the end would read past them)."""
    if not os.path.isfile(path):
        return None
    try:
        table = numpy_array(path)
    except (ValueError, OSError) as e:
        raise DataError(f"{path} is not a readable .npy array ({e}): remove it (the order is replayed)") from None
    if (
        table.ndim != len(shape)
        or table.shape[1:] != shape[1:]
        or not 1 <= table.shape[0] <= shape[0]
        or table.dtype.kind not in "iu"
        or not np.array_equal(table[0], first_row())
    ):
        raise DataError(
            f"{path} is not the official index array for these bins (shape {shape} or its first rows, its first "
            "row as the seed-42 draw over this data's token count): remove it, or use the bins it was drawn for"
        )
    low, top = int(table.min()), int(table.max())  # vectorised over the memory map: about a second for 2.3 GB
    if low < 0 or top >= high:
        raise DataError(
            f"{path} holds offsets from {low} to {top}, outside 0..{high - 1} for these bins: it is damaged or "
            "drawn for other data; remove it (the order is replayed)"
        )
    return table


def check_official(what: str, n_tokens: int, block_size: int, rows: int, expected: int) -> None:
    """The official order's windows fit this run: 1024-token data windows, its number of rows."""
    if rows != expected:
        raise ValueError(f"{what} replays the official {expected} rows, this run has {rows}: match its shape")
    if block_size > OFFICIAL_WINDOW or n_tokens <= OFFICIAL_WINDOW:
        raise ValueError(
            f"{what} replays windows of {OFFICIAL_WINDOW} + 1 tokens: it needs block_size <= {OFFICIAL_WINDOW} "
            f"(it is {block_size}) and more than {OFFICIAL_WINDOW} tokens per split ({n_tokens})"
        )


class EpochOrder:
    """Items 0 .. n - 1 visited once per epoch, each epoch in a fresh random order drawn from (seed, epoch):
    the k-th item of the stream is a pure function of (seed, k)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self._perms = n, seed, {}

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) >= 2:  # a step's rows span at most two epochs
                self._perms.pop(min(self._perms))
            self._perms[epoch] = _rng(self.seed, EPOCH_KEY, epoch).permutation(self.n)
        return self._perms[epoch]

    def take(self, step: int, rows: int) -> np.ndarray:
        """The items of step's rows: stream positions step * rows .. (step + 1) * rows - 1."""
        k = step * rows + np.arange(rows)
        epoch, index = np.divmod(k, self.n)
        out = np.empty(rows, dtype=np.int64)
        for e in np.unique(epoch):
            sel = epoch == e
            out[sel] = self._permutation(int(e))[index[sel]]
        return out


EVAL_PARTS = ("all", "first", "second")  # the validation split, or one half of it


def part_range(n: int, part: str) -> tuple[int, int]:
    """[low, high) of the part of n items (tokens or examples) an evaluation reads: all, or a half. A tuning
    stage chooses on one half and its report is measured on the other, so the choice is not scored on the
    data that made it."""
    return {"all": (0, n), "first": (0, n // 2), "second": (n // 2, n)}[part]


def fixed_offsets(n_tokens: int, block_size: int, count: int, seed: int, key: int) -> np.ndarray:
    """count window offsets drawn once from the seed: the same set at every evaluation and for every model."""
    return _rng(seed, key).integers(0, n_tokens - block_size, size=count)


class TrainBatches:
    """The training rows of every step. sampling='random' draws window offsets uniformly (arXiv 2603.13381's
    method); 'permutation' visits non-overlapping windows in a fresh random order each epoch; 'lines' makes
    each row one line of the dataset (the tokens between two eos ids), padded, the lines in a fresh random
    order each epoch (arXiv 2604.10791's probe training); 'official' replays arXiv 2603.13381's own index
    stream (OfficialRows: batch_size x grad_accum must be its 480 rows, in any split; official_table: its
    train_indices.npy, if the dataset holds one)."""

    def __init__(
        self,
        tokens,
        block_size: int,
        batch_size: int,
        grad_accum: int,
        seed: int,
        sampling="random",
        eos=None,
        official_table=None,
        vocab_size=None,
    ):
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling={sampling!r} is invalid: use one of {', '.join(SAMPLINGS)}")
        self.tokens, self.block_size, self.batch_size = tokens, block_size, batch_size
        self.grad_accum, self.seed, self.sampling, self.eos = grad_accum, seed, sampling, eos
        self.vocab_size = vocab_size  # every batch's ids are checked below it (check_ids)
        self.rows = batch_size * grad_accum
        self.n_windows = (len(tokens) - 1) // block_size
        if sampling == "lines":
            if eos is None:
                raise ValueError("sampling='lines' needs the dataset's eos id ('eos' in meta.json)")
            ends = np.flatnonzero(np.asarray(tokens) == eos)
            starts = np.concatenate(([0], ends[:-1] + 1))
            self.lines = np.stack([starts, ends], axis=1)[ends - starts >= 2]  # >= 2 tokens: one prediction
            if not len(self.lines):
                raise ValueError(f"sampling='lines' found no line of 2 or more tokens ended by eos={eos}")
            self.n_windows = len(self.lines)
        if sampling == "official":
            check_official("sampling='official'", len(tokens), block_size, self.rows, OFFICIAL_ROWS)
            self.official = OfficialRows(len(tokens), official_table)
        self.order = EpochOrder(self.n_windows, seed)
        self._last = (None, None)  # (step, offsets)

    def offsets(self, step: int) -> np.ndarray:
        """Start offsets of all rows of step's global batch (kept for the step's micro-steps)."""
        if self._last[0] != step:
            self._last = (step, self._draw(step))
        return self._last[1]

    def _draw(self, step: int) -> np.ndarray:
        if self.sampling == "official":
            return self.official.row(step)
        if self.sampling == "random":
            return _rng(self.seed, TRAIN_KEY, step).integers(0, len(self.tokens) - self.block_size, size=self.rows)
        out = self.order.take(step, self.rows)
        return out if self.sampling == "lines" else out * self.block_size  # line numbers, or window offsets

    def get(self, step: int, micro: int, rank: int = 0, world_size: int = 1):
        local_accum = self.grad_accum // world_size
        start = (rank * local_accum + micro) * self.batch_size
        chosen = self.offsets(step)[start : start + self.batch_size]
        if self.sampling == "lines":
            return line_rows(self.tokens, self.lines[chosen], self.block_size, self.eos, self.vocab_size)
        return windows(self.tokens, chosen, self.block_size, self.vocab_size)

    def fingerprint(self, step: int) -> str:
        """A short hash of the token ids of step's whole global batch, for logs that prove identical data."""
        if self.sampling == "lines":
            x, y = line_rows(self.tokens, self.lines[self.offsets(step)], self.block_size, self.eos)
            data = torch.cat([x, y], dim=1).numpy().tobytes()
        else:
            idx = self.offsets(step)[:, None] + np.arange(self.block_size + 1)
            data = np.ascontiguousarray(self.tokens[idx]).tobytes()
        return hashlib.blake2b(data, digest_size=8).hexdigest()


class ExampleBatches:
    """The training rows of every step from a dataset of whole examples (nlq/data/examples.py): each epoch
    visits every example once, in a fresh order from (seed, epoch), the rows of a step split over ranks and
    micro-steps as TrainBatches splits them. Targets of -100 (not scored) become the loss's ignored -1."""

    def __init__(self, split, batch_size: int, grad_accum: int, seed: int, vocab_size=None):
        self.split, self.batch_size, self.grad_accum = split, batch_size, grad_accum
        self.rows, self.vocab_size = batch_size * grad_accum, vocab_size
        self.order = EpochOrder(len(split.inputs), seed)
        self._last = (None, None)  # (step, example indices)

    def offsets(self, step: int) -> np.ndarray:
        """The examples of step's global batch (kept for the step's micro-steps)."""
        if self._last[0] != step:
            self._last = (step, self.order.take(step, self.rows))
        return self._last[1]

    def get(self, step: int, micro: int, rank: int = 0, world_size: int = 1):
        local_accum = self.grad_accum // world_size
        start = (rank * local_accum + micro) * self.batch_size
        return example_rows(self.split, self.offsets(step)[start : start + self.batch_size], self.vocab_size)

    def fingerprint(self, step: int) -> str:
        """A short hash of the ids and targets of step's whole global batch (TrainBatches.fingerprint's kind)."""
        x, y = example_rows(self.split, self.offsets(step))
        return hashlib.blake2b(torch.cat([x, y], dim=1).numpy().tobytes(), digest_size=8).hexdigest()


def example_rows(split, chosen: np.ndarray, vocab_size: int | None = None):
    """Inputs and targets (int64 tensors) of the chosen examples, -100 targets as -1; ids checked below
    vocab_size (check_ids)."""
    x = np.asarray(split.inputs[chosen], dtype=np.int64)
    y = np.asarray(split.targets[chosen], dtype=np.int64)
    check_ids(x, vocab_size)
    return torch.from_numpy(x), torch.from_numpy(np.where(y < 0, -1, y))
