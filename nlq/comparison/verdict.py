"""Your text, your verdict (verdict.py): the arms trained on a folder of one's documents, their losses, latency
side by side, the blind review page and its tally."""

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from model import QUERY_MODES
from nlq.common.atomic import atomic_write_json, atomic_write_text
from nlq.common.domains import At, Number
from nlq.common.errors import UserError
from nlq.common.repo import ROOT
from nlq.comparison import sweep, tuning
from nlq.comparison.compare import Run, arms_of, equal_cost_tables, fingerprint_report, plot
from nlq.comparison.stats import LOSS, versus_baseline
from nlq.data import documents
from nlq.data.dataset import load_meta, open_split
from nlq.data.tokenizer import codec, tokenizer_vocab
from nlq.eval import latency, review
from nlq.inference.sampling import decoding_precision
from nlq.run import checkpoint
from nlq.run.hardware import resolve_device

ARMS = (*QUERY_MODES, "wide_mlp")  # a query mode, or wide_mlp: linear queries with the MLP 4.75 d wide


class VerdictError(UserError):
    """A verdict that cannot be run as asked: the line says what to change."""


def parser(doc: str | None = None) -> argparse.ArgumentParser:
    """verdict.py's options (doc: its --help text)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="a folder of .txt / .md documents")
    p.add_argument(
        "--arms", default="linear,residual_gelu", help="query modes or config files; the first is the reference"
    )
    p.add_argument("--out", required=True, help="the report directory")
    p.add_argument("--config", default=str(ROOT / "config" / "verdict.py"), help="the settings every arm shares")
    p.add_argument("--tune", action="store_true", help="tune every arm on --grid (--tune_seeds), report on --seeds")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2", help="with --tune (default: learning rates)")
    p.add_argument("--tune_seeds", default="1", help="with --tune: stage 1's seeds")
    p.add_argument("--seeds", help="the seeds reported (default 1,2,3; with --tune 2,3,4)")
    p.add_argument("--tokenizer", default="gpt2", choices=documents.TOKENIZERS, help="GPT-2 BPE, or characters")
    p.add_argument("--val_size", type=Number(), default=0.1, help="the share of documents held out for validation")
    p.add_argument("--test_size", type=Number(), default=0.1, help="the share held out for the review")
    p.add_argument("--review_items", type=int, default=20, help="test documents the review continues")
    p.add_argument("--prompt_tokens", type=int, default=64, help="the opening of a document shown as its prompt")
    p.add_argument("--new_tokens", type=int, default=64, help="tokens each arm writes (the true continuation alike)")
    p.add_argument(
        "--temperature", type=Number(At(lo=0)), default=0.8, help="sampling temperature, the same for every arm"
    )
    p.add_argument("--top_k", type=int, default=200, help="sampling's top k, the same for every arm")
    p.add_argument("--latency_repeats", type=int, default=5, help="interleaved rounds of the latency measurement")
    p.add_argument("--tally", metavar="CHOICES.json", help="the answers the review page exported: unblind them")
    p.add_argument("--list_skipped", action="store_true", help="name every file of --data left out, with why")
    sweep.add_run_options(p)
    return p


DEFAULT_GRID = "learning_rate=3e-4,1e-3,3e-3"


SPLIT_SEED = 2357  # which documents are held out (data/openwebtext/prepare.py's seed)


def verdict(args, extra) -> None:
    """The verdict args (verdict.py's options, parser()) and extra (--key=value options for every run) ask for:
    the dataset, the runs, the report and the review page; or, with --tally, the review's answers unblinded."""
    out = Path(args.out)
    if args.tally:
        return tally(Path(args.tally), out)
    bad = [x for x in extra if not x.startswith("--") or "=" not in x]
    if bad:
        raise VerdictError(f"{bad[0]}: verdict passes only --key=value options on to train.py")
    check(args)
    arms = arm_list(args.arms, args.config)
    sweep.check_executor(args, extra)
    request = {
        "data": str(Path(args.data).resolve()), "arms": [a for a, _, _ in arms], "config": args.config,
        "tune": args.tune, "grid": args.grid, "seeds": args.seeds, "tune_seeds": args.tune_seeds,
        "tokenizer": args.tokenizer, "val_size": args.val_size, "test_size": args.test_size, "extra": extra,
    }  # fmt: skip
    check_out(out, request)
    check_page(out, args)
    args.out_root = str(out / "runs")  # where sweep.launch keeps the runs (and a cluster's job records)
    folder = documents.survey(args.data, args.val_size, args.test_size, SPLIT_SEED)
    if args.list_skipped:
        print("\n".join(documents.skipped_lines(folder)) or "nothing in --data was skipped")
    if not folder.splits.get("test"):
        raise VerdictError(f"--test_size={args.test_size} holds out no document for the review: raise it")
    codec_meta, encode = documents.codec_of(folder, args.tokenizer)
    extra = [f"--vocab_size={codec_meta['vocab_size']}", *extra] if args.tokenizer == "char" else extra
    runs, keys = plan(args, arms, out, extra)
    check_review(args, folder, encode, min(sweep.block_size_of(r) for r in runs))
    if args.dry_run:
        sweep.launch(runs, args, extra=[])
        return
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "verdict.json", request)  # first: a rerun of this command continues it
    prepare(args, folder, out, request)
    results = train_all(args, arms, runs, keys, out, extra)
    report(args, arms, results, out)


def check(args) -> None:
    """The options agree, before anything is read or started."""
    if not args.data:
        raise VerdictError("--data=DIR is needed: a folder of .txt / .md documents (or --tally to unblind a review)")
    if not Path(args.data).is_dir():
        raise VerdictError(f"--data={args.data} is not a folder: give a folder of .txt / .md documents")
    for name in ("review_items", "prompt_tokens", "new_tokens", "latency_repeats"):
        if getattr(args, name) < 1:
            raise VerdictError(f"--{name}={getattr(args, name)}: give a number >= 1")
    if args.top_k < 1:
        raise VerdictError(f"--top_k={args.top_k}: give a number >= 1")
    if (args.grid or args.tune_seeds != "1") and not args.tune:
        raise VerdictError("--grid and --tune_seeds are options of --tune")


REVIEW_OPTIONS = ("review_items", "prompt_tokens", "new_tokens", "temperature", "top_k")  # what makes the page


def review_options(args) -> dict:
    return {k: getattr(args, k) for k in REVIEW_OPTIONS}


def check_page(out: Path, args) -> None:
    """A review page already in OUT was made with these options: answers to it may exist, so it is kept and a
    rerun that would make another page is refused."""
    key = out / "review_key.json"
    if not key.is_file():
        return
    try:
        held = json.loads(key.read_text()).get("options")
    except (OSError, ValueError, AttributeError):
        held = None
    if held != review_options(args):
        made = ", ".join(f"--{k}={v}" for k, v in (held or {}).items()) or "options this version does not know"
        raise VerdictError(
            f"{out} holds a review page made with {made}; answers exported from it are tallied with its key, so it is "
            "kept: rerun with those options, or choose another --out"
        )


def written_review(out: Path) -> tuple:
    """(the review id, its items) of the page OUT holds, or (None, 0)."""
    key = out / "review_key.json"
    if not key.is_file():
        return None, 0
    held = json.loads(key.read_text())
    return held["review"], len(held["items"])


def check_review(args, folder, encode, block_size: int) -> None:
    """The review can be made from the test split (two documents longer than the prompt at least), before any
    run; --review_items beyond what it holds is said."""
    prompt = min(args.prompt_tokens, block_size - 1)
    lengths = sorted((len(encode(documents.read_document(p)[0])) for p in folder.splits["test"]), reverse=True)
    long = sum(n > prompt for n in lengths)
    if long < 2:
        fix = (
            f"lower --prompt_tokens to {lengths[1] - 1} or less"
            if len(lengths) > 1 and lengths[1] > 1
            else f"raise --test_size (it holds out {len(lengths)} document(s)) or add documents"
        )
        raise VerdictError(
            f"the test split holds {long} document(s) longer than the prompt ({prompt} tokens), the review needs 2: "
            f"{fix}"
        )
    if args.review_items > long:
        print(f"--review_items={args.review_items}: the test split holds {long} documents longer than the prompt, so "
              f"the review shows {long}")  # fmt: skip


def arm_list(text: str, config: str) -> list[tuple[str, str, list]]:
    """[(name, config file, its options)]: a query mode on the shared config, or a config file of one's own."""
    arms = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item.endswith(".py"):
            if not Path(item).is_file():
                raise VerdictError(f"--arms: {item} is not a file")
            arms.append((Path(item).stem, item, []))
        elif item == "wide_mlp":
            arms.append((item, config, ["--mlp_ratio=4.75"]))
        elif item in QUERY_MODES:
            arms.append((item, config, [f"--query_mode={item}"]))
        else:
            raise VerdictError(f"--arms: {item!r} is neither a query mode ({', '.join(ARMS)}) nor a .py config file")
    names = [a for a, _, _ in arms]
    if len(arms) < 2 or len(set(names)) < len(names):
        raise VerdictError(f"--arms={text}: name two arms or more, each once (e.g. --arms=linear,residual_gelu)")
    return arms


def check_out(out: Path, request: dict) -> None:
    """OUT is new, or holds this same verdict (a rerun continues it); another verdict's directory is refused."""
    held = out / "verdict.json"
    if held.is_file():
        try:
            same = json.loads(held.read_text()) == request
        except ValueError:
            same = False
        if not same:
            raise VerdictError(f"{out} holds another verdict ({held} differs from this command): choose another --out")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise VerdictError(f"{out} exists and holds no verdict: choose another --out")
    sweep.check_out_root(out)


def plan(args, arms, out: Path, extra) -> tuple[list, list]:
    """(the runs of the first stage: all of them without --tune, stage 1 with it; the grid keys)."""
    data = [f"--dataset={out / 'data'}", *extra]
    if not args.tune:
        seeds = sweep.seed_list("--seeds", args.seeds or "1,2,3")
        runs = [
            r for name, config, opts in arms for r in sweep.runs_with(config, name, seeds, out / "runs", [*data, *opts])
        ]
        return runs, []
    keys, points = sweep.grid_points(args.grid or [DEFAULT_GRID], extra)
    tune_seeds = sweep.seed_list("--tune_seeds", args.tune_seeds)
    seeds = sweep.seed_list("--seeds", args.seeds or "2,3,4")
    if set(tune_seeds) & set(seeds):
        raise VerdictError("--tune_seeds and --seeds share a seed: report on fresh seeds")
    stage1 = [
        r
        for name, config, opts in arms
        for point in points
        for r in sweep.runs_with(config, name, tune_seeds, out / "runs", [*data, *opts], point, "tune")
    ]
    return stage1, keys


def prepare(args, folder, out: Path, request: dict) -> None:
    """The dataset under OUT/data, made once: its meta.json, written last, marks it complete."""
    data = out / "data"
    if not (data / "meta.json").is_file():
        meta = documents.write(folder, args.tokenizer, data, request["data"], force=True)
        print("\n".join(documents.summary(folder, meta)) + f" -> {data}")


def train_all(args, arms, first, keys, out: Path, extra) -> dict:
    """Every run to its end; with --tune, stage 1, each arm's choice (lowest validation loss), stage 2."""
    finished, failures = sweep.launch(first, args, extra=[], tolerate=sweep.DIVERGED if args.tune else None)
    if not args.tune:
        if len(finished) < len(first):
            raise VerdictError(f"{len(first) - len(finished)} runs did not finish (above): run the same command again")
        return {"runs": first, "stage1": []}
    gave_up = {n for n, (code, _) in failures.items() if code == sweep.DIVERGED}
    if any(r not in finished and str(r.out_dir) not in gave_up for r in first):
        raise VerdictError("stage 1 is not complete (above): run the same command again; stage 2 starts after it")
    chosen = sweep.chosen_points(first, keys)
    seeds = sweep.seed_list("--seeds", args.seeds or "2,3,4")
    data = [f"--dataset={out / 'data'}", *extra]
    stage2 = [
        r
        for name, config, opts in arms
        for r in sweep.runs_with(config, name, seeds, out / "runs", [*data, *opts], chosen[name], "report")
    ]
    done, _ = sweep.launch(stage2, args, extra=[])
    if len(done) < len(stage2):
        raise VerdictError(f"{len(stage2) - len(done)} stage-2 runs did not finish (above): run the same command again")
    return {"runs": stage2, "stage1": first, "keys": keys}


def losses(results: dict, baseline: str) -> dict:
    """Per arm: validation loss at the last step (mean, std over seeds), its perplexity, its difference from
    the baseline paired by seed (stats.versus_baseline); with --tune, tuning.report's two-stage table."""
    runs = [Run.from_dir(r.out_dir) for r in results["runs"]]
    if results["stage1"]:
        stage1 = [Run.from_dir(r.out_dir) for r in results["stage1"]]
        table = tuning.report(stage1 + runs, results["keys"], baseline)
        arms = table["arms"]
    else:
        table, arms = None, {}
        step = min(r.config["max_iters"] for r in runs)
        by_arm = arms_of(runs)
        for arm, rs in by_arm.items():
            values = [r.evals[step]["val_loss"] for r in rs]
            gain, interval, p, kind = (
                (0.0, None, None, "") if arm == baseline else versus_baseline(rs, by_arm[baseline], step)
            )
            arms[arm] = {"n": len(rs), "val_loss_mean": statistics.mean(values), "improvement": gain, "p": p}
            arms[arm] |= {"val_loss_std": statistics.stdev(values) if len(values) > 1 else None, "test": kind}
            arms[arm] |= {"interval": list(interval) if interval else None}
    for r in arms.values():
        r["perplexity"] = float(np.exp(r["val_loss_mean"]))
    step = min(r.config["max_iters"] for r in runs)
    order = tuning.arm_order(table) if table else list(arms)  # the loss table's order, for every table
    equal_cost = equal_cost_tables(runs, baseline, step, LOSS, None, order)  # FLOPs, and the seconds each run took
    return {"arms": arms, "order": order, "tuned": table, "equal_cost": equal_cost, "batches": fingerprint_report(runs)}


def first_runs(results: dict) -> dict:
    """{arm: the out_dir of its reported run of the first seed}: what latency and the review use."""
    out = {}
    for r in sorted(results["runs"], key=lambda r: r.seed):
        out.setdefault(r.arm, r.out_dir)
    return out


def load_models(results: dict, device: str) -> dict:
    """{arm: model} from each arm's first reported run."""
    models = {}
    for arm, out_dir in first_runs(results).items():
        models[arm] = checkpoint.load_for_inference("resume", str(out_dir))[0].to(device).eval()
    return models


def measure_latency(args, models: dict, reference: str, device: str) -> dict:
    """Prefill and decode of each arm side by side (nlq/eval/latency.py), in the dtype sample.py would
    decode the reference in (dtype=auto: measured on a CPU), the same for every arm."""
    ref, ctx, dtype, why = decoding_precision(models[reference], device, "auto")
    decoders = {reference: ref}
    for arm, model in models.items():
        if arm != reference:
            decoders[arm] = decoding_precision(model, device, str(dtype).removeprefix("torch."))[0]
    block = min(m.config.block_size for m in models.values())
    prompt = min(args.prompt_tokens, block - args.new_tokens) if block > args.new_tokens else block // 2
    new = min(args.new_tokens, block - prompt)
    found = latency.compare_latency(decoders, reference, prompt, new, args.latency_repeats, device, ctx)
    return {"device": device, "dtype": str(dtype), "why": why, "threads": torch.get_num_threads(), "prompt": prompt,
            "new_tokens": new, "repeats": args.latency_repeats, "arms": found}  # fmt: skip


def review_items(args, models: dict, meta: dict, data: Path, device: str) -> list:
    """Up to --review_items test documents long enough to continue: each its opening, its true continuation
    and every arm's, sampled with the same settings and the same seed per item."""
    encode, decode = codec(meta)
    ids = open_split(data, "test")
    block = min(m.config.block_size for m in models.values())
    prompt = min(args.prompt_tokens, block - 1)
    docs = [d for d in documents.documents_of(ids, meta["eos"]) if len(d) > prompt]
    order = list(range(len(docs)))
    np.random.default_rng(0).shuffle(order)
    items = []
    for n, i in enumerate(order[: args.review_items]):
        doc = docs[i].astype(np.int64)
        item = {
            "id": f"item-{n + 1}",
            "prompt": decode(doc[:prompt].tolist()),
            "truth": text(decode, doc[prompt:], args.new_tokens, meta),
        }
        for arm, model in models.items():
            g = torch.Generator(device=device).manual_seed(1000 + n)
            x = torch.tensor(doc[:prompt][None], device=device)
            y = model.generate(x, args.new_tokens, temperature=args.temperature, top_k=args.top_k, generator=g,
                               vocab_limit=tokenizer_vocab(meta))  # fmt: skip
            item[arm] = text(decode, y[0, prompt:].cpu().numpy(), args.new_tokens, meta)
        items.append(item)
    return items


def text(decode, ids, n: int, meta: dict) -> str:
    """The first n ids as text, cut at the end of the document."""
    ids = [int(i) for i in ids[:n]]
    if meta["eos"] in ids:
        ids = ids[: ids.index(meta["eos"])]
    return decode(ids)


def report(args, arms, results: dict, out: Path) -> None:
    """report.json, report.md, curves.png, review.html and review_key.json in out."""
    names = [a for a, _, _ in arms]
    reference = names[0]
    loss = losses(results, reference)
    device = resolve_device("auto")
    timing = measure_latency(args, load_models(results, device), reference, device)
    rid, n_items = written_review(out)
    if rid is None:  # the page is made once: answers exported from it stay tallied by its key
        models = load_models(results, device)  # latency casts its models to the decode dtype: sample from fresh ones
        items = review_items(args, models, load_meta(out / "data"), out / "data", device)
        title = f"Which continuation is better? ({len(items)} items)"
        rid, n_items = review.write(out, items, tuple(names[:2]), 0, title, review_options(args)), len(items)
    plot([Run.from_dir(r.out_dir) for r in results["runs"]], out / "curves.png", reference)
    data_meta = load_meta(out / "data")
    result = {
        "command": ["verdict.py", *sys.argv[1:]] if sys.argv[0].endswith("verdict.py") else None,
        "data": {
            k: data_meta.get(k)
            for k in ("source", "tokenizer", "documents", "tokens", "duplicates", "skipped", "other_files")
        },
        "reference": reference,
        "losses": loss,
        "latency": timing,
        "review": {"id": rid, "items": n_items, "arms": names[:2], "page": "review.html"},
    }
    atomic_write_json(out / "report.json", result, indent=1)
    lines = markdown(result, args)
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def markdown(result: dict, args) -> list[str]:
    ref, data, loss, timing = result["reference"], result["data"], result["losses"], result["latency"]
    docs = ", ".join(f"{n} {k}" for k, n in data["documents"].items())
    lines = [
        f"# Verdict: {', '.join(loss['arms'])} on {data['source']}",
        "",
        f"Documents: {docs} ({data['tokenizer']} tokens: "
        + ", ".join(f"{n:,} {k}" for k, n in data["tokens"].items())
        + f"); {data['duplicates']} duplicates dropped, skipped: {documents.skipped_text(data['skipped'] or {})}"
        + (f"; {data['other_files']} files of other types ignored" if data.get("other_files") else "")
        + ".",
        "",
        "## Validation loss",
        "",
    ]
    if loss["tuned"]:
        lines += tuning.markdown(loss["tuned"])
    else:
        lines += [
            f"At equal settings on identical batches; the difference from {ref} relative to its loss (positive: lower "
            "loss), its 95 % interval and p paired by seed.",
            "",
            "| arm | val loss | perplexity | runs | vs reference | 95 % interval | p |",
            "|---|---|---|---|---|---|---|",
        ]
        for arm, r in loss["arms"].items():
            std = f" ± {r['val_loss_std']:.4f}" if r["val_loss_std"] is not None else ""
            ci = f"[{r['interval'][0]:+.2%}, {r['interval'][1]:+.2%}]" if r["interval"] else "—"
            p = f"{r['p']:.3g} ({r['test']})" if r["p"] is not None else "—"
            lines.append(
                f"| {arm} | {r['val_loss_mean']:.4f}{std} | {r['perplexity']:.2f} | {r['n']} "
                f"| {r['improvement']:+.2%} | {ci} | {p} |"
            )
    lines += [*loss["equal_cost"], "", loss["batches"], "", "Curves: curves.png."]
    lines += ["", "## Inference latency on this machine", ""]
    lines += [
        f"Batch 1, a prompt of {timing['prompt']} tokens then {timing['new_tokens']} tokens decoded with the KV cache, "
        f"{timing['dtype'].removeprefix('torch.')} on {timing['device']} ({timing['threads']} threads); median "
        f"[min-max] over {timing['repeats']} interleaved rounds; ratios to {ref} paired within each round. "
        "Measured each time this report is written: a rerun of the command trains nothing and measures it again.",
        "",
        "| arm | prefill tokens/s | ratio | decode ms/token | ratio |",
        "|---|---|---|---|---|",
    ]
    for arm in loss["order"]:  # the loss tables' order
        r = timing["arms"][arm]
        lines.append(
            f"| {arm} | {spread(r['prefill_tokens_per_s'], 0)} | {spread(r['prefill_ratio'], 3)} "
            f"| {spread(r['decode_ms_per_token'], 2)} | {spread(r['decode_ratio'], 3)} |"
        )
    rv = result["review"]
    lines += [
        "",
        "## Blind review",
        "",
        f"review.html: {rv['items']} test documents, each continued by {rv['arms'][0]} and {rv['arms'][1]} as A and B "
        "in an order drawn per item. Open it in a browser, answer with a / b / t, export with e, then: "
        f"python verdict.py --tally=choices-{rv['id']}.json --out={args.out}",
    ]
    return lines


def spread(s: dict, digits: int) -> str:
    return f"{s['median']:,.{digits}f} [{s['min']:,.{digits}f}-{s['max']:,.{digits}f}]"


def check_tally(path: Path, answers: dict) -> None:
    """A tally already in OUT is of these same answers (written again alike) or is kept: refused."""
    if not path.is_file():
        return
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        held = {}
    if not isinstance(held, dict) or held.get("answers") != answers:
        made = held.get("from", "answers not kept in it") if isinstance(held, dict) else "unreadable"
        raise VerdictError(
            f"{path} holds the tally of other answers ({made}): move it aside to tally these, so that neither is lost"
        )


def tally(choices: Path, out: Path) -> None:
    """Unblind a review's exported answers with its key: OUT/tally.json, printed."""
    key_file = out / "review_key.json"
    if not key_file.is_file():
        raise VerdictError(f"{out} holds no review_key.json: give the --out of the verdict whose page was reviewed")
    key = json.loads(key_file.read_text())
    answers = review.read_choices(choices, key)
    result = review.tally(answers, key) | {"answers": answers, "from": str(choices)}
    check_tally(out / "tally.json", answers)
    atomic_write_json(out / "tally.json", result, indent=1)
    a, b = key["arms"]
    p = result["sign_test_p"]
    print(
        f"{result['answered']} of {result['items']} items answered: {a} better {result['wins'][a]}, {b} better "
        f"{result['wins'][b]}, ties {result['ties']}; sign test p {'—' if p is None else f'{p:.3g}'} "
        f"-> {out / 'tally.json'}"
    )
