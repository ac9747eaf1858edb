"""A training run's settings (TrainConfig: every key train.py takes besides the model's, model.GPTConfig)
and the learning-rate schedule they describe."""

import math
from dataclasses import dataclass
from typing import Annotated

from nlq.common.domains import DEVICE, DTYPE, At, Each, OneOf, Text, check
from nlq.data.loader import EVAL_PARTS, SAMPLINGS
from nlq.run.parallel import PARALLELISMS


@dataclass
class TrainConfig:
    # I/O
    out_dir: Annotated[str, Text()] = "out"  # one run per out_dir: checkpoints, metrics.jsonl, config.json
    init_from: Annotated[str, Text()] = "scratch"  # scratch, resume, auto (resume if any), FILE.pt, gpt2.., HF dir
    init_continue: bool = False  # init_from=FILE.pt: also continue its AdamW state and step (else step 0, fresh AdamW)
    init_order: Annotated[str, OneOf("project", "official")] = "project"  # official: as the paper's model.py draws
    eval_interval: Annotated[int, At(1)] = 2000  # evaluate and write out_dir/ckpt.pt every eval_interval steps
    eval_iters: Annotated[int, At(1)] = 200  # the fixed validation set holds eval_iters * batch_size windows
    eval_only: bool = False  # evaluate the checkpoint (or pretrained weights), print, write nothing
    log_interval: Annotated[int, At(1)] = 1  # steps between console lines / metrics records (the only host syncs)
    keep_checkpoints: Annotated[tuple[int, ...], Each(At(0))] = ()  # steps also kept as ckpt_<step>.pt
    always_save_checkpoint: bool = True  # nanoGPT's key: False saves ckpt.pt only when the val loss improves
    freeze_pretrained: bool = False  # frozen probe: train only preproj / content_skip / LoRA parameters
    allow_schedule_change: bool = False  # let a resume change the lr schedule (max_iters, lr_decay_iters, ...)
    # wandb
    wandb_log: bool = False  # log to wandb too (needs `wandb login`, or WANDB_MODE=offline)
    wandb_project: Annotated[str, Text()] = "nonlinear-queries"  # wandb project
    wandb_group: Annotated[str | None, Text()] = None  # the arms of one sweep share a group
    wandb_run_name: Annotated[str | None, Text()] = None  # the arm's name; compare.py pools runs of one name as seeds
    # data
    dataset: Annotated[str, Text()] = "openwebtext"  # data/<dataset>, or a directory: train.bin/val.bin, or examples
    data_seed: Annotated[int, At(0, 2**63 - 1)] = 1337  # batch order and evaluation windows; keep it fixed across arms
    sampling: Annotated[str, OneOf(*SAMPLINGS)] = "random"  # random windows, permutation, lines, official (its stream)
    eval_order: Annotated[str, OneOf("fixed", "official")] = "fixed"  # fixed windows, or official: its k-th at eval k
    eval_part: Annotated[str, OneOf(*EVAL_PARTS)] = "all"  # the validation half evaluated: tuning chooses on another
    batch_size: Annotated[int, At(1)] = 12  # rows per micro-step per process
    gradient_accumulation_steps: Annotated[int, At(1)] = 40  # micro-steps per optimizer step, summed over all processes
    seed: Annotated[int, At(0, 2**63 - 1)] = 1337  # model init and dropout; vary it for multi-seed error bars
    # AdamW and schedule
    learning_rate: Annotated[float, At(above=0)] = 6e-4  # peak learning rate, after warmup
    max_iters: Annotated[int, At(0)] = 60000  # optimizer steps of the whole run
    weight_decay: Annotated[float, At(0)] = 0.1  # on parameters with >= 2 dims only
    beta1: Annotated[float, At(0, below=1)] = 0.9  # AdamW beta1
    beta2: Annotated[float, At(0, below=1)] = 0.95  # AdamW beta2
    grad_clip: Annotated[float, At(0)] = 1.0  # 0 disables clipping
    decay_lr: bool = True  # warmup + cosine decay; False: constant learning_rate
    warmup_iters: Annotated[int, At(0)] = 2000  # linear warmup steps
    lr_decay_iters: Annotated[int | None, At(1)] = None  # None: max_iters
    min_lr: Annotated[float | None, At(0)] = None  # None: learning_rate / 10
    # system
    device: Annotated[str, DEVICE] = "auto"  # auto: cuda if available, else cpu
    dtype: Annotated[str, DTYPE] = "auto"  # auto: bf16 (or fp16) on a GPU; on a CPU, measured
    compile: bool = True  # torch.compile the model
    param_dtype: Annotated[str, OneOf("float32", "bfloat16")] = "float32"  # bfloat16: weights, AdamW state in bf16
    backend: Annotated[str | None, OneOf("nccl", "gloo")] = None  # None: nccl on GPUs, gloo on CPUs
    parallelism: Annotated[str, OneOf(*PARALLELISMS)] = "ddp"  # ddp: whole models; fsdp: sharded
    activation_checkpointing: bool = False  # recompute blocks' activations in backward: less memory
    checkpoint_every: Annotated[int, At(1)] = 1  # with activation_checkpointing: every k-th block (1: all)
    reshard_micro_steps: bool = False  # fsdp: gather parameters anew every micro-step (less memory, more traffic)
    async_save: bool = True  # fsdp: sharded checkpoints written by a thread while training goes on
    dry_run: Annotated[int, At(0)] = 0  # N > 0: print memory per GPU on N GPUs under DDP and FSDP, then exit
    cpu_peak_flops: Annotated[float | None, At(above=0)] = None  # for MFU on CPU; None: measured at start

    def __post_init__(self):
        check(self)
        if self.min_lr is not None and self.min_lr > self.learning_rate:
            raise ValueError(f"min_lr={self.min_lr} is invalid: it must be <= learning_rate={self.learning_rate}")


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
