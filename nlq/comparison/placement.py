"""Where a local sweep's runs run: its slots, each a GPU (or the CPU) and the CPU threads of the run in it.

Without --gpus, --jobs runs side by side on the CPUs, the CPUs shared among them. With --gpus, each GPU takes
--runs_per_gpu runs at a time: a small model's step is launch-bound (the GPU waits on Python to launch each
kernel), so one run leaves a GPU mostly idle and several runs, each its own process, fill it. By default the
count is the most that both the machine's cores (THREADS_PER_RUN threads a run) and the GPU's free memory
(each run's weights, AdamW state and activations, nlq/run/memory.py, plus a CUDA context) allow. A run's
arithmetic does not depend on how many share its GPU: its seed, batches and kernels are its own (a GPU's
kernels are not all deterministic run to run, shared or not: see docs/screening.md).
"""

import os
import re
import subprocess

from configurator import parse
from model import GPTConfig
from nlq.common.errors import UserError
from nlq.common.fits import GiB
from nlq.run.config import TrainConfig
from nlq.run.memory import estimate

THREADS_PER_RUN = 2  # one drives the GPU (Python launching kernels), one spare for data and evaluations: assumed
CONTEXT_BYTES = GiB  # a CUDA context and the caching allocator's slack per process: assumed, not measured
# What nlq/run/memory.estimate reads of a run's config besides its model
MEMORY_FIELDS = ("batch_size", "gradient_accumulation_steps", "dtype", "param_dtype", "freeze_pretrained",
                 "activation_checkpointing", "checkpoint_every", "reshard_micro_steps")  # fmt: skip
GPU_ID = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z-]+")  # an index, or a UUID as nvidia-smi -L prints it
START_S = 8.0  # seconds a run takes to start on a GPU (Python, torch, CUDA), for the plan: assumed


def gpu_free_bytes(gpus: list[str]) -> int | None:
    """The least free memory among these GPUs (nvidia-smi's indices), None where nvidia-smi cannot say."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    free = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        index, mib = (part.strip() for part in line.split(","))
        free[index] = int(mib) * 2**20
    found = [free[g] for g in gpus if g in free]
    return min(found) if found else None


def run_bytes(runs) -> int:
    """The memory of the largest of these runs on one GPU, its CUDA context included."""
    estimated, largest = {}, 0
    for r in runs:  # runs differ by seed and grid point far more often than by what their memory depends on
        cfg, model_cfg = parse([r.config, *r.options], TrainConfig, GPTConfig)
        shape = (repr(model_cfg), *(getattr(cfg, k) for k in MEMORY_FIELDS))
        if shape not in estimated:
            estimated[shape] = estimate(cfg, model_cfg, 1)["ddp"]["total"]
        largest = max(largest, estimated[shape])
    return int(largest) + CONTEXT_BYTES


def runs_per_gpu(gpus: int, cores: int, free: int | None, need: int) -> tuple[int, str]:
    """(runs at a time on each GPU, why): the most that cores and free memory both allow, at least one."""
    by_cores = max(1, cores // (gpus * THREADS_PER_RUN))
    why = f"{cores} cores at {THREADS_PER_RUN} threads a run"
    if free is None:
        return by_cores, why + "; the GPU's memory unknown here (pass --runs_per_gpu to set it)"
    by_memory = max(1, free // need)
    why += f", {free / GiB:,.0f} GiB free at {need / GiB:.1f} GiB a run"
    return min(by_cores, by_memory), why


def slots(args, runs) -> tuple[list, int | None, str]:
    """(a GPU id, or None for the CPU, per run at a time; each run's CPU threads, or None: torch's default;
    the placement in words)."""
    cores = os.cpu_count() or 1
    if not args.gpus:
        threads = args.threads or (max(1, cores // args.jobs) if args.jobs > 1 else None)
        return [None] * args.jobs, threads, f"{args.jobs} at a time on the CPUs"
    gpus = gpu_list(args.gpus)
    if args.runs_per_gpu:
        per, why = args.runs_per_gpu, "--runs_per_gpu"
    else:
        free = gpu_free_bytes(gpus)
        per, why = runs_per_gpu(len(gpus), cores, free, run_bytes(runs) if free is not None else 0)
    placed = [g for g in gpus for _ in range(per)]
    threads = args.threads or max(1, cores // len(placed))
    said = f"{len(placed)} at a time: {per} per GPU on {len(gpus)} GPU(s), {threads} CPU thread(s) each ({why})"
    return placed, threads, said


def gpu_plan(steps: list[int], at_most: list[int], placed: list, step_ms: float) -> str:
    """The plan's time on GPUs: runs of these steps (and, at most, those of at_most more), len(placed) at a
    time, each step step_ms and each start START_S (stated assumptions, not measurements)."""

    def minutes(lengths):
        at_once = len(placed)
        return (sum(lengths) * step_ms / 1e3 + len(lengths) * START_S) / at_once / 60

    more = f"; at most {minutes(steps + at_most):.0f} min with all {len(at_most)} runs more" if at_most else ""
    return (
        f"GPU plan: {len(steps)} runs, {len(placed)} at a time: about {minutes(steps):.0f} min{more}, at "
        f"{step_ms:g} ms a step (--gpu_step_ms) and {START_S:g} s to start a run (assumed, not measured)"
    )


def gpu_list(text: str) -> list[str]:
    """--gpus as the GPUs it names, each once: CUDA_VISIBLE_DEVICES's forms, an index (0 up) or a UUID."""
    gpus = text.split(",")
    for g in gpus:
        if not GPU_ID.fullmatch(g):
            raise UserError(
                f"--gpus={text}: {g!r} is not a GPU; give a comma list of indices or UUIDs as nvidia-smi -L lists "
                "them (e.g. --gpus=0,1)"
            )
    twice = sorted({g for g in gpus if gpus.count(g) > 1})
    if twice:
        raise UserError(
            f"--gpus={text}: GPU {twice[0]} is named twice; name each GPU once (--runs_per_gpu sets runs on one)"
        )
    return gpus


def check_present(gpus: list[str], extra) -> None:
    """A run told to train on GPUs the machine lacks would train on its CPU under a GPU's name: refused, unless
    the runs are asked for the CPU (--device=cpu: a rehearsal of the GPU placement)."""
    if "--device=cpu" in extra:
        return
    import torch

    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if count == 0:
        raise UserError(
            f"--gpus={','.join(gpus)}: this machine has no CUDA GPU (torch sees none), so the runs would train on "
            "the CPU: drop --gpus (--jobs runs side by side on the CPUs), add --dry_run to plan, or --device=cpu to "
            "rehearse"
        )
    missing = [g for g in gpus if g.isdigit() and int(g) >= count]
    if visible is None and missing:
        raise UserError(f"--gpus={','.join(gpus)}: GPU {missing[0]} is not here; this machine's are 0 to {count - 1}")


def check(args, extra=()) -> None:
    """The placement options agree, before anything is planned; for a real run, the GPUs named exist."""
    if args.runs_per_gpu is not None and not args.gpus:
        raise UserError("--runs_per_gpu places runs on GPUs: give --gpus as well (e.g. --gpus=0)")
    if args.runs_per_gpu is not None and args.runs_per_gpu < 1:
        raise UserError(f"--runs_per_gpu={args.runs_per_gpu}: give a number above 0")
    if args.gpus is not None:
        gpus = gpu_list(args.gpus)
        if not args.dry_run:
            check_present(gpus, extra)
