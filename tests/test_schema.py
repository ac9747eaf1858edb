"""The one table of GPTConfig's fields against GPT-2's, GPT-NeoX's, the official code's and the export's keys
(nlq/interop/schema.py): every field has its place, and a config crosses to a format that can hold it and back
unchanged. (The import and export tests check the numbers each format then computes.)"""

import dataclasses

import pytest
import transformers

from model import PROBE_FIELDS, GPTConfig
from nlq.interop import schema

EXPORTABLE = [  # configs the export holds: every field it carries, moved off its default
    GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=100),
    GPTConfig(
        n_layer=3, n_head=4, n_embd=48, block_size=40, vocab_size=77, n_kv_head=2, bias=True,
        query_mode="residual_gelu", query_hidden=20, attn_scale=0.3, mlp_ratio=13 / 3, activation="gelu_tanh",
        pos_embedding="rotary", rotary_pct=0.5, rope_base=500.0, parallel_residual=True, tie_embeddings=False,
        norm_eps=1e-6, preproj=True, preproj_ratio=1.5, content_skip=True,
    ),
    GPTConfig(n_layer=1, n_head=2, n_embd=16, query_mode="identity", mlp_ratio=4.75),
]  # fmt: skip


def test_every_field_has_its_place():
    """A field added to GPTConfig must say how each format holds it, or that none does (schema.MODEL_ONLY)."""
    names = {f.name for f in dataclasses.fields(GPTConfig)}
    assert set(schema.TABLE) | set(schema.MODEL_ONLY) == names
    assert not set(schema.TABLE) & set(schema.MODEL_ONLY)
    assert set(schema.MODEL_ONLY) <= set(PROBE_FIELDS)  # what no checkpoint holds, a probe's config sets
    assert all(set(cells) <= set(schema.FORMATS) for cells in schema.TABLE.values())


def resolved(c: GPTConfig) -> dict:
    """What the model is, fields left to a default resolved to the numbers they give (the export writes those)."""
    out = {f.name: getattr(c, f.name) for f in dataclasses.fields(GPTConfig) if f.name not in schema.MODEL_ONLY}
    out.update(n_kv_head=c.kv_heads, attn_scale=c.scale, mlp_ratio=c.mlp_hidden, rotary_pct=c.rotary_dims)
    out.update(query_hidden=(c.query_hidden or c.n_embd // 2) if c.query_mode == "residual_gelu" else None)
    out.update(preproj_ratio=int(c.preproj_ratio * c.n_embd) if c.preproj else None, dropout=None)
    return out


@pytest.mark.parametrize("config", EXPORTABLE, ids=range(len(EXPORTABLE)))
def test_an_export_config_goes_and_comes_back_the_same_model(config):
    back = GPTConfig(**schema.to_fields("export", schema.to_theirs("export", config)))
    assert resolved(back) == resolved(config)


def test_a_gpt2_config_goes_through_transformers_and_back():
    """Ours -> GPT2Config's keys -> a real GPT2Config (its defaults filled) -> ours: the same model."""
    config = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=100, bias=True,
                       activation="gelu_tanh", mlp_ratio=4.5, tie_embeddings=False, norm_eps=1e-6)  # fmt: skip
    hf = transformers.GPT2Config(**schema.to_theirs("gpt2", config))
    assert (hf.n_inner, hf.activation_function, hf.n_positions) == (144, "gelu_new", 64)
    assert GPTConfig(**schema.to_fields("gpt2", schema.Attributes(hf))) == config


def test_a_neox_config_reads_as_pythias_architecture():
    hf = transformers.GPTNeoXConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=256, vocab_size=90,
        max_position_embeddings=32, rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                     "partial_rotary_factor": 0.5},
    )  # fmt: skip
    fields = schema.to_fields("neox", schema.Attributes(hf))
    assert fields["pos_embedding"] == "rotary" and fields["bias"] is True and fields["mlp_ratio"] == 4.0
    assert (fields["rotary_pct"], fields["rope_base"], fields["n_head"], fields["n_layer"]) == (0.5, 5000.0, 4, 2)


def test_the_official_model_args_read_with_their_own_names():
    args = dict(block_size=256, vocab_size=50304, n_layer=4, num_heads=4, n_embd=128, tie_weights=False, dropout=0.1,
                bias=True, scale=0.0625, query_mode="original", mlp_hidden_size=560)  # fmt: skip
    fields = schema.to_fields("official", args)
    assert fields["query_mode"] == "linear" and fields["n_head"] == 4 and fields["attn_scale"] == 0.0625
    assert GPTConfig(**fields).mlp_hidden == 560 and fields["norm_eps"] == 1e-5 and fields["activation"] == "gelu"
