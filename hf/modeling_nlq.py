"""A GPT exported from the nonlinear-queries project (export.py --format=hf), for transformers: the same
model as the project's model.py, written again without it (its parity test keeps the two equal). Parameter
names are the project's (nanoGPT's). LoRA arrives merged into the weights it adapted; dropout is off.

query_mode (arXiv 2603.13381): linear Q = X W_Q; identity Q = X; residual Q = X + X W_Q; residual_gelu
Q = X + LayerNorm(W2 GELU(W1 RMSNorm(X))), X the attention's input; config.scale is the softmax scale.
No KV cache: generation recomputes the sequence (use_cache is off). Right padding is fine (attention is
causal); left padding is refused, since positions would shift.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_nlq import NLQConfig


class QueryMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.rms = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
        self.w1 = nn.Linear(c.n_embd, c.query_hidden, bias=c.bias)
        self.w2 = nn.Linear(c.query_hidden, c.n_embd, bias=c.bias)
        self.ln = nn.LayerNorm(c.n_embd, eps=c.norm_eps, bias=c.bias)

    def forward(self, x):
        return self.ln(self.w2(F.gelu(self.w1(self.rms(x)))))


def rotate(x, cos, sin, dims):
    """Rotary embedding of the first dims of each head, rotate-half convention."""
    x_rot, x_pass = x[..., :dims], x[..., dims:]
    x1, x2 = x_rot.chunk(2, dim=-1)
    return torch.cat((x_rot * cos + torch.cat((-x2, x1), dim=-1) * sin, x_pass), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.head_dim = c.n_embd // c.n_head
        self.q_dim = c.n_embd if c.query_mode in ("linear", "residual") else 0
        self.kv_dim = c.n_kv_head * self.head_dim
        self.c_attn = nn.Linear(c.n_embd, self.q_dim + 2 * self.kv_dim, bias=c.bias)
        self.query = QueryMLP(c) if c.query_mode == "residual_gelu" else None
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x, cos=None, sin=None):
        B, T, C = x.shape
        xw, k, v = self.c_attn(x).split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        mode = self.c.query_mode
        if mode == "linear":
            q = xw
        elif mode == "identity":
            q = x
        else:
            q = x + (xw if mode == "residual" else self.query(x))
        q = q.view(B, T, self.c.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.c.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.c.n_kv_head, self.head_dim).transpose(1, 2)
        if cos is not None:
            q, k = rotate(q, cos, sin, self.c.rotary_dims), rotate(k, cos, sin, self.c.rotary_dims)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=T > 1, scale=self.c.scale, enable_gqa=self.c.n_kv_head != self.c.n_head
        )
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, c.mlp_hidden, bias=c.bias)
        self.c_proj = nn.Linear(c.mlp_hidden, c.n_embd, bias=c.bias)
        self.approximate = "tanh" if c.activation == "gelu_tanh" else "none"

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))


class PreProjection(nn.Module):
    """x + W_down SiLU(W_up x) on the block's normalised input (arXiv 2604.10791)."""

    def __init__(self, c):
        super().__init__()
        self.up = nn.Linear(c.n_embd, c.preproj_hidden, bias=False)
        self.down = nn.Linear(c.preproj_hidden, c.n_embd, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.norm_eps, bias=c.bias)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.norm_eps, bias=c.bias)
        self.mlp = MLP(c)
        self.preproj = PreProjection(c) if c.preproj_hidden else None
        self.skip = nn.Linear(c.n_embd, c.n_embd, bias=False) if c.content_skip else None

    def forward(self, x, cos=None, sin=None):
        h = self.ln_1(x)
        if self.preproj is not None:
            h = self.preproj(h)
        a = self.attn(h, cos, sin)
        if self.c.parallel_residual:
            out = x + a + self.mlp(self.ln_2(x))
        else:
            x = x + a
            out = x + self.mlp(self.ln_2(x))
        return out + self.skip(h) if self.skip is not None else out


class NLQForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = NLQConfig
    base_model_prefix = "transformer"
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: NLQConfig):
        super().__init__(config)
        layers = dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias),
        )
        if config.pos_embedding == "learned":
            layers["wpe"] = nn.Embedding(config.block_size, config.n_embd)
        self.transformer = nn.ModuleDict(layers)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, value):
        self.transformer.wte = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def rotary(self, T, device):
        dims = self.config.rotary_dims
        inv_freq = 1.0 / (self.config.rope_base ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims))
        freqs = torch.outer(torch.arange(self.config.block_size, dtype=torch.float32), inv_freq)[:T]
        emb = torch.cat((freqs, freqs), dim=-1).to(device)
        return emb.cos(), emb.sin()

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        B, T = input_ids.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        if attention_mask is not None and bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):
            raise ValueError("left padding is not supported (positions would shift): pad on the right")
        x = self.transformer.wte(input_ids)
        cos = sin = None
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe(torch.arange(T, device=input_ids.device))
        else:
            cos, sin = self.rotary(T, input_ids.device)
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for block in self.transformer.h:
            x = block(x, cos, sin)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids[:, -self.config.block_size :], "attention_mask": None}
