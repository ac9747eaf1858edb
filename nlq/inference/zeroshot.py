"""Zero-shot scoring of a trained model (zeroshot.py): LAMBADA, HellaSwag, ARC-Easy, WikiText perplexity, under the
paper's protocol or lm-evaluation-harness's, and the harness's own tasks (nlq/inference/harness.py)."""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch

from nlq.common.atomic import atomic_write_json, check_writable
from nlq.common.domains import DEVICE, DTYPE, At, Each, OneOf, Text, check
from nlq.common.errors import ConfigError
from nlq.data.dataset import DataError
from nlq.eval import taskdata
from nlq.eval.scoring import checked_encoder, loglikelihoods
from nlq.run.checkpoint import load_for_inference
from nlq.run.hardware import autocast, dtype_name, resolve_device, resolve_dtype

TASKS = ("lambada", "hellaswag", "arc_easy", "wikitext")


@dataclass
class EvalConfig:
    init_from: Annotated[str, Text()] = "resume"  # resume (out_dir's checkpoint), FILE.pt, gpt2.., Pythia or a HF dir
    out_dir: Annotated[str, Text()] = "out"  # the run to evaluate, with init_from=resume
    protocol: Annotated[str, OneOf(*taskdata.PROTOCOLS)] = "paper"  # the official code's, or 'standard' (module doc)
    tasks: Annotated[tuple[str, ...], Each(OneOf(*TASKS), nonempty=True)] = TASKS  # a comma list
    harness: Annotated[tuple[str, ...], Each(Text())] = ()  # lm-evaluation-harness tasks to run instead
    harness_include: Annotated[str | None, Text()] = None  # a directory of local task YAMLs for --harness
    limit: Annotated[int | None, At(1)] = 500  # items per task but wikitext (the paper used 500); None: all
    wikitext_lines: Annotated[int, At(1)] = 300  # paper: rows read (blanks too); standard: kept lines
    wikitext_min_chars: Annotated[int, At(0)] = 50  # wikitext lines shorter than this are skipped
    wikitext_min_tokens: Annotated[int, At(0)] = 10  # wikitext lines of fewer tokens are skipped
    ppl_len: Annotated[int, At(2)] = 512  # wikitext lines are cut to this many tokens
    batch_size: Annotated[int, At(1)] = 16  # sequences per forward pass
    lambada_file: Annotated[str | None, Text()] = None  # local JSONL copy of the data (the hub's fields); None: the hub
    hellaswag_file: Annotated[str | None, Text()] = None  # local JSONL copy of HellaSwag; None: the hub
    arc_easy_file: Annotated[str | None, Text()] = None  # local JSONL copy of ARC-Easy; None: the hub
    wikitext_file: Annotated[str | None, Text()] = None  # local JSONL copy of WikiText-103; None: the hub
    device: Annotated[str, DEVICE] = "auto"  # auto: cuda if available, else cpu
    dtype: Annotated[str, DTYPE] = "auto"  # auto: paper protocol bf16 weights (its code's); standard: as train.py
    out: Annotated[str | None, Text()] = None  # results JSON; None: out_dir/eval.json (resume), else ./eval.json

    def __post_init__(self):
        check(self)


PAPER_MAX_TOKENS = 512  # the official code skips a longer LAMBADA item and truncates a longer choice text


def scorable(items, protocol: str) -> tuple[list, int]:
    """(the items to score, how many were skipped): a row marked {"skip": why} is skipped under the paper
    protocol, as the official code skips it, and refused with its reason under the standard one."""
    skips = [item["skip"] for item in items if "skip" in item]
    if skips and protocol != "paper":
        raise DataError(f"a row cannot be scored: {skips[0]}; fix or remove it (the paper protocol skips it)")
    return [item for item in items if "skip" not in item], len(skips)


def lambada(model, encode, items, batch_size, protocol="paper"):
    """acc: every token of the last word reproduced greedily. Under the paper protocol a passage without a
    space, or whose context and word exceed 512 tokens, is skipped and counted, as the official code does."""
    requests, skipped = [], 0
    for item in items:
        if " " not in item["text"]:
            if protocol != "paper":
                raise DataError(f"a LAMBADA passage has no space, so no last word: {item['text'][:60]!r}")
            skipped += 1
            continue
        context, word = item["text"].rsplit(" ", 1)
        request = (encode(context), encode(" " + word))
        if protocol == "paper" and len(request[0]) + len(request[1]) > PAPER_MAX_TOKENS:
            skipped += 1
            continue
        requests.append(request)
    hits = [greedy for _, greedy in loglikelihoods(model, requests, batch_size, native=protocol == "paper")]
    return {"acc": sum(hits) / len(hits) if hits else 0.0, "n": len(hits), "skipped": skipped}


def argmax(scores) -> int:
    """The index of the highest score; the first on a tie."""
    return max(range(len(scores)), key=scores.__getitem__)


def paper_cut(context: list, ending: list) -> tuple[list, list]:
    """The official code tokenizes context + ending with truncation at 512 tokens (the first 512 kept) and
    scores what is left of the ending after the context: possibly part of it, possibly nothing."""
    return context[:PAPER_MAX_TOKENS], ending[: max(0, PAPER_MAX_TOKENS - len(context))]


def multiple_choice(model, encode, items, batch_size, protocol="paper"):
    """paper: acc of the ending with the highest mean log-prob per token (over the ending's tokens within the
    first 512, at least 1). standard: acc by the sum of log-probs, acc_norm by log-prob per character."""
    items, skipped = scorable(items, protocol)
    requests = [(encode(item["context"]), encode(e)) for item in items for e in item["endings"]]
    if protocol == "paper":
        requests = [paper_cut(c, e) for c, e in requests]
    scores = iter(loglikelihoods(model, requests, batch_size, native=protocol == "paper"))
    lengths = iter(max(len(ids), 1) for _, ids in requests)
    acc = acc_norm = 0
    for item in items:
        lps = [next(scores)[0] for _ in item["endings"]]
        per_token = [lp / next(lengths) for lp in lps]
        per_char = [lp / len(e) for lp, e in zip(lps, item["endings"])]
        acc += argmax(per_token if protocol == "paper" else lps) == item["label"]
        acc_norm += argmax(per_char) == item["label"]
    n = max(len(items), 1)
    if protocol == "paper":
        return {"acc": acc / n, "n": len(items), "skipped": skipped}
    return {"acc": acc / n, "acc_norm": acc_norm / n, "n": len(items)}


def perplexity(model, encode, lines, max_len, batch_size):
    ids = [encode(line)[: min(max_len, model.config.block_size + 1)] for line in lines]
    results = loglikelihoods(model, [(x[:1], x[1:]) for x in ids], batch_size)
    per_line = [-lp / (len(x) - 1) for (lp, _), x in zip(results, ids)]
    total = sum(-lp for lp, _ in results) / sum(len(x) - 1 for x in ids)
    return {"ppl": math.exp(sum(per_line) / len(per_line)), "ppl_tokens": math.exp(total), "n": len(ids)}


def run_task(task, model, encode, cfg: EvalConfig):
    try:
        return score_task(task, model, encode, cfg)
    except DataError as e:
        raise DataError(f"{task}: {e}") from None


def score_task(task, model, encode, cfg: EvalConfig):
    path = getattr(cfg, f"{task}_file")
    if task == "wikitext":
        if cfg.protocol == "paper":
            candidates = taskdata.wikitext_paper_rows(cfg.wikitext_lines, cfg.wikitext_min_chars, path)
        else:
            candidates = taskdata.wikitext_lines("validation", cfg.wikitext_min_chars, None, path)
        lines = [t for t in candidates if len(encode(t)) >= cfg.wikitext_min_tokens]
        lines = lines if cfg.protocol == "paper" else lines[: cfg.wikitext_lines]
        if not lines:
            raise DataError(
                f"no WikiText line has >= {cfg.wikitext_min_chars} characters and >= {cfg.wikitext_min_tokens} tokens"
            )
        return perplexity(model, encode, lines, cfg.ppl_len, cfg.batch_size)
    items = []
    for item in taskdata.items(task, path, protocol=cfg.protocol):
        items.append(item)
        if len(items) == cfg.limit:
            break
    if not items:
        raise DataError(f"{task}: no items in {path or taskdata.HUB[task][0]}")
    if task == "lambada":
        return lambada(model, encode, items, cfg.batch_size, cfg.protocol)
    return multiple_choice(model, encode, items, cfg.batch_size, cfg.protocol)


def results_path(cfg: EvalConfig) -> Path:
    """Where the results go, checked writable before any task runs."""
    out = Path(cfg.out or (Path(cfg.out_dir) / "eval.json" if cfg.init_from == "resume" else "eval.json"))
    check_writable("--out", out)
    return out


def evaluate(cfg: EvalConfig) -> None:
    """Every task of cfg on its model, each task's scores written to the results file as soon as it is done."""
    out = results_path(cfg)
    if cfg.harness_include and not Path(cfg.harness_include).is_dir():
        raise ConfigError(f"--harness_include={cfg.harness_include}: no such directory; name the folder of task YAMLs")
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device.split(":")[0])
    model, meta = load_for_inference(cfg.init_from, cfg.out_dir)
    model.eval().to(device)
    if cfg.harness:
        return run_harness(cfg, model, meta, device, dtype, out)
    encode = checked_encoder(meta, model.config.vocab_size)
    results = {}
    if cfg.protocol == "paper" and cfg.dtype == "auto":  # its code loads the weights in bf16, no autocast
        model.to(torch.bfloat16)
        dtype = torch.float32
    precision = dtype_name(next(model.parameters()).dtype if dtype == torch.float32 else dtype)
    print(f"precision: {precision} {'weights' if dtype == torch.float32 else 'autocast'}")
    with autocast(device, dtype):
        for task in cfg.tasks:
            print(f"{task}: scoring ...", flush=True)
            results[task] = run_task(task, model, encode, cfg)
            scores = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in results[task].items())
            print(f"{task}: {scores}")
            # after each task: a failure in a later one keeps the scores already computed
            record = {
                "init_from": cfg.init_from,
                "out_dir": cfg.out_dir,
                "protocol": cfg.protocol,
                "precision": precision,
                "results": results,
            }
            atomic_write_json(out, record)
    print(f"results: {out}")


def run_harness(cfg: EvalConfig, model, meta, device, dtype, out: Path):
    """The lm-evaluation-harness tasks in cfg.harness on the model; --limit applies to each."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from nlq.inference import harness

    lm = harness.ProjectLM(model, meta, batch_size=cfg.batch_size, device=device)
    tasks = TaskManager(include_path=cfg.harness_include) if cfg.harness_include else TaskManager()
    unknown = [t for t in cfg.harness if t not in tasks.all_tasks]
    if unknown:
        raise ConfigError(f"harness task(s) {unknown} unknown: name lm-eval tasks, or add --harness_include=DIR")
    print(f"lm-evaluation-harness: {', '.join(cfg.harness)} ...", flush=True)
    with autocast(device, dtype):
        evaluation = lm_eval.simple_evaluate(model=lm, tasks=list(cfg.harness), limit=cfg.limit, task_manager=tasks)
    results = {
        task: {k: v for k, v in r.items() if isinstance(v, (int, float))} for task, r in evaluation["results"].items()
    }
    for task, r in results.items():
        print(f"{task}: " + ", ".join(f"{k} {v:.4f}" for k, v in r.items()))
    record = {
        "init_from": cfg.init_from,
        "out_dir": cfg.out_dir,
        "protocol": "lm-evaluation-harness",
        "results": results,
    }
    atomic_write_json(out, record)
    print(f"results: {out}")
