"""How a model is spread over the processes of a run, applied from outside the model (model.py knows
nothing of it): DDP, where every process holds the whole model and optimizer state, or FSDP2
(torch.distributed.fsdp.fully_shard), where each process holds 1/world_size of every parameter, gradient
and optimizer state and gathers a block's parameters only while it computes; and activation
checkpointing per block, with either.

FSDP shards each transformer block and then the root (embeddings, final norm, head), as torchtitan does.
Under bf16 compute it runs DDP's arithmetic (shard's docstring says what differs); the sharded parameters,
which the optimizer updates, stay in param_dtype.
"""

import math
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from nlq.common import errors

PARALLELISMS = ("ddp", "fsdp")


@dataclass
class Dist:
    """This process's place in the run."""

    enabled: bool  # launched by torchrun
    rank: int
    world_size: int
    device: str

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    @property
    def device_ids(self) -> list[int] | None:
        """DDP's device_ids: this rank's GPU."""
        return [int(self.device.split(":")[1])] if self.enabled and self.device_type == "cuda" else None


def init(device: str, backend: str | None = None) -> Dist:
    """Under torchrun (RANK set), join the process group (nccl on GPUs, gloo on CPUs, unless backend says)
    and take this rank's GPU, LOCAL_RANK; otherwise one process on device."""
    if "RANK" not in os.environ:
        return Dist(False, 0, 1, device)
    d = Dist(True, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), device)
    if d.device_type == "cuda":
        d.device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(d.device)
    dist.init_process_group(backend=backend or ("nccl" if d.device_type == "cuda" else "gloo"))
    return d


def cli_main(run, argv=None):
    """errors.cli_main for a script that may join a process group: it leaves the group however it ends."""
    try:
        errors.cli_main(run, argv)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def checkpoint_activations(model, every: int = 1) -> None:
    """Recompute the activations of every k-th block (blocks 0, k, 2k, ...) in the backward pass instead of
    keeping them: only those blocks' inputs stay alive through the forward; the others keep theirs (k = 2:
    half the blocks recomputed, about half the saving and half the extra compute of k = 1). The parameter
    names do not change (the blocks' forward is replaced, not wrapped), so checkpoints are the same with it
    on or off. The RNG state is restored for
    the recomputation, so dropout draws the same masks and the gradients are those of the plain model."""
    for block in model.transformer.h[::every]:
        block.forward = partial(checkpoint, block.forward, use_reentrant=False)


def shard(model, dtype: torch.dtype) -> None:
    """FSDP2 in place: every block, then the root. Frozen parameters are sharded too.

    Under bf16 the arithmetic is DDP's (autocast over float32 weights): a block's Linear weights and biases
    are gathered in bf16, as autocast casts them for its matmuls anyway; its norms are groups of their own
    gathered in float32 (autocast runs norms in float32; the CPU kernels refuse a bf16 weight on a float32
    input); no input is cast (cast_forward_inputs=False), so the residual stream stays float32; the root
    (embeddings, final norm, head) stays float32 and autocast casts the head's matmul. Only the order of the
    float32 gradient reductions differs from DDP's. The norms' groups cost 2 to 4 small all-gathers per
    block and step (a few microseconds each on NVLink: under 1 % of a GPT-2-small step, expected, not
    measured)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = root_policy = MixedPrecisionPolicy()
    if dtype != torch.float32:
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
        root_policy = MixedPrecisionPolicy(reduce_dtype=torch.float32, cast_forward_inputs=False)
    for block in model.transformer.h:
        for adapter in (block.attn.lora_attn, block.attn.lora_proj):  # float32 in a bf16 block: a group of its own
            if adapter is not None:
                fully_shard(adapter, mp_policy=policy)
        if dtype != torch.float32:  # norms keep float32 weights, as under DDP's autocast: groups of their own
            for norm in [m for m in block.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]:
                fully_shard(norm, mp_policy=root_policy)
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=root_policy)


def compile_blocks(model) -> None:
    """torch.compile each block in place, before sharding (FSDP2's hooks stay outside the graphs), and the
    head with its loss (GPT.head_loss: called inside the root's forward, after its parameters are gathered)."""
    for block in model.transformer.h:
        block.compile()
    model.head_loss = torch.compile(model.head_loss)


def wrap(model, cfg, distributed: bool, dtype: torch.dtype, device_ids=None):
    """The model the loop calls, from the model it built (whose parameters the optimizer takes: under FSDP
    the same object, sharded in place). One process runs the plain model whatever parallelism says."""
    if cfg.activation_checkpointing:
        checkpoint_activations(model, cfg.checkpoint_every)
    if distributed and cfg.parallelism == "fsdp":
        if cfg.compile:
            compile_blocks(model)
        shard(model, dtype)
        return model
    wrapped = torch.compile(model) if cfg.compile else model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(wrapped, device_ids=device_ids, gradient_as_bucket_view=True)
    return wrapped


@contextmanager
def micro_step(model, cfg, distributed: bool, last: bool):
    """One micro-step of gradient accumulation: gradients are reduced across processes only on the last.
    Under FSDP, parameters also stay gathered between micro-steps unless cfg.reshard_micro_steps (less
    memory, one more all-gather per block and micro-step)."""
    if not distributed:
        yield
    elif cfg.parallelism == "ddp":
        with nullcontext() if last else model.no_sync():
            yield
    else:
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last or cfg.reshard_micro_steps)
        yield


def clip_grad_norm(params, max_norm: float) -> torch.Tensor:
    """Clip to the global gradient norm (over all shards under FSDP) and return it as a local tensor."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else math.inf)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def local(t: torch.Tensor) -> torch.Tensor:
    """This process's shard of a parameter (the tensor itself when not sharded)."""
    return t.to_local() if isinstance(t, DTensor) else t
