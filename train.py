"""Train a GPT with a chosen query function, on one process or many (DDP).

    python train.py config/shakespeare_char.py                            # CPU quick start
    python train.py config/owt_nlq.py                                     # one GPU
    torchrun --standalone --nproc_per_node=8 train.py config/owt_nlq.py   # one node

Settings are the fields of TrainConfig below and of model.GPTConfig, set by config files and
--key=value overrides (configurator.py). The batches of step s are a pure function of (data_seed, s)
(loader.py), so every arm of a comparison, every world size and every resumed run sees the same data;
each logged step records a fingerprint of its global batch to prove it.
"""

import json
import math
import os
import sys
import time
import uuid
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpoint
from configurator import ConfigError, parse
from dataset import DataError, load_meta, open_split
from hardware import peak_flops, resolve_device, resolve_dtype
from loader import SAMPLINGS, TRAIN_EVAL_KEY, VAL_KEY, TrainBatches, fixed_offsets, windows
from model import GPT, PROBE_FIELDS, GPTConfig

# What fixes the tokens of each step and the validation windows: a resume must not change it. The
# split of a step into micro-batches may change (e.g. a smaller batch_size after running out of memory).
DATA_ORDER = {
    "dataset": lambda c: c["dataset"],
    "data_seed": lambda c: c["data_seed"],
    "sampling": lambda c: c["sampling"],
    "batch_size x gradient_accumulation_steps": lambda c: c["batch_size"] * c["gradient_accumulation_steps"],
    "eval_iters x batch_size": lambda c: c["eval_iters"] * c["batch_size"],
}


@dataclass
class TrainConfig:
    # I/O
    out_dir: str = "out"
    init_from: str = "scratch"  # 'scratch', 'resume' (from out_dir/ckpt.pt), or GPT-2 weights: 'gpt2'.. or a HF dir
    eval_interval: int = 2000  # evaluate and write out_dir/ckpt.pt every eval_interval steps
    eval_iters: int = 200  # the fixed validation set holds eval_iters * batch_size windows
    eval_only: bool = False
    log_interval: int = 1
    keep_checkpoints: tuple[int, ...] = ()  # steps whose checkpoint is also kept as ckpt_<step>.pt
    freeze_pretrained: bool = False  # frozen probe: train only preproj / content_skip / LoRA parameters
    # wandb
    wandb_log: bool = False
    wandb_project: str = "nonlinear-queries"
    wandb_group: str | None = None  # the arms of one sweep share a group
    wandb_run_name: str | None = None
    # data
    dataset: str = "openwebtext"  # data/<dataset>, or a directory holding train.bin/val.bin/meta.json
    data_seed: int = 1337  # batch order and evaluation windows; keep it fixed across arms
    sampling: str = "random"  # 'random' windows (the paper) or 'permutation' (without replacement)
    batch_size: int = 12  # rows per micro-step per process
    gradient_accumulation_steps: int = 40  # micro-steps per optimizer step, summed over all processes
    seed: int = 1337  # model init and dropout; vary it for multi-seed error bars
    # AdamW and schedule
    learning_rate: float = 6e-4
    max_iters: int = 60000
    weight_decay: float = 0.1  # on parameters with >= 2 dims only
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping
    decay_lr: bool = True
    warmup_iters: int = 2000
    lr_decay_iters: int | None = None  # None: max_iters
    min_lr: float | None = None  # None: learning_rate / 10
    # system
    device: str = "auto"  # 'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1', 'mps'
    dtype: str = "auto"  # 'auto', 'float32', 'bfloat16', 'float16'
    compile: bool = True
    cpu_peak_flops: float | None = None  # for MFU on CPU; None: measured at start


class Diverged(Exception):
    """A non-finite loss or gradient norm."""


def lr_at(it: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    min_lr = cfg.min_lr if cfg.min_lr is not None else cfg.learning_rate / 10
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - cfg.warmup_iters) / max(1, decay_iters - cfg.warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - min_lr)


def make_optimizer(model: GPT, cfg: TrainConfig, device_type: str):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel exists for CUDA and CPU and is the fastest on both.
    fused = device_type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), fused=fused)


@torch.no_grad()
def evaluate(model, tokens, offsets, cfg, block_size, device, ctx, rank, world_size):
    """Mean loss over the fixed windows; ranks split the windows and sum."""
    model.eval()
    mine = offsets[rank::world_size]
    total = torch.zeros(2, device=device, dtype=torch.float64)
    for i in range(0, len(mine), cfg.batch_size):
        x, y = windows(tokens, mine[i : i + cfg.batch_size], block_size)
        with ctx:
            _, loss = model(x.to(device), y.to(device))
        total += torch.stack([loss.double() * len(x), torch.tensor(len(x), device=device, dtype=torch.float64)])
    if world_size > 1:
        dist.all_reduce(total)
    model.train()
    return (total[0] / total[1]).item()


def build_model(cfg: TrainConfig, model_cfg: GPTConfig, meta: dict):
    """(model, checkpoint or None, origin): a new model, pretrained weights, or the out_dir checkpoint.
    origin is the init_from that made the weights ('scratch' or a pretrained name), kept across resumes."""
    ckpt_path = Path(cfg.out_dir) / "ckpt.pt"
    probe = {k: getattr(model_cfg, k) for k in PROBE_FIELDS}
    if cfg.init_from == "scratch":
        if ckpt_path.exists() and not cfg.eval_only:
            raise ConfigError(f"{ckpt_path} exists: continue it with --init_from=resume, or choose another out_dir")
        model, ckpt, origin = GPT(model_cfg), None, "scratch"
    elif cfg.init_from == "resume":
        ckpt = checkpoint.load(ckpt_path, required=("model", "model_args", "config", "optimizer", "iter_num", "origin"))
        origin = ckpt["origin"]
        # A pretrained model's shape comes from its weights, so only the probe fields are the config's to set.
        fields = ckpt["model_args"] if origin == "scratch" else probe
        mismatched = [
            f"{k} (checkpoint {ckpt['model_args'][k]!r}, config {getattr(model_cfg, k)!r})"
            for k in fields
            if k != "dropout" and getattr(model_cfg, k) != ckpt["model_args"][k]
        ]
        mismatched += [
            f"{name} (checkpoint {rule(ckpt['config'])!r}, config {rule(asdict(cfg))!r})"
            for name, rule in DATA_ORDER.items()
            if rule(ckpt["config"]) != rule(asdict(cfg))
        ]
        if mismatched:
            raise ConfigError(f"cannot resume {ckpt_path} with a different setup: {'; '.join(mismatched)}")
        model = GPT(GPTConfig(**{**ckpt["model_args"], "dropout": model_cfg.dropout}))
        model.load_state_dict(checkpoint.clean_state_dict(ckpt["model"]))
    elif GPT.is_pretrained_source(cfg.init_from):
        try:
            model, ckpt, origin = GPT.from_pretrained(cfg.init_from, **probe), None, cfg.init_from
        except ValueError as e:
            raise ConfigError(str(e)) from None
    else:
        raise ConfigError(
            f"init_from={cfg.init_from!r} is invalid: use scratch, resume, a GPT-2 name (gpt2, "
            "gpt2-medium, gpt2-large, gpt2-xl), a Pythia name (EleutherAI/pythia-160m) or a local HF directory"
        )
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
        for name, p in model.named_parameters():
            p.requires_grad = GPT.is_added(name)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError("freeze_pretrained=True leaves nothing to train: set preproj, content_skip or lora_rank")
    return model, ckpt, origin


def main(argv=None):
    try:
        run(sys.argv[1:] if argv is None else argv)
    except (ConfigError, DataError, checkpoint.CheckpointError, Diverged) as e:
        sys.exit(f"error: {e}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(argv):
    cfg, model_cfg = parse(argv, TrainConfig, GPTConfig)
    if cfg.sampling not in SAMPLINGS:
        raise ConfigError(f"sampling={cfg.sampling!r} is invalid: use one of {', '.join(SAMPLINGS)}")

    ddp = "RANK" in os.environ
    rank, world_size = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if ddp else (0, 1)
    device = resolve_device(cfg.device)
    if ddp and device.startswith("cuda"):
        device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(device)
    device_type = device.split(":")[0]
    try:
        ptdtype = resolve_dtype(cfg.dtype, device_type)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.gradient_accumulation_steps % world_size:
        raise ConfigError(
            f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not divisible by "
            f"the {world_size} processes: make it a multiple of the world size"
        )
    accum = cfg.gradient_accumulation_steps // world_size
    master = rank == 0
    out_dir = Path(cfg.out_dir)

    # Data: bins checked against meta before anything is built or written.
    data_dir = Path(cfg.dataset) if Path(cfg.dataset).is_dir() else Path("data") / cfg.dataset
    meta = load_meta(data_dir)
    block_size = model_cfg.block_size
    train_tokens = open_split(data_dir, "train", min_tokens=block_size + 1)
    val_tokens = open_split(data_dir, "val", min_tokens=block_size + 1)
    batches = TrainBatches(
        train_tokens, block_size, cfg.batch_size, cfg.gradient_accumulation_steps, cfg.data_seed, cfg.sampling
    )
    n_eval = cfg.eval_iters * cfg.batch_size
    val_offsets = fixed_offsets(len(val_tokens), block_size, n_eval, cfg.data_seed, VAL_KEY)
    train_eval_offsets = fixed_offsets(len(train_tokens), block_size, n_eval, cfg.data_seed, TRAIN_EVAL_KEY)

    torch.manual_seed(cfg.seed)  # model init only; the data never reads this generator
    model, ckpt, origin = build_model(cfg, model_cfg, meta)
    model_cfg = model.config
    model.to(device)
    ctx = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)
    scaler = torch.amp.GradScaler(device_type, enabled=ptdtype == torch.float16)
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    optimizer = make_optimizer(model, cfg, device_type)
    start = 0
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        start = ckpt["iter_num"]
    raw_model = model
    if ddp:
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    if cfg.compile:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])] if device_type == "cuda" else None)

    tokens_per_step = block_size * cfg.batch_size * cfg.gradient_accumulation_steps
    flops_per_step = raw_model.flops_per_token(block_size) * tokens_per_step
    peak, peak_source = peak_flops(device, ptdtype, cfg.cpu_peak_flops)
    resolved = {**asdict(cfg), **model_cfg.to_dict()}
    metrics_path = out_dir / "metrics.jsonl"
    wandb_id = ckpt.get("wandb_id") if ckpt else None
    tokenizer_meta = {k: meta[k] for k in ("tokenizer", "chars", "name") if k in meta}  # for sample.py, eval.py
    if master:
        print(json.dumps(resolved, indent=1))
        trainable = sum(p.numel() for p in raw_model.parameters() if p.requires_grad)
        print(
            f"{raw_model.num_params():,} non-embedding parameters, {trainable:,} trainable; {world_size} process(es) "
            f"x {accum} micro-steps x {cfg.batch_size} x {block_size} = {tokens_per_step:,} tokens/step; "
            f"peak {peak and f'{peak:.3g}'} FLOP/s ({peak_source})"
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(resolved, indent=1) + "\n")
        keep_metrics(metrics_path, start)
        if cfg.wandb_log:
            import wandb

            wandb_id = wandb_id or uuid.uuid4().hex[:12]  # kept in the checkpoint, so a resume continues the run
            wandb.init(
                project=cfg.wandb_project,
                group=cfg.wandb_group,
                name=cfg.wandb_run_name,
                id=wandb_id,
                resume="allow",
                config=resolved,
            )

    def log(record):
        if not master:
            return
        with open(metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if cfg.wandb_log:
            import wandb

            wandb.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def save(it):
        state = {
            "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "model_args": model_cfg.to_dict(),
            "config": asdict(cfg),
            "iter_num": it,
            "wandb_id": wandb_id,
            "tokenizer": tokenizer_meta,
            "origin": origin,
        }
        checkpoint.save(state, out_dir / "ckpt.pt")
        if it in cfg.keep_checkpoints:
            checkpoint.save(state, out_dir / f"ckpt_{it:06d}.pt")

    it, step_time = start, None
    while True:
        if it % cfg.eval_interval == 0 or it == cfg.max_iters or cfg.eval_only:
            if it != start or ckpt is None or cfg.eval_only:  # a resumed step was evaluated before its save
                args = (cfg, block_size, device, ctx, rank, world_size)
                val = evaluate(model, val_tokens, val_offsets, *args)
                train_eval = evaluate(model, train_tokens, train_eval_offsets, *args)
                log({"step": it, "val_loss": val, "train_eval_loss": train_eval, "tokens": it * tokens_per_step})
                if master:
                    print(f"step {it}: val loss {val:.4f}, train loss {train_eval:.4f}")
            if cfg.eval_only:
                break
            if master and it > start:
                save(it)
        elif master and it in cfg.keep_checkpoints:
            save(it)
        if it >= cfg.max_iters:
            break

        t0 = time.perf_counter()
        lr = lr_at(it, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # Dropout's random stream is a function of (seed, rank, step): resume needs no saved RNG state.
        torch.manual_seed(hash((cfg.seed, rank, it)) % 2**63)
        loss_sum = torch.zeros((), device=device)
        for micro in range(accum):
            x, y = batches.get(it, micro, rank, world_size)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            sync = not ddp or micro == accum - 1  # all-reduce gradients once, on the last micro-step
            with ctx, nullcontext() if sync else model.no_sync():
                _, loss = model(x, y)
                scaler.scale(loss / accum).backward()
            loss_sum += loss.detach().float()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
        stats = torch.stack([loss_sum / accum, norm.float()])
        if ddp:
            dist.all_reduce(stats)
            stats /= world_size
        loss_value, norm_value = stats.tolist()
        # fp16's scaler skips steps with inf gradients by design; otherwise any non-finite value stops the run.
        if not math.isfinite(loss_value) or not (math.isfinite(norm_value) or scaler.is_enabled()):
            raise Diverged(
                f"non-finite loss {loss_value} / grad norm {norm_value} at step {it}: stopped before the "
                f"optimizer step; {out_dir / 'ckpt.pt'} is the last good checkpoint. Lower learning_rate "
                "or raise weight_decay / grad clipping, then --init_from=resume"
            )
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

        dt = time.perf_counter() - t0
        step_time = dt if step_time is None else 0.9 * step_time + 0.1 * dt
        if it % cfg.log_interval == 0:
            mfu = flops_per_step / dt / (peak * world_size) if peak else None
            log(
                {
                    "step": it,
                    "loss": loss_value,
                    "lr": lr,
                    "grad_norm": norm_value,
                    "tokens": (it + 1) * tokens_per_step,
                    "ms": dt * 1000,
                    "mfu": mfu,
                    "fingerprint": batches.fingerprint(it),
                }
            )
            if master:
                eta = time.strftime("%H:%M:%S", time.gmtime(step_time * (cfg.max_iters - it - 1)))
                mfu_text = f"{mfu:.1%}" if mfu is not None else "n/a"
                print(f"step {it}: loss {loss_value:.4f}, lr {lr:.2e}, {dt * 1000:.1f} ms, mfu {mfu_text}, eta {eta}")
        it += 1

    if master and cfg.wandb_log:
        import wandb

        wandb.finish()
    if ddp:  # leave together: a rank that tears down while its peer is still saving can hang in gloo
        dist.barrier()


def keep_metrics(path: Path, start: int):
    """A resumed run replays the steps after its checkpoint: drop their old records first (a new run,
    start 0, drops all). The evaluation at the checkpoint's own step stays: it is not repeated."""
    if not path.exists():
        return
    records = [json.loads(line) for line in path.read_text().splitlines() if line] if start else []
    kept = [r for r in records if r["step"] < start or (r["step"] == start and "val_loss" in r)]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
