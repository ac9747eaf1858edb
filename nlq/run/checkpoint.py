"""Checkpoints, in two formats, and the one path from a checkpoint, or pretrained weights, to a model ready
for inference (sample.py, evaluation, bench).

- A single file, out_dir/ckpt.pt (one process or DDP): written atomically (nlq/common/atomic.py) by rank 0, read with
  weights only (nlq/common/safe_load.py: no file loaded here can run code).
- Sharded (FSDP): out_dir/ckpt-sharded/step_NNNNNN/, written by every rank with torch.distributed.checkpoint
  (DCP) into step_NNNNNN.partial, which rank 0 completes with run.pt (everything but the tensors of the
  model and optimizer), renames, and then names in ckpt-sharded/latest.json (atomically). A kill at any
  moment leaves latest.json naming a complete checkpoint. run.pt records the size of every file the save
  wrote, so a deleted or truncated shard is found before DCP reads it. DCP reshards on load, so any number
  of processes, sharded or not, resumes it; export.py turns it into the single file.

Either format resumes either kind of run. latest() picks the newest intact checkpoint of out_dir (ckpt.pt,
a sharded step, or a kept ckpt_NNNNNN.pt), warning about each damaged one it passes over.
"""

import json
import math
import os
import re
import shutil
import sys
import warnings
import zlib
from pathlib import Path

import torch

from model import GPT, GPTConfig, buffer_count, clean_state_dict, parameter_count
from nlq.common.atomic import WriteError, atomic_write, atomic_write_text, fsync_dir
from nlq.common.errors import ConfigError, UserError
from nlq.common.fits import check_fits
from nlq.common.safe_load import dcp_planner, dcp_reader, read_dcp_metadata, torch_load
from nlq.interop import importers
from nlq.paper import official

# DCP warns when it reads or writes without a process group (also from its writer thread); here that is
# a one-process run, as intended.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
CHECKPOINT, SHARDED, LATEST, RUN = "ckpt.pt", "ckpt-sharded", "latest.json", "run.pt"
IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")  # optimizer group keys that are not state


class CheckpointError(UserError):
    """A checkpoint problem."""

    every_rank = True


class Damaged(CheckpointError):
    """A checkpoint that cannot be read whole: truncated, a shard missing, unsafe metadata."""


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def save(obj: dict, path) -> None:
    """Write obj to path atomically; a failed write (full disk, ...) keeps the old file and raises WriteError."""
    atomic_write(path, lambda f: torch.save(obj, f), needed_bytes=_nbytes(obj))


def load(path, required=("model", "model_args")) -> dict:
    """A checkpoint as a dict. A sharded one holds its run.pt and, under "sharded", its directory: the
    model's and optimizer's tensors stay on disk until model_from / restore_optimizer read them."""
    path = Path(path)
    if path.is_dir():
        ckpt = load(path / RUN, [k for k in required if k not in ("model", "optimizer")])
        check_files(path, ckpt)
        return {**ckpt, "sharded": str(path)}
    if not path.is_file():
        raise CheckpointError(f"{path} not found: no run has saved a checkpoint there (check out_dir, or train first)")
    try:
        ckpt = torch_load(path)
    except Exception as e:
        raise Damaged(f"{path} cannot be read ({type(e).__name__}): it is truncated or not a checkpoint") from None
    check_types(ckpt, path)
    if official.is_official(ckpt):  # arXiv 2603.13381's own checkpoints, in this project's terms
        ckpt = official.convert(ckpt, path)
    missing = [k for k in required if not isinstance(ckpt, dict) or k not in ckpt]
    if missing and isinstance(ckpt, dict) and ckpt.get("origin") == "official":
        raise CheckpointError(
            f"{path} is an official checkpoint of arXiv 2603.13381 (no {', '.join(missing)}): train from it with "
            f"--init_from={path} (--init_continue=True continues its AdamW state and step)"
        )
    if missing:
        raise CheckpointError(
            f"{path} lacks {', '.join(missing)}: not a checkpoint of this project nor of the paper's official code"
        )
    return ckpt


def check_types(ckpt, path) -> None:
    """The fields every reader relies on are of their type, in this project's format and the official one
    alike: model a dict of tensors, model_args and config dicts, iter_num a step count."""
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} holds a {type(ckpt).__name__}, not a checkpoint's dict")
    wrong = [
        f"{k} is a {type(ckpt[k]).__name__}" for k in ("model_args", "config") if not isinstance(ckpt.get(k, {}), dict)
    ]
    model = ckpt.get("model", {})
    if not isinstance(model, dict) or not all(isinstance(v, torch.Tensor) for v in model.values()):
        wrong.append("model is not a dict of tensors")
    step = ckpt.get("iter_num", 0)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        wrong.append(f"iter_num is {step!r}, not a step count")
    if wrong:
        raise CheckpointError(f"{path} is damaged or not a checkpoint: {'; '.join(wrong)}")


def check_files(directory: Path, ckpt: dict, verify: bool = False) -> None:
    """A sharded step's files are the ones its save wrote, at their sizes (and, with verify, their CRC32:
    a same-size corruption would otherwise load, or load garbage), and its metadata is safe to read. A step
    saved before sizes (or checksums) were recorded is checked for what it records."""
    for name, recorded in (ckpt.get("files") or {}).items():
        size, crc = recorded if isinstance(recorded, (list, tuple)) else (recorded, None)
        f = directory / name
        if not f.is_file():
            raise Damaged(f"{directory} is damaged: {name} is missing")
        if f.stat().st_size != size:
            raise Damaged(f"{directory} is damaged: {name} has {f.stat().st_size} bytes, the save wrote {size}")
        if verify and crc is not None and checksum(f) != crc:
            raise Damaged(f"{directory} is damaged: {name} has other bytes than the save wrote (its CRC32 differs)")
    try:
        read_dcp_metadata(directory / ".metadata")
    except UserError as e:
        raise Damaged(f"{directory} is damaged: {e}") from None


def _mismatch(path, e: Exception, ckpt: dict) -> CheckpointError:
    cause = first_cause(e)
    if ckpt.get("origin") == "official":
        return CheckpointError(
            f"{path} is an official checkpoint of arXiv 2603.13381 that this project cannot build "
            f"({cause}): its model_args or weights are damaged or of another model"
        )
    return CheckpointError(
        f"{path} does not match this version's model ({cause}): use the version of this project that wrote it"
    )


def first_cause(e: Exception) -> str:
    """An error's telling line: torch's 'size mismatch for NAME: ...' where there is one (its first line only
    says 'Error(s) in loading state_dict'), else the first."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
    return next(
        (line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))), lines[0]
    )


def model_config(ckpt: dict, path, **overrides):
    """The GPTConfig a checkpoint was trained with; overrides replace fields (dropout)."""
    try:
        return GPTConfig(**{**ckpt["model_args"], **overrides})
    except (TypeError, ValueError) as e:  # a field this version lacks, or a value it refuses
        raise _mismatch(path, e, ckpt) from None


def model_from(ckpt: dict, path, **overrides):
    """The GPT a checkpoint describes, with its weights (read from the shards, whole, if sharded)."""
    config = model_config(ckpt, path, **overrides)
    check_fits(parameter_count(config) + buffer_count(config), 4, "cpu", "float32 weights")
    model = GPT(config)
    restore_weights(model, ckpt, path)
    return model


def restore_weights(model, ckpt: dict, path) -> None:
    """Load a checkpoint's weights into model in place. Under FSDP each rank reads only its shards of a
    sharded checkpoint, and keeps only its shard of a single file's whole tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    try:
        if "sharded" in ckpt:
            state = get_model_state_dict(model)
            _dcp_load({"model": state}, ckpt["sharded"])
            set_model_state_dict(model, state)
        else:
            whole = StateDictOptions(full_state_dict=True)
            set_model_state_dict(model, clean_state_dict(ckpt["model"]), options=whole)
    except (RuntimeError, KeyError) as e:
        raise _mismatch(path, e, ckpt) from None


def is_file_source(init_from: str) -> bool:
    """Whether init_from names a checkpoint file (this project's or the official code's), not a mode or a hub name."""
    return init_from.endswith(".pt") or Path(init_from).is_file()


def load_model(path):
    """(GPT, checkpoint dict) from a training checkpoint (a file or a sharded directory)."""
    ckpt = load(path)
    return model_from(ckpt, path), ckpt


# ---- sharded checkpoints ----------------------------------------------------------------------------


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _master() -> bool:
    return not _distributed() or torch.distributed.get_rank() == 0


def _barrier() -> None:
    if _distributed():
        torch.distributed.barrier()


def _dcp_load(state: dict, directory) -> None:
    """Fill state's tensors in place from a DCP directory: by all ranks together when distributed. The
    reader and planner are safe_load's: nothing in the directory can run code."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, storage_reader=dcp_reader(directory), planner=dcp_planner(), no_dist=not _distributed())


def sharded_latest(out_dir) -> Path | None:
    """The step directory latest.json names (written last by a save: a complete step), or None."""
    pointer = Path(out_dir) / SHARDED / LATEST
    if not pointer.is_file():
        return None
    try:
        name = json.loads(pointer.read_text())["dir"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        name = None
    if not isinstance(name, str) or not re.fullmatch(r"step_\d+", name):
        raise CheckpointError(
            f'{pointer} is damaged: rewrite it as {{"dir": "step_NNNNNN"}}, naming a complete step directory beside it'
        )
    return pointer.parent / name


def candidates(out_dir) -> list[Path]:
    """Every complete checkpoint out_dir may hold, in the order that breaks ties between equal steps:
    ckpt.pt, the sharded step latest.json names, the other sharded steps, kept ckpt_NNNNNN.pt files."""
    out_dir = Path(out_dir)
    steps = sorted(d for d in (out_dir / SHARDED).glob("step_*") if not d.name.endswith(".partial"))
    try:
        pointed = [sharded_latest(out_dir)]
    except CheckpointError:  # a damaged latest.json: the steps themselves are still found
        pointed = []
    ordered = [out_dir / CHECKPOINT, *pointed, *steps, *sorted(out_dir.glob("ckpt_[0-9]*.pt"))]
    complete = [p for p in ordered if p is not None and (p.is_file() or (p / RUN).is_file())]
    return list(dict.fromkeys(complete))


def step_of(path: Path) -> int:
    """A checkpoint's step, reading no weights (run.pt of a sharded step; a memory-mapped file)."""
    if path.is_dir():
        return load(path, ("iter_num",))["iter_num"]
    try:
        ckpt = torch_load(path, mmap=True)
    except Exception as e:
        raise Damaged(f"{path} cannot be read ({type(e).__name__}): it is truncated or not a checkpoint") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("iter_num"), int):
        raise Damaged(f"{path} lacks iter_num: not a checkpoint of this project")
    return ckpt["iter_num"]


def survey(out_dir, sharded: bool = False, verify: bool = True) -> tuple[Path | None, dict[Path, str]]:
    """(out_dir's newest intact checkpoint or None, {damaged checkpoint: what is wrong with it}). Every
    candidate is checked for its files and sizes; with verify, the newest sharded step also for its files'
    checksums (read whole), and the next newest is taken if they differ."""
    steps, damaged = {}, {}
    for path in candidates(out_dir):
        if sharded and not path.is_dir():
            continue
        try:
            steps[path] = step_of(path)
        except CheckpointError as e:
            damaged[path] = str(e)
    for path in sorted(steps, key=lambda p: -steps[p]):  # newest first; ckpt.pt first among equals
        try:
            if verify and path.is_dir():
                check_files(path, load(path / RUN, ()), verify=True)
            return path, damaged
        except CheckpointError as e:
            damaged[path] = str(e)
    return None, damaged


def latest(out_dir, sharded: bool = False) -> Path | None:
    """out_dir's newest intact checkpoint (of the sharded format only, if sharded), None if it holds none.
    Damaged ones are passed over with a warning; if every checkpoint there is damaged, the error names them."""
    best, damaged = survey(out_dir, sharded)
    if best is None and damaged:
        raise Damaged(f"{out_dir} holds no intact checkpoint: {'; '.join(damaged.values())}")
    for line in damaged.values():
        print(f"warning: {line}; using {best}", file=sys.stderr)
    return best


def save_sharded(out_dir, meta: dict, model, optimizer, keep: bool, background: bool = False) -> Path:
    """Collective: every rank writes its shards of the model and optimizer. meta (iter_num, config, ...)
    goes to run.pt. Older step directories are deleted once this one is named, unless they are to be kept.
    With background, the state is copied to host memory and written by a thread while training goes on;
    the step is named (run.pt, rename, latest.json) by finish_pending, which the next save, the end of the
    run and any error path call, and poll_pending as soon as the write is done. Until then latest.json
    names the previous step: a kill at any moment leaves a complete checkpoint named."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    finish_pending()  # one save in flight at a time, named in order
    root = Path(out_dir) / SHARDED
    final = root / f"step_{meta['iter_num']:06d}"
    partial = final.with_name(final.name + ".partial")
    previous = sharded_latest(out_dir)
    if _master():
        shutil.rmtree(partial, ignore_errors=True)  # left by a kill during an earlier save of this step
        partial.mkdir(parents=True)
    _barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    name = partial, final, {**meta, "keep": keep}, previous
    try:
        if background:
            group = _writer_group() if _distributed() else None
            future = dcp.async_save(state, checkpoint_id=str(partial), process_group=group, no_dist=group is None)
            _PENDING.append((future, name))
            return final
        dcp.save(state, checkpoint_id=str(partial), no_dist=not _distributed())
    except Exception as e:
        raise _save_failed(e, partial, final, previous) from None
    _name_step(*name)
    _barrier()
    return final


_PENDING = []  # [(future, (partial, final, meta, previous))]: the background save still being written
_WRITER_GROUP = []  # the process group of background writes, apart from training's collectives


def _writer_group():
    """A gloo group of all ranks for the background writer's collectives: on the training group they would
    interleave with the training's own from another thread."""
    if not _WRITER_GROUP:
        _WRITER_GROUP.append(torch.distributed.new_group(backend="gloo"))
    return _WRITER_GROUP[0]


def poll_pending() -> None:
    """Name the background save if its write is done (no waiting)."""
    if _PENDING and _PENDING[0][0].done():
        finish_pending()


def finish_pending() -> None:
    """Wait for the background save, if any, and name its step (rank 0). Raises WriteError if it failed."""
    if not _PENDING:
        return
    future, name = _PENDING.pop()
    try:
        future.result()
    except Exception as e:
        partial, final, _, previous = name
        raise _save_failed(e, partial, final, previous) from None
    _name_step(*name)


def _name_step(partial: Path, final: Path, meta: dict, previous) -> None:
    """Rank 0 completes a written step: run.pt with the files' sizes, the rename, latest.json, the pruning."""
    if not _master():
        return
    root = final.parent
    try:
        files = {f.name: [f.stat().st_size, checksum(f)] for f in partial.iterdir() if f.is_file()}
        atomic_write(partial / RUN, lambda f: torch.save({**meta, "files": files}, f))
        shutil.rmtree(final, ignore_errors=True)  # a stale copy of this step that latest.json never named
        os.replace(partial, final)
        fsync_dir(root)
        atomic_write_text(root / LATEST, json.dumps({"dir": final.name, "step": meta["iter_num"]}) + "\n")
    except Exception as e:
        raise _save_failed(e, partial, final, previous) from None
    _prune(root, final)


def checksum(path: Path) -> int:
    """CRC32 of a file, read in chunks (zlib: about 4 GB/s, so 0.4 s for GPT-2 small's 1.5 GB of shards)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
    return crc


def _save_failed(e: Exception, partial: Path, final: Path, previous) -> WriteError:
    if _master():
        shutil.rmtree(partial, ignore_errors=True)
    if isinstance(e, WriteError):
        return e
    kept = f"{previous} is kept" if previous else "no earlier checkpoint exists"
    return WriteError(f"could not write the sharded checkpoint {final} ({type(e).__name__}: {e}); {kept}")


def _prune(root: Path, newest: Path) -> None:
    """Remove every step directory but the newest and the kept ones: also those a kill left behind (a
    partial save, or a previous step whose successor was named but not yet cleaned up)."""
    for d in root.glob("step_*"):
        if d == newest or not d.is_dir():
            continue
        try:
            kept = not d.name.endswith(".partial") and bool(load(d / RUN, ()).get("keep"))
        except CheckpointError:  # no readable run.pt: never a complete checkpoint
            kept = False
        if not kept:
            shutil.rmtree(d, ignore_errors=True)


def restore_optimizer(model, optimizer, ckpt: dict) -> None:
    """Load a checkpoint's optimizer state into an optimizer over model's parameters, sharded or not. A
    single file's state is checked against the model first (groups, names, shapes, dtypes, steps): fused
    AdamW reads a state of another shape out of bounds (a segfault), not as an error."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    if "sharded" in ckpt:
        state = get_optimizer_state_dict(model, optimizer)
        _dcp_load({"optimizer": state}, ckpt["sharded"])
        set_optimizer_state_dict(model, optimizer, state)
        return
    path = ckpt.get("path", "the checkpoint")
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    saved = _keyed_by_name(optimizer_state(ckpt, path), [n for g in groups for n in g], path)
    _check_state(saved, groups, dict(model.named_parameters()), path)
    # How this optimizer computes (fused on this device, ...) is this run's, not the saving run's.
    ours = [{k: g[k] for k in IMPLEMENTATION if k in g} for g in optimizer.param_groups]
    saved = {**saved, "param_groups": [{**g, **o} for g, o in zip(saved["param_groups"], ours, strict=True)]}
    set_optimizer_state_dict(model, optimizer, saved, options=StateDictOptions(full_state_dict=True))


def optimizer_state(ckpt: dict, path) -> dict:
    """A checkpoint's AdamW state ({'state', 'param_groups'}), or one line saying why there is none: a
    checkpoint shared without it (absent, None or {}) serves every use but a resume and --init_continue."""
    if ckpt.get("optimizer_unusable"):
        raise CheckpointError(f"{ckpt['optimizer_unusable']}: it cannot be continued; start from its weights alone")
    saved = ckpt.get("optimizer")
    if not saved:
        raise CheckpointError(
            f"{path} holds no optimizer state (it was left out, as when a checkpoint is shared): a resume needs it; "
            f"start a new run from its weights with --init_from={path} and another --out_dir"
        )
    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict):
        raise CheckpointError(f"{path}'s optimizer entry is not an optimizer's state: start from its weights alone")
    if not isinstance(saved.get("param_groups"), list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in saved["param_groups"]
    ):
        raise CheckpointError(f"{path}'s optimizer state has no parameter groups: start from its weights alone")
    return saved


def _keyed_by_name(saved: dict, order: list, path) -> dict:
    """A single file keys the state by each parameter's position in the optimizer's groups (an official
    checkpoint's arrives keyed by name, official.convert); keyed by name, the same whole state loads into
    sharded parameters as well (each rank keeps its shard)."""
    keys = [*saved["state"], *(i for g in saved["param_groups"] for i in g["params"])]
    if all(isinstance(k, str) for k in keys):
        return saved
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(order) for k in keys):
        raise CheckpointError(
            f"{path}'s optimizer state indexes parameters outside this model's {len(order)}: it belongs to another "
            "model; start from its weights alone"
        )
    return {
        "state": {order[i]: s for i, s in saved["state"].items()},
        "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in saved["param_groups"]],
    }


def _check_state(saved: dict, groups: list, params: dict, path) -> None:
    """The state fits this optimizer: the same groups of the same parameters, each moment of its parameter's
    shape in a float dtype, each step a finite count >= 0."""
    theirs = [sorted(map(str, g["params"])) for g in saved["param_groups"]]
    if theirs != [sorted(g) for g in groups]:
        raise CheckpointError(
            f"{path}'s optimizer state holds {len(theirs)} groups of {[len(g) for g in theirs]} parameters, this "
            f"model's optimizer {len(groups)} of {[len(g) for g in groups]} (or other names): it belongs to another "
            "model or freezing; start from its weights alone"
        )
    for name, entry in saved["state"].items():
        if name not in params or not isinstance(entry, dict):
            raise CheckpointError(f"{path}'s optimizer state for {name!r} is not this model's: the file is damaged")
        for key, value in entry.items():
            if key == "step":
                step = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
                if not isinstance(step, (int, float)) or isinstance(step, bool) or not 0 <= step < math.inf:
                    raise CheckpointError(f"{path}'s optimizer step for {name} is {value!r}: not a count; damaged")
            elif isinstance(value, torch.Tensor) and (
                tuple(value.shape) != tuple(params[name].shape) or not value.is_floating_point()
            ):
                raise CheckpointError(
                    f"{path}'s optimizer {key} for {name} is {tuple(value.shape)} {value.dtype}, the parameter "
                    f"{tuple(params[name].shape)}: it belongs to another model; start from its weights alone"
                )


def which_step(ckpt: dict) -> str:
    """Which step a checkpoint holds, in words: the run's last, or (always_save_checkpoint=False) the step of its
    lowest validation loss, which can be earlier."""
    step, config = ckpt.get("iter_num"), ckpt.get("config") or {}
    if step is None:
        return "a checkpoint that does not record its step"
    end = config.get("max_iters")
    if config.get("always_save_checkpoint", True) or step == end:
        return f"step {step}" + (f" of {end}" if end else "")
    best = ckpt.get("best_val_loss")
    shown = f" ({best:.4f})" if isinstance(best, float) else ""
    return f"step {step} of {end}: the step of the lowest validation loss{shown}, kept by always_save_checkpoint=False"


def load_for_inference(init_from: str, out_dir: str):
    """(model, tokenizer meta) for sample.py, the evaluation and bench: out_dir's checkpoint for
    init_from='resume', a checkpoint file (this project's or the official code's), else pretrained weights
    (a GPT-2 or Pythia name or a local HF directory). The tokenizer is the run's (kept in its checkpoint) and
    is checked to fit the model's vocabulary."""
    from nlq.data.tokenizer import pretrained_tokenizer, tokenizer_vocab

    if init_from == "resume":
        path = latest(out_dir)
        if path is None:
            raise CheckpointError(f"{out_dir} holds no checkpoint ({CHECKPOINT} or {SHARDED}/): check out_dir")
        model, ckpt = load_model(path)
        meta = ckpt.get("tokenizer") or {"tokenizer": "gpt2"}
        print(f"{path}: {which_step(ckpt)}")
    elif is_file_source(init_from):
        model, ckpt = load_model(init_from)
        meta = ckpt.get("tokenizer") or {"tokenizer": "gpt2"}
        print(f"{init_from}: {which_step(ckpt)}")
    elif importers.is_pretrained_source(init_from):
        try:
            model = importers.from_pretrained(init_from)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        meta = pretrained_tokenizer(init_from)
    else:
        raise ConfigError(
            f"init_from={init_from!r} is invalid: use resume, a checkpoint file (.pt), a GPT-2 or Pythia name, "
            "or a local HF directory"
        )
    bad = model.non_finite()
    if bad:
        source = init_from if init_from != "resume" else out_dir
        raise CheckpointError(
            f"{source} holds non-finite weights in {len(bad)} tensors ({bad[0]}, ...): the run diverged before this "
            "save; use an earlier checkpoint (a kept ckpt_NNNNNN.pt, --keep_checkpoints)"
        )
    needed = tokenizer_vocab(meta)
    if needed > model.config.vocab_size:
        raise CheckpointError(
            f"the tokenizer ({meta['tokenizer']}) has {needed} ids but the model's vocab_size is "
            f"{model.config.vocab_size}: the checkpoint lacks the tokenizer it was trained with (a nanoGPT "
            "checkpoint?); train it with this project, or pass weights whose vocabulary fits"
        )
    return model, meta
