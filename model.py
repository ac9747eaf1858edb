"""GPT language model with a choice of attention query function.

Every architecture choice of the project lives here: GPTConfig is the one description of a model
and GPT builds it. Parameter names follow nanoGPT / HF GPT-2 (transformer.wte, transformer.h.0.attn
.c_attn, ...) so GPT-2 weights load by name.

query_mode (arXiv 2603.13381, "Beyond Linearity in Attention Projections"):
  linear         Q = X W_Q                                       (standard; Q, K, V from one matmul)
  identity       Q = X                                           (no W_Q at all)
  residual       Q = X + X W_Q                                   (linear ablation of the paper's code)
  residual_gelu  Q = X + LayerNorm(W2 GELU(W1 RMSNorm(X)))       (the paper's nonlinear query)
  wide_mlp       linear queries, MLP hidden 4.75 d               (the paper's +12.5 % params arm)
X is the attention input (the output of ln_1). The paper writes the nonlinear query as (X + f(X)) / 2;
like its official code we drop the 1/2 here and fold it into the softmax scale, 1/(2 sqrt(head_dim)),
which is the default scale of every mode whose query carries the unscaled residual X.
"""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

QUERY_MODES = ("linear", "identity", "residual", "residual_gelu", "wide_mlp")
# Modes whose query is X plus something: the paper's 1/2 is folded into the attention scale.
HALF_SCALE_MODES = ("identity", "residual", "residual_gelu")
ACTIVATIONS = ("gelu", "gelu_tanh")
POS_EMBEDDINGS = ("learned", "rotary")


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for speed
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    n_kv_head: int | None = None  # None: one K/V head per query head; fewer: grouped-query attention
    dropout: float = 0.0
    bias: bool = False  # biases in the Linear and LayerNorm layers (GPT-2 and GPT-NeoX: True)
    query_mode: str = "linear"
    query_hidden: int | None = None  # residual_gelu's W1 width r; None: n_embd // 2 (the paper)
    attn_scale: float | None = None  # softmax scale; None: the query mode's default (see module doc)
    mlp_ratio: float | None = None  # MLP hidden = int(mlp_ratio * n_embd); None: 4, or 4.75 for wide_mlp
    activation: str = "gelu"  # MLP activation: exact 'gelu' (nanoGPT, Pythia) or 'gelu_tanh' (GPT-2)
    pos_embedding: str = "learned"  # 'learned' table or 'rotary' (no table)
    rotary_pct: float = 1.0  # fraction of each head's dims that rotary rotates (GPT-NeoX: 0.25)
    rope_base: float = 10000.0
    parallel_residual: bool = False  # x + attn(ln_1 x) + mlp(ln_2 x), as GPT-NeoX
    tie_embeddings: bool = True  # lm_head shares the token embedding
    norm_eps: float = 1e-5

    def __post_init__(self):
        def bad(field, allowed):
            raise ValueError(f"{field}={getattr(self, field)!r} is invalid: {allowed}")

        if self.query_mode not in QUERY_MODES:
            bad("query_mode", "use one of " + ", ".join(QUERY_MODES))
        if self.activation not in ACTIVATIONS:
            bad("activation", "use one of " + ", ".join(ACTIVATIONS))
        if self.pos_embedding not in POS_EMBEDDINGS:
            bad("pos_embedding", "use one of " + ", ".join(POS_EMBEDDINGS))
        for field in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, field) < 1:
                bad(field, "must be a positive integer")
        if self.n_embd % self.n_head:
            bad("n_embd", f"must be divisible by n_head={self.n_head}")
        if self.n_kv_head is not None and (self.n_kv_head < 1 or self.n_head % self.n_kv_head):
            bad("n_kv_head", f"must be a positive divisor of n_head={self.n_head}")
        if self.pos_embedding == "rotary" and (self.rotary_dims < 2 or self.rotary_dims % 2):
            bad("rotary_pct", f"must give an even number >= 2 of rotary dims out of head_dim={self.head_dim}")
        if not 0.0 <= self.dropout < 1.0:
            bad("dropout", "must be in [0, 1)")

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
        ratio = self.mlp_ratio if self.mlp_ratio is not None else (4.75 if self.query_mode == "wide_mlp" else 4.0)
        return int(ratio * self.n_embd)

    @property
    def scale(self) -> float:
        if self.attn_scale is not None:
            return self.attn_scale
        half = 0.5 if self.query_mode in HALF_SCALE_MODES else 1.0
        return half / math.sqrt(self.head_dim)

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Keys and values of every layer for incremental decoding. Queries are never cached, so a
    nonlinear query function costs no cache memory: the cache depends on n_kv_head and head_dim only."""

    def __init__(self, config: GPTConfig, batch_size: int, device=None, dtype=torch.float32):
        shape = (config.n_layer, batch_size, config.kv_heads, config.block_size, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.pos = 0  # number of positions already cached

    @property
    def capacity(self) -> int:
        return self.k.size(3)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def reset(self):
        self.pos = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        end = self.pos + k.size(2)
        self.k[layer, :, :, self.pos:end] = k
        self.v[layer, :, :, self.pos:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


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

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        T = x.size(-2)
        cos, sin = self.cos[pos:pos + T].to(x.dtype), self.sin[pos:pos + T].to(x.dtype)
        x_rot, x_pass = x[..., :self.dims], x[..., self.dims:]
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
        self.w1 = nn.Linear(d, r, bias=config.bias)
        self.w2 = nn.Linear(r, d, bias=config.bias)
        self.ln = nn.LayerNorm(d, eps=config.norm_eps, bias=config.bias)

    def forward(self, x):
        return self.ln(self.w2(F.gelu(self.w1(self.rms(x)))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.query_mode = config.query_mode
        self.q_dim = config.n_embd if config.query_mode in ("linear", "wide_mlp", "residual") else 0
        self.kv_dim = self.n_kv_head * self.head_dim
        # One fused matmul for whatever linear projections the mode has (Q and K/V, or K/V only).
        self.c_attn = nn.Linear(config.n_embd, self.q_dim + 2 * self.kv_dim, bias=config.bias)
        self.query = QueryMLP(config) if config.query_mode == "residual_gelu" else None
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout
        self.scale = config.scale

    def forward(self, x, rotary=None, cache=None, layer=0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        if self.query_mode == "identity":
            q = x
        elif self.query_mode == "residual":
            q = x + q
        elif self.query_mode == "residual_gelu":
            q = x + self.query(x)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)

        pos = cache.pos if cache is not None else 0
        if rotary is not None:
            q, k = rotary(q, pos), rotary(k, pos)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        # Causal within the new tokens; every cached position is in the past and visible.
        mask, causal = None, T > 1
        if pos > 0 and T > 1:
            mask = torch.ones(T, pos + T, dtype=torch.bool, device=x.device).tril(diagonal=pos)
            causal = False
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head,
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.mlp_hidden, bias=config.bias)
        self.c_proj = nn.Linear(config.mlp_hidden, config.n_embd, bias=config.bias)
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

    def forward(self, x, rotary=None, cache=None, layer=0):
        a = self.attn(self.ln_1(x), rotary, cache, layer)
        if self.parallel_residual:
            return x + a + self.mlp(self.ln_2(x))
        x = x + a
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
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
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections that write into the residual stream.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

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
        """Matmul FLOPs per token: 2 per weight of every Linear (lm_head and the query MLP included)
        plus 4 * n_layer * seq_len * n_embd for the attention scores and values (PaLM's count, which
        charges the full sequence, not the causal half). Training is 3x forward (backward = 2x)."""
        weights = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        forward = 2 * weights + 4 * self.config.n_layer * seq_len * self.config.n_embd
        return 3 * forward if training else forward

    def forward(self, idx, targets=None, cache: KVCache | None = None, last_only: bool = False):
        """Logits (B, T, vocab), or (B, 1, vocab) with last_only; and the mean cross-entropy against
        targets (ignore_index -1) when targets are given. With a cache, idx continues the cached
        sequence at position cache.pos."""
        B, T = idx.shape
        pos = cache.pos if cache is not None else 0
        limit = cache.capacity if cache is not None else self.config.block_size
        if pos + T > limit:
            raise ValueError(f"sequence length {pos + T} exceeds block_size={limit}: crop the input to "
                             f"the last {limit} tokens or use a model with a larger block_size")
        x = self.transformer.wte(idx)
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe(torch.arange(pos, pos + T, device=idx.device))
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, self.rotary, cache, i)
        x = self.transformer.ln_f(x)
        if cache is not None:
            cache.pos += T
        if last_only:
            x = x[:, -1:, :]
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True, generator: torch.Generator | None = None):
        """Continue idx (B, T) by max_new_tokens tokens. temperature 0 is greedy. With the cache each
        step feeds one token; when the context is full the cache is refilled from the last block_size
        tokens, so the result equals recomputation on the cropped context (nanoGPT's behaviour)."""
        bs = self.config.block_size
        cache = None
        if use_cache:
            cache = KVCache(self.config, idx.size(0), idx.device, self.lm_head.weight.dtype)
        for _ in range(max_new_tokens):
            if cache is None:
                logits, _ = self(idx[:, -bs:], last_only=True)
            elif cache.pos == 0 or cache.pos == bs:
                cache.reset()
                logits, _ = self(idx[:, -bs:], cache=cache, last_only=True)
            else:
                logits, _ = self(idx[:, -1:], cache=cache, last_only=True)
            logits = logits[:, -1, :].float()
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, nxt), dim=1)
        return idx

    @classmethod
    def from_pretrained(cls, name_or_path: str, **overrides):
        """GPT-2 weights ('gpt2' ... 'gpt2-xl' or a local HF directory) through transformers.
        overrides may change non-architectural fields such as dropout."""
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(name_or_path, torch_dtype=torch.float32)
        c = hf.config
        if c.model_type != "gpt2":
            raise ValueError(f"cannot import model_type={c.model_type!r} from {name_or_path}: supported is gpt2")
        config = GPTConfig(
            block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head,
            n_embd=c.n_embd, bias=True, norm_eps=c.layer_norm_epsilon, tie_embeddings=True,
            activation="gelu" if c.activation_function == "gelu" else "gelu_tanh", **overrides,
        )
        if config.query_mode != "linear":
            raise ValueError(f"query_mode={config.query_mode!r}: pretrained GPT-2 weights are linear-query only")
        model = cls(config)
        # HF GPT-2 stores Linear weights as Conv1D, (in, out): transpose those.
        conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        theirs = {k: v for k, v in hf.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        ours = model.state_dict()
        missing = sorted(set(ours) - set(theirs))
        if missing:
            raise ValueError(f"{name_or_path} lacks weights for {missing[:4]}")
        with torch.no_grad():
            for k, v in ours.items():
                w = theirs[k].t() if k.endswith(conv1d) else theirs[k]
                v.copy_(w)
        return model
