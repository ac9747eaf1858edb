import copy
import json
import math
import re
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from model import GPT, QUERY_MODES, GPTConfig, KVCache, Linear
from nlq.common.errors import ConfigError
from nlq.interop.importers import from_pretrained
from nlq.run.config import TrainConfig

TINY = dict(block_size=32, vocab_size=67, n_layer=2, n_head=4, n_embd=32)
VARIANTS = [  # (pos_embedding, n_kv_head): learned and rotary positions, full and grouped K/V heads
    ("learned", None),
    ("rotary", None),
    ("learned", 2),
    ("rotary", 1),
]


def tiny(query_mode="linear", seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, "query_mode": query_mode, **kw})).eval()


def rms_gelu_ln(x, m, eps=1e-5):
    """arXiv 2603.13381's f(X) = LayerNorm(W2 GELU(W1 RMSNorm(X))), exact GELU, the norms' weights m.rms, m.ln."""
    r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * m.rms.weight
    h = r @ m.w1.weight.T
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    f = h @ m.w2.weight.T
    return (f - f.mean(-1, keepdim=True)) / torch.sqrt(f.var(-1, unbiased=False, keepdim=True) + eps) * m.ln.weight


@dataclass
class Reference:
    """A query mode written from its formula, independently of model.py: the query from X (with W_Q, the
    rows of c_attn before W_K, if the mode has one, and the attention module for its own weights); whether
    the paper halves the query (Q = (X + ...) / 2); the weights it adds per layer beyond W_K, W_V, W_O, as
    a function of the width d and the query MLP's width r; and the multiply-adds per token those weights
    cost."""

    query: object
    has_wq: bool
    half: bool
    params: object
    macs: object


REFERENCES = {
    "linear": Reference(lambda x, w_q, attn: x @ w_q.T, True, False, lambda d, r: d * d, lambda d, r: d * d),
    "identity": Reference(lambda x, w_q, attn: x, False, True, lambda d, r: 0, lambda d, r: 0),
    "residual": Reference(lambda x, w_q, attn: x + x @ w_q.T, True, True, lambda d, r: d * d, lambda d, r: d * d),
    "residual_gelu": Reference(
        lambda x, w_q, attn: x + rms_gelu_ln(x, attn.query),
        False,
        True,
        lambda d, r: 2 * d * r + 2 * d,  # W1, W2 and the RMSNorm and LayerNorm weights
        lambda d, r: 2 * d * r,
    ),
}


def reference(mode) -> Reference:
    if mode not in REFERENCES:
        pytest.fail(
            f"query mode {mode!r} has no reference: add it to REFERENCES in tests/test_model.py, written from its "
            "formula (its query, whether it halves Q, the weights it adds and their multiply-adds per token)"
        )
    return REFERENCES[mode]


def expected_non_embedding_params(d, layers, hidden, mode, r=None):
    """From the architecture (no biases): per layer ln_1 and ln_2 weights, the mode's query weights, W_K, W_V,
    c_proj, the MLP. Plus ln_f. The token and position tables are the embedding."""
    r = r or d // 2
    return layers * (2 * d + reference(mode).params(d, r) + 2 * d * d + d * d + 2 * d * hidden) + d


@pytest.mark.parametrize("mode", QUERY_MODES)
@pytest.mark.parametrize("mlp_ratio,hidden", [(None, 3072), (4.75, 3648), (13 / 3, 3328)])
def test_gpt2_small_non_embedding_params_follow_the_architecture(mode, mlp_ratio, hidden):
    with torch.device("meta"):
        model = GPT(GPTConfig(query_mode=mode, mlp_ratio=mlp_ratio))
    assert model.num_params() == expected_non_embedding_params(768, 12, hidden, mode)


def test_the_papers_counts():
    """The figures arXiv 2603.13381 states (GPT-2 small, non-embedding), from the formula above."""
    assert expected_non_embedding_params(768, 12, 3072, "linear") == 84_953_856
    assert expected_non_embedding_params(768, 12, 3072, "residual_gelu") == 84_972_288  # +18,432: the norm weights
    assert expected_non_embedding_params(768, 12, 3328, "linear") == 89_672_448  # the 4.33x ablation, int(768 * 13/3)


def test_wide_mlp_is_the_linear_arm_with_a_wider_mlp():
    old = GPTConfig(n_embd=768, query_mode="wide_mlp")
    assert (old.query_mode, old.mlp_ratio, old.mlp_hidden) == ("linear", 4.75, 3648)
    assert GPTConfig(n_embd=768, query_mode="wide_mlp", mlp_ratio=5).mlp_hidden == 3840
    assert GPTConfig(n_embd=768, mlp_ratio=4.5).mlp_hidden == 3456


def test_untied_head_counts_as_non_embedding():
    tied, untied = tiny(), tiny(tie_embeddings=False)
    assert untied.num_params() - tied.num_params() == TINY["vocab_size"] * TINY["n_embd"]
    assert untied.lm_head.weight.data_ptr() != untied.transformer.wte.weight.data_ptr()


def reference_attention(attn, x, mode, scale=None):
    """Causal self-attention written from the papers' formulas, independent of model.py's code paths, with
    the mode's query from REFERENCES. The paper's halved query, (X + f(X)) / 2 under the usual 1/sqrt(head_dim)
    scale, is computed as written; the official code's X + f(X) under 1/(2 sqrt(head_dim)) gives the same logits."""
    d, nh = TINY["n_embd"], TINY["n_head"]
    hd, (B, T, _) = d // nh, x.shape
    ref = reference(mode)
    w = attn.c_attn.weight
    w_q, w_k, w_v = w.split(d) if ref.has_wq else (None, *w.split(d))
    q = ref.query(x, w_q, attn)
    if ref.half:
        q = q / 2
    heads = lambda t: t.view(B, T, nh, hd).transpose(1, 2)  # noqa: E731
    s = heads(q) @ heads(x @ w_k.T).transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(hd))
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1) @ heads(x @ w_v.T)).transpose(1, 2).reshape(B, T, d) @ attn.c_proj.weight.T


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_every_query_mode_equals_its_reference_forward(mode):
    attn = tiny(mode).transformer.h[0].attn
    with torch.no_grad():  # non-trivial weights everywhere: a missing norm weight or a wrong term shows
        for p in attn.parameters():  # matrices around 0, norm weights around 1
            p.uniform_(-0.5, 0.5) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    x = torch.randn(2, 7, TINY["n_embd"])
    with torch.no_grad():
        torch.testing.assert_close(attn(x), reference_attention(attn, x, mode), atol=1e-5, rtol=1e-5)


def test_attn_scale_overrides_the_modes_default():
    attn = tiny("identity", attn_scale=0.3).transformer.h[0].attn
    x = torch.randn(2, 7, TINY["n_embd"])
    with torch.no_grad():  # the reference halves q for identity, so 0.3 * 2 undoes it: the raw scale 0.3 on X
        torch.testing.assert_close(attn(x), reference_attention(attn, x, "identity", scale=0.6), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", QUERY_MODES)
@pytest.mark.parametrize("pos,kv", VARIANTS)
def test_causality_at_every_length(mode, pos, kv):
    """At every length from 1 to block_size, changing the last token leaves every earlier position's logits
    exactly as they were and changes the last one's."""
    model = tiny(mode, pos_embedding=pos, n_kv_head=kv)
    gen = torch.Generator().manual_seed(0)
    for T in range(1, TINY["block_size"] + 1):
        idx = torch.randint(0, TINY["vocab_size"], (2, T), generator=gen)
        changed = idx.clone()
        changed[:, -1] = (changed[:, -1] + 1) % TINY["vocab_size"]
        with torch.no_grad():
            a, b = model(idx)[0], model(changed)[0]
        torch.testing.assert_close(a[:, :-1], b[:, :-1], atol=0, rtol=0)
        assert not torch.allclose(a[:, -1], b[:, -1]), T


@pytest.mark.parametrize("pos", ["learned", "rotary"])
def test_generate_feeds_one_token_a_step_through_the_cache(pos):
    """With the cache, the prompt is run once and each new token alone; once the context is full, each step
    refills it from the last block_size tokens (their positions shift: nothing cached still holds), as
    recomputation on the cropped context does (test_kv_cache_matches_recomputation)."""
    model = tiny("residual_gelu", pos_embedding=pos, block_size=8)
    lengths = []
    forward = model.forward
    record = lambda idx, **kw: lengths.append(idx.size(1)) or forward(idx, **kw)  # noqa: E731
    with mock.patch.object(model, "forward", side_effect=record):
        model.generate(torch.zeros(1, 5, dtype=torch.long), 6, temperature=0)
    assert lengths == [5, 1, 1, 1, 8, 8]  # tokens 6, 7, 8 fill the cache; the 9th and 10th see the last 8


def test_same_seed_same_init_other_seed_other_init():
    a, b, c = tiny("residual_gelu", seed=1), tiny("residual_gelu", seed=1), tiny("residual_gelu", seed=2)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    assert not torch.equal(a.transformer.h[0].attn.query.w1.weight, c.transformer.h[0].attn.query.w1.weight)


def test_query_mlp_init_and_gradients():
    model = tiny("residual_gelu", n_embd=256, n_head=4).train()
    w1 = model.transformer.h[0].attn.query.w1.weight
    assert w1.std().item() == pytest.approx(0.02, rel=0.1)
    idx = torch.randint(0, TINY["vocab_size"], (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    for block in model.transformer.h:
        for p in (block.attn.query.w1.weight, block.attn.query.w2.weight, block.attn.query.rms.weight):
            assert p.grad is not None and p.grad.abs().sum() > 0


def test_gpt2s_initialisation_scales_the_residual_projections():
    """GPT-2's init (as nanoGPT writes it): weights N(0, 0.02), biases 0, the two projections that write into
    the residual stream (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)); arXiv 2604.10791's
    pre-projection N(0, 0.01) and skip N(0, skip_init_std). Standard deviations of 65k+ draws, within 5 %."""
    torch.manual_seed(0)
    n_layer, d = 8, 256
    model = GPT(GPTConfig(n_layer=n_layer, n_head=4, n_embd=d, block_size=32, vocab_size=512, bias=True,
                          preproj=True, content_skip=True, skip_init_std=1e-4))  # fmt: skip
    residual = 0.02 / math.sqrt(2 * n_layer)
    expected = {"attn.c_proj": residual, "mlp.c_proj": residual, "attn.c_attn": 0.02, "mlp.c_fc": 0.02,
                "preproj.up": 0.01, "preproj.down": 0.01, "skip": 1e-4}  # fmt: skip
    for i, block in enumerate(model.transformer.h):
        for name, std in expected.items():
            linear = block.get_submodule(name)
            assert linear.weight.std().item() == pytest.approx(std, rel=0.05), (i, name)
            assert linear.bias is None or not linear.bias.any(), (i, name)
    assert model.transformer.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("mode", QUERY_MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_bias_means_a_bias_in_every_linear_and_layernorm_but_the_head(mode, bias):
    """nanoGPT's bias flag: 'True: bias in Linears and LayerNorms' (the head has none, as GPT-2's); the query
    modes' own layers included."""
    model = tiny(mode, bias=bias)
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.LayerNorm)) and n != "lm_head"]
    assert layers and all((m.bias is not None) == bias for _, m in layers), [n for n, m in layers]


def test_attention_dropout_is_the_configs_in_training_and_none_in_evaluation():
    model = tiny("residual_gelu", dropout=0.3)
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for train, p in [(True, 0.3), (False, 0.0)]:
        model.train(train)
        with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", wraps=sdpa) as call:
            model(idx)
        assert [c.kwargs["dropout_p"] for c in call.call_args_list] == [p] * TINY["n_layer"]


@pytest.mark.parametrize("want", ["features", "head"])
def test_the_head_loss_when_only_the_features_or_only_the_head_is_trained(want):
    """A frozen head (a probe of a frozen model trains what comes before it) or frozen features (a head
    trained alone): the gradient asked for is the whole logits' cross-entropy's, the other is not made."""
    torch.manual_seed(0)
    head = nn.Linear(16, 41, bias=False).requires_grad_(want == "head")
    h = torch.randn(3, 70, 16, requires_grad=want == "features")
    t = torch.randint(0, 41, (3, 70))
    GPT.head_loss(SimpleNamespace(lm_head=head), h, t, chunk=64).backward()
    ours = h.grad if want == "features" else head.weight.grad
    (h.grad, head.weight.grad) = (None, None)
    F.cross_entropy(head(h).reshape(-1, 41), t.reshape(-1)).backward()
    reference = h.grad if want == "features" else head.weight.grad
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-7)
    assert (h.grad if want == "head" else head.weight.grad) is None


@pytest.mark.parametrize("mode", QUERY_MODES)
@pytest.mark.parametrize("pos,kv", VARIANTS)
@pytest.mark.parametrize("batch", [1, 2])  # one stream decodes through Linear's one-row path
def test_kv_cache_matches_recomputation(mode, pos, kv, batch):
    model = tiny(mode, pos_embedding=pos, n_kv_head=kv)
    prompt = torch.randint(0, TINY["vocab_size"], (batch, 5))
    # 40 new tokens run past block_size=32, so the cache's refill path is exercised too.
    with_cache = model.generate(prompt, 40, temperature=0, use_cache=True)
    without = model.generate(prompt, 40, temperature=0, use_cache=False)
    assert torch.equal(with_cache, without)

    seq = with_cache[:, : TINY["block_size"]]
    full, _ = model(seq)
    cache = KVCache(model.config, batch)
    model(seq[:, :9], cache=cache)  # prefill, then one token at a time, then a 3-token chunk
    steps = [model(seq[:, t : t + 1], cache=cache)[0] for t in range(9, 20)]
    steps.append(model(seq[:, 20:23], cache=cache)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 9:23], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_of_one_row_is_x_times_w_transposed_plus_b(dtype, tol, bias):
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=bias).to(dtype)
    for shape in [(1, 1, 24), (1, 24), (24,), (3, 24)]:  # one row (addmv on a CPU), and several
        x = torch.randn(shape).to(dtype)
        expected = x.double() @ layer.weight.double().T + (layer.bias.double() if bias else 0)
        y = layer(x)
        assert y.shape == (*shape[:-1], 40) and y.dtype == dtype
        torch.testing.assert_close(y.double(), expected, atol=tol, rtol=tol)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # float32 weights under autocast: nn.Linear's path
        assert Linear(24, 40, bias=bias)(torch.randn(1, 24)).dtype == torch.bfloat16


def test_bf16_decoding_is_within_its_documented_tolerance_of_float32():
    """README: decoding with bf16 weights gives logits within 10 % of the float32 logits' standard deviation
    at every position, so greedy tokens agree wherever float32's top two differ by more than twice that."""
    model = tiny("residual_gelu", pos_embedding="rotary", preproj=True, content_skip=True)
    half = copy.deepcopy(model).to(torch.bfloat16)
    prompt = torch.randint(0, TINY["vocab_size"], (1, 4))
    seq = model.generate(prompt, TINY["block_size"] - 4, temperature=0)  # float32's greedy tokens
    with torch.no_grad():
        full = model(seq)[0][:, 3:]  # float32 logits at the positions that predict the generated tokens
        cache = KVCache(half.config, 1, dtype=torch.bfloat16)
        half(seq[:, :3], cache=cache)
        steps = torch.cat([half(seq[:, t : t + 1], cache=cache)[0] for t in range(3, seq.size(1))], 1).float()
    tol = 0.1 * full.std(dim=-1)
    assert ((steps - full).abs() <= tol[..., None]).all()
    top2 = full.topk(2, dim=-1).values
    clear = top2[..., 0] - top2[..., 1] > 2 * tol
    assert clear.float().mean() > 0.5  # most positions are decided: the next check has something to check
    assert torch.equal(steps.argmax(-1)[clear], full.argmax(-1)[clear])
    # Free-running, bf16 generates float32's tokens up to the first position that is not clearly decided.
    agreed = 4 + int(clear[0].long().cumprod(0).sum())
    torch.testing.assert_close(
        half.generate(prompt, TINY["block_size"] - 4, temperature=0)[:, :agreed], seq[:, :agreed]
    )


def test_sampling_is_deterministic_for_a_generator_seed():
    model = tiny("residual_gelu")
    prompt = torch.zeros(1, 1, dtype=torch.long)
    runs = [
        model.generate(prompt, 20, temperature=1.0, top_k=10, generator=torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert torch.equal(*runs)


@pytest.mark.parametrize("mode", QUERY_MODES)
def test_flops_per_token_hand_count(mode):
    """Forward: 2 FLOPs per multiply-add of every weight (K, V, O, the MLP, the mode's own, the head) and
    4 T d per layer for the attention scores and their weighted sum; training: 3x (forward + backward)."""
    d, L, V, T, r = 32, 2, 67, 32, 16
    for hidden, kw in [(4 * d, {}), (int(4.75 * d), {"mlp_ratio": 4.75})]:
        weights = 2 * d * d + d * d + 2 * d * hidden + reference(mode).macs(d, r)
        forward = 2 * (L * weights + d * V) + 4 * L * T * d
        assert tiny(mode, **kw).flops_per_token(T) == 3 * forward
        assert tiny(mode, **kw).flops_per_token(T, training=False) == forward


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(query_mode="quadratic"), "query_mode='quadratic'"),
        (dict(n_embd=30), "n_embd=30"),
        (dict(n_kv_head=3), "n_kv_head=3"),
        (dict(pos_embedding="alibi"), "pos_embedding='alibi'"),
    ],
)
def test_bad_config_names_field_value_and_allowed(kw, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(")) as err:
        GPTConfig(**{**TINY, **kw})
    assert "must be one of" in str(err.value) or "divisible" in str(err.value) or "divisor" in str(err.value)


def test_sequence_longer_than_block_size():
    with pytest.raises(ValueError, match="exceeds block_size=32"):
        tiny()(torch.zeros(1, 33, dtype=torch.long))


def test_hf_gpt2_parity(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=48, vocab_size=101)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():  # random biases and norms: a zero bias or unit norm would hide a wrong import
        for name, p in hf.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
    hf.save_pretrained(tmp_path)
    ours = from_pretrained(str(tmp_path)).eval()
    idx = torch.randint(0, 101, (2, 48))
    with torch.no_grad():
        expected = hf(idx).logits
        got, _ = ours(idx)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="linear-query only"):
        from_pretrained(str(tmp_path), dict(query_mode="identity"))


@pytest.mark.slow
def test_compile_smoke():
    model = tiny("residual_gelu", pos_embedding="rotary", n_kv_head=2).train()
    idx = torch.randint(0, TINY["vocab_size"], (2, 16))
    eager_loss = model(idx, idx)[1]
    compiled = torch.compile(model)
    loss = compiled(idx, idx)[1]
    loss.backward()
    torch.testing.assert_close(loss, eager_loss, atol=1e-5, rtol=1e-5)
    assert model.transformer.h[0].attn.query.w2.weight.grad is not None


@pytest.mark.parametrize("parallel,rotary_pct,base", [(True, 0.25, 10000.0), (False, 0.5, 500.0)])
def test_hf_gpt_neox_parity(tmp_path, parallel, rotary_pct, base):
    """Pythia's layout at a trained scale: 4 or 8 of each head's 16 dims rotated (2 or 4 frequencies: a
    frequency order or a pairing of the wrong halves shows), weights of order one, relative tolerance;
    Pythia's rotary base and another one (a base left at our default would pass with Pythia's alone)."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.GPTNeoXConfig(
        vocab_size=96,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=48,
        rope_parameters={"rope_type": "default", "rope_theta": base, "partial_rotary_factor": rotary_pct},
        use_parallel_residual=parallel,
    )
    torch.manual_seed(0)
    hf = transformers.GPTNeoXForCausalLM(hf_config).eval()
    with torch.no_grad():  # weights of order one; random biases catch a wrong bias layout
        for name, p in hf.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 1.0 if "embed" in name else p.size(1) ** -0.5)
            else:
                p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.2)
    hf.save_pretrained(tmp_path)
    ours = from_pretrained(str(tmp_path)).eval()
    assert ours.config.rotary_dims == int(16 * rotary_pct) and ours.config.parallel_residual == parallel
    assert ours.config.rope_base == base
    idx = torch.randint(0, 96, (2, 48))
    with torch.no_grad():
        expected = hf(idx).logits
        assert expected.std() > 0.5
        torch.testing.assert_close(ours(idx)[0], expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


def test_preprojection_and_content_skip_wiring():
    model = tiny(preproj=True, content_skip=True)
    block = model.transformer.h[0]
    assert block.preproj.up.weight.shape == (40, 32)  # hidden 1.25 d
    assert block.skip.weight.std().item() == pytest.approx(1e-4, rel=0.2)
    assert block.preproj.up.weight.std().item() == pytest.approx(0.01, rel=0.2)
    with torch.no_grad():
        block.skip.weight.normal_(0, 0.1)  # large enough to matter in the comparison below
        x = torch.randn(2, 9, 32)
        h = block.ln_1(x)
        xt = h + block.preproj.down(F.silu(block.preproj.up(h)))
        # arXiv 2604.10791's official code, sequential block: the skip joins the block's output after the MLP,
        # so ln_2 and the MLP see x + attn(x~) only.
        mid = x + block.attn(xt)
        out = mid + block.mlp(block.ln_2(mid)) + block.skip(xt)
        torch.testing.assert_close(block(x), out)

    parallel = tiny(preproj=True, content_skip=True, parallel_residual=True).transformer.h[0]
    with torch.no_grad():  # GPT-NeoX's parallel block: every branch reads x and adds to it
        parallel.skip.weight.normal_(0, 0.1)
        h = parallel.ln_1(x)
        xt = h + parallel.preproj.down(F.silu(parallel.preproj.up(h)))
        out = x + parallel.attn(xt) + parallel.mlp(parallel.ln_2(x)) + parallel.skip(xt)
        torch.testing.assert_close(parallel(x), out)


@pytest.mark.parametrize("kw", [dict(preproj=True, content_skip=True), dict(lora_rank=4)])
def test_new_modules_keep_causality_and_cache_parity(kw):
    model = tiny("residual_gelu", pos_embedding="rotary", **kw)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if GPT.is_added(name):
                p.normal_(0, 0.05)  # LoRA's B starts at zero: make every added path active
    prompt = torch.randint(0, TINY["vocab_size"], (1, 6))
    assert torch.equal(
        model.generate(prompt, 30, temperature=0), model.generate(prompt, 30, temperature=0, use_cache=False)
    )
    idx = torch.randint(0, TINY["vocab_size"], (1, 20))
    changed = idx.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0][:, :15], model(changed)[0][:, :15], atol=0, rtol=0)


def test_lora_starts_as_the_identity_update_and_counts():
    base, lora = tiny(seed=3), tiny(seed=3, lora_rank=4)
    lora.load_state_dict(base.state_dict(), strict=False)
    idx = torch.randint(0, TINY["vocab_size"], (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(lora(idx)[0], base(idx)[0])
    d = TINY["n_embd"]
    added = sum(p.numel() for n, p in lora.named_parameters() if GPT.is_added(n))
    assert added == TINY["n_layer"] * 4 * ((d + 3 * d) + (d + d))
    assert lora.num_params() - base.num_params() == added
    assert lora.flops_per_token(32) - base.flops_per_token(32) == 3 * 2 * added
    assert {n.split(".")[-2] for n, p in lora.named_parameters() if GPT.is_added(n)} == {"lora_attn", "lora_proj"}


def test_pretrained_import_with_a_probe_keeps_the_base_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=32, vocab_size=50)
    ).save_pretrained(tmp_path)
    plain = from_pretrained(str(tmp_path)).eval()
    probe = from_pretrained(str(tmp_path), dict(content_skip=True, lora_rank=2)).eval()
    idx = torch.randint(0, 50, (1, 16))
    with torch.no_grad():
        for block in probe.transformer.h:
            block.skip.weight.zero_()
        torch.testing.assert_close(probe(idx)[0], plain(idx)[0])  # B = 0 and W_skip = 0: the same function
    base = {n: p for n, p in probe.named_parameters() if not GPT.is_added(n)}
    assert all(torch.equal(p, dict(plain.named_parameters())[n]) for n, p in base.items())


@pytest.mark.parametrize("name,hidden", [("433", 3328), ("450", 3456), ("4625", 3552), ("500", 3840), ("350", 2688)])
def test_mlp_width_ablation_arms_have_the_official_widths(name, hidden):
    from pathlib import Path

    from configurator import parse

    root = Path(__file__).resolve().parents[1]
    _, model_cfg = parse([str(root / f"config/owt_mlp{name}.py")], TrainConfig, GPTConfig)
    assert model_cfg.query_mode == "linear" and model_cfg.mlp_hidden == hidden
    with torch.device("meta"):
        assert GPT(model_cfg).num_params() == expected_non_embedding_params(768, 12, hidden, "linear")


@pytest.mark.parametrize("mode", sorted(QUERY_MODES))
@pytest.mark.parametrize("tied", [True, False])
def test_the_chunked_head_loss_equals_the_whole_logits_cross_entropy(mode, tied):
    """forward(idx, targets) never holds all logits (model.LOSS_CHUNK tokens at a time): its loss and every
    gradient equal F.cross_entropy over the whole logits, computed here, to float32 rounding."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=1024, vocab_size=97, query_mode=mode,
                          tie_embeddings=tied))  # fmt: skip
    idx = torch.randint(0, 97, (5, 1024))  # 5120 tokens: chunks of 2048, 2048 and 1024
    targets = torch.randint(0, 97, (5, 1024))
    targets[1, 100:900] = -1  # ignored positions, unevenly spread over the chunks
    _, loss = model(idx, targets)
    loss.backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits, none = model(idx)
    reference = F.cross_entropy(logits.reshape(-1, 97), targets.reshape(-1), ignore_index=-1)
    reference.backward()
    assert none is None and loss.item() == pytest.approx(reference.item(), rel=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, rtol=1e-4, atol=1e-7, msg=name)
    # a chunk size that divides nothing evenly, directly, and under no_grad (evaluation)
    h = torch.randn(3, 50, 32, requires_grad=True)
    t = torch.randint(0, 97, (3, 50))
    model.zero_grad(set_to_none=True)
    chunked = model.head_loss(h, t, chunk=37)
    (2 * chunked).backward()  # the incoming gradient scales both
    ours = h.grad.clone(), model.lm_head.weight.grad.clone()
    h.grad, model.lm_head.weight.grad = None, None
    whole = F.cross_entropy(model.lm_head(h).reshape(-1, 97), t.reshape(-1))
    (2 * whole).backward()
    assert chunked.item() == pytest.approx(whole.item(), rel=1e-6)
    torch.testing.assert_close(ours, (h.grad, model.lm_head.weight.grad), rtol=1e-4, atol=1e-7)
    with torch.no_grad():
        assert model.head_loss(h, t, chunk=37).item() == pytest.approx(whole.item(), rel=1e-6)


def test_the_head_loss_under_bf16_autocast_is_autograd_over_the_autocast_logits():
    """Under autocast the chunked loss's products run in bf16 as autograd's would: loss and gradients equal
    the whole-logits reference under the same autocast, to bf16 rounding; a frozen head gets no gradient."""
    torch.manual_seed(0)
    head = nn.Linear(64, 300, bias=False)
    h = torch.randn(700, 64, requires_grad=True)
    t = torch.randint(0, 300, (700,))
    t[::7] = -1
    model = SimpleNamespace(lm_head=head)
    with torch.autocast("cpu", torch.bfloat16):
        loss = GPT.head_loss(model, h, t, chunk=256)
    loss.backward()
    ours = h.grad.clone(), head.weight.grad.clone()
    h.grad, head.weight.grad = None, None
    with torch.autocast("cpu", torch.bfloat16):
        reference = F.cross_entropy(head(h).float(), t, ignore_index=-1)
    reference.backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-3)
    for a, b in zip(ours, (h.grad, head.weight.grad)):
        assert (a - b).abs().max() <= 0.02 * b.abs().max()  # bf16 products: ~3 significant digits
    head.weight.requires_grad_(False)
    h.grad, head.weight.grad = None, None
    GPT.head_loss(model, h, t, chunk=256).backward()
    assert head.weight.grad is None and h.grad is not None


def test_the_head_loss_recomputes_nothing():
    """Forward and backward of the chunked loss run the three products of autograd over whole logits
    (logits, x's gradient, the weight's), 2 N d V FLOPs each, and no fourth (a recomputed forward)."""
    from torch.utils.flop_counter import FlopCounterMode

    N, d, V = 600, 32, 97
    head = nn.Linear(d, V, bias=False)
    h = torch.randn(N, d, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        GPT.head_loss(SimpleNamespace(lm_head=head), h, torch.randint(0, V, (N,)), chunk=256).backward()
    assert counter.get_total_flops() == 3 * 2 * N * d * V


def minimal_hf_dir(tmp_path, hf, keys: dict):
    """hf's weights with a config.json of only model_type and keys: every other key left to the format's
    defaults, as an older or hand-written config leaves them."""
    hf.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": hf.config.model_type, **keys}))
    return tmp_path


def test_a_gpt2_config_with_every_optional_key_absent_takes_gpt2s_own_defaults(tmp_path):
    """transformers' GPT2Config (models/gpt2/configuration_gpt2.py) defaults: activation_function
    'gelu_new' (the tanh GELU), n_inner None (4 x n_embd), layer_norm_epsilon 1e-5, tie_word_embeddings
    True, scale_attn_weights True. The import agrees, and so do the logits of transformers' own model."""
    transformers = pytest.importorskip("transformers")
    sizes = dict(n_layer=2, n_head=4, n_embd=32, n_positions=48, vocab_size=101)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**sizes)).eval()
    path = minimal_hf_dir(tmp_path, hf, sizes)
    ours = from_pretrained(str(path)).eval()
    c = ours.config
    assert (c.activation, c.mlp_hidden, c.norm_eps, c.tie_embeddings, c.bias) == ("gelu_tanh", 128, 1e-5, True, True)
    assert c.scale == 1 / math.sqrt(8)
    idx = torch.randint(0, 101, (2, 48))
    with torch.no_grad():
        expected = transformers.AutoModelForCausalLM.from_pretrained(path).eval()(idx).logits
        torch.testing.assert_close(ours(idx)[0], expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


def test_a_neox_config_with_every_optional_key_absent_takes_neoxs_own_defaults(tmp_path):
    """transformers' GPTNeoXConfig (models/gpt_neox/configuration_gpt_neox.py) defaults: a quarter of each
    head rotated (rotary_pct / partial_rotary_factor 0.25) at base 10000, hidden_act 'gelu' (exact),
    use_parallel_residual True, tie_word_embeddings False, layer_norm_eps 1e-5."""
    transformers = pytest.importorskip("transformers")
    sizes = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128)
    sizes.update(max_position_embeddings=48, vocab_size=96)
    torch.manual_seed(0)
    hf = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**sizes)).eval()
    path = minimal_hf_dir(tmp_path, hf, sizes)
    ours = from_pretrained(str(path)).eval()
    c = ours.config
    assert (c.rotary_dims, c.rope_base, c.activation, c.parallel_residual) == (4, 10000.0, "gelu", True)
    assert (c.tie_embeddings, c.norm_eps, c.bias) == (False, 1e-5, True)
    idx = torch.randint(0, 96, (2, 48))
    with torch.no_grad():
        expected = transformers.AutoModelForCausalLM.from_pretrained(path).eval()(idx).logits
        torch.testing.assert_close(ours(idx)[0], expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


@pytest.mark.parametrize(
    "model_type,change,words",
    [
        ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        ("gpt2", dict(scale_attn_weights=False), "scale_attn_weights"),
        ("gpt2", dict(activation_function="relu"), "activation 'relu'"),
        ("gpt_neox", dict(hidden_act="silu"), "activation 'silu'"),
        ("gpt_neox", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_type='linear'"),
    ],
)
def test_an_option_the_model_lacks_is_refused_not_dropped(tmp_path, model_type, change, words):
    transformers = pytest.importorskip("transformers")
    if model_type == "gpt2":
        config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=16, vocab_size=50, **change)
        hf = transformers.GPT2LMHeadModel(config)
    else:
        sizes = dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32, vocab_size=50)
        hf = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**sizes, **change))
    hf.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"does not describe a model here.*{re.escape(words)}"):
        from_pretrained(str(tmp_path))


def test_a_config_json_that_no_memory_holds_is_refused_at_once(tmp_path):
    """A GPT-2 config.json of 200,000 layers (a few parameters each, but minutes to build: beyond the
    domain's 4096 layers), and a NeoX one whose context of 10^12 tokens holds 4 TB of rotary angles beside
    small weights: one line each, before anything is built or read."""
    deep, wide = tmp_path / "deep", tmp_path / "long"
    gpt2 = {"model_type": "gpt2", "n_layer": 200_000, "n_embd": 16, "n_head": 2, "n_positions": 64, "vocab_size": 100}
    neox = {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2}
    neox |= {"intermediate_size": 256, "max_position_embeddings": 10**12, "vocab_size": 1000}
    for d, c in ((deep, gpt2), (wide, neox)):
        d.mkdir()
        (d / "config.json").write_text(json.dumps(c))
        (d / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(ValueError, match="n_layer=200000 is invalid: it must be <= 4096"):
        from_pretrained(str(deep))
    with pytest.raises(ConfigError, match=r"need [\d,.]+ GiB, more than the [\d,.]+ GiB free on cpu"):
        from_pretrained(str(wide))


@pytest.mark.parametrize("mode", sorted(QUERY_MODES))
def test_every_norm_takes_the_configs_epsilon(mode):
    """norm_eps reaches every LayerNorm and RMSNorm (the blocks', the final one, the query MLP's): a norm built
    with torch's default 1e-5 passes every test at the default norm_eps, and only the export round trip noticed.
    Here eps is 0.125, and the final norm's output is the formula's with it: (x - mean) / sqrt(var + eps)."""
    config = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=32, query_mode=mode, norm_eps=0.125)
    model = GPT(config)
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]
    per_block = 2 + 2 * QUERY_MODES[mode].mlp  # ln_1, ln_2, and the query MLP's RMSNorm and LayerNorm
    assert len(norms) == 2 * per_block + 1 and all(m.eps == 0.125 for m in norms), [m.eps for m in norms]
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0] * 4])
    by_hand = (x - 3.0) / math.sqrt(3.5 + 0.125)  # mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5
    with torch.no_grad():
        assert torch.allclose(model.transformer.ln_f(x), by_hand, atol=1e-6)
