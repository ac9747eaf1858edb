"""GPT language model with a choice of attention query function.

Every architecture choice of the project lives here: GPTConfig is the one description of a model
and GPT builds it. Parameter names follow nanoGPT / HF GPT-2 (transformer.wte, transformer.h.0.attn
.c_attn, ...) so GPT-2 weights load by name.

query_mode (arXiv 2603.13381, "Beyond Linearity in Attention Projections"), one entry of QUERY_MODES each:
  linear         Q = X W_Q                                       (standard; Q, K, V from one matmul)
  identity       Q = X                                           (no W_Q at all)
  residual       Q = X + X W_Q                                   (linear ablation of the paper's code)
  residual_gelu  Q = X + LayerNorm(W2 GELU(W1 RMSNorm(X)))       (the paper's nonlinear query)
X is the attention input (the output of ln_1). The paper's "wide MLP" arm (+12.5 % parameters) is linear
queries with mlp_ratio=4.75; query_mode='wide_mlp' is still read as exactly that.
"""

import hashlib
import math
from dataclasses import asdict, dataclass, replace
from typing import Annotated

import torch
import torch.nn as nn
import torch.nn.functional as F

from nlq.common.domains import At, OneOf, check

ROW_KERNELS = ("addmv", "linear")


class Linear(nn.Linear):
    """nn.Linear, except that a single row on a CPU (a token of single-stream decoding) may go through addmv.
    Decoding a token reads every weight once, so this product's rate is the decode speed, and which kernel
    is faster for one row depends on the CPU: in bf16 GPT-2 small's 49 matrices took 19.0 ms in F.linear
    against addmv's 14.3 ms on a 2-core Xeon with AMX, and 20-24 against 27-29 ms on a 2-core AMD EPYC
    with AVX512-BF16 and no AMX (float32: equal on both). row_kernel says which ("addmv" or "linear");
    decoding measures it per machine (nlq/inference/sampling.py). Under autocast nn.Linear's path is kept:
    autocast casts for F.linear, and has no rule for addmv."""

    row_kernel = "addmv"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            self.row_kernel != "addmv"
            or x.device.type != "cpu"
            or x.shape[:-1].numel() != 1
            or torch.is_autocast_enabled("cpu")
        ):
            return super().forward(x)
        row = x.reshape(-1)
        y = torch.mv(self.weight, row) if self.bias is None else torch.addmv(self.bias, self.weight, row)
        return y.view(*x.shape[:-1], -1)


@dataclass(frozen=True)
class QueryMode:
    """One query function. linear_q: c_attn computes an n_embd-wide X W_Q; mlp: the block holds the
    QueryMLP f; half_scale: the query carries the unscaled residual X, so the paper's (X + f(X)) / 2 is
    computed as X + f(X) with the 1/2 folded into the softmax scale, 1/(2 sqrt(head_dim)), as the paper's
    official code does. query(x, xw, f) is the query from X, X W_Q (if linear_q) and f (if mlp)."""

    linear_q: bool
    mlp: bool
    half_scale: bool
    query: object


QUERY_MODES = {
    "linear": QueryMode(linear_q=True, mlp=False, half_scale=False, query=lambda x, xw, f: xw),
    "identity": QueryMode(linear_q=False, mlp=False, half_scale=True, query=lambda x, xw, f: x),
    "residual": QueryMode(linear_q=True, mlp=False, half_scale=True, query=lambda x, xw, f: x + xw),
    "residual_gelu": QueryMode(linear_q=False, mlp=True, half_scale=True, query=lambda x, xw, f: x + f(x)),
}
NANOGPT_PEAK_FLOPS = 312e12  # the peak nanoGPT's estimate_mfu assumes (an A100, bf16)
LOSS_CHUNK = 2048  # tokens per chunk of the head and its loss (GPT.head_loss)
WIDE_MLP_RATIO = 4.75  # the paper's wide-MLP arm: 4.75 d = 3648 hidden units at d = 768
# Fields a pretrained import takes from the config; a checkpoint's weights fix every other field.
PROBE_FIELDS = ("dropout", "preproj", "preproj_ratio", "content_skip", "skip_init_std", "lora_rank", "lora_alpha")
ACTIVATIONS = ("gelu", "gelu_tanh")
POS_EMBEDDINGS = ("learned", "rotary")


WRAPPER_PREFIXES = ("_orig_mod.", "module.")  # what torch.compile and DDP put before parameter names


def clean_state_dict(state: dict) -> dict:
    """Parameter names without torch.compile / DDP wrapper prefixes."""
    out = {}
    for k, v in state.items():
        while k.startswith(WRAPPER_PREFIXES):  # wrappers nest in either order: module._orig_mod.x, _orig_mod.module.x
            k = k.split(".", 1)[1]
        out[k] = v
    return out


@dataclass
class GPTConfig:
    block_size: Annotated[int, At(1)] = 1024  # context length in tokens
    vocab_size: Annotated[int, At(1)] = 50304  # GPT-2's 50257 padded up to a multiple of 64 for speed
    n_layer: Annotated[int, At(1, 4096)] = 12  # transformer blocks (at most 4096: more take minutes to build)
    n_head: Annotated[int, At(1)] = 12  # attention (query) heads per block
    n_embd: Annotated[int, At(1)] = 768  # model width d
    n_kv_head: Annotated[int | None, At(1)] = None  # None: one K/V head per query head; fewer: grouped-query attention
    dropout: Annotated[float, At(0, below=1)] = 0.0  # on embeddings, attention weights and residual branches
    bias: bool = False  # biases in the Linear and LayerNorm layers (GPT-2 and GPT-NeoX: True)
    query_mode: Annotated[str, OneOf(*QUERY_MODES)] = "linear"  # see QUERY_MODES
    query_hidden: Annotated[int | None, At(1)] = None  # residual_gelu's W1 width r; None: n_embd // 2 (the paper)
    attn_scale: Annotated[float | None, At(above=0)] = None  # softmax scale; None: the query mode's (see QueryMode)
    mlp_ratio: Annotated[float | None, At(above=0)] = None  # MLP hidden = int(ratio * n_embd); None: 4 (13/3: 3328)
    activation: Annotated[str, OneOf(*ACTIVATIONS)] = "gelu"  # exact 'gelu' (nanoGPT, Pythia) or 'gelu_tanh' (GPT-2)
    pos_embedding: Annotated[str, OneOf(*POS_EMBEDDINGS)] = "learned"  # 'learned' table or 'rotary' (no table)
    rotary_pct: Annotated[float, At(above=0, hi=1)] = 1.0  # fraction of head dims rotated (GPT-NeoX: 0.25)
    rope_base: Annotated[float, At(above=1)] = 10000.0  # rotary frequency base
    parallel_residual: bool = False  # x + attn(ln_1 x) + mlp(ln_2 x), as GPT-NeoX
    tie_embeddings: bool = True  # lm_head shares the token embedding
    norm_eps: Annotated[float, At(above=0)] = 1e-5  # epsilon of every LayerNorm / RMSNorm
    # arXiv 2604.10791: x~ = x^ + W_down SiLU(W_up x^) on the block's normalised input x^, before Q/K/V
    preproj: bool = False  # add the pre-projection x~ before Q/K/V
    preproj_ratio: Annotated[float, At(above=0)] = 1.25  # W_up's width, as a multiple of n_embd
    content_skip: bool = False  # block output += W_skip x~ (d x d, no bias), bypassing attention
    skip_init_std: Annotated[float, At(0)] = 1e-4  # W_skip's init std (nearly zero: the model starts as it was)
    # LoRA on the attention's input (c_attn) and output (c_proj) projections; 0: off
    lora_rank: Annotated[int, At(0)] = 0  # LoRA rank r
    lora_alpha: Annotated[float | None, At(above=0)] = None  # None: 2 * lora_rank

    def __post_init__(self):
        def bad(field, allowed):
            raise ValueError(f"{field}={getattr(self, field)!r} is invalid: {allowed}")

        if self.query_mode == "wide_mlp":  # the old name of an arm, kept for configs and checkpoints
            self.query_mode = "linear"
            self.mlp_ratio = WIDE_MLP_RATIO if self.mlp_ratio is None else self.mlp_ratio
        check(self)
        if self.n_embd % self.n_head:
            bad("n_embd", f"must be divisible by n_head={self.n_head}")
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            bad("n_kv_head", f"must be a positive divisor of n_head={self.n_head}")
        if self.pos_embedding == "rotary" and (self.rotary_dims < 2 or self.rotary_dims % 2):
            bad("rotary_pct", f"must give an even number >= 2 of rotary dims out of head_dim={self.head_dim}")
        if self.mlp_hidden < 1:
            bad("mlp_ratio", f"must give at least one hidden unit at n_embd={self.n_embd}")
        if self.preproj and int(self.preproj_ratio * self.n_embd) < 1:
            bad("preproj_ratio", f"must give at least one hidden unit at n_embd={self.n_embd}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def rotary_dims(self) -> int:
        return int(self.head_dim * self.rotary_pct)

    @property
    def mlp_hidden(self) -> int:
        return int((self.mlp_ratio if self.mlp_ratio is not None else 4.0) * self.n_embd)

    @property
    def query(self) -> QueryMode:
        return QUERY_MODES[self.query_mode]

    @property
    def scale(self) -> float:
        if self.attn_scale is not None:
            return self.attn_scale
        return (0.5 if self.query.half_scale else 1.0) / math.sqrt(self.head_dim)

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Keys and values of every layer for incremental decoding. Queries are never cached, so a
    nonlinear query function costs no cache memory: the cache depends on n_kv_head and head_dim only."""

    static = False  # positions are a host int: each step's shapes grow with it

    def __init__(self, config: GPTConfig, batch_size: int, device=None, dtype=torch.float32):
        shape = (config.n_layer, batch_size, config.kv_heads, config.block_size, config.head_dim)
        # Uninitialised: only positions below pos are ever read (zeroing GPT-2 small's cache costs 10 ms).
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.pos = 0  # number of positions already cached

    @property
    def capacity(self) -> int:
        return self.k.size(3)

    def reset(self):
        self.pos = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        end = self.pos + k.size(2)
        self.k[layer, :, :, self.pos : end] = k
        self.v[layer, :, :, self.pos : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


class StaticKVCache(KVCache):
    """A KVCache whose every step has the same shapes and reads no host value: the position is a device
    tensor, and attention reads every slot, those at or past the position masked out. A one-token step is
    then one fixed sequence of kernels, which a CUDA graph captures once and replays (nlq/eval/decoding.py).
    Slots start at zero: a masked slot's weight is exactly 0, and 0 times garbage could be NaN. Each layer's
    keys and values are a tensor of their own, not a view of one: torch.compile then writes a step's slots in
    place, where through a view it copies the layer's whole cache twice a step."""

    static = True

    def __init__(self, config: GPTConfig, batch_size: int, device=None, dtype=torch.float32):
        shape = (batch_size, config.kv_heads, config.block_size, config.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.slots = torch.arange(config.block_size, device=device)
        self.positions = self.mask = None  # of the step being computed (begin)

    @property
    def capacity(self) -> int:
        return self.slots.numel()

    def reset(self):
        self.pos.zero_()

    def begin(self, T: int) -> torch.Tensor:
        """The positions of the T tokens of this step, and which slots each may attend to (itself and before)."""
        self.positions = self.pos + self.slots[:T]
        self.mask = self.slots[None, :] <= self.positions[:, None]
        return self.positions

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        self.k[layer].index_copy_(2, self.positions, k)
        self.v[layer].index_copy_(2, self.positions, v)
        return self.k[layer], self.v[layer]


class Rotary(nn.Module):
    """Rotary position embedding on the first rotary_dims of each head, rotate-half convention
    (GPT-NeoX / HF), so NeoX checkpoints load without permuting weights."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        dims = config.rotary_dims
        inv_freq = 1.0 / (config.rope_base ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims))
        freqs = torch.outer(torch.arange(config.block_size, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.dims = dims
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x: torch.Tensor, pos) -> torch.Tensor:
        """x rotated at positions pos, pos + 1, ... (pos an int), or at the positions of a tensor pos."""
        T = x.size(-2)
        if isinstance(pos, torch.Tensor):
            cos, sin = self.cos[pos].to(x.dtype), self.sin[pos].to(x.dtype)
        else:
            cos, sin = self.cos[pos : pos + T].to(x.dtype), self.sin[pos : pos + T].to(x.dtype)
        x_rot, x_pass = x[..., : self.dims], x[..., self.dims :]
        x1, x2 = x_rot.chunk(2, dim=-1)
        rotated = x_rot * cos + torch.cat((-x2, x1), dim=-1) * sin
        return torch.cat((rotated, x_pass), dim=-1)


class QueryMLP(nn.Module):
    """f(X) = LayerNorm(W2 GELU(W1 RMSNorm(X))), W1: d -> r, W2: r -> d. With r = d/2 it holds
    exactly the d^2 matrix parameters of the W_Q it replaces (plus two norm weight vectors)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        d, r = config.n_embd, config.query_hidden or config.n_embd // 2
        self.rms = nn.RMSNorm(d, eps=config.norm_eps)
        self.w1 = Linear(d, r, bias=config.bias)
        self.w2 = Linear(r, d, bias=config.bias)
        self.ln = nn.LayerNorm(d, eps=config.norm_eps, bias=config.bias)

    def forward(self, x):
        return self.ln(self.w2(F.gelu(self.w1(self.rms(x)))))


class PreProjection(nn.Module):
    """x~ = x^ + W_down SiLU(W_up x^) (arXiv 2604.10791): a nonlinear map of the normalised block input
    that sees no positions; Q, K, V (and rotary) are computed from its output. No biases."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        hidden = int(config.preproj_ratio * config.n_embd)
        self.up = Linear(config.n_embd, hidden, bias=False)
        self.down = Linear(hidden, config.n_embd, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(x)))


class LoRA(nn.Module):
    """The low-rank update (alpha / r) B A x of a frozen Linear (Hu et al. 2021). B starts at zero, so
    adding LoRA leaves the model's function unchanged until B trains. Its weights may be float32 in a bfloat16
    model (GPT.keep_adapters_float32, as PEFT keeps them): x is cast to them, the update back to x's dtype."""

    def __init__(self, d_in: int, d_out: int, rank: int, alpha: float):
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, d_in))
        self.B = nn.Parameter(torch.zeros(d_out, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x):
        return ((x.to(self.A.dtype) @ self.A.t()) @ self.B.t() * self.scale).to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.mode = config.query
        self.q_dim = config.n_embd if self.mode.linear_q else 0
        self.kv_dim = self.n_kv_head * self.head_dim
        # One fused matmul for whatever linear projections the mode has (Q and K/V, or K/V only).
        self.c_attn = Linear(config.n_embd, self.q_dim + 2 * self.kv_dim, bias=config.bias)
        self.query = QueryMLP(config) if self.mode.mlp else None
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.lora_attn = self.lora_proj = None
        if config.lora_rank:
            alpha = config.lora_alpha if config.lora_alpha is not None else 2 * config.lora_rank
            self.lora_attn = LoRA(config.n_embd, self.c_attn.out_features, config.lora_rank, alpha)
            self.lora_proj = LoRA(config.n_embd, config.n_embd, config.lora_rank, alpha)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout
        self.scale = config.scale

    def forward(self, x, rotary=None, cache=None, layer=0):
        B, T, C = x.shape
        qkv = self.c_attn(x)
        if self.lora_attn is not None:
            qkv = qkv + self.lora_attn(x)
        xw, k, v = qkv.split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        q = self.mode.query(x, xw, self.query)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)

        static = cache is not None and cache.static
        pos = cache.positions if static else cache.pos if cache is not None else 0
        if rotary is not None:
            q, k = rotary(q, pos), rotary(k, pos)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        # Causal within the new tokens; every cached position is in the past and visible.
        mask, causal = None, T > 1
        if static:
            mask, causal = cache.mask, False
        elif pos > 0 and T > 1:
            mask = torch.ones(T, pos + T, dtype=torch.bool, device=x.device).tril(diagonal=pos)
            causal = False
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head,
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        out = self.c_proj(y)
        if self.lora_proj is not None:
            out = out + self.lora_proj(y)
        return self.resid_dropout(out)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.mlp_hidden, bias=config.bias)
        self.c_proj = Linear(config.mlp_hidden, config.n_embd, bias=config.bias)
        self.approximate = "tanh" if config.activation == "gelu_tanh" else "none"
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)
        self.mlp = MLP(config)
        self.parallel_residual = config.parallel_residual
        self.preproj = PreProjection(config) if config.preproj else None
        self.skip = Linear(config.n_embd, config.n_embd, bias=False) if config.content_skip else None

    def forward(self, x, rotary=None, cache=None, layer=0):
        h = self.ln_1(x)
        if self.preproj is not None:
            h = self.preproj(h)
        a = self.attn(h, rotary, cache, layer)
        if self.parallel_residual:
            out = x + a + self.mlp(self.ln_2(x))
        else:
            x = x + a
            out = x + self.mlp(self.ln_2(x))
        # The content skip joins the block's output after the MLP, as arXiv 2604.10791's official code adds
        # it: in a sequential block ln_2 and the MLP never see it.
        return out + self.skip(h) if self.skip is not None else out


def chunk_loss(x, weight, targets):
    """(summed cross-entropy, float32 log-probabilities, the product's dtype) of x @ weight.T against targets,
    ignoring -1. The product runs in the dtype autocast gives it, the loss in float32, as
    F.cross_entropy(F.linear(x, weight).float(), ...) does. At most two logits-sized tensors exist at once."""
    product = F.linear(x, weight)
    dtype, logits = product.dtype, product.float()
    del product
    logprobs = F.log_softmax(logits, 1)
    del logits
    picked = logprobs.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    return -(picked * (targets != -1)).sum(), logprobs, dtype


class HeadLoss(torch.autograd.Function):
    """The summed cross-entropy of x @ weight.T (x: N x d, weight: vocab x d, targets: N, -1 ignored), chunk
    rows at a time, with both gradients computed in the forward while each chunk's logits exist: the
    backward only scales them. Three products per chunk, as autograd over the whole logits does (a
    recomputing checkpoint would add a fourth: +9 % of GPT-2 small's training FLOPs). The saved gradients
    are x's size and weight's (accumulated over chunks in float32); each product runs in autocast's dtype,
    as autograd's backward of an autocast matmul does."""

    @staticmethod
    def forward(ctx, x, weight, targets, chunk):
        want_x, want_w = ctx.needs_input_grad[:2]
        grad_x = torch.empty_like(x) if want_x else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        total = torch.zeros((), device=x.device)
        for i in range(0, len(x), chunk):
            xc, tc = x[i : i + chunk], targets[i : i + chunk]
            loss, logprobs, dtype = chunk_loss(xc, weight, tc)  # dtype: autocast's (bf16), else the weights'
            total = total + loss
            # d loss / d logits = softmax - one_hot(target), zero on ignored rows; in place
            grad = logprobs.exp_()
            grad.scatter_add_(1, tc.clamp(min=0)[:, None], torch.full_like(grad[:, :1], -1.0))
            grad.mul_((tc != -1)[:, None])
            grad = grad.to(dtype)  # autocast casts weight and xc to it below (weight once, from its cache)
            if want_x:
                grad_x[i : i + chunk] = (grad @ weight).to(x.dtype)
            if want_w:
                grad_w += (grad.t() @ xc).float()
            del logprobs, grad  # before the next chunk's logits exist
        ctx.save_for_backward(grad_x, grad_w)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_x, grad_w = ctx.saved_tensors
        gx = grad_x * grad_total.to(grad_x.dtype) if grad_x is not None else None
        gw = (grad_w * grad_total).to(ctx.weight_dtype) if grad_w is not None else None
        return gx, gw, None, None


class GPT(nn.Module):
    chunked_loss = True  # head_loss in chunks; False: over the whole logits, as nanoGPT (a benchmark's switch)

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        # One draw from torch's generator seeds every parameter's own (init_weights), taken before the layers
        # are built (each nn.Linear draws from it while it is made, and the layers differ between arms):
        # torch.manual_seed(s); GPT(config) stays reproducible, as in nanoGPT. On the CPU explicitly: a model
        # built under torch.device("meta") draws it too.
        base = int(torch.randint(2**62, (1,), device="cpu"))
        layers = dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias),
        )
        if config.pos_embedding == "learned":
            layers["wpe"] = nn.Embedding(config.block_size, config.n_embd)
        self.transformer = nn.ModuleDict(layers)
        self.rotary = Rotary(config) if config.pos_embedding == "rotary" else None
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight
        self.init_weights(base)

    def init_weights(self, base: int) -> None:
        """GPT-2's initialisation (N(0, 0.02) matrices and tables, N(0, 0.02 / sqrt(2 n_layer)) for the
        projections into the residual stream, zero biases, unit norms; arXiv 2604.10791's small pre-projection
        and skip; LoRA's A kaiming-uniform and B zero), each parameter drawn from a generator of its own seeded
        by base and its name, and c_attn's Q, K and V rows as three such parameters. So two models of one
        base start alike in every parameter they share: a query mode's own weights, or a wider MLP, take
        nothing from the others' streams, and a mode without W_Q starts with linear's K and V."""
        config = self.config
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.is_meta:  # shapes only: nothing to draw
                    continue
                if name.endswith("attn.c_attn.weight"):
                    attn = self.get_submodule(name.rsplit(".", 2)[0])
                    for part, rows in zip("qkv", p.split([attn.q_dim, attn.kv_dim, attn.kv_dim])):
                        if rows.numel():
                            rows.normal_(0.0, 0.02, generator=parameter_generator(base, f"{name}:{part}", p))
                    continue
                init_parameter(name, p, config, parameter_generator(base, name, p))

    def non_finite(self) -> list[str]:
        """The names of the parameters holding a NaN or an infinity (a run that diverged before it saved)."""
        return [n for n, p in self.named_parameters() if not torch.isfinite(p).all()]

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; non_embedding drops the token and position tables (the paper's count).
        A tied lm_head is the token table and is dropped with it; an untied one is counted."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wte.weight.numel()
            if "wpe" in self.transformer:
                n -= self.transformer.wpe.weight.numel()
        return n

    def flops_per_token(self, seq_len: int, training: bool = True) -> float:
        """Matmul FLOPs per token: 2 per weight of every matrix multiply (every 2-D parameter but the
        position table and an untied token table: lm_head, the query MLP and LoRA included) plus
        4 * n_layer * seq_len * n_embd for the attention scores and values (PaLM's count, which charges
        the full sequence, not the causal half). Training is 3x forward (backward = 2x)."""
        lookups = [] if self.config.tie_embeddings else [self.transformer.wte.weight]
        if "wpe" in self.transformer:
            lookups.append(self.transformer.wpe.weight)
        weights = sum(p.numel() for p in self.parameters() if p.dim() == 2) - sum(p.numel() for p in lookups)
        forward = 2 * weights + 4 * self.config.n_layer * seq_len * self.config.n_embd
        return 3 * forward if training else forward

    # ---- nanoGPT's model API (model.py of github.com/karpathy/nanoGPT), kept for its scripts and notebooks ----

    @classmethod
    def from_pretrained(cls, model_type: str, override_args: dict | None = None) -> "GPT":
        """nanoGPT's GPT.from_pretrained('gpt2', dict(dropout=0.0)): nlq.interop.importers.from_pretrained, which
        also reads Pythia, local Hugging Face directories and this project's exports, running no code. Imported
        here, when called, as nanoGPT imports transformers: model.py stands on torch alone until a user asks
        for pretrained weights (the one import up the floors tests/test_layout.py allows)."""
        from nlq.interop.importers import from_pretrained

        return from_pretrained(model_type, override_args)

    def get_num_params(self, non_embedding: bool = True) -> int:
        """nanoGPT's count: every parameter, less the position table if non_embedding. The token table is kept,
        as nanoGPT keeps it (tied, it is also the head). num_params is the paper's count, without it."""
        n = self.num_params(non_embedding=False)
        if non_embedding and "wpe" in self.transformer:
            n -= self.transformer.wpe.weight.numel()
        return n

    def crop_block_size(self, block_size: int) -> None:
        """A shorter context, as nanoGPT's surgery for a pretrained model: the position table (or rotary
        angles) cut to block_size, config.block_size with it."""
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise TypeError(f"block_size={block_size!r}: give an int (the new context length)")
        if not 1 <= block_size <= self.config.block_size:
            raise ValueError(f"block_size={block_size}: give 1 to {self.config.block_size} (the model's)")
        self.config.block_size = block_size
        if "wpe" in self.transformer:
            self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])
        if self.rotary is not None:
            self.rotary.cos, self.rotary.sin = self.rotary.cos[:block_size], self.rotary.sin[:block_size]

    def use_row_kernel(self, kernel: str) -> None:
        """The kernel every Linear of the model uses for a single row on a CPU (Linear's docstring)."""
        if kernel not in ROW_KERNELS:
            raise ValueError(f"kernel={kernel!r}: give one of {', '.join(ROW_KERNELS)}")
        for m in self.modules():
            if isinstance(m, Linear):
                m.row_kernel = kernel

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas, device_type: str):
        """AdamW with weight decay on the trainable parameters of two or more dims (matrices, embeddings) and
        none on the rest (biases, norms), as nanoGPT and train.py train; fused on CUDA and CPU, where the fused
        kernel is the fastest and also takes found_inf."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = device_type in ("cuda", "cpu")
        return torch.optim.AdamW(groups, lr=learning_rate, betas=tuple(betas), fused=fused)

    def estimate_mfu(self, fwdbwd_per_iter: int, dt: float, peak_flops: float = NANOGPT_PEAK_FLOPS) -> float:
        """Model FLOPs utilisation of fwdbwd_per_iter sequences of block_size tokens trained in dt seconds, by
        flops_per_token (the 6N + 12 L H Q T of nanoGPT's count, N the weights of every matrix multiply, the
        query MLP's included), against peak_flops: by default nanoGPT's assumption, an A100's bf16 312 TFLOP/s;
        nlq.run.hardware.peak_flops(device, dtype) gives this machine's (what train.py reports)."""
        T = self.config.block_size
        achieved = self.flops_per_token(T) * T * fwdbwd_per_iter / dt
        return achieved / peak_flops

    def keep_adapters_float32(self) -> "GPT":
        """LoRA's weights back to float32 after the model was cast to bfloat16: PEFT keeps adapters in float32
        (autocast_adapter_dtype), so their updates and AdamW state do not round away. The pre-projection and
        the skip follow the model's dtype, as arXiv 2604.10791's code casts them to their layer's."""
        for m in self.modules():
            if isinstance(m, LoRA):
                m.float()
        return self

    @staticmethod
    def is_added(name: str) -> bool:
        """Whether a parameter belongs to what this project adds on top of a pretrained GPT-2 / GPT-NeoX
        (pre-projection, content skip, LoRA): the parameters a frozen probe trains."""
        return any(part in ("preproj", "skip", "lora_attn", "lora_proj") for part in name.split("."))

    def forward(
        self, idx, targets=None, cache: KVCache | None = None, last_only: bool = False, return_logits: bool = False
    ):
        """(logits, loss). Without targets: logits (B, T, vocab), or (B, 1, vocab) with last_only, and None.
        With targets: the mean cross-entropy (ignore_index -1), computed by head_loss without the whole logits
        ever existing, and logits None, unless return_logits asks for them too (one more head product).
        With a cache, idx continues the cached sequence at position cache.pos."""
        B, T = idx.shape
        static = cache is not None and cache.static
        pos = cache.pos if cache is not None and not static else 0
        limit = cache.capacity if cache is not None else self.config.block_size
        if pos + T > limit:  # a static cache's position is on the device: its decoder keeps it in bounds
            raise ValueError(
                f"sequence length {pos + T} exceeds block_size={limit}: crop the input to "
                f"the last {limit} tokens or use a model with a larger block_size"
            )
        positions = cache.begin(T) if static else torch.arange(pos, pos + T, device=idx.device)
        x = self.transformer.wte(idx)
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe(positions)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, self.rotary, cache, i)
        x = self.transformer.ln_f(x)
        if cache is not None:
            cache.pos += T
        if targets is not None:
            return (self.lm_head(x) if return_logits else None), self.head_loss(x, targets)
        if last_only:
            x = x[:, -1:, :]
        return self.lm_head(x), None

    def head_loss(self, x, targets, chunk: int = LOSS_CHUNK):
        """The mean cross-entropy of lm_head(x) against targets (ignore_index -1), chunk tokens at a time
        (HeadLoss): only one chunk's logits exist at once, instead of B x T x vocab of them (2.5 GB in float32
        for a GPT-2 micro-batch of 12 x 1024), and nothing is recomputed."""
        x, targets = x.reshape(-1, x.size(-1)), targets.reshape(-1)
        weight = self.lm_head.weight
        if not GPT.chunked_loss:  # nanoGPT's: the whole logits at once (what gpu_check's ablation times it against)
            return F.cross_entropy(F.linear(x, weight).float(), targets, ignore_index=-1)
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            total = HeadLoss.apply(x, weight, targets, chunk)
        else:
            total = sum(
                chunk_loss(x[i : i + chunk], weight, targets[i : i + chunk])[0] for i in range(0, len(x), chunk)
            )
        return total / (targets != -1).sum()

    def generate(
        self,
        idx,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        vocab_limit: int | None = None,
    ):
        """Continue idx (B, T) by max_new_tokens tokens. temperature 0 is greedy. With the cache each
        step feeds one token; when the context is full the cache is refilled from the last block_size
        tokens, so the result equals recomputation on the cropped context (nanoGPT's behaviour).
        vocab_limit: draw only ids below it (a vocabulary padded past the tokenizer's has rows of no token)."""
        check_sampling(temperature, top_k)
        bs = self.config.block_size
        cache = None
        if use_cache:
            cache = KVCache(self.config, idx.size(0), idx.device, self.lm_head.weight.dtype)
        with torch.no_grad():  # here, not as a decorator: mutmut leaves decorated functions unmutated
            for _ in range(max_new_tokens):
                if cache is None:
                    logits, _ = self(idx[:, -bs:], last_only=True)
                elif cache.pos == 0 or cache.pos == bs:
                    cache.reset()
                    logits, _ = self(idx[:, -bs:], cache=cache, last_only=True)
                else:
                    logits, _ = self(idx[:, -1:], cache=cache, last_only=True)
                nxt = next_token(logits, temperature, top_k, generator, vocab_limit)
                idx = torch.cat((idx, nxt), dim=1)
        return idx


def check_sampling(temperature: float, top_k: int | None) -> None:
    if not temperature >= 0:  # NaN too
        raise ValueError(f"temperature={temperature}: give 0 (greedy) or more")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k={top_k!r}: give a whole number of tokens, 1 or more (or None: all)")


def next_token(logits, temperature: float, top_k: int | None, generator, vocab_limit: int | None) -> torch.Tensor:
    """(B, 1) ids from the last position's logits (B, T, vocab): greedy at temperature 0, else drawn from the
    top_k most likely below vocab_limit (a vocabulary padded past the tokenizer's has rows of no token)."""
    logits = logits[:, -1, :vocab_limit].float()
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


def parameter_generator(base: int, name: str, p: torch.Tensor) -> torch.Generator:
    """A generator on p's device seeded by base and the parameter's name (a stable hash: Python's own
    hash of a string changes from process to process)."""
    digest = hashlib.blake2b(f"{base}:{name}".encode(), digest_size=8).digest()
    return torch.Generator(device=p.device).manual_seed(int.from_bytes(digest, "little") % 2**63)


def init_parameter(name: str, p: torch.Tensor, config: GPTConfig, g: torch.Generator) -> None:
    """One parameter's initial values by its name (GPT.init_weights)."""
    if name.endswith(".bias") or name.endswith(".B"):  # LoRA's B starts at zero: the model is unchanged
        p.zero_()
    elif p.dim() == 1:  # LayerNorm and RMSNorm weights
        p.fill_(1.0)
    elif name.endswith(".A"):
        nn.init.kaiming_uniform_(p, a=math.sqrt(5), generator=g)
    elif ".preproj." in name:
        p.normal_(0.0, 0.01, generator=g)
    elif name.endswith(".skip.weight"):
        p.normal_(0.0, config.skip_init_std, generator=g)
    elif name.endswith("c_proj.weight"):  # GPT-2's scaled init of the projections into the residual stream
        p.normal_(0.0, 0.02 / math.sqrt(2 * config.n_layer), generator=g)
    else:
        p.normal_(0.0, 0.02, generator=g)


def parameter_count(config, non_embedding: bool = False) -> int:
    """The model's parameters (GPT.num_params), exactly, without building it (by_depth)."""
    return by_depth(config, lambda model: model.num_params(non_embedding))


def buffer_count(config) -> int:
    """The floats the model holds beside its parameters (the rotary angles: 2 x block_size x rotary_dims),
    without building it: a memory check that counted parameters alone would let a huge context through."""
    return by_depth(config, lambda model: sum(b.numel() for b in model.buffers()))


def training_flops_per_token(config, seq_len: int) -> float:
    """GPT.flops_per_token of a training step at seq_len, without building the model (by_depth)."""
    return by_depth(config, lambda model: model.flops_per_token(seq_len))


def by_depth(config, measure):
    """measure(model) of the model config describes, at any depth, from models of one and of two blocks
    on the meta device: every block is alike, so the measure is linear in n_layer. A model that a file
    describes is never built, even on the meta device, just to be measured."""

    def at(n_layer: int):
        with torch.device("meta"):
            return measure(GPT(replace(config, n_layer=n_layer)))

    one, two = at(1), at(2)
    return one + (two - one) * (config.n_layer - 1)
