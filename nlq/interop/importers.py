"""Pretrained weights of other formats, read for this project's GPT: GPT-2 and GPT-NeoX (Pythia) checkpoints,
by hub name or local Hugging Face directory, through transformers, and this project's own exports. Each
importer maps the other model's config to GPTConfig fields and its state dict to our parameter names (the
model keeps GPT-2's / nanoGPT's names); from_pretrained builds the model from what they return."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model import GPT, GPTConfig, buffer_count, parameter_count
from nlq.common import hub
from nlq.common.fits import check_fits
from nlq.interop import schema

EXPORT_TYPE = "nlq_gpt"  # config.json's model_type of an export (nlq/interop/hf/configuration_nlq.py)


def is_pretrained_source(name: str) -> bool:
    """Whether init_from names pretrained weights: a GPT-2 name, a hub id (owner/name) or a local directory
    (a path to a .pt file is a checkpoint, not a hub id)."""
    if name.endswith(".pt") or Path(name).is_file():
        return False
    return name.startswith("gpt2") or "/" in name or Path(name).is_dir()


@dataclass(frozen=True)
class Pretrained:
    """Weights of another format, opened: the GPTConfig fields its config decides, and its weights in this
    project's names, read only when weights() is called (after the model's size was checked)."""

    source: str  # the name or directory, for messages
    fields: dict
    weights: Callable[[], dict]
    export: bool  # this project's export (overrides replace its fields) or a foreign format (overrides only add)

    def config_fields(self, overrides: dict) -> dict:
        """The fields with overrides: a foreign format's fields are its own (GPTConfig(**fields, **overrides)
        refuses a field given twice), an export's may be replaced."""
        twice = sorted(set(self.fields) & set(overrides))
        if twice and not self.export:
            raise TypeError(f"got multiple values for keyword argument {twice[0]!r}")
        return {**self.fields, **overrides}

    def config_error(self, e: Exception) -> ValueError:
        """The one-line error for fields GPTConfig refused."""
        if self.export:
            return ValueError(f"{self.source}/config.json is not an export's config ({type(e).__name__}: {e})")
        return ValueError(f"{self.source}'s config does not describe a model here ({first_line(e)})")


def open_pretrained(name_or_path: str) -> Pretrained:
    """GPT-2 ('gpt2' ... 'gpt2-xl') or GPT-NeoX / Pythia weights, by hub name or local HF directory, through
    transformers, or a directory this project exported (export.py --format=hf, read without its code). No
    directory's code is ever run (trust_remote_code=False, and a local directory that names any is refused
    before transformers sees it), and weights are read from safetensors only."""
    if is_export(name_or_path):
        return _open_export(Path(name_or_path))
    if Path(name_or_path).is_dir():
        check_directory(Path(name_or_path))
    hub.offline()  # before transformers is imported: it reads the switch once
    from transformers import AutoConfig, AutoModelForCausalLM

    safe = dict(trust_remote_code=False)
    try:
        hf_config = AutoConfig.from_pretrained(name_or_path, **safe)
    except Exception as e:  # not on the hub, offline, no model directory, a field of the wrong type: the file's
        raise ValueError(f"cannot load pretrained weights {name_or_path!r}: {first_line(e)}") from None
    if hf_config.model_type not in IMPORTERS:
        raise ValueError(
            f"cannot import model_type={hf_config.model_type!r} from {name_or_path}: "
            f"supported are {', '.join(IMPORTERS)}"
        )
    fields, weights = IMPORTERS[hf_config.model_type]
    try:
        fields = fields(hf_config)
    except (TypeError, ValueError, AttributeError, KeyError) as e:  # a field of the wrong type, an option we lack
        raise ValueError(f"{name_or_path}'s config does not describe a model here ({first_line(e)})") from None

    def read() -> dict:
        try:
            hf = AutoModelForCausalLM.from_pretrained(name_or_path, config=hf_config, use_safetensors=True, **safe)
        except (OSError, ValueError, RuntimeError) as e:  # no safetensors, or weights that do not fit the config
            raise ValueError(f"cannot load pretrained weights {name_or_path!r}: {first_line(e)}") from None
        try:
            return weights(hf_config, hf.state_dict())
        except (KeyError, RuntimeError) as e:  # a weight missing, or of a shape its config does not describe
            raise ValueError(f"{name_or_path}'s weights do not fit its config.json ({first_line(e)})") from None

    return Pretrained(name_or_path, fields, read, export=False)


def from_pretrained(model_type: str, override_args: dict | None = None) -> GPT:
    """nanoGPT's GPT.from_pretrained('gpt2', dict(dropout=0.0)), which also takes GPT-2 sizes, Pythia, local
    Hugging Face directories and this project's exports, read running no code. override_args may set fields
    the checkpoint has no say in (dropout, preproj, content_skip, lora_rank, ...); the parameters they add keep
    their fresh initialisation. The model's size is checked against free memory before any weights are read."""
    pretrained = open_pretrained(model_type)
    try:
        config = GPTConfig(**pretrained.config_fields(override_args or {}))
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:  # out of its domain
        raise pretrained.config_error(e) from None
    if not pretrained.export and config.query_mode != "linear":
        raise ValueError(f"query_mode={config.query_mode!r}: pretrained weights are linear-query only")
    held = parameter_count(config) + buffer_count(config)
    check_fits(held, 8, "cpu", "float32 weights, held twice while they are copied")
    model = GPT(config)
    copy_weights(model, pretrained.weights(), pretrained.source)
    return model


def first_line(e: Exception) -> str:
    """An error's message on one line: its first two lines (transformers puts the cause on the second)."""
    return " ".join(line.strip() for line in str(e).strip().splitlines()[:2]) or type(e).__name__


def check_directory(path: Path) -> None:
    """A local Hugging Face directory is read only when its config.json names a model type imported here
    (GPT-2, GPT-NeoX) and no code of its own, and it holds safetensors weights: transformers would
    otherwise ask on the terminal whether to run the directory's code, or unpickle pytorch_model.bin."""
    what = "this project reads a directory's config.json and safetensors weights only, and never runs its code"
    try:
        c = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} has no readable config.json ({first_line(e)}): not a Hugging Face model") from None
    if not isinstance(c, dict):
        raise ValueError(f"{path}/config.json is not a JSON object: not a Hugging Face model configuration")
    if c.get("auto_map") or c.get("model_type") not in IMPORTERS:
        code = f" and code of its own (auto_map: {', '.join(map(str, c['auto_map']))})" if c.get("auto_map") else ""
        raise ValueError(
            f"{path}/config.json names model_type={c.get('model_type')!r}{code}: {what}; supported are "
            f"{', '.join(IMPORTERS)} and this project's exports"
        )
    if not any((path / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
        pickled = [f.name for f in path.glob("*.bin")]
        held = f" (it holds {', '.join(pickled)}: pickles)" if pickled else ""
        raise ValueError(
            f"{path} holds no model.safetensors{held}: {what}; save it with safe_serialization=True where you trust it"
        )


def copy_weights(model: torch.nn.Module, state: dict, source) -> None:
    """Copy state into the model: every weight present, each of exactly the model's shape and of a float
    dtype (copy_ would broadcast a [1] tensor over a whole matrix, or cast integers silently)."""
    ours = model.state_dict()
    missing = sorted(k for k in ours if k not in state and not model.is_added(k))
    if missing:
        raise ValueError(f"{source} lacks weights for {missing[:4]}")
    for k, v in ours.items():
        if k not in state:
            continue
        t = state[k]
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(v.shape) or not t.is_floating_point():
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{source}: {k} is {got}, the model needs {tuple(v.shape)} floating point")
    with torch.no_grad():
        for k, v in ours.items():
            if k in state:
                v.copy_(state[k])


def is_export(path: str) -> bool:
    """Whether path is a directory export.py --format=hf wrote (config.json's model_type)."""
    try:
        return json.loads((Path(path) / "config.json").read_text()).get("model_type") == EXPORT_TYPE
    except (OSError, ValueError, AttributeError):
        return False


def _open_export(path: Path) -> Pretrained:
    """An export's fields from config.json and its weights from model.safetensors alone: its modeling code is
    never run."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    c = json.loads((path / "config.json").read_text())
    try:
        fields = _export_fields(c)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ValueError(f"{path}/config.json is not an export's config ({type(e).__name__}: {e})") from None

    def read() -> dict:
        try:
            state = load_file(path / "model.safetensors")
        except (OSError, SafetensorError) as e:
            raise ValueError(f"cannot read {path / 'model.safetensors'}: {e}") from None
        if c["tie_word_embeddings"]:
            state.setdefault("lm_head.weight", state.get("transformer.wte.weight"))
        return state

    return Pretrained(str(path), fields, read, export=True)


def _export_fields(c: dict) -> dict:
    """GPTConfig fields from an export's config.json (nlq/interop/hf/configuration_nlq.py's names)."""
    return schema.to_fields("export", c)


def _gpt2_fields(c) -> dict:
    """GPTConfig fields from HF GPT-2's config, transformers' defaults filled in for the keys it leaves out;
    an option this project's model lacks is refused rather than dropped."""
    if not c.scale_attn_weights or c.scale_attn_by_inverse_layer_idx:
        raise ValueError("scale_attn_weights=False or scale_attn_by_inverse_layer_idx=True: this project's "
                         "attention scales by 1/sqrt(head_dim) in every layer")  # fmt: skip
    return schema.to_fields("gpt2", schema.Attributes(c))


def _gpt2_weights(c, sd) -> dict:
    """Our state dict from HF GPT-2's. Its Linear weights are Conv1D, (in, out)."""
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    return {k: v.t() if k.endswith(conv1d) else v for k, v in sd.items()}


def _neox_fields(c) -> dict:
    """GPTConfig fields from HF GPT-NeoX's (Pythia's) config: partial rotary, parallel residual, biased
    LayerNorms, an untied head."""
    rope = c.rope_parameters  # transformers >= 5 fills its defaults: theta 10000, 1/4 of each head rotated
    if rope.get("rope_type", "default") != "default":
        raise ValueError(
            f"rope_type={rope['rope_type']!r}: this project's rotary embedding is the default (unscaled) one"
        )
    return schema.to_fields("neox", schema.Attributes(c))


def _neox_weights(c, sd) -> dict:
    """Our state dict from HF GPT-NeoX's, whose fused QKV is laid out head by head."""
    d, nh = c.hidden_size, c.num_attention_heads
    hd = d // nh
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
    return out


# transformers' model_type -> (GPTConfig fields from its config, our state dict from its state dict)
IMPORTERS = {"gpt2": (_gpt2_fields, _gpt2_weights), "gpt_neox": (_neox_fields, _neox_weights)}
