"""A model of this project as a Hugging Face directory that transformers, lm-eval and the Hub load.

Two forms (export.py --format):
- 'hf': any model, as weights (model.safetensors), config.json with an auto_map, generation_config.json,
  the tokenizer, and the modeling code (nlq/interop/hf/configuration_nlq.py, nlq/interop/hf/modeling_nlq.py: a second
  implementation of model.py, kept equal by tests/test_export.py). transformers loads it with
  trust_remote_code=True; this project loads it back (nlq/interop/importers.py) from config.json and the weights alone,
  running none of the code.
- 'gpt2': a plain GPT2LMHeadModel, no remote code, for a model GPT-2 can express (linear queries, learned
  positions, one K/V head per query head, sequential blocks, GPT-2's softmax scale, no pre-projection or
  skip); anything else is refused in one line naming what.
LoRA is merged into the weights it adapts (W + (alpha / r) B A) in both. The directory is written beside
the destination and renamed into place, so a failure leaves no half-written export.
"""

import math
import os
import shutil
import tempfile
from pathlib import Path

import torch

from model import GPT, LoRA
from nlq.common.atomic import remove_stale_temps
from nlq.common.errors import UserError
from nlq.interop import schema

HERE = Path(__file__).resolve().parent
MODELING = ("configuration_nlq.py", "modeling_nlq.py")  # in nlq/interop/hf/, copied into every 'hf' export
FORMATS = ("hf", "gpt2")


class ExportError(UserError):
    """A model or destination the export cannot serve."""


def merged_state(model: GPT) -> dict:
    """The model's weights with every LoRA folded into the projection it adapts, float32, LoRA keys gone."""
    state = {k: v.detach().float().clone() for k, v in model.state_dict().items() if ".lora_" not in k}
    for name, module in model.named_modules():
        if isinstance(module, LoRA):
            target = name.replace("lora_attn", "c_attn").replace("lora_proj", "c_proj") + ".weight"
            state[target] += module.scale * (module.B.float() @ module.A.float())
    return state


def nlq_config(model: GPT) -> dict:
    """config.json's model fields for nlq/interop/hf/configuration_nlq.py, every derived width resolved to a number."""
    return schema.to_theirs("export", model.config)


def gpt2_blockers(model: GPT) -> list[str]:
    """What a plain GPT-2 cannot express in this model."""
    c = model.config
    checks = {
        f"query_mode={c.query_mode!r}": c.query_mode != "linear",
        "pos_embedding='rotary'": c.pos_embedding != "learned",
        f"n_kv_head={c.n_kv_head}": c.kv_heads != c.n_head,
        "parallel_residual=True": c.parallel_residual,
        "preproj=True": c.preproj,
        "content_skip=True": c.content_skip,
        # a linear query at another softmax scale than GPT-2's (the other modes' halved scale goes with them)
        f"attn_scale={c.attn_scale}": c.query_mode == "linear"
        and not math.isclose(c.scale, 1 / math.sqrt(c.head_dim), rel_tol=1e-12),
    }
    return [name for name, blocked in checks.items() if blocked]


def run_tokenizer(meta: dict):
    """The run's tokenizer as a transformers tokenizer: GPT-2's BPE from the packaged files (offline, checked
    against tiktoken's hashes), or the pretrained model's own. Batches are padded on the left, with eos where
    the tokenizer has no pad token (GPT-2's BPE), so that a pipeline batches and generates as one prompt
    alone: the model reads positions from the mask, so left padding changes no token in training either."""
    import transformers

    from nlq.data.tokenizer import gpt2_encoding, gpt2_files, hf_tokenizer

    if meta["tokenizer"] == "gpt2":
        gpt2_encoding()
        vocab, merges = gpt2_files()
        tok = transformers.GPT2Tokenizer(vocab=str(vocab), merges=str(merges), padding_side="left")
    else:
        tok = hf_tokenizer(meta["name"], padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def special_tokens(tok) -> dict:
    """bos / eos ids of the tokenizer (GPT-2 BPE: both <|endoftext|>)."""
    return {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}


def generation_defaults(hf, tok) -> None:
    """generate's defaults: the tokenizer's padding, and never an id the tokenizer lacks: the embedding's rows
    past it (50257-50303 of GPT-2's padded 50304) decode to nothing."""
    gen = hf.generation_config
    gen.pad_token_id = tok.pad_token_id
    gen.suppress_tokens = list(range(len(tok), hf.config.vocab_size)) or None


def check_exportable(model: GPT, meta: dict, fmt: str) -> None:
    if meta["tokenizer"] == "char":
        raise ExportError(
            "a character-level run has no transformers tokenizer to ship with it: export a run trained on "
            "GPT-2 BPE or a pretrained model's tokenizer (its weights are in its ckpt.pt)"
        )
    bad = model.non_finite()
    if bad:
        raise ExportError(
            f"the checkpoint holds non-finite weights in {len(bad)} tensors ({bad[0]}, ...): it diverged; export "
            "an earlier checkpoint"
        )
    blockers = gpt2_blockers(model) if fmt == "gpt2" else []
    if blockers:
        raise ExportError(f"GPT-2 cannot express {', '.join(blockers)}: export with --format=hf instead")


def check_destination(dest: Path) -> None:
    """dest does not exist or is an empty directory, and its parent is writable: checked before any work."""
    if dest.is_symlink():
        raise ExportError(f"--dest={dest} is a symbolic link: name the directory itself (the export replaces dest)")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ExportError(f"--dest={dest} exists and is not an empty directory: choose a new one")
    parent = dest.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ExportError(f"--dest={dest}: its directory {parent} does not exist or is not writable")


def export(model: GPT, meta: dict, dest, fmt: str = "hf") -> Path:
    """Write model (with its tokenizer meta) as a Hugging Face directory at dest; returns dest."""
    dest = Path(dest)
    check_destination(dest)
    check_exportable(model, meta, fmt)
    from safetensors import SafetensorError

    tmp = None
    try:
        remove_stale_temps(dest.resolve().parent)  # what an export killed before its rename left there
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{os.getpid()}.", dir=dest.resolve().parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would make the export private
        tok = run_tokenizer(meta)
        (write_gpt2 if fmt == "gpt2" else write_nlq)(model, tok, tmp)
        tok.save_pretrained(tmp)
        for f in tmp.rglob("*"):  # one rule for the directory and its files (safetensors writes 0600)
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    except (OSError, SafetensorError, RuntimeError) as e:  # a full disk surfaces from safetensors' writer too
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise ExportError(f"cannot write {dest} ({reason}): free space or choose another --dest") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def write_nlq(model: GPT, tok, directory: Path) -> None:
    from nlq.interop.hf.configuration_nlq import NLQConfig
    from nlq.interop.hf.modeling_nlq import NLQForCausalLM

    config = NLQConfig(**nlq_config(model), **special_tokens(tok))
    config.auto_map = {
        "AutoConfig": "configuration_nlq.NLQConfig",
        "AutoModelForCausalLM": "modeling_nlq.NLQForCausalLM",
    }
    config.architectures = ["NLQForCausalLM"]
    hf = NLQForCausalLM(config)
    hf.load_state_dict(merged_state(model), strict=True)
    generation_defaults(hf, tok)
    hf.save_pretrained(directory)
    for name in MODELING:
        shutil.copy(HERE / "hf" / name, directory / name)


def write_gpt2(model: GPT, tok, directory: Path) -> None:
    """GPT-2's layout: Conv1D weights (in, out), biases everywhere (zero where this model has none)."""
    import transformers

    c = model.config
    config = transformers.GPT2Config(
        **schema.to_theirs("gpt2", c), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special_tokens(tok)
    )
    hf = transformers.GPT2LMHeadModel(config)
    ours = merged_state(model)
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    with torch.no_grad():
        for name, p in hf.named_parameters():  # parameters only: GPT-2's attn.bias buffer is its causal mask
            if name in ours:
                p.copy_(ours[name].t() if name.endswith(conv1d) else ours[name])
            else:  # a bias this model was built without
                assert name.endswith(".bias"), name
                p.zero_()
    generation_defaults(hf, tok)
    hf.save_pretrained(directory)
