"""A training run, start to end: distributed setup, the data, how the run starts (new, resume, restart;
nlq/run/start.py), the model, the optimizer step (nlq/run/step.py), then the Trainer's loop of steps,
evaluations and saves. train.py parses the settings and calls train(); how the model is spread over
processes (DDP, FSDP, activation checkpointing) is nlq/run/parallel.py's.

The batches of step s are a pure function of (data_seed, s) (nlq/data/loader.py), so every arm of a
comparison, every world size and every resumed run sees the same data; each logged step records a
fingerprint of its global batch to prove it.
"""

import math
import time
import uuid
from dataclasses import asdict

import torch
import torch.distributed as dist

from model import GPT, GPTConfig
from nlq.common.errors import ConfigError, UserError
from nlq.common.eta import format_eta
from nlq.data.loader import example_rows, windows
from nlq.eval.accuracy import accuracy, class_counts, macro_accuracy
from nlq.interop import importers
from nlq.run import checkpoint, parallel, start
from nlq.run.config import TrainConfig, lr_at
from nlq.run.hardware import (
    autocast,
    cached_cpu_flops,
    choose_cpu_dtype,
    dtype_name,
    machine_cached,
    peak_flops,
    resolve_device,
    resolve_dtype,
    set_tf32,
)
from nlq.run.inputs import Data, open_data, sized_to_data
from nlq.run.memory import print_estimate
from nlq.run.parallel import Dist
from nlq.run.rundir import RunDir, Wandb
from nlq.run.step import DeviceBatches, OptimizerStep


class Diverged(UserError):
    """A non-finite loss, gradient norm, validation loss or weight. Its exit status is its own (3), so that
    a sweep tells a run that diverged from one that failed."""

    exit_code = 3


class Interrupted(UserError):
    """Ctrl-C during training: the shell's status for SIGINT."""

    exit_code = 130


def is_dtype_choice(value) -> bool:
    """A cached dtype=auto decision: [dtype name, why]."""
    return isinstance(value, list) and len(value) == 2 and value[0] in ("float32", "bfloat16")


def evaluation_line(rec: dict) -> str:
    """An evaluation's console words: the losses, and on a dataset of examples the test split's accuracy."""
    if "val_acc" in rec:
        return (
            f"test loss {rec['val_loss']:.4f}, accuracy {rec['val_acc']:.4f} "
            f"(per example {rec['val_example_acc']:.4f}), train loss {rec['train_eval_loss']:.4f}"
        )
    return f"val loss {rec['val_loss']:.4f}, train loss {rec['train_eval_loss']:.4f}"


def setup_distributed(cfg: TrainConfig) -> Dist:
    d = parallel.init(resolve_device(cfg.device), cfg.backend)
    if cfg.gradient_accumulation_steps % d.world_size:
        raise ConfigError(
            f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not divisible by "
            f"the {d.world_size} processes: make it a multiple of the world size"
        )
    return d


class Trainer:
    """The loop's state and its three actions: an optimizer step, an evaluation with its save, a record."""

    def __init__(self, cfg, model_cfg, d: Dist, data: Data, model: GPT, ckpt, origin, run: RunDir, wandb):
        self.cfg, self.d, self.data, self.run, self.wandb = cfg, d, data, run, wandb
        self.raw_model = model.to(d.device, getattr(torch, cfg.param_dtype)).keep_adapters_float32()
        self.origin = origin
        self.model_cfg = model.config
        self.block_size = model_cfg.block_size
        self.dtype = self.choose_dtype(model, ckpt)
        if cfg.parallelism == "fsdp" and self.dtype == torch.float16:
            raise ConfigError("parallelism='fsdp' runs bfloat16 or float32, not float16: use --dtype=bfloat16")
        if d.device_type == "cuda":
            set_tf32(True)
        self.sharded = cfg.parallelism == "fsdp"  # the checkpoint format: sharded even on one process
        self.model = parallel.wrap(model, cfg, d.enabled, self.dtype, d.device_ids)
        self.optimizer_step = step = OptimizerStep(cfg, d, self.model, model, self.dtype)
        self.optimizer, self.scaler, self.guard, self.ctx = step.optimizer, step.scaler, step.guard, step.ctx
        self.start, self.last_saved, self.best_val = 0, None, math.inf
        if ckpt is not None:
            checkpoint.restore_weights(model, ckpt, ckpt["path"])
            checkpoint.restore_optimizer(model, self.optimizer, ckpt)
            if ckpt.get("scaler"):  # an official checkpoint has none
                self.scaler.load_state_dict(ckpt["scaler"])
            self.start = self.last_saved = ckpt["iter_num"]
            self.best_val = ckpt.get("best_val_loss", math.inf)
        self.wandb_id = (ckpt or {}).get("wandb_id") or uuid.uuid4().hex[:12]  # a resume continues the wandb run
        self.accum = step.accum
        self.tokens_per_step = data.row_tokens * cfg.batch_size * cfg.gradient_accumulation_steps
        self.flops_per_step = self.raw_model.flops_per_token(data.row_tokens) * self.tokens_per_step
        self.peak, self.peak_source = peak_flops(d.device, self.dtype, cfg.cpu_peak_flops, cached=True)
        self.remeasured = False  # a CPU's cached peak is measured again at most once per run (mfu)

    def choose_dtype(self, model: GPT, ckpt) -> torch.dtype:
        """cfg.dtype; 'auto' on a CPU is measured once per machine and micro-batch shape (by rank 0, for all
        ranks, on the first run's model; hardware.machine_cached), so every arm of a comparison on this
        machine computes in the same precision, and a resume keeps the run's choice."""
        cfg, d = self.cfg, self.d
        if cfg.dtype != "auto" or d.device_type != "cpu":
            return resolve_dtype(cfg.dtype, d.device_type)
        if ckpt is not None and "dtype" in ckpt:
            return getattr(torch, ckpt["dtype"])
        choice = torch.zeros((), dtype=torch.long)
        if d.master:
            rows = max(1, min(cfg.batch_size, 1024 // self.block_size))
            x = torch.zeros(rows, self.block_size, dtype=torch.long, device=d.device)

            def micro_step(dtype):
                with autocast(d.device, dtype):
                    _, loss = model(x, x)
                loss.backward()
                model.zero_grad(set_to_none=True)

            def measure():
                dtype, why = choose_cpu_dtype(micro_step)
                return [dtype_name(dtype), why]

            shape = f"training micro-step of {rows} x {self.block_size} tokens"
            name, why = machine_cached("cpu_dtype", shape, measure, valid=is_dtype_choice)
            print(f"dtype=auto: {why}, kept for every run of this shape on this machine (~/.cache/nonlinear-queries)")
            choice.fill_(name == "bfloat16")
        if d.enabled:
            dist.broadcast(choice, 0)
        return torch.bfloat16 if choice else torch.float32

    def record(self, rec: dict) -> None:
        if self.d.master:
            self.run.append(rec)
            self.wandb.log(rec)

    def say(self, line: str) -> None:
        if self.d.master:
            print(line)

    @torch.no_grad()
    def evaluate(self, tokens, offsets) -> float:
        """Mean loss over fixed windows; ranks split the windows and sum. Every rank runs the same number of
        forward passes (FSDP gathers parameters in each): one short of windows repeats one, weighted 0."""
        self.model.eval()
        mine = offsets[self.d.rank :: self.d.world_size]
        per_rank = math.ceil(len(offsets) / self.d.world_size)
        total = torch.zeros(2, device=self.d.device, dtype=torch.float64)
        for i in range(0, per_rank, self.cfg.batch_size):
            chunk = mine[i : i + self.cfg.batch_size]
            x, y = windows(tokens, chunk if len(chunk) else offsets[:1], self.block_size, self.data.meta["vocab_size"])
            with self.ctx:
                _, loss = self.model(x.to(self.d.device), y.to(self.d.device))
            total[0] += loss.double() * len(chunk)
            total[1] += len(chunk)
        if self.d.enabled:
            dist.all_reduce(total)
        self.model.train()
        return (total[0] / total[1]).item()

    @torch.no_grad()
    def evaluate_examples(self, split, chosen) -> dict:
        """Loss (mean over scored tokens) and accuracy (per scored token, per example) of the chosen
        examples; ranks split them and sum, each running the same number of forward passes (a rank short of
        examples repeats one, counted 0)."""
        self.model.eval()
        mine = chosen[self.d.rank :: self.d.world_size]
        per_rank = math.ceil(len(chosen) / self.d.world_size)
        total = torch.zeros(5, device=self.d.device, dtype=torch.float64)  # loss sum, right, scored, right ex, ex
        classes = torch.zeros(3, self.data.meta["vocab_size"], device=self.d.device, dtype=torch.float64)
        for i in range(0, per_rank, self.cfg.batch_size):
            rows = mine[i : i + self.cfg.batch_size]
            x, y = example_rows(split, rows if len(rows) else chosen[:1], self.data.meta["vocab_size"])
            x, y = x.to(self.d.device), y.to(self.d.device)
            with self.ctx:
                logits, loss = self.model(x, y, return_logits=True)
            counts = accuracy(logits, y) if len(rows) else (0, 0, 0, 0)
            if counts[1]:  # a batch of no scored token has no loss (0 / 0)
                total[0] += loss.double() * counts[1]
                classes += class_counts(logits, y, classes.shape[1])
            total[1:] += torch.tensor(counts, dtype=torch.float64, device=self.d.device)
        if self.d.enabled:
            dist.all_reduce(total)
            dist.all_reduce(classes)
        self.model.train()
        loss_sum, right, scored, right_ex, examples = total.tolist()
        macro = macro_accuracy(classes)
        return {
            "loss": loss_sum / scored,
            "acc": right / scored,
            "example_acc": right_ex / examples,
            "acc_macro": macro,
        }

    def stop_if_diverged(self, what: str | None = None) -> None:
        step = self.guard.bad_step()
        if step is None and what is None:
            return
        checkpoint.finish_pending()  # a save still being written is complete and named first
        if self.last_saved is not None:  # only rank 0 surveys out_dir (another rank's read could race its pruning)
            where = checkpoint.latest(self.run.path) if self.d.master else "the checkpoint"
            kept = f"{where} (step {self.last_saved}) is the last good checkpoint"
            again = "--init_from=resume"
        else:
            kept, again = "no checkpoint was saved yet", "--init_from=auto (it starts again, keeping the files aside)"
        cause = what or f"non-finite loss or gradient norm at step {step}: no update was applied from that step on"
        raise Diverged(f"{cause}; {kept}. Lower learning_rate or raise weight_decay / grad clipping, then {again}")

    def summary(self) -> str:
        """The closing lines: where the run ended, where its checkpoint is, what to run next."""
        path = checkpoint.latest(self.run.path) if self.last_saved is not None else None
        return (
            f"done: step {self.cfg.max_iters}, best val loss {self.best_val:.4f}; checkpoint {path}\n"
            f"  sample:  python sample.py --out_dir={self.run.path}\n"
            f"  compare: python compare.py {self.run.path} OTHER_OUT_DIR ...  (runs of other arms or seeds)"
        )

    def interrupted_line(self, where: str = "") -> str:
        """where: what the interrupt stopped, when it says (atomic.Interrupted: a checkpoint's write)."""
        checkpoint.finish_pending()
        kept = f"the last checkpoint is step {self.last_saved}" if self.last_saved is not None else "no checkpoint yet"
        return (
            f"interrupted during step {self.step} of {self.cfg.max_iters}{' ' + where if where else ''}; {kept} in "
            f"{self.run.path}, intact: continue with --init_from=auto"
        )

    def weights_finite(self) -> bool:
        """All weights finite, on every rank's shard: one answer for all ranks."""
        finite = all(bool(torch.isfinite(parallel.local(p)).all()) for p in self.raw_model.parameters())
        flag = torch.tensor(float(finite), device=self.d.device)
        if self.d.enabled:
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag)

    def save(self, it: int) -> None:
        if not self.weights_finite():
            self.stop_if_diverged(f"non-finite weights at step {it}: not saved")
        meta = {
            "scaler": self.scaler.state_dict(),
            "dtype": dtype_name(self.dtype),
            "model_args": self.model_cfg.to_dict(),
            "config": asdict(self.cfg),
            "iter_num": it,
            "best_val_loss": self.best_val,
            "wandb_id": self.wandb_id,
            "tokenizer": {k: self.data.meta[k] for k in ("tokenizer", "chars", "name") if k in self.data.meta},
            "origin": self.origin,
        }
        keep = it in self.cfg.keep_checkpoints
        if self.sharded:  # every rank writes its shards, in the background if async_save
            checkpoint.save_sharded(self.run.path, meta, self.raw_model, self.optimizer, keep, self.cfg.async_save)
        elif self.d.master:
            state = {**meta, "model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict()}
            checkpoint.save(state, self.run.checkpoint)
            if keep:
                checkpoint.save(state, self.run.path / f"ckpt_{it:06d}.pt")
        self.last_saved = it

    def evaluate_and_save(self, it: int) -> None:
        """Validation and train-eval losses at step it, then the checkpoint; nothing non-finite is saved."""
        self.stop_if_diverged()
        improved = False
        if it != self.start or self.last_saved is None:  # a resumed step was evaluated before its save
            rec = self.evaluation(it)
            val, train_eval = rec["val_loss"], rec["train_eval_loss"]
            if not (math.isfinite(val) and math.isfinite(train_eval)):
                self.stop_if_diverged(f"non-finite validation loss {val} at step {it}: not saved")
            self.record({"step": it, **rec, "tokens": it * self.tokens_per_step})
            self.say(f"step {it}: {evaluation_line(rec)}")
            improved, self.best_val = val < self.best_val, min(val, self.best_val)
        if it > self.start and (self.cfg.always_save_checkpoint or improved):
            self.save(it)

    def evaluation(self, it: int) -> dict:
        """The evaluation records of step it: val_loss and train_eval_loss on the step's windows; on a dataset of
        examples val_* is the test split's, with its accuracy per scored token and per example."""
        val_rows, train_rows = self.data.eval_windows(it)
        if self.data.examples is None:
            val = self.evaluate(self.data.val, val_rows)
            return {"val_loss": val, "train_eval_loss": self.evaluate(self.data.train, train_rows)}
        test = self.evaluate_examples(self.data.val, val_rows)
        rec = {"val_loss": test["loss"], "val_acc": test["acc"], "val_example_acc": test["example_acc"]}
        rec["val_acc_macro"] = test["acc_macro"]  # MAD's measure (nlq/eval/accuracy.py)
        return rec | {"train_eval_loss": self.evaluate_examples(self.data.train, train_rows)["loss"]}

    def train_step(self, it: int) -> torch.Tensor:
        """One optimizer step on step it's batch; returns the mean loss and gradient norm (no host sync)."""
        return self.optimizer_step(it, self.batch(it))

    def batch(self, it: int) -> DeviceBatches:
        """Step it's micro-batches of this rank, on the device."""
        return DeviceBatches(
            lambda micro: self.data.batches.get(it, micro, self.d.rank, self.d.world_size), self.d.device
        )

    def mfu(self, seconds_per_step: float | None) -> float | None:
        """Model FLOPs utilisation, never above 1: a higher reading means the peak is wrong. A CPU's cached
        peak (measured while the machine was busy) is measured again, once; otherwise no MFU is reported."""
        if not seconds_per_step or not self.peak:
            return None
        achieved = self.flops_per_step / seconds_per_step / self.d.world_size
        if achieved > self.peak and self.d.device_type == "cpu" and not self.cfg.cpu_peak_flops and not self.remeasured:
            self.remeasured = True
            self.peak = cached_cpu_flops(self.dtype, at_least=achieved)
        return achieved / self.peak if achieved <= self.peak else None

    def log_step(self, it: int, stats: torch.Tensor, seconds_per_step: float | None, fingerprint: str | None):
        """The step's record and console line: the one place the loop reads numbers back from the device."""
        loss, norm, last = stats.tolist()
        self.stop_if_diverged()
        rec = {"step": it, "loss": loss, "last_micro_loss": last, "lr": lr_at(it, self.cfg), "grad_norm": norm}
        rec["tokens"] = (it + 1) * self.tokens_per_step
        rec["ms"] = seconds_per_step * 1000 if seconds_per_step else None
        rec["mfu"] = self.mfu(seconds_per_step)
        rec["time"] = round(time.time(), 3)  # the wall clock: whether two runs' step times were taken side by side
        if fingerprint is not None:
            rec["fingerprint"] = fingerprint
        self.record(rec)
        if seconds_per_step:
            eta = format_eta(seconds_per_step * (self.cfg.max_iters - it - 1))
            mfu = f"{rec['mfu']:.1%}" if rec["mfu"] is not None else "n/a"
            tok_s = self.tokens_per_step / seconds_per_step
            self.say(
                f"step {it}: loss {loss:.4f}, lr {rec['lr']:.2e}, {rec['ms']:.1f} ms, {tok_s:,.0f} tok/s, "
                f"mfu {mfu}, eta {eta}"
            )
        else:
            self.say(f"step {it}: loss {loss:.4f}, lr {rec['lr']:.2e}")

    def fit(self) -> None:
        """Steps from start to max_iters. Time per step is measured between logged steps (where the host
        syncs), after two warm-up steps (compilation), smoothed, and excludes evaluations."""
        cfg, it = self.cfg, self.start
        self.step = it
        clock, smoothed = None, None  # (time, step) of the last sync point; smoothed seconds per step
        while True:
            if it % cfg.eval_interval == 0 or it == cfg.max_iters:
                self.evaluate_and_save(it)
                clock = None
            elif it in cfg.keep_checkpoints:
                self.stop_if_diverged()
                self.save(it)
                clock = None
            if it >= cfg.max_iters:
                checkpoint.finish_pending()
                break
            stats = self.train_step(it)
            if it % cfg.log_interval == 0:
                checkpoint.poll_pending()  # a background save whose write is done gets its name now
                # Host work while a GPU still runs the step just queued, before the sync below.
                fingerprint = self.data.batches.fingerprint(it) if self.d.master else None
                if self.d.device_type == "cuda":
                    torch.cuda.synchronize(self.d.device)
                now = time.perf_counter()
                per_step = None
                if clock is not None and clock[1] >= self.start + 2:
                    per_step = (now - clock[0]) / (it - clock[1])
                    smoothed = per_step if smoothed is None else 0.8 * smoothed + 0.2 * per_step
                self.log_step(it, stats, smoothed if per_step else None, fingerprint)
                clock = (time.perf_counter(), it)
            it += 1
            self.step = it


def train(cfg: TrainConfig, model_cfg: GPTConfig) -> None:
    """The run cfg and model_cfg describe: trained, resumed or restarted as its out_dir says; with dry_run, the
    memory estimate only."""
    if cfg.dry_run:
        if importers.is_pretrained_source(cfg.init_from):
            raise ConfigError(f"dry_run estimates a model built from the config, not init_from={cfg.init_from!r}")
        print_estimate(cfg, model_cfg, cfg.dry_run)
        return
    d = setup_distributed(cfg)
    data = open_data(cfg, model_cfg.block_size)
    model_cfg = sized_to_data(data, model_cfg)
    run_dir = RunDir(cfg.out_dir)
    if d.master and not cfg.eval_only:
        run_dir.lock()  # before reading what out_dir holds: no second process can change it from here on
    try:
        start_and_train(cfg, model_cfg, d, data, run_dir)
    except BaseException:
        run_dir.unlock(failed=True)
        raise
    run_dir.unlock()


def write_config(trainer: Trainer, resolved: dict) -> None:
    """config.json: every setting, and the machines the run has trained on (RunDir.machines)."""
    machine = {"step": trainer.start, "threads": torch.get_num_threads(), "device": str(trainer.d.device)}
    machine |= {"dtype": dtype_name(trainer.dtype), "torch": torch.__version__}
    trainer.run.write_config({**resolved, "machine": trainer.run.machines(machine)})


def restore_finished(trainer: Trainer, resolved: dict, path) -> None:
    """A run at max_iters whose evaluation at that step is missing from metrics.jsonl, or whose config.json
    is gone: the evaluation recomputed from the checkpoint (the weights it was made on) and recorded, the
    config written again, so that a sweep waiting for them can finish. Nothing is trained."""
    step = trainer.start
    if not trainer.run.evaluated(step):
        rec = trainer.evaluation(step)
        trainer.record({"step": step, **rec, "tokens": step * trainer.tokens_per_step})
        trainer.say(f"step {step}: {evaluation_line(rec)} (the evaluation of {path}, which metrics.jsonl lacked)")
    if trainer.d.master and not trainer.run.config_path.is_file():
        write_config(trainer, resolved)
        trainer.say(f"{trainer.run.config_path} written again")


def changed_settings(resolved: dict) -> str:
    """The settings that differ from the defaults, as key=value."""
    defaults = {**asdict(TrainConfig()), **GPTConfig().to_dict()}
    changed = [f"{k}={v}" for k, v in resolved.items() if k in defaults and v != defaults[k] and k != "out_dir"]
    return ", ".join(changed) or "the defaults"


def start_and_train(cfg: TrainConfig, model_cfg: GPTConfig, d: Dist, data: Data, run_dir: RunDir) -> None:
    mode, path, leftovers = start.start_mode(cfg, run_dir)
    torch.manual_seed(cfg.seed)  # model init only; the data never reads this generator
    model, ckpt, origin = start.build_model(cfg, model_cfg, mode, path)
    start.check_model(model, cfg, model_cfg, data, origin)
    resolved = {**asdict(cfg), **model.config.to_dict()}
    finished = ckpt is not None and ckpt["iter_num"] >= cfg.max_iters and not cfg.eval_only
    if finished and run_dir.evaluated(ckpt["iter_num"]) and run_dir.config_path.is_file():
        if d.master:
            print(f"{path} is at step {ckpt['iter_num']}, max_iters={cfg.max_iters}: nothing to train")
        return
    wandb = Wandb(cfg.wandb_log and d.master and not cfg.eval_only and not finished)
    trainer = Trainer(cfg, model_cfg, d, data, model, ckpt, origin, run_dir, wandb)
    if finished:  # its last evaluation or config.json was lost (a kill, a copy): restored, nothing trained
        return restore_finished(trainer, resolved, path)
    if cfg.eval_only:
        trainer.say(
            f"step {trainer.start}: {evaluation_line(trainer.evaluation(trainer.start))} (eval_only: nothing written)"
        )
        return
    if d.master:
        print(f"run {run_dir.path}: {changed_settings(resolved)} (every setting: {run_dir.path / 'config.json'})")
        unused = model.config.vocab_size - data.meta["vocab_size"]
        if unused > 0:  # a config's vocab_size above the data's (GPT-2's padding, or another dataset's alphabet)
            held = data.meta["vocab_size"]
            print(
                f"the data uses {held} of the model's {model.config.vocab_size} token ids (vocab_size); the other "
                f"{unused} are padding no target names, as in nanoGPT's 50304 for GPT-2's 50257: nothing is wrong"
            )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(
            f"{model.num_params():,} non-embedding parameters, {trainable:,} trainable; {d.world_size} process(es) "
            f"x {trainer.accum} micro-steps x {cfg.batch_size} x {model_cfg.block_size} = "
            f"{trainer.tokens_per_step:,} tokens/step"
        )
        peak = f"{trainer.peak:.3g} FLOP/s, {trainer.peak_source}" if trainer.peak else trainer.peak_source
        print(f"mfu: the model's FLOPs per second over the device's peak, {peak}")
        if ckpt is not None and cfg.allow_schedule_change:
            first, last = lr_at(trainer.start, cfg), lr_at(cfg.max_iters, cfg)
            print(f"new schedule: lr {first:.3g} at step {trainer.start} -> {last:.3g} at step {cfg.max_iters}")
        if ckpt is not None:
            what = "continuing the AdamW state and step of" if cfg.init_continue else "resuming from"
            print(f"{what} {ckpt['path']} at step {trainer.start}")
        wandb.start(cfg, resolved, trainer.wandb_id)  # first: a missing login stops before anything is written
        if leftovers:  # a restart's files, or damaged checkpoints a resume's saves would overwrite
            aside = run_dir.set_aside(leftovers, config=ckpt is None)
            print(f"set aside in {aside}: {', '.join(p.name for p in leftovers)}")
        write_config(trainer, resolved)
        run_dir.trim_metrics(trainer.start)
    try:
        trainer.fit()
    except KeyboardInterrupt as e:
        raise Interrupted(trainer.interrupted_line(str(e))) from None
    wandb.finish()
    if d.master:  # the summary surveys out_dir: other ranks would read it while rank 0 prunes the last step
        print(trainer.summary())
    if d.enabled:  # leave together: a rank that tears down while its peer is still saving can hang in gloo
        dist.barrier()
