"""A GPT exported from the nonlinear-queries project (export.py --format=hf), for transformers: the same
model as the project's model.py, written again without it (tests/test_export.py keeps the two equal). Parameter
names are the project's (nanoGPT's). LoRA arrives merged into the weights it adapted; dropout is off.

query_mode (arXiv 2603.13381): linear Q = X W_Q; identity Q = X; residual Q = X + X W_Q; residual_gelu
Q = X + LayerNorm(W2 GELU(W1 RMSNorm(X))), X the attention's input; config.scale is the softmax scale.

What a transformers causal LM does, this does: a 2-D attention_mask (left or right padding; positions
counted from each row's first token), position_ids (restarting ones separate packed sequences), inputs_embeds,
a KV cache (transformers' DynamicCache, which generate makes), labels (shifted here; num_items_in_batch
divides the summed loss, as Trainer's gradient accumulation needs), output_hidden_states, output_attentions,
return_dict=False, gradient checkpointing, and attn_implementation 'sdpa' (the default) or 'eager' (the
explicit softmax, also used for output_attentions). Refused with an error rather than computed wrong: a 4-D
mask or a cache other than a DynamicCache (their layout is not this file's), positions at or past
block_size, unknown keyword arguments.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_nlq import NLQConfig

# transformers renamed the cache argument and output field from past_key_values to cache (5.2x); both are read.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
# Arguments some transformers versions' generate passes and this model has no use for.
IGNORED = {"cache_position"}


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


def eager_attention(q, k, v, mask, scale):
    """softmax(q k^T scale, masked) v written out: (output, the attention weights). K/V heads are shared by
    consecutive query heads, as scaled_dot_product_attention's enable_gqa shares them."""
    groups = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.float().softmax(dim=-1).to(q.dtype)
    return weights @ v, weights


class Attention(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.c, self.layer = c, layer
        self.head_dim = c.n_embd // c.n_head
        self.q_dim = c.n_embd if c.query_mode in ("linear", "residual") else 0
        self.kv_dim = c.n_kv_head * self.head_dim
        self.c_attn = nn.Linear(c.n_embd, self.q_dim + 2 * self.kv_dim, bias=c.bias)
        self.query = QueryMLP(c) if c.query_mode == "residual_gelu" else None
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

    def queries(self, x, xw):
        mode = self.c.query_mode
        if mode == "linear":
            return xw
        if mode == "identity":
            return x
        return x + (xw if mode == "residual" else self.query(x))

    def forward(self, x, cos, sin, mask, cache, eager):
        """mask: None for plain causal attention over x alone, else (B or 1, 1, T, keys) bool, True where seen."""
        B, T, C = x.shape
        xw, k, v = self.c_attn(x).split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        q = self.queries(x, xw).view(B, T, self.c.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.c.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.c.n_kv_head, self.head_dim).transpose(1, 2)
        if cos is not None:
            q, k = rotate(q, cos, sin, self.c.rotary_dims), rotate(k, cos, sin, self.c.rotary_dims)
        if cache is not None:
            k, v = cache.update(k, v, self.layer)
        weights = None
        if eager:
            y, weights = eager_attention(q, k, v, mask, self.c.scale)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=mask is None and T > 1, scale=self.c.scale,
                enable_gqa=self.c.n_kv_head != self.c.n_head,
            )  # fmt: skip
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), weights


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


class Block(GradientCheckpointingLayer):
    """gradient_checkpointing_enable() recomputes it in the backward (GradientCheckpointingLayer: x, cos, sin
    positional, for reentrant checkpoints)."""

    def __init__(self, c, layer):
        super().__init__()
        self.c = c
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.norm_eps, bias=c.bias)
        self.attn = Attention(c, layer)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.norm_eps, bias=c.bias)
        self.mlp = MLP(c)
        self.preproj = PreProjection(c) if c.preproj_hidden else None
        self.skip = nn.Linear(c.n_embd, c.n_embd, bias=False) if c.content_skip else None

    def forward(self, x, cos=None, sin=None, mask=None, cache=None, eager=False):
        h = self.ln_1(x)
        if self.preproj is not None:
            h = self.preproj(h)
        a, weights = self.attn(h, cos, sin, mask, cache, eager)
        if self.c.parallel_residual:
            out = x + a + self.mlp(self.ln_2(x))
        else:
            x = x + a
            out = x + self.mlp(self.ln_2(x))
        return (out + self.skip(h) if self.skip is not None else out), weights


class NLQForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = NLQConfig
    base_model_prefix = "transformer"
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}
    _no_split_modules = ["Block"]
    _supports_sdpa = True
    supports_gradient_checkpointing = True
    accepts_loss_kwargs = True  # the loss honours num_items_in_batch: Trainer need not divide it again

    def __init__(self, config: NLQConfig):
        super().__init__(config)
        layers = dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config, i) for i in range(config.n_layer)),
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

    def rotary(self, positions, dtype):
        """cos, sin of the rotary angles at positions (B, T), shaped (B, 1, T, rotary_dims) for the heads."""
        dims = self.config.rotary_dims
        inv_freq = 1.0 / (self.config.rope_base ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims))
        freqs = positions[..., None].float() * inv_freq.to(positions.device)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def positions(self, attention_mask, position_ids, past, T, device):
        """Each new token's position: given, else counted from its row's first unmasked token (left padding
        shifts nothing), else past .. past + T - 1."""
        if position_ids is None and attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -T:]
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=device)[None]
        if int(position_ids.max()) >= self.config.block_size:
            raise ValueError(
                f"position {int(position_ids.max())} is past block_size={self.config.block_size}: give at most "
                f"{self.config.block_size} tokens in all (prompt and generated; crop the prompt from the left)"
            )
        return position_ids

    @staticmethod
    def check_inputs(attention_mask, position_ids) -> None:
        """Refuse what this model would compute wrongly rather than read it as something else: a mask of other
        values than 1 (a token) and 0 (padding), such as an additive mask of 0 and -inf or soft weights, and
        positions that are not integers from 0 up."""
        if attention_mask is not None and attention_mask.numel():
            values = attention_mask.unique()
            if not bool(((values == 0) | (values == 1)).all()):
                shown = ", ".join(f"{v:g}" for v in values[:4].float().tolist())
                raise ValueError(
                    f"attention_mask holds values other than 0 and 1 ({shown}...): this model takes a 2-D mask of "
                    "1 for a token and 0 for padding (not an additive mask of 0 and -inf, nor weights)"
                )
        if position_ids is not None and position_ids.numel():
            if position_ids.is_floating_point() or position_ids.is_complex() or position_ids.dtype == torch.bool:
                raise ValueError(f"position_ids are {position_ids.dtype}: give integer positions (torch.long)")
            if int(position_ids.min()) < 0:
                raise ValueError(f"position_ids holds {int(position_ids.min())}: positions count from 0")

    @staticmethod
    def attention_mask_4d(attention_mask, position_ids, B, T, past, device, eager):
        """(B or 1, 1, T, past + T) bool, True where a query sees a key: the keys at or before its own position
        that are not padding and, where position_ids restart within a row and no mask is given (sequences packed
        without padding, as DataCollatorWithFlattening packs them), of its own sequence. None when plain causal
        attention over the new tokens is all there is (SDPA's is_causal). A padding query that would see
        nothing sees every key: its output is never read, and an all-masked row would be NaN."""
        packed = (  # as transformers reads packing: from positions alone, with no mask given
            position_ids is not None
            and attention_mask is None
            and past == 0
            and T > 1
            and bool((position_ids[:, 1:] <= position_ids[:, :-1]).any())
        )
        if attention_mask is None and past == 0 and not eager and not packed:
            return None
        S = past + T
        if attention_mask is not None and tuple(attention_mask.shape) != (B, S):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; this model takes a 2-D mask of "
                f"(batch, past + new tokens) = ({B}, {S}), 1 for a token and 0 for padding"
            )
        mask = (torch.arange(S, device=device)[None] <= torch.arange(past, S, device=device)[:, None])[None, None]
        if packed:
            restarts = F.pad(position_ids[:, 1:] <= position_ids[:, :-1], (1, 0), value=False)
            sequence = restarts.long().cumsum(-1)
            mask = mask & (sequence[:, None, :, None] == sequence[:, None, None, :])
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, :].bool()
        return mask | ~mask.any(dim=-1, keepdim=True)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        logits_to_keep=0,
        num_items_in_batch=None,
        **kwargs,
    ):
        cache = self.cache_argument(kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        self.check_inputs(attention_mask, position_ids)
        x = self.transformer.wte(input_ids) if inputs_embeds is None else inputs_embeds
        B, T = x.shape[:2]
        cfg = self.config
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        use_cache = cfg.use_cache if use_cache is None else use_cache
        checkpointing = (
            self.training and torch.is_grad_enabled() and any(b.gradient_checkpointing for b in self.transformer.h)
        )
        if checkpointing:
            use_cache, cache = False, None  # a recomputed block would write the cache twice
        past = cache.get_seq_length() if cache is not None else 0
        if use_cache and cache is None:
            cache = DynamicCache(config=cfg)
        eager = output_attentions or cfg._attn_implementation == "eager"
        mask = self.attention_mask_4d(attention_mask, position_ids, B, T, past, x.device, eager)
        positions = self.positions(attention_mask, position_ids, past, T, x.device)
        cos = sin = None
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe(positions)
        else:
            cos, sin = self.rotary(positions, x.dtype)
        hidden, attentions = [], []
        for block in self.transformer.h:
            hidden.append(x)
            x, weights = block(x, cos, sin, mask=mask, cache=cache, eager=eager)
            attentions.append(weights)
        x = self.transformer.ln_f(x)
        hidden.append(x)
        logits = self.lm_head(x[:, -logits_to_keep:] if logits_to_keep else x)
        out = CausalLMOutputWithPast(
            loss=None if labels is None else self.loss(logits, labels, num_items_in_batch),
            logits=logits,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
            **{CACHE_FIELD: cache if use_cache else None},
        )
        return out if (cfg.return_dict if return_dict is None else return_dict) else out.to_tuple()

    @staticmethod
    def cache_argument(kwargs):
        """The KV cache under either of its names; every other keyword not known here is refused."""
        given = [kwargs.pop(name, None) for name in ("cache", "past_key_values")]
        cache = next((c for c in given if c is not None), None)
        unknown = sorted(set(kwargs) - IGNORED)
        if unknown:
            raise TypeError(f"NLQForCausalLM.forward got unexpected keyword arguments {unknown}")
        if cache is not None and type(cache) is not DynamicCache:
            raise ValueError(
                f"this model's KV cache is a transformers DynamicCache, not {type(cache).__name__} (a static or "
                "legacy tuple cache lays keys out otherwise): leave cache_implementation unset"
            )
        return cache

    @staticmethod
    def loss(logits, labels, num_items_in_batch=None):
        """Cross-entropy of each token's logits against the next label (-100 ignored): the mean, or the sum
        divided by num_items_in_batch, the label count of all micro-batches of an accumulated step."""
        logits, labels = logits[:, :-1].float(), labels[:, 1:].to(logits.device)
        total = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), reduction="sum")
        count = (labels != -100).sum() if num_items_in_batch is None else num_items_in_batch
        return total / torch.as_tensor(count, device=total.device)
