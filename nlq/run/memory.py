"""What a run needs per GPU before it runs (train.py --dry_run=N): parameters, gradients, AdamW state and
activations, under DDP and under FSDP on N GPUs; and the refusal, before anything is allocated, of a model
whose weights and optimizer state alone cannot fit the memory this machine has free (check_fits).

Parameters, gradients and optimizer state are counts times bytes. Activations are traced, not modelled:
one micro-batch's forward runs on the meta device (shapes only, no memory, no arithmetic) and the
tensors autograd saves for the backward are added up, each storage once. On the meta device attention
falls back to its math form, which saves the T x T probabilities; the fused kernels that GPUs and CPUs
run keep a log-sum-exp per row instead, which is what is counted (with the head's gradients, which
GPT.head_loss computes in the forward and keeps for the backward). The peak adds what is held on top at
the end of the forward, one chunk of the head's logits, or, with activation checkpointing, one block
recomputed in the backward.
"""

import gc
from collections import Counter
from dataclasses import replace

import torch

from model import GPT, LOSS_CHUNK
from nlq.common.fits import GiB
from nlq.run import parallel


def saved_bytes(model, batch_size: int, seq_len: int) -> int:
    """Bytes autograd keeps for the backward of one forward of a batch_size x seq_len micro-batch."""
    storages = {}

    def pack(t):
        key = t.untyped_storage()._cdata
        if t.dim() >= 3 and t.shape[-1] == t.shape[-2] == seq_len:  # attention probabilities -> log-sum-exp
            storages[key] = t[..., 0].numel() * 4
        else:
            storages.setdefault(key, t.untyped_storage().nbytes())
        return t

    idx = torch.zeros(batch_size, seq_len, dtype=torch.long, device="meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    return sum(n for key, n in storages.items() if key not in params)


def activation_bytes(model_cfg, batch_size: int, dtype: torch.dtype, checkpointing: bool, every: int = 1) -> dict:
    """Saved activations and the backward's peak on top of the parameters, for one micro-batch."""
    with torch.device("meta"):
        model = GPT(model_cfg).to(dtype)
    T, d = model_cfg.block_size, model_cfg.n_embd
    full = saved_bytes(model, batch_size, T)
    # The head and loss (GPT.head_loss) hold one chunk of logits at a time, never all of them, at the end of
    # the forward: at most two float32 copies of them (the logits and their log-softmax, turned into their
    # gradient in place).
    head = min(batch_size * T, LOSS_CHUNK) * model_cfg.vocab_size * 8
    if not checkpointing:
        return {"saved": full, "peak": full + head}
    one_block = saved_bytes(_truncated(model_cfg, dtype, 2), batch_size, T) - saved_bytes(
        _truncated(model_cfg, dtype, 1), batch_size, T
    )
    parallel.checkpoint_activations(model, every)
    kept = saved_bytes(model, batch_size, T)
    # The backward's largest moment is the first recomputed block (the last checkpointed one): what the
    # forward kept (checkpointed blocks' inputs, the other blocks' activations), less the blocks after it,
    # already through their backward, plus its activations again and the gradient arriving at it (inside
    # a block, ops free their saved tensors about as fast as they make gradients).
    after = model_cfg.n_layer - 1 - (model_cfg.n_layer - 1) // every * every
    incoming = batch_size * T * d * 4
    return {"saved": kept, "peak": max(kept + head, kept - after * one_block + one_block + incoming)}


def _truncated(model_cfg, dtype, n_layer: int):
    with torch.device("meta"):
        return GPT(replace(model_cfg, n_layer=n_layer)).to(dtype)


def estimate(cfg, model_cfg, gpus: int) -> dict:
    """Bytes per GPU under 'ddp' and 'fsdp' on gpus GPUs: each a dict of named parts and 'total'."""
    with torch.device("meta"):
        model = GPT(model_cfg)
    n_params = sum(p.numel() for p in model.parameters())
    if cfg.freeze_pretrained:
        n_train = sum(p.numel() for n, p in model.named_parameters() if GPT.is_added(n))
    else:
        n_train = n_params
    stored = getattr(torch, cfg.param_dtype).itemsize  # parameters, gradients and AdamW moments
    compute = torch.bfloat16 if cfg.dtype in ("auto", "bfloat16", "float16") else torch.float32
    act = activation_bytes(model_cfg, cfg.batch_size, compute, cfg.activation_checkpointing, cfg.checkpoint_every)
    accum = max(1, cfg.gradient_accumulation_steps // gpus)
    ddp = {"parameters": n_params * stored, "gradients": n_train * stored, "AdamW": 2 * n_train * stored}
    fsdp = {k: v / gpus for k, v in ddp.items()}
    # Gathered copies: between micro-steps every block stays gathered with its unsharded gradient (unless
    # reshard_micro_steps); otherwise about two blocks at a time (one computing, one prefetched) and the root.
    # The root (embeddings, final norm, head) is gathered in float32 (parallel.shard), the blocks in the
    # compute dtype (their norms' few weights in float32 too: not counted).
    block = sum(p.numel() for p in model.transformer.h[0].parameters())
    root = n_params - model_cfg.n_layer * block
    if accum > 1 and not cfg.reshard_micro_steps:
        fsdp["gathered"] = root * 4 + (n_params - root) * compute.itemsize + n_train * 4
    else:
        fsdp["gathered"] = root * 4 + 2 * block * compute.itemsize + block * 4
    for parts in (ddp, fsdp):
        parts["activations (peak)"] = act["peak"]
        parts["total"] = sum(parts.values())
    return {"params": n_params, "trainable": n_train, "saved": act["saved"], "ddp": ddp, "fsdp": fsdp}


def print_estimate(cfg, model_cfg, gpus: int) -> None:
    e = estimate(cfg, model_cfg, gpus)
    tokens = cfg.batch_size * model_cfg.block_size
    ac = "off"
    if cfg.activation_checkpointing:
        ac = "on" if cfg.checkpoint_every == 1 else f"on every {cfg.checkpoint_every} blocks"
    print(
        f"{e['params']:,} parameters ({e['trainable']:,} trainable), {cfg.param_dtype} weights and AdamW state; "
        f"micro-batch {cfg.batch_size} x {model_cfg.block_size} = {tokens:,} tokens, activation checkpointing "
        f"{ac}: {e['saved'] / GiB:.2f} GiB saved for the backward"
    )
    print(f"| GiB per GPU on {gpus} GPUs | DDP | FSDP |\n|---|---|---|")
    for part in e["fsdp"]:
        ddp = e["ddp"].get(part)
        print(f"| {part} | {'—' if ddp is None else f'{ddp / GiB:.1f}'} | {e['fsdp'][part] / GiB:.1f} |")


def measured_peak_bytes(step) -> int:
    """The highest total of CPU allocations made and not yet freed while step() runs, from the profiler's
    allocator events on the thread that runs it (another thread's frees would hide part of the peak)."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()  # a collection during step() would free older tensors and hide part of the peak
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    finally:
        gc.enable()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    worker = Counter(e.start_thread_id() for e in events).most_common(1)[0][0]
    total = peak = 0
    for _, n in sorted((e.start_ns(), e.nbytes()) for e in events if e.start_thread_id() == worker):
        total += n
        peak = max(peak, total)
    return peak
