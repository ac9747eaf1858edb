"""What a run reads: the dataset's splits checked against meta.json, the batches of every step (a pure
function of data_seed and the step: nlq/data/loader.py) and the windows of every evaluation."""

import os
from dataclasses import dataclass, replace

import numpy as np

from model import GPTConfig
from nlq.common.errors import ConfigError
from nlq.data.dataset import check_token_ids, load_meta, open_split
from nlq.data.examples import Examples, is_examples, open_examples
from nlq.data.loader import (
    OFFICIAL_EVAL,
    OFFICIAL_STEPS,
    TRAIN_EVAL_KEY,
    VAL_KEY,
    ExampleBatches,
    TrainBatches,
    check_official,
    fixed_offsets,
    official_eval_offsets,
    official_train_table,
    part_range,
)
from nlq.run.config import TrainConfig


@dataclass
class Data:
    path: str
    meta: dict
    train: object  # memory-mapped token ids (an examples dataset: its train Split)
    val: object  # (an examples dataset: its test Split)
    batches: TrainBatches | ExampleBatches
    eval_windows: object  # step -> (val offsets, train offsets) of the evaluation at that step
    row_tokens: int  # tokens of one row: block_size, or an example's length
    examples: Examples | None = None  # a dataset of whole examples: evaluated for accuracy on its test split


def open_data(cfg: TrainConfig, block_size: int) -> Data:
    """The dataset's splits, checked against meta.json, the batch order of every step and the windows of
    every evaluation."""
    path = cfg.dataset if os.path.isdir(cfg.dataset) else os.path.join("data", cfg.dataset)
    check_not_disk_dataset(path)
    if is_examples(path):
        return open_example_data(cfg, path, block_size)
    meta = load_meta(path)
    train = open_split(path, "train", min_tokens=block_size + 1)
    val = open_split(path, "val", min_tokens=block_size + 1)
    check_token_ids(path, meta, {"train": train, "val": val})
    eos = meta.get("eos")
    if cfg.sampling == "lines" and eos is None:
        raise ConfigError(f"sampling='lines' needs the dataset's eos id: {path}/meta.json has no 'eos'")
    if cfg.sampling == "official" and cfg.max_iters > OFFICIAL_STEPS:
        raise ConfigError(f"sampling='official' holds {OFFICIAL_STEPS:,} steps of indices: set max_iters <= that")
    accum = cfg.gradient_accumulation_steps
    try:
        table = official_train_table(path, len(train), cfg.max_iters) if cfg.sampling == "official" else None
        batches = TrainBatches(
            train, block_size, cfg.batch_size, accum, cfg.data_seed, cfg.sampling, eos, table, meta["vocab_size"]
        )
        eval_windows = evaluation_windows(cfg, block_size, len(train), len(val), path)
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    return Data(path, meta, train, val, batches, eval_windows, block_size)


def check_not_disk_dataset(path: str) -> None:
    """MAD-Lab's other on-disk layout (DiskDataset: text documents indexed by data_idx.csv) is named as such."""
    for where in (path, os.path.join(path, "train"), os.path.join(path, "test")):
        if os.path.isfile(os.path.join(where, "data_idx.csv")):
            raise ConfigError(
                f"{path} is in MAD-Lab's DiskDataset layout (text documents and data_idx.csv), which train.py does not "
                "read: write the task with MAD-Lab's MemoryDataset (train/ and test/, inputs.npy and targets.npy) or "
                "with data/synthetic_tasks/prepare.py"
            )


def sized_to_data(data: Data, model_cfg: GPTConfig) -> GPTConfig:
    """A dataset of examples (data/synthetic_tasks/prepare.py's, or MAD-Lab's MemoryDataset): the model's
    vocabulary (meta.json's, or the data's largest id + 1) and context (its examples' length) from the data,
    where the config left them at their defaults (a 50,304-id, 1,024-position model would be built otherwise,
    predicting ids the data has no class for), said in one line. Token datasets keep the config's: GPT-2's
    50,257 ids are padded to 50,304 on purpose, as in nanoGPT."""
    if data.examples is None:
        return model_cfg
    defaults = GPTConfig.__dataclass_fields__
    taken = {
        k: v
        for k, v in (("vocab_size", data.meta["vocab_size"]), ("block_size", data.examples.seq_len))
        if getattr(model_cfg, k) == defaults[k].default
    }
    if taken:
        shown = " and ".join(f"{k}={v}" for k, v in taken.items())
        print(f"{data.path} is a dataset of examples: {shown} from its data; set them to choose others")
    return replace(model_cfg, **taken)


def open_example_data(cfg: TrainConfig, path: str, block_size: int) -> Data:
    """A dataset of whole examples (data/synthetic_tasks/prepare.py, or MAD-Lab's layout): rows are examples
    in epochs of fresh permutations from data_seed; each evaluation scores the whole test split (loss and
    accuracy) and the loss of a fixed sample of training examples."""
    if cfg.sampling in ("lines", "official") or cfg.eval_order == "official":
        raise ConfigError(
            f"{path} is a dataset of whole examples, read in epochs of permutations: sampling={cfg.sampling!r} and "
            f"eval_order={cfg.eval_order!r} are for token datasets (leave them at their defaults)"
        )
    ex = open_examples(path, block_size)
    vocab = ex.meta["vocab_size"]
    batches = ExampleBatches(ex.train, cfg.batch_size, cfg.gradient_accumulation_steps, cfg.data_seed, vocab)
    n = min(len(ex.train), cfg.eval_iters * cfg.batch_size)
    train_sample = np.sort(np.random.default_rng([cfg.data_seed, TRAIN_EVAL_KEY]).choice(len(ex.train), n, False))
    low, high = part_range(len(ex.test), cfg.eval_part)
    if high == low:
        raise ConfigError(f"{path}/test holds one example: eval_part={cfg.eval_part!r} needs two or more")
    fixed = (np.arange(low, high), train_sample)
    return Data(path, ex.meta, ex.train, ex.test, batches, lambda step: fixed, ex.seq_len, ex)


def evaluation_windows(cfg: TrainConfig, block_size: int, n_train: int, n_val: int, path: str):
    """step -> (val offsets, train offsets): the same fixed windows at every evaluation, or (eval_order=
    'official') the official code's k-th rows at the k-th evaluation, k = step // eval_interval (its own
    eval_*_indices.npy beside the bins must then equal the replay)."""
    n_eval = cfg.eval_iters * cfg.batch_size
    if cfg.eval_order == "fixed":
        low, high = part_range(n_val, cfg.eval_part)
        if high - low <= block_size:
            raise ValueError(
                f"eval_part={cfg.eval_part!r}: that half of val.bin holds {high - low} tokens, not a window of "
                f"block_size + 1 = {block_size + 1}: use eval_part='all' or more validation data"
            )
        fixed = (
            low + fixed_offsets(high - low, block_size, n_eval, cfg.data_seed, VAL_KEY),
            fixed_offsets(n_train, block_size, n_eval, cfg.data_seed, TRAIN_EVAL_KEY),
        )
        return lambda step: fixed
    if cfg.eval_part != "all":
        raise ValueError("eval_order='official' evaluates the official windows: eval_part must be 'all'")
    check_official("eval_order='official'", min(n_train, n_val), block_size, n_eval, OFFICIAL_EVAL[1])
    if cfg.max_iters // cfg.eval_interval >= OFFICIAL_EVAL[0]:
        raise ValueError(
            f"eval_order='official' holds {OFFICIAL_EVAL[0]} evaluations, fewer than max_iters / eval_interval: "
            "lower max_iters or raise eval_interval"
        )
    train_rows, val_rows = official_eval_offsets(n_train, n_val, path)
    return lambda step: (val_rows[step // cfg.eval_interval], train_rows[step // cfg.eval_interval])
