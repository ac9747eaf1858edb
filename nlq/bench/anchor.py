"""The decoding peer this project's is held against: transformers' GPT-2 generate, at the same shape, prompt,
number of new tokens, dtype and device, greedy. On a GPU it runs as transformers recommends for speed (its
static cache, which generate compiles); where that fails, its default dynamic cache, and the report says which."""

import statistics

import torch

from nlq.eval.latency import timed


def transformers_generate(shape: dict, cfg, device: str, dtype: torch.dtype) -> dict:
    """{"path", "tokens_per_s": median/min/max over cfg.repeats runs of prompt_len + decode_tokens}: the whole
    generation's new tokens per second, prefill included (as generate reports it), after two warm-up runs."""
    try:
        import transformers
        from transformers import GPT2LMHeadModel
    except Exception as e:  # not installed, or its own imports broken: no anchor, said in the report
        return {"path": f"unavailable ({type(e).__name__}: {str(e).splitlines()[0][:200]})", "tokens_per_s": None}
    # No end-of-text token: generate then decodes exactly decode_tokens (GPT-2's 50256 is not even a token of
    # a smaller vocabulary, which transformers warns of), with no min_new_tokens processor in its loop.
    config = transformers.GPT2Config(
        vocab_size=shape["vocab_size"], n_positions=shape["block_size"], n_embd=shape["n_embd"],
        n_layer=shape["n_layer"], n_head=shape["n_head"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device, dtype).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, shape["vocab_size"], (1, cfg.prompt_len), generator=gen).to(device)
    n = cfg.decode_tokens
    options = dict(max_new_tokens=n, do_sample=False, pad_token_id=0)
    path = "dynamic cache, eager"
    if device.startswith("cuda"):
        # generate compiles its own one-token forward for a static cache (transformers' compile_config): wrapping
        # the forward in torch.compile's reduce-overhead ourselves failed on an H200 (2026-12-04: a CUDA graph's
        # output overwritten by the next step, inside generate's loop).
        try:
            static = dict(options, cache_implementation="static")
            for _ in range(2):
                model.generate(prompt, **static)
            options, path = static, "static cache, its forward compiled by generate"
        except Exception as e:  # an older transformers, or a compile failure: its default path, said
            path = f"dynamic cache, eager (static failed: {type(e).__name__}: {str(e).splitlines()[0][:200]})"
    rates = []
    with torch.no_grad():
        for r in range(cfg.repeats + 2):
            t = timed(lambda: model.generate(prompt, **options), device)
            if r >= 2:
                rates.append(n / t)
    return {
        "path": path,
        "transformers": transformers.__version__,
        "tokens_per_s": {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "samples": rates},
    }
