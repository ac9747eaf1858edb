"""Inference latency as sample.py decodes: one prompt (batch 1) through the Decoder (nlq/eval/decoding.py:
CUDA graphs on a GPU, the KV cache on a CPU), its prefill timed, then new tokens one at a time. Several
models are measured in interleaved rounds (each once per round), so a drift in the machine's speed hits all
alike, and each ratio to the reference is paired within a round.
"""

import statistics
import time

import torch

from nlq.eval.decoding import Decoder


def timed(fn, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return time.perf_counter() - t


def prefill_and_decode(
    decoder: Decoder, prompt: torch.Tensor, new_tokens: int, device: str, ctx
) -> tuple[float, float]:
    """(prefill seconds, decode tokens/s) of one prompt through decoder (its path: graphs on a GPU), under ctx
    (the decode dtype's autocast, or none)."""
    with torch.no_grad(), ctx:
        prefill = timed(lambda: decoder.prefill(prompt), device)
        tok = prompt[:, -1:]
        decode = timed(lambda: [decoder.step(tok) for _ in range(new_tokens)], device)
    return prefill, new_tokens / decode


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": values}


def compare_latency(models: dict, reference: str, prompt_len: int, new_tokens: int, repeats: int, device: str, ctx):
    """{name: {"path", "prefill_tokens_per_s", "decode_ms_per_token", and each one's ratio to the reference}},
    every figure a summary (median, min, max) over `repeats` interleaved rounds after two rounds of warm-up (on
    a GPU the second captures the prompt's graph); the prompt is the same random ids for every model."""
    vocab = min(m.config.vocab_size for m in models.values())
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(0)).to(device)
    decoders = {name: Decoder(model) for name, model in models.items()}
    raw = {name: {"prefill": [], "decode": []} for name in models}
    for r in range(repeats + 2):
        for name, decoder in decoders.items():
            prefill_s, decode_rate = prefill_and_decode(decoder, prompt, new_tokens, device, ctx)
            if r >= 2:  # rounds 0 and 1 warm every model up
                raw[name]["prefill"].append(prompt_len / prefill_s)
                raw[name]["decode"].append(1000 / decode_rate)
    out = {}
    for name, r in raw.items():
        base = raw[reference]
        out[name] = {
            "path": decoders[name].label + (f" ({decoders[name].why})" if decoders[name].why else ""),
            "prefill_tokens_per_s": summary(r["prefill"]),
            "decode_ms_per_token": summary(r["decode"]),
            "prefill_ratio": summary([a / b for a, b in zip(r["prefill"], base["prefill"])]),
            "decode_ratio": summary([a / b for a, b in zip(r["decode"], base["decode"])]),
        }
    return out
