"""How a training run starts: what out_dir holds decides between a new run, a resume and a restart
(start_mode); a resume must keep what fixes the data order and the schedule (DATA_ORDER, SCHEDULE,
resume_mismatches); the model is built from the config, a checkpoint or pretrained weights (build_model),
after checking that it fits in memory, and is checked against the data (check_model). train.py calls
these in that order; cfg is its TrainConfig.
"""

import os
import sys
from dataclasses import asdict

import torch

from model import GPT, PROBE_FIELDS, GPTConfig, buffer_count, clean_state_dict, parameter_count
from nlq.common.errors import ConfigError
from nlq.common.fits import check_fits
from nlq.interop import importers
from nlq.paper import official
from nlq.run import checkpoint
from nlq.run.hardware import resolve_device
from nlq.run.rundir import RunDir

# What fixes the tokens of each step and the validation windows: a resume must not change it. The
# split of a step into micro-batches may change (e.g. a smaller batch_size after running out of memory).
DATA_ORDER = {
    "dataset": lambda c: c["dataset"],
    "data_seed": lambda c: c["data_seed"],
    "sampling": lambda c: c["sampling"],
    "eval_order": lambda c: c.get("eval_order", "fixed"),  # runs saved before eval_order existed: fixed
    "eval_part": lambda c: c.get("eval_part", "all"),  # runs saved before eval_part existed: all
    "batch_size x gradient_accumulation_steps": lambda c: c["batch_size"] * c["gradient_accumulation_steps"],
    "eval_iters x batch_size": lambda c: c["eval_iters"] * c["batch_size"],
}
# What fixes the learning-rate curve: a resume that changes it bends the schedule mid-run.
SCHEDULE = {
    "learning_rate": lambda c: c["learning_rate"],
    "min_lr": lambda c: c["min_lr"],
    "warmup_iters": lambda c: c["warmup_iters"],
    "decay_lr": lambda c: c["decay_lr"],
    "end of the cosine (lr_decay_iters, else max_iters)": lambda c: c["lr_decay_iters"] or c["max_iters"],
}


def start_mode(cfg, run: RunDir) -> tuple[str, object, list]:
    """(mode, checkpoint path or None, files to set aside): init_from resolved against what out_dir holds.
    mode is 'scratch', 'resume' or a pretrained source. No start erases a run: a run with an intact
    checkpoint is continued by resume or auto (damaged newer checkpoints are set aside, not overwritten);
    one without (stopped before its first save, or every checkpoint damaged) is restarted by auto, which
    sets all its files aside."""
    path, damaged = checkpoint.survey(run.path)
    leftovers = list(damaged) if path is not None else run.held()
    mode = cfg.init_from
    if mode == "auto":
        mode = "resume" if path is not None else "scratch"
    why = f" ({'; '.join(damaged.values())})" if damaged else " (it stopped before its first checkpoint)"
    if mode == "resume" and path is None and not leftovers:
        raise ConfigError(f"init_from=resume but {run.path} holds no checkpoint: start with --init_from=scratch")
    if mode == "resume" and path is None:
        raise ConfigError(
            f"init_from=resume but {run.path} holds no intact checkpoint{why}: --init_from=auto starts the run "
            "again and keeps its files aside"
        )
    if cfg.eval_only:
        if mode == "scratch":
            raise ConfigError("eval_only=True needs weights: --init_from=resume (out_dir's checkpoint) or pretrained")
        return mode, path, []
    if mode == "resume":
        for line in damaged.values():
            print(f"warning: {line}; resuming from {path}", file=sys.stderr)
        return mode, path, leftovers
    if run.holds_a_run():
        if cfg.init_from == "auto":
            return mode, None, leftovers
        held = " and ".join(p.name for p in run.held())
        step = checkpoint.step_of(path) if path is not None else None
        if step is not None and step >= cfg.max_iters:  # resume would train nothing: say what there is to do
            raise ConfigError(
                f"{run.path} holds a finished run (step {step}, max_iters={cfg.max_iters}): look at it with "
                f"`python sample.py --out_dir={run.path}` or `python compare.py {run.path}`, or choose another out_dir"
            )
        fix = "--init_from=resume" if path is not None else f"--init_from=auto (it holds no checkpoint{why})"
        raise ConfigError(f"{run.path} holds a run ({held}): continue it with {fix}, or choose another out_dir")
    return mode, path, []


def resume_mismatches(ckpt: dict, cfg, model_cfg: GPTConfig, path) -> list[str]:
    """What differs between a checkpoint's run and this config, in the fields a resume must keep."""
    saved_model, saved = checkpoint.model_config(ckpt, path), ckpt["config"]
    # A pretrained model's shape comes from its weights, so only the probe fields are the config's to set.
    fields = GPTConfig.__dataclass_fields__ if ckpt["origin"] == "scratch" else PROBE_FIELDS
    out = [
        f"{k} (checkpoint {getattr(saved_model, k)!r}, config {getattr(model_cfg, k)!r})"
        for k in fields
        if k != "dropout" and getattr(model_cfg, k) != getattr(saved_model, k)
    ]
    # An evaluation never reads the schedule: eval_only may name another max_iters or lr_decay_iters.
    rules = dict(DATA_ORDER) if cfg.allow_schedule_change or cfg.eval_only else {**DATA_ORDER, **SCHEDULE}
    return out + [
        f"{name} (checkpoint {rule(saved)!r}, config {rule(asdict(cfg))!r})"
        for name, rule in rules.items()
        if rule(saved) != rule(asdict(cfg))
    ]


def build_model(cfg, model_cfg: GPTConfig, mode: str, path):
    """(model, checkpoint or None, origin): a new model, pretrained weights, or the out_dir checkpoint.
    origin is the init_from that made the weights ('scratch' or a pretrained name), kept across resumes."""
    probe = {k: getattr(model_cfg, k) for k in PROBE_FIELDS}
    if mode == "scratch":
        check_memory(cfg, model_cfg)
        model = GPT(model_cfg)
        if cfg.init_order == "official":
            official.initialise(model, cfg.seed)
        return model, None, "scratch"
    if mode == "resume":
        required = ("model", "model_args", "config", "optimizer", "iter_num", "origin")
        ckpt = checkpoint.load(path, required=required)
        if "sharded" not in ckpt:  # a sharded step keeps its optimizer state in its shards
            checkpoint.optimizer_state(ckpt, path)
        mismatched = resume_mismatches(ckpt, cfg, model_cfg, path)
        if mismatched:
            schedule_changed = any(m.startswith(tuple(SCHEDULE)) for m in mismatched)
            hint = " (a schedule change needs --allow_schedule_change=True)" if schedule_changed else ""
            raise ConfigError(f"cannot resume {path} with a different setup: {'; '.join(mismatched)}{hint}")
        # The weights are loaded once the model is spread (Trainer): under FSDP each rank reads its shards only.
        saved_cfg = checkpoint.model_config(ckpt, path, dropout=model_cfg.dropout)
        check_memory(cfg, saved_cfg)
        model = GPT(saved_cfg)
        return model, {**ckpt, "path": str(path)}, ckpt["origin"]
    if checkpoint.is_file_source(mode):
        return from_file(cfg, model_cfg, mode)
    if importers.is_pretrained_source(mode):
        try:
            return importers.from_pretrained(mode, probe), None, mode
        except ValueError as e:
            raise ConfigError(str(e)) from None
    raise ConfigError(
        f"init_from={mode!r} is invalid: use scratch, resume, auto, a checkpoint file (.pt), a GPT-2 name (gpt2, "
        "gpt2-medium, gpt2-large, gpt2-xl), a Pythia name (EleutherAI/pythia-160m) or a local HF directory"
    )


def from_file(cfg, model_cfg: GPTConfig, path: str):
    """A run that starts from a checkpoint file, this project's or the official code's (nlq/paper/official.py): the
    model as the file describes it, with the config's probe fields where they are set. init_continue also
    continues the file's AdamW state and step (the Trainer restores them); otherwise the step is 0 and the
    optimizer fresh. origin is the file: the shape comes from its weights on every later resume."""
    ckpt = checkpoint.load(path)
    defaults = GPTConfig()
    added = {k: getattr(model_cfg, k) for k in PROBE_FIELDS if getattr(model_cfg, k) != getattr(defaults, k)}
    if cfg.init_continue:
        if set(added) - {"dropout"}:
            raise ConfigError(f"init_continue=True continues {path} as it was: unset {', '.join(sorted(added))}")
        checkpoint.optimizer_state(ckpt, path)  # refused here, before the model is built, if it has none
    config = checkpoint.model_config(ckpt, path, **added)
    check_memory(cfg, config)
    model = GPT(config)
    if cfg.init_continue:
        return model, {**ckpt, "path": str(path)}, str(path)
    try:
        result = model.load_state_dict(clean_state_dict(ckpt["model"]), strict=False)
    except RuntimeError as e:  # a weight of another shape than model_args describe
        raise ConfigError(
            f"{path}'s weights do not fit its own model_args ({checkpoint.first_cause(e)}): the file is damaged or "
            "was written for another model; start from another checkpoint"
        ) from None
    missing = [k for k in result.missing_keys if not GPT.is_added(k)]
    if missing or result.unexpected_keys:
        raise ConfigError(f"{path} does not fit its own model_args: {(missing + result.unexpected_keys)[:3]}")
    return model, None, str(path)


def check_memory(cfg, model_cfg: GPTConfig) -> None:
    """Before the model is built: its float32 weights fit the host (they are made there), and its weights,
    gradients and AdamW state fit the training device (a GPU holds its FSDP shard only)."""
    n = parameter_count(model_cfg)
    check_fits(n + buffer_count(model_cfg), 4, "cpu", "float32 weights")
    device = resolve_device(cfg.device)
    shards = int(os.environ.get("WORLD_SIZE", 1)) if cfg.parallelism == "fsdp" and device != "cpu" else 1
    check_fits(n, 4 * getattr(torch, cfg.param_dtype).itemsize / shards, device, "weights, gradients and AdamW state")


def check_model(model: GPT, cfg, model_cfg: GPTConfig, data, origin: str) -> None:
    """The model fits the data; a frozen probe has something to train."""
    meta = data.meta
    if meta["vocab_size"] > model.config.vocab_size:
        raise ConfigError(
            f"the dataset's meta.json has vocab_size={meta['vocab_size']} but the model has "
            f"vocab_size={model.config.vocab_size}: set vocab_size >= {meta['vocab_size']}"
        )
    if model_cfg.block_size > model.config.block_size:
        raise ConfigError(f"block_size={model_cfg.block_size} exceeds the model's context of {model.config.block_size}")
    if cfg.freeze_pretrained:
        if origin == "scratch":
            raise ConfigError(
                "freeze_pretrained=True needs pretrained weights: set init_from to a GPT-2 or Pythia "
                "name or a local HF directory"
            )
        freeze_pretrained(model)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError("freeze_pretrained=True leaves nothing to train: set preproj, content_skip or lora_rank")


def freeze_pretrained(model: GPT) -> None:
    """The frozen probe: only the parameters added to a pretrained model train."""
    for name, p in model.named_parameters():
        p.requires_grad = GPT.is_added(name)
