"""One table of model.GPTConfig's fields against the other formats' config keys, read in both directions:
GPT-2's (transformers' GPT2Config), GPT-NeoX's (Pythia), arXiv 2603.13381's official model_args, and this
project's Hugging Face export (nlq/interop/hf/configuration_nlq.py). Each cell says how a format holds a field:
Key(name, to_ours, to_theirs) (its key, and how a value crosses each way: as it is unless given), or
Fixed(value) (the format has no key: its models always have that value). A field a format lacks in the table is
our default there. The importers (nlq/interop/importers.py, nlq/paper/official.py) and the export
(nlq/interop/hf_export.py) all go through to_fields and to_theirs; tests/test_schema.py checks that every
GPTConfig field is placed here or named model-only, and that a config crosses to each format and back unchanged.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from model import GPTConfig

FORMATS = ("gpt2", "neox", "official", "export")
# GPTConfig fields no foreign config holds: the frozen probe's training choices and the initialisation of what it
# adds (set by train.py's config on top of pretrained weights: model.PROBE_FIELDS).
MODEL_ONLY = ("skip_init_std", "lora_rank", "lora_alpha")


def same(value, config):
    return value


@dataclass(frozen=True)
class Key:
    name: str  # the format's key
    to_ours: Callable = same  # (their value, their whole config) -> ours
    to_theirs: Callable | None = same  # (our value, our GPTConfig) -> theirs; None: another row writes the key


@dataclass(frozen=True)
class Fixed:
    value: object  # what every model of that format has


def width_ratio(hidden: int, d: int) -> float:
    """The ratio r with int(r * d) == hidden, for fields that give a width as a multiple of n_embd (a plain
    hidden / d can land one below after rounding)."""
    ratio = hidden / d
    while int(ratio * d) < hidden:
        ratio = math.nextafter(ratio, math.inf)
    return ratio


# transformers' activation names -> ours: the exact GELU, or its tanh approximation (gelu_new, gelu_fast and
# gelu_pytorch_tanh compute the same formula)
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def activation(name: str, config=None) -> str:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r}: this project's models have {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


OFFICIAL_MODES = {
    "original": "linear",
    "identity": "identity",
    "residual": "residual",
    "residual_gelu": "residual_gelu",
}


def official_mode(name, config=None) -> str:
    return OFFICIAL_MODES[name]


def hf_activation(ours: str, config=None) -> str:
    return "gelu" if ours == "gelu" else "gelu_new"


def mlp_width(key: str, d_key: str, exact: bool = True) -> Key:
    """mlp_ratio as a hidden width: `key`, over `d_key` (n_embd's name there); None (GPT-2's n_inner) is 4 d."""

    def to_ours(hidden, c):
        if hidden is None:
            return None
        return width_ratio(hidden, c[d_key]) if exact else hidden / c[d_key]

    return Key(key, to_ours, lambda ratio, config: config.mlp_hidden)


TABLE = {
    "block_size": dict(gpt2=Key("n_positions"), neox=Key("max_position_embeddings"), official=Key("block_size"),
                       export=Key("block_size")),
    "vocab_size": dict(gpt2=Key("vocab_size"), neox=Key("vocab_size"), official=Key("vocab_size"),
                       export=Key("vocab_size")),
    "n_layer": dict(gpt2=Key("n_layer"), neox=Key("num_hidden_layers"), official=Key("n_layer"), export=Key("n_layer")),
    "n_head": dict(gpt2=Key("n_head"), neox=Key("num_attention_heads"), official=Key("num_heads"),
                   export=Key("n_head")),
    "n_embd": dict(gpt2=Key("n_embd"), neox=Key("hidden_size"), official=Key("n_embd"), export=Key("n_embd")),
    "n_kv_head": dict(export=Key("n_kv_head", to_theirs=lambda v, config: config.kv_heads)),
    "dropout": dict(official=Key("dropout")),
    "bias": dict(gpt2=Fixed(True), neox=Fixed(True), official=Key("bias"), export=Key("bias")),
    "query_mode": dict(official=Key("query_mode", official_mode, None), export=Key("query_mode")),
    "query_hidden": dict(export=Key(
        "query_hidden",
        lambda v, c: v if c["query_mode"] == "residual_gelu" else None,
        lambda v, config: v or config.n_embd // 2,
    )),
    "attn_scale": dict(official=Key("scale", lambda v, c: float(v), None),
                       export=Key("scale", to_theirs=lambda v, config: config.scale)),
    "mlp_ratio": dict(gpt2=mlp_width("n_inner", "n_embd"), neox=mlp_width("intermediate_size", "hidden_size", False),
                      official=mlp_width("mlp_hidden_size", "n_embd"), export=mlp_width("mlp_hidden", "n_embd")),
    "activation": dict(gpt2=Key("activation_function", activation, hf_activation),
                       neox=Key("hidden_act", activation, hf_activation), official=Fixed("gelu"),
                       export=Key("activation")),
    "pos_embedding": dict(neox=Fixed("rotary"), export=Key("pos_embedding")),
    "rotary_pct": dict(
        neox=Key("rope_parameters", lambda rope, c: rope["partial_rotary_factor"], None),
        export=Key(
            "rotary_dims",
            lambda dims, c: dims / (c["n_embd"] // c["n_head"]) if c["pos_embedding"] == "rotary" else 1.0,
            lambda pct, config: config.rotary_dims if config.pos_embedding == "rotary" else 0,
        ),
    ),
    "rope_base": dict(neox=Key("rope_parameters", lambda rope, c: rope["rope_theta"], None), export=Key("rope_base")),
    "parallel_residual": dict(neox=Key("use_parallel_residual"), export=Key("parallel_residual")),
    "tie_embeddings": dict(gpt2=Key("tie_word_embeddings"), neox=Key("tie_word_embeddings"),
                           official=Key("tie_weights"), export=Key("tie_word_embeddings")),
    "norm_eps": dict(gpt2=Key("layer_norm_epsilon"), neox=Key("layer_norm_eps"), official=Fixed(1e-5),
                     export=Key("norm_eps")),
    "preproj": dict(export=Key(
        "preproj_hidden", lambda hidden, c: bool(hidden),
        lambda on, config: int(config.preproj_ratio * config.n_embd) if on else 0,
    )),
    "preproj_ratio": dict(export=Key(
        "preproj_hidden", lambda hidden, c: width_ratio(hidden, c["n_embd"]) if hidden else 1.25, None
    )),
    "content_skip": dict(export=Key("content_skip")),
}  # fmt: skip


class Attributes:
    """A transformers config read as a mapping (GPT2Config, GPTNeoXConfig): c[key] is its attribute, defaults
    filled in by transformers for the keys its config.json left out."""

    def __init__(self, config):
        self.config = config

    def __getitem__(self, key):
        return getattr(self.config, key)


def to_fields(fmt: str, theirs) -> dict:
    """The GPTConfig fields a format's config (a mapping) decides. A missing key raises KeyError naming it."""
    out = {}
    for field, cells in TABLE.items():
        cell = cells.get(fmt)
        if isinstance(cell, Fixed):
            out[field] = cell.value
        elif cell is not None:
            out[field] = cell.to_ours(theirs[cell.name], theirs)
    return out


def to_theirs(fmt: str, config: GPTConfig) -> dict:
    """A format's config keys for our config (Fixed cells and keys another row writes left out)."""
    out = {}
    for field, cells in TABLE.items():
        cell = cells.get(fmt)
        if isinstance(cell, Key) and cell.to_theirs is not None:
            out[cell.name] = cell.to_theirs(getattr(config, field), config)
    return out
