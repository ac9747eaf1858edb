"""One optimizer step as training takes it (train.py's loop, and bench.py's timing of it): AdamW, gradient
accumulation with the batches staged on the device, clipping, and the guard that skips a non-finite update
without a host sync."""

import torch
import torch.distributed as dist

from model import GPT
from nlq.run import parallel
from nlq.run.config import TrainConfig, lr_at
from nlq.run.hardware import autocast
from nlq.run.parallel import Dist


def make_optimizer(model: GPT, cfg: TrainConfig, device_type: str):
    return model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), device_type)


class DivergenceGuard:
    """Finds a non-finite loss or gradient norm on the device, without a host sync: the optimizer skips
    that update (fused AdamW's found_inf, as a gradient scaler does) and the first bad step is kept on the
    device, read back only where the loop syncs anyway (log, evaluation, save)."""

    def __init__(self, optimizer, scaler, device):
        self.optimizer, self.scaler = optimizer, scaler
        self.on_device = bool(optimizer.defaults.get("fused"))
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)

    def step(self, it: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
        bad = ~torch.isfinite(loss)
        if not self.scaler.is_enabled():  # fp16's scaler skips inf gradients by design: not a divergence
            bad |= ~torch.isfinite(norm)
        self.first_bad = torch.where((self.first_bad < 0) & bad, it, self.first_bad)
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif self.on_device:
            self.optimizer.found_inf = bad.float()
            self.optimizer.step()
            del self.optimizer.found_inf
        elif not bad.item():  # an optimizer without found_inf: decide on the host
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def bad_step(self) -> int | None:
        bad = int(self.first_bad)
        return bad if bad >= 0 else None


class DeviceBatches:
    """One step's micro-batches on the device: batches(micro) -> (x, y). On a GPU a host batch is staged in
    pinned memory and copied asynchronously (a copy from pageable memory may wait for the device), and
    prefetch(micro) reads and stages a micro-batch while the device still computes the one before it."""

    def __init__(self, read, device):
        self.read, self.device, self.staged = read, device, {}  # read(micro) -> (x, y) anywhere
        self.pin = torch.device(device).type == "cuda"

    def prefetch(self, micro: int) -> None:
        if micro not in self.staged:
            self.staged[micro] = self.stage(micro)

    def __call__(self, micro: int):
        return self.staged.pop(micro) if micro in self.staged else self.stage(micro)

    def stage(self, micro: int):
        x, y = self.read(micro)
        if self.pin and x.device.type == "cpu":
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


class OptimizerStep:
    """One optimizer step as training takes it (train.py's loop, and bench.py's timing of it): the step's
    learning rate and dropout seed, gradient accumulation over the micro-batches with the gradients crossing
    processes on the last, fp16 loss scaling, clipping, the divergence guard's update. Returns [mean loss,
    gradient norm, the last micro-batch's loss] as a device tensor: no host sync. The last micro-batch is the
    global one (the last rank's last); its loss is what arXiv 2603.13381's official code logs as the step's."""

    def __init__(self, cfg, d: Dist, model, raw_model: GPT, dtype: torch.dtype):
        self.cfg, self.d, self.model, self.raw_model = cfg, d, model, raw_model
        self.ctx = autocast(d.device, dtype)
        self.scaler = torch.amp.GradScaler(d.device_type, enabled=dtype == torch.float16)
        self.optimizer = make_optimizer(raw_model, cfg, d.device_type)
        self.guard = DivergenceGuard(self.optimizer, self.scaler, d.device)
        self.accum = cfg.gradient_accumulation_steps // d.world_size

    def __call__(self, it: int, batch) -> torch.Tensor:
        """batch: the step's DeviceBatches; micro-batch m + 1 is staged while m computes."""
        lr = lr_at(it, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # Dropout's random stream is a function of (seed, rank, step): resume needs no saved RNG state.
        torch.manual_seed(hash((self.cfg.seed, self.d.rank, it)) % 2**63)
        loss_sum = torch.zeros((), device=self.d.device)
        for micro in range(self.accum):
            x, y = batch(micro)
            last = micro == self.accum - 1  # gradients cross processes once, on the last micro-step
            with self.ctx, parallel.micro_step(self.model, self.cfg, self.d.enabled, last):
                _, loss = self.model(x, y)
                if not last:  # queued on a GPU: the host reads the next micro-batch meanwhile
                    batch.prefetch(micro + 1)
                self.scaler.scale(loss / self.accum).backward()
            loss_sum += loss.detach().float()
        self.scaler.unscale_(self.optimizer)
        norm = parallel.clip_grad_norm(self.raw_model.parameters(), self.cfg.grad_clip)
        last_rank = self.d.rank == self.d.world_size - 1
        last = loss.detach().float() * (self.d.world_size if last_rank else 0)  # the mean below keeps it whole
        stats = torch.stack([loss_sum / self.accum, norm.float(), last])
        if self.d.enabled:  # asynchronous on GPUs; a NaN on any rank reaches every rank
            dist.all_reduce(stats)
            stats /= self.d.world_size
        self.guard.step(it, stats[0], stats[1])
        return stats
