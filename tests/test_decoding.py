"""Decoding through the static KV cache (nlq/eval/decoding.py) computes what GPT.generate computes: the same
greedy tokens in every query mode, past a full context too, and the same draws from the same generator."""

import pytest
import torch

from model import GPT, QUERY_MODES, GPTConfig
from nlq.eval.decoding import Decoder

SHAPE = dict(n_layer=2, n_head=2, n_embd=32, block_size=24, vocab_size=40)


def model_of(**kw) -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SHAPE, **kw)).eval()
    with torch.no_grad():  # weights of order one: every branch moves the logits, near-ties are rare
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1))
    return model


@pytest.mark.parametrize("kw", [dict(query_mode=m) for m in QUERY_MODES] + [
    dict(query_mode="residual_gelu", pos_embedding="rotary", n_kv_head=1, bias=True),
])  # fmt: skip
def test_greedy_tokens_through_the_static_cache_are_generates(kw):
    """A prompt of 10, 30 new tokens: the context (24) fills and is cropped and prefilled again 16 times."""
    model = model_of(**kw)
    prompt = torch.randint(0, SHAPE["vocab_size"], (2, 10), generator=torch.Generator().manual_seed(1))
    expected = model.generate(prompt, 30, temperature=0)
    decoder = Decoder(model, batch=2, path="static")
    assert decoder.path == "static" and decoder.label == "static KV cache, eager"
    assert torch.equal(decoder.generate(prompt, 30, temperature=0), expected)
    assert torch.equal(
        decoder.generate(prompt[:, :3], 5, temperature=0), model.generate(prompt[:, :3], 5, temperature=0)
    )


@pytest.mark.parametrize("kw", [
    dict(query_mode="linear"),
    dict(query_mode="residual_gelu", pos_embedding="rotary", n_kv_head=1, bias=True),
])  # fmt: skip
def test_greedy_tokens_through_the_compiled_step_are_generates(kw):
    """The one-token step compiled (torch.compile's C++ kernels on a CPU), prompts prefilled eagerly: the same
    tokens as GPT.generate, past a full context, and the cache's position as the eager step leaves it."""
    model = model_of(**kw)
    prompt = torch.randint(0, SHAPE["vocab_size"], (2, 10), generator=torch.Generator().manual_seed(1))
    decoder = Decoder(model, batch=2, path="compiled")
    assert torch.equal(decoder.generate(prompt, 30, temperature=0), model.generate(prompt, 30, temperature=0))
    assert decoder.path == "compiled" and decoder.why is None
    assert decoder.label == "static KV cache, compiled step"
    with torch.no_grad():
        decoder.prefill(prompt[:, :4])
        for _ in range(3):
            decoder.step(prompt[:, :1])
    assert int(decoder.cache.pos) == 7


def test_a_step_that_fails_to_compile_is_taken_eagerly_and_said(monkeypatch):
    """torch.compile breaking at the first step (a missing C compiler, an op inductor refuses): the Decoder
    decodes the eager static cache, gives generate's tokens, and its reason names the failure."""

    def broken(fn, **options):
        def compiled(*args):
            raise RuntimeError("planted: no C++ compiler\nsecond line")

        return compiled

    monkeypatch.setattr(torch, "compile", broken)
    model = model_of(query_mode="residual_gelu")
    prompt = torch.randint(0, SHAPE["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(4))
    decoder = Decoder(model, path="compiled")
    assert torch.equal(decoder.generate(prompt, 8, temperature=0), model.generate(prompt, 8, temperature=0))
    assert decoder.path == "static" and decoder.label == "static KV cache, eager"
    assert decoder.why == "torch.compile failed (RuntimeError: planted: no C++ compiler): static KV cache, eager"


def test_sampled_tokens_follow_the_generator_as_generate_does():
    model = model_of(query_mode="residual_gelu")
    prompt = torch.randint(0, SHAPE["vocab_size"], (1, 5), generator=torch.Generator().manual_seed(2))
    args = dict(temperature=0.9, top_k=7, vocab_limit=33)
    expected = model.generate(prompt, 12, generator=torch.Generator().manual_seed(3), **args)
    got = Decoder(model, path="static").generate(prompt, 12, generator=torch.Generator().manual_seed(3), **args)
    assert torch.equal(got, expected) and int(got[:, 5:].max()) < 33


def test_the_path_a_cpu_takes_and_why():
    model = model_of()
    assert Decoder(model).path == "cache" and Decoder(model).why is None  # auto: GPT.generate on a CPU
    graph = Decoder(model, path="graph")
    assert graph.path == "static" and "need a GPU" in graph.why
    with pytest.raises(ValueError, match="path='fast'"):
        Decoder(model, path="fast")
    with pytest.raises(ValueError, match="temperature"):
        Decoder(model, path="static").generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=-1)
