"""Pretrained weights into this project's GPT: GPT-2 and GPT-NeoX (Pythia) checkpoints, by hub name or local
Hugging Face directory, through transformers. Each importer maps the other model's config to GPTConfig
fields and its state dict to our parameter names (the model keeps GPT-2's / nanoGPT's names)."""

import json
from pathlib import Path

import torch

import hub
from model import GPT, GPTConfig, width_ratio

EXPORT_TYPE = "nlq_gpt"  # config.json's model_type of an export (hf/configuration_nlq.py)


def is_pretrained_source(name: str) -> bool:
    """Whether init_from names pretrained weights: a GPT-2 name, a hub id (owner/name) or a local directory
    (a path to a .pt file is a checkpoint, not a hub id)."""
    if name.endswith(".pt") or Path(name).is_file():
        return False
    return name.startswith("gpt2") or "/" in name or Path(name).is_dir()


def from_pretrained(name_or_path: str, **overrides) -> GPT:
    """GPT-2 ('gpt2' ... 'gpt2-xl') or GPT-NeoX / Pythia weights, by hub name or local HF directory,
    through transformers, or a directory this project exported (export.py --format=hf, read without its
    code). overrides may set fields the checkpoint has no say in (dropout, preproj, content_skip,
    lora_rank, ...); the parameters they add keep their fresh initialisation."""
    if is_export(name_or_path):
        return _from_export(Path(name_or_path), overrides)
    hub.offline()  # before transformers is imported: it reads the switch once
    from transformers import AutoModelForCausalLM

    try:
        hf = AutoModelForCausalLM.from_pretrained(name_or_path)  # any dtype: copy_ below casts to ours
    except (OSError, ValueError) as e:  # not on the hub, no network, or not a model directory
        raise ValueError(f"cannot load pretrained weights {name_or_path!r}: {str(e).splitlines()[0]}") from None
    if hf.config.model_type not in IMPORTERS:
        raise ValueError(
            f"cannot import model_type={hf.config.model_type!r} from {name_or_path}: "
            f"supported are {', '.join(IMPORTERS)}"
        )
    fields, theirs = IMPORTERS[hf.config.model_type](hf.config, hf.state_dict())
    config = GPTConfig(**fields, **overrides)
    if config.query_mode != "linear":
        raise ValueError(f"query_mode={config.query_mode!r}: pretrained weights are linear-query only")
    model = GPT(config)
    ours = model.state_dict()
    missing = sorted(k for k in ours if k not in theirs and not GPT.is_added(k))
    if missing:
        raise ValueError(f"{name_or_path} lacks weights for {missing[:4]}")
    with torch.no_grad():
        for k, v in ours.items():
            if k in theirs:
                v.copy_(theirs[k])
    return model


def is_export(path: str) -> bool:
    """Whether path is a directory export.py --format=hf wrote (config.json's model_type)."""
    try:
        return json.loads((Path(path) / "config.json").read_text()).get("model_type") == EXPORT_TYPE
    except (OSError, ValueError, AttributeError):
        return False


def _from_export(path: Path, overrides: dict) -> GPT:
    """An export's model from config.json and model.safetensors alone: its modeling code is never run."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    c = json.loads((path / "config.json").read_text())
    head_dim = c["n_embd"] // c["n_head"]
    fields = dict(
        **{k: c[k] for k in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_kv_head", "bias")},
        **{k: c[k] for k in ("query_mode", "activation", "pos_embedding", "rope_base", "parallel_residual")},
        norm_eps=c["norm_eps"],
        query_hidden=c["query_hidden"] if c["query_mode"] == "residual_gelu" else None,
        attn_scale=c["scale"],
        mlp_ratio=width_ratio(c["mlp_hidden"], c["n_embd"]),
        rotary_pct=c["rotary_dims"] / head_dim if c["pos_embedding"] == "rotary" else 1.0,
        preproj=bool(c["preproj_hidden"]),
        preproj_ratio=width_ratio(c["preproj_hidden"], c["n_embd"]) if c["preproj_hidden"] else 1.25,
        content_skip=c["content_skip"],
        tie_embeddings=c["tie_word_embeddings"],
    )
    model = GPT(GPTConfig(**{**fields, **overrides}))
    try:
        state = load_file(path / "model.safetensors")
    except (OSError, SafetensorError) as e:
        raise ValueError(f"cannot read {path / 'model.safetensors'}: {e}") from None
    if c["tie_word_embeddings"]:
        state.setdefault("lm_head.weight", state.get("transformer.wte.weight"))
    missing = [k for k in model.state_dict() if k not in state and not GPT.is_added(k)]
    if missing:
        raise ValueError(f"{path} lacks weights for {missing[:4]}")
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if k in state:
                v.copy_(state[k])
    return model


def _from_gpt2(c, sd):
    """GPTConfig fields and our state dict from HF GPT-2. Its Linear weights are Conv1D, (in, out)."""
    fields = dict(
        block_size=c.n_positions,
        vocab_size=c.vocab_size,
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_embd=c.n_embd,
        bias=True,
        norm_eps=c.layer_norm_epsilon,
        tie_embeddings=True,
        activation="gelu" if c.activation_function == "gelu" else "gelu_tanh",
    )
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    return fields, {k: v.t() if k.endswith(conv1d) else v for k, v in sd.items()}


def _from_neox(c, sd):
    """GPTConfig fields and our state dict from HF GPT-NeoX (Pythia): partial rotary, parallel residual,
    biased LayerNorms, an untied head, and a fused QKV laid out head by head."""
    rope = getattr(c, "rope_parameters", None) or {}  # transformers >= 5; older releases: rotary_pct etc.
    d, nh = c.hidden_size, c.num_attention_heads
    hd = d // nh
    fields = dict(
        block_size=c.max_position_embeddings,
        vocab_size=c.vocab_size,
        n_layer=c.num_hidden_layers,
        n_head=nh,
        n_embd=d,
        bias=True,
        norm_eps=c.layer_norm_eps,
        tie_embeddings=c.tie_word_embeddings,
        activation="gelu" if c.hidden_act == "gelu" else "gelu_tanh",
        pos_embedding="rotary",
        rotary_pct=rope.get("partial_rotary_factor", getattr(c, "rotary_pct", 1.0)),
        rope_base=rope.get("rope_theta", getattr(c, "rotary_emb_base", 10000.0)),
        parallel_residual=c.use_parallel_residual,
        mlp_ratio=c.intermediate_size / d,
    )
    out = {
        "transformer.wte.weight": sd["gpt_neox.embed_in.weight"],
        "lm_head.weight": sd["embed_out.weight" if "embed_out.weight" in sd else "lm_head.weight"],  # 4.x; 5.x
        "transformer.ln_f.weight": sd["gpt_neox.final_layer_norm.weight"],
        "transformer.ln_f.bias": sd["gpt_neox.final_layer_norm.bias"],
    }
    names = {
        "ln_1": "input_layernorm",
        "ln_2": "post_attention_layernorm",
        "attn.c_proj": "attention.dense",
        "mlp.c_fc": "mlp.dense_h_to_4h",
        "mlp.c_proj": "mlp.dense_4h_to_h",
    }
    for i in range(c.num_hidden_layers):
        ours, theirs = f"transformer.h.{i}.", f"gpt_neox.layers.{i}."
        for a, b in names.items():
            for p in ("weight", "bias"):
                out[f"{ours}{a}.{p}"] = sd[f"{theirs}{b}.{p}"]
        # [head0: q k v, head1: q k v, ...] -> [all q, all k, all v]
        w, bias = sd[f"{theirs}attention.query_key_value.weight"], sd[f"{theirs}attention.query_key_value.bias"]
        out[f"{ours}attn.c_attn.weight"] = w.view(nh, 3, hd, d).transpose(0, 1).reshape(3 * d, d)
        out[f"{ours}attn.c_attn.bias"] = bias.view(nh, 3, hd).transpose(0, 1).reshape(3 * d)
    return fields, out


IMPORTERS = {"gpt2": _from_gpt2, "gpt_neox": _from_neox}  # transformers' model_type -> importer
