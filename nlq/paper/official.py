"""The artifacts of arXiv 2603.13381's official code (github.com/MarkoKarbevski/beyond_query_linearity, its
model.py and train.py) read as this project's: its checkpoints, its initialisation and its loss logs (its batch
order is replayed by nlq/data/loader.py).

Its checkpoints (train.py: ckpt.pt after each evaluation, ckpt_<step>.pt at save_checkpoint_steps) are one
torch.save'd dict: model (a nanoGPT state dict, maybe with torch.compile's _orig_mod. prefix), optimizer
(AdamW, two groups: the >= 2-dim parameters, then the rest, each in named_parameters order), model_args,
iter_num, best_val_loss, config. Its query modules have other names than ours (RENAMES) and 'original' is
our 'linear'. Its attention's head dim is n_embd // num_heads whatever model_args' head_size says (the
forward never reads head_size); its scale is model_args' scale. Loading stays weights_only (nlq/common/safe_load.py).
"""

import math
from pathlib import Path

import torch

from model import GPTConfig, clean_state_dict
from nlq.common.errors import UserError
from nlq.common.safe_load import torch_load
from nlq.interop import schema

# model_args keys that shape the model; the rest (TRAINING_KEYS) are the run's settings, kept for the record.
MODEL_KEYS = (
    "block_size", "vocab_size", "n_layer", "num_heads", "n_embd", "tie_weights", "head_size", "dropout", "bias",
    "scale", "query_mode", "mlp_hidden_size",
)  # fmt: skip
TRAINING_KEYS = (
    "batch_size", "accumulation_size", "learning_rate", "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr",
    "warmup_iters", "lr_decay_iters", "min_lr", "save_checkpoint_steps", "max_iters",
)  # fmt: skip
# Its GPTConfig's defaults, for keys a config left out (head_size 64 fixes the default scale: sqrt(1/64)).
DEFAULTS = dict(
    block_size=1024, vocab_size=50304, n_layer=12, num_heads=12, n_embd=768, tie_weights=True, dropout=0.0,
    bias=False, scale=math.sqrt(1 / 64), query_mode="original", mlp_hidden_size=4 * 768,
)  # fmt: skip
RENAMES = {  # its attention's query modules -> ours (model.QueryMLP)
    "attn.residual_rmsnorm_input.": "attn.query.rms.",
    "attn.residual_in.": "attn.query.w1.",
    "attn.residual_out.": "attn.query.w2.",
    "attn.residual_layernorm_output.": "attn.query.ln.",
}
SEED = 1337  # its train.py: torch.manual_seed(1337 + rank) before the model is built
EVAL_INTERVAL, TOKENS_PER_STEP = 1000, 12 * 40 * 1024  # its train.py's fixed settings
LOGS = ("tensor.pt", "eval_train_tensor.pt", "eval_val_tensor.pt")  # its run directory's loss logs


class OfficialError(UserError):
    """An official checkpoint this project cannot read or express."""


def is_official(ckpt) -> bool:
    """Whether a loaded checkpoint has the official layout (model_args with num_heads; ours has n_head)."""
    return isinstance(ckpt, dict) and isinstance(ckpt.get("model_args"), dict) and "num_heads" in ckpt["model_args"]


def model_fields(model_args: dict, path) -> dict:
    """The GPTConfig fields of an official model_args; a key or value this project cannot express is refused."""
    unknown = sorted(set(model_args) - set(MODEL_KEYS) - set(TRAINING_KEYS))
    if unknown:
        raise OfficialError(f"{path}: model_args has {', '.join(unknown)}, which this project cannot express")
    a = {**DEFAULTS, **{k: v for k, v in model_args.items() if k in MODEL_KEYS}}
    if a["query_mode"] not in schema.OFFICIAL_MODES:
        modes = ", ".join(schema.OFFICIAL_MODES)
        raise OfficialError(f"{path}: query_mode={a['query_mode']!r} is none of the official {modes}")
    if not all(isinstance(a[k], int) and a[k] > 0 for k in ("n_embd", "num_heads", "mlp_hidden_size", "n_layer")):
        raise OfficialError(f"{path}: n_embd, num_heads, n_layer and mlp_hidden_size must be positive integers")
    if not isinstance(a["scale"], (int, float)) or isinstance(a["scale"], bool):
        raise OfficialError(f"{path}: scale={a['scale']!r} is not a number")
    return schema.to_fields("official", a)


def parameter_names(fields: dict) -> list[str]:
    """The official model's parameters in its named_parameters order, in our names: the order of its
    AdamW state. A tied head is the token table and appears once, as transformer.wte.weight."""
    bias = [".weight", ".bias"] if fields["bias"] else [".weight"]
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(fields["n_layer"]):
        h = f"transformer.h.{i}."
        attn = ["attn.c_attn", "attn.c_proj"]
        norms = []
        if fields["query_mode"] == "residual_gelu":  # its registration order: the norms, then W1, W2
            norms = ["attn.query.rms.weight"]
            attn += ["attn.query.ln", "attn.query.w1", "attn.query.w2"]
        names += [h + "ln_1" + s for s in bias]
        names += [h + m + s for m in attn[:2] for s in bias] + [h + n for n in norms]
        names += [h + m + s for m in attn[2:] for s in bias]
        names += [h + "ln_2" + s for s in bias] + [h + m + s for m in ("mlp.c_fc", "mlp.c_proj") for s in bias]
    names += ["transformer.ln_f" + s for s in bias]
    return names if fields["tie_embeddings"] else names + ["lm_head.weight"]


def _rename(state: dict) -> dict:
    out = {}
    for k, v in state.items():
        for old, new in RENAMES.items():
            k = k.replace(old, new)
        if not k.endswith(".attn.bias"):  # the causal-mask buffer of its non-flash attention: not a weight
            out[k] = v
    return out


def _optimizer(saved: dict, fields: dict, state: dict, path) -> dict:
    """Its AdamW state keyed by our parameter names (checkpoint.restore_optimizer reads names). Its groups
    index the >= 2-dim parameters, then the others, each in its named_parameters order."""
    names = parameter_names(fields)
    order = [n for n in names if state[n].dim() >= 2] + [n for n in names if state[n].dim() < 2]
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not groups or sorted(i for g in groups for i in g["params"]) != list(range(len(order))):
        raise OfficialError(f"{path}: its optimizer state does not hold this model's {len(order)} parameters")
    return {
        "state": {order[i]: s for i, s in saved["state"].items()},
        "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in groups],
    }


def convert(ckpt: dict, path) -> dict:
    """An official checkpoint as this project's: weights in our names, the model as GPTConfig fields, the
    optimizer keyed by name, origin 'official', GPT-2's tokenizer (the official data is GPT-2 BPE)."""
    missing = [k for k in ("model", "model_args") if k not in ckpt]
    if missing:
        raise OfficialError(f"{path} lacks {', '.join(missing)}: not a complete official checkpoint")
    fields = model_fields(ckpt["model_args"], path)
    state = _rename(clean_state_dict(ckpt["model"]))
    absent = [n for n in parameter_names(fields) if n not in state]
    if absent:
        raise OfficialError(f"{path} lacks the weights {', '.join(absent[:3])}: a damaged or foreign checkpoint")
    out = {
        "model": state,
        "model_args": fields,
        "iter_num": ckpt.get("iter_num", 0),
        "best_val_loss": ckpt.get("best_val_loss", math.inf),
        "origin": "official",
        "tokenizer": {"tokenizer": "gpt2"},
    }
    if ckpt.get("optimizer"):  # a shared checkpoint may leave it out (absent, None, {}): the weights still load
        try:
            out["optimizer"] = _optimizer(ckpt["optimizer"], fields, state, path)
        except (OfficialError, KeyError, TypeError, IndexError) as e:  # only a continuation needs it
            out["optimizer_unusable"] = (
                str(e) if isinstance(e, OfficialError) else f"{path}: its optimizer state is damaged"
            )
    return out


# ---- initialisation -----------------------------------------------------------------------------------


def check_expressible(config) -> None:
    """The official model.py can build this GPTConfig (so its initialisation can be replayed)."""
    plain = GPTConfig(
        **{k: getattr(config, k) for k in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "bias")},
        query_mode=config.query_mode,
        mlp_ratio=config.mlp_ratio,
        tie_embeddings=config.tie_embeddings,
        dropout=config.dropout,
        attn_scale=config.attn_scale,
        norm_eps=config.norm_eps,
    )
    differs = [k for k, v in plain.to_dict().items() if getattr(config, k) != v]
    if differs:
        raise OfficialError(
            f"init_order='official' replays the official model.py, which has no {', '.join(differs)}: "
            "use init_order='project'"
        )


def initialise(model, seed: int = SEED) -> None:
    """Give model the weights the official model.py gives a fresh model after torch.manual_seed(seed),
    bitwise on CPU. There, every nn.Linear and nn.Embedding first initialises itself when it is built
    (kaiming-uniform weight and uniform bias; a standard normal table), then GPT.apply draws N(0, 0.02)
    for each of them in module order, the tied head last, then the residual projections (c_proj) draw
    N(0, 0.02 / sqrt(2 n_layer)). Only the last draw of each survives, but every draw advances the
    generator: all are replayed here on scratch tensors, in that order, from a private generator."""
    c = model.config
    check_expressible(c)
    g = torch.Generator().manual_seed(seed)
    d, hidden, qk = c.n_embd, c.mlp_hidden, (2 if c.query_mode in ("identity", "residual_gelu") else 3) * c.n_embd
    linears = []  # (our name, shape) of every official nn.Linear, in module order
    for i in range(c.n_layer):
        h = f"transformer.h.{i}."
        linears += [(h + "attn.c_attn", (qk, d)), (h + "attn.c_proj", (d, d))]
        if c.query_mode == "residual_gelu":
            linears += [(h + "attn.query.w1", (d // 2, d)), (h + "attn.query.w2", (d, d // 2))]
        linears += [(h + "mlp.c_fc", (hidden, d)), (h + "mlp.c_proj", (d, hidden))]
    tables = [("transformer.wte", (c.vocab_size, d)), ("transformer.wpe", (c.block_size, d))]

    for _, shape in tables:  # built: nn.Embedding's standard normal
        torch.empty(shape).normal_(generator=g)
    for _, shape in linears + [("lm_head", (c.vocab_size, d))]:  # built: nn.Linear's uniform draws
        torch.empty(shape).uniform_(generator=g)
        if c.bias and _ != "lm_head":
            torch.empty(shape[0]).uniform_(generator=g)
    drawn = {}
    for name, shape in tables + linears + [("lm_head", (c.vocab_size, d))]:  # GPT.apply: N(0, 0.02)
        drawn[name] = torch.empty(shape).normal_(0.0, 0.02, generator=g)
    std = 0.02 / math.sqrt(2 * c.n_layer)
    for name, _ in linears:  # named_parameters order: each block's attn.c_proj, then its mlp.c_proj
        if name.endswith("c_proj"):
            drawn[name] = torch.empty(drawn[name].shape).normal_(0.0, std, generator=g)
    if c.tie_embeddings:  # the head's draw came last and is the table
        drawn["transformer.wte"] = drawn["lm_head"]
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name.endswith(".bias"):
                p.zero_()
            elif name.rsplit(".", 1)[0] in drawn:
                p.copy_(drawn[name.rsplit(".", 1)[0]])
            else:  # LayerNorm and RMSNorm weights
                p.fill_(1.0)


def read_model_args(path) -> dict:
    """An official checkpoint's model_args, its tensors left on disk (memory-mapped)."""
    try:
        ckpt = torch_load(path, mmap=True)
    except Exception as e:
        raise OfficialError(f"{path} cannot be read ({type(e).__name__}): truncated or not a checkpoint") from None
    if not is_official(ckpt):
        raise OfficialError(f"{path} is not an official checkpoint (no model_args with num_heads)")
    return ckpt["model_args"]


# ---- loss logs ----------------------------------------------------------------------------------------


def read_log(path: Path) -> torch.Tensor:
    """One of its loss logs: a float tensor of rows of 3 (weights_only)."""
    try:
        t = torch_load(path)
    except FileNotFoundError:
        raise OfficialError(f"{path} not found: an official run directory holds {', '.join(LOGS)}") from None
    except Exception as e:
        raise OfficialError(f"{path} cannot be read ({type(e).__name__}): it is damaged or not its loss log") from None
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.size(1) != 3 or not t.is_floating_point():
        raise OfficialError(f"{path} is not an official loss log (a float tensor of rows [value, ., .])")
    return t.float()


def losses(run_dir) -> tuple[dict, dict]:
    """({step: train loss}, {step: (val loss, train-eval loss)}) of an official run directory. Its train.py
    writes a step's row of tensor.pt (column 0: the last micro-batch's loss times the accumulation, so one
    micro-batch of 12 rows, not the step's mean) and evaluates before training step k * 1000 into row k of
    eval_train_tensor.pt / eval_val_tensor.pt (count, mean, std over 200 batches); unwritten rows are 0."""
    run_dir = Path(run_dir)
    train, eval_train, eval_val = (read_log(run_dir / name) for name in LOGS)
    if len(eval_train) != len(eval_val):  # its loop allocates both with one row per evaluation
        raise OfficialError(
            f"{run_dir}: {LOGS[1]} has {len(eval_train)} rows and {LOGS[2]} {len(eval_val)}; its train.py writes "
            "them alike: one of them is damaged or from another run"
        )
    for name, log in zip(LOGS[1:], (eval_train, eval_val)):
        if not torch.isfinite(log[:, 0]).all() or (log[:, 0] < 0).any():
            raise OfficialError(f"{run_dir / name}: its counts (column 0) must be finite and >= 0: it is damaged")
    steps = {i: float(v) for i, v in enumerate(train[:, 0].tolist()) if v != 0}
    evals = {  # a train-eval row not written (count 0) is no loss of 0
        k * EVAL_INTERVAL: (float(v[1]), float(t[1]) if t[0] > 0 else math.nan)
        for k, (v, t) in enumerate(zip(eval_val, eval_train))
        if v[0] > 0
    }
    if not evals:
        raise OfficialError(f"{run_dir / LOGS[2]} holds no evaluation yet")
    return steps, evals
