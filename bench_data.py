"""Data pipeline benchmark: prepare throughput and peak memory at two corpus sizes, against a plain
single-process tiktoken loop, and the loader's time per batch.

    python bench_data.py                                  # the generated play
    python bench_data.py --input=data/shakespeare_char/input.txt --copies=32 --num_proc=2

The corpus is the input text cut into documents at blank lines, repeated `copies` (and 4 x `copies`)
times, as JSONL (data/shakespeare_char/prepare.py downloads tiny shakespeare to the input.txt above).
Peak memory not growing with the corpus is the property to look at.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from configurator import parse
from nlq.common.atomic import atomic_write_json
from nlq.common.domains import At, Text, check
from nlq.common.errors import ConfigError, cli_main
from nlq.data.dataset import open_split
from nlq.data.loader import TrainBatches
from nlq.data.textprep import synthetic_play

ROOT = Path(__file__).resolve().parent

PLAIN_LOOP = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from nlq.data.tokenizer import EOT, gpt2_encoding
    enc, ids = gpt2_encoding(), []
    for line in open({src!r}):
        ids.extend(enc.encode_ordinary(json.loads(line)["text"]))
        ids.append(EOT)
    np.array(ids, dtype=np.uint16).tofile({dst!r})
""")


@dataclass
class DataBenchConfig:
    input: Annotated[str | None, Text()] = None  # a UTF-8 text, cut into documents; None: the generated play
    copies: Annotated[int, At(1)] = 8  # the small corpus: this many copies of the input; the large: 4 times as many
    num_proc: Annotated[int, At(1)] = 2  # prepare's worker processes
    block_size: Annotated[int, At(1)] = 1024  # the loader's window
    batch_size: Annotated[int, At(1)] = 12  # rows per loader batch
    batches: Annotated[int, At(1)] = 200  # loader batches timed
    out: Annotated[str, Text()] = "bench_data.json"  # where the JSON report goes

    def __post_init__(self):
        check(self)


# Runs a command and prints the peak RSS (KiB) of its largest process. A fresh wrapper per command,
# because a process's RUSAGE_CHILDREN maximum never resets.
PEAK_RSS = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stderr.write(r.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
)


def timed_child(cmd):
    """(seconds, peak RSS in MiB of the largest process among the command and its workers)."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PEAK_RSS, *map(str, cmd)], capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if r.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {r.stderr.strip().splitlines()[-1]}")
    return seconds, int(r.stdout.split()[-1]) / 1024


def run(cfg: DataBenchConfig):
    if cfg.input is not None and not Path(cfg.input).is_file():
        raise ConfigError(f"input={cfg.input}: no such file")
    text = Path(cfg.input).read_text() if cfg.input else synthetic_play()
    docs = [d for d in text.split("\n\n") if d.strip()]
    report = {"input": cfg.input or "the generated play (textprep.synthetic_play)", "documents_per_copy": len(docs)}
    report["sizes"] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for copies in (cfg.copies, 4 * cfg.copies):
            corpus = tmp / f"corpus{copies}.jsonl"
            with open(corpus, "w") as f:
                for _ in range(copies):
                    f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
            out = tmp / f"out{copies}"
            prep_s, prep_rss = timed_child(
                [
                    sys.executable,
                    ROOT / "data/openwebtext/prepare.py",
                    "--dataset",
                    corpus,
                    "--out_dir",
                    out,
                    "--num_proc",
                    str(cfg.num_proc),
                ]
            )
            tokens = sum(json.loads((out / "meta.json").read_text())["tokens"].values())
            script = PLAIN_LOOP.format(root=str(ROOT), src=str(corpus), dst=str(tmp / "plain.bin"))
            plain_s, plain_rss = timed_child([sys.executable, "-c", script])
            report["sizes"].append(
                {
                    "copies": copies,
                    "corpus_mb": corpus.stat().st_size / 2**20,
                    "tokens": tokens,
                    "prepare_s": prep_s,
                    "prepare_tokens_per_s": tokens / prep_s,
                    "prepare_peak_rss_mib": prep_rss,
                    "plain_loop_s": plain_s,
                    "plain_tokens_per_s": tokens / plain_s,
                    "plain_peak_rss_mib": plain_rss,
                }
            )
        loader = TrainBatches(open_split(out, "train"), cfg.block_size, cfg.batch_size, 40, seed=0)
        t = time.perf_counter()
        for s in range(cfg.batches):
            loader.get(s, s % 40)
        report["loader_ms_per_batch"] = (time.perf_counter() - t) / cfg.batches * 1e3
        t = time.perf_counter()
        for s in range(10):
            loader.fingerprint(s)
        report["fingerprint_ms_per_step"] = (time.perf_counter() - t) / 10 * 1e3
    return report


def report_lines(argv):
    (cfg,) = parse(argv, DataBenchConfig, doc=__doc__, prog="bench_data.py")
    report = run(cfg)
    print(
        "| corpus | tokens | prepare tok/s | plain loop tok/s | prepare / plain | prepare peak RSS | plain peak RSS |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in report["sizes"]:
        print(
            f"| {s['corpus_mb']:.1f} MiB | {s['tokens']:,} | {s['prepare_tokens_per_s']:,.0f} "
            f"| {s['plain_tokens_per_s']:,.0f} | {s['prepare_tokens_per_s'] / s['plain_tokens_per_s']:.2f}x "
            f"| {s['prepare_peak_rss_mib']:.0f} MiB | {s['plain_peak_rss_mib']:.0f} MiB |"
        )
    print(
        f"\nloader: {report['loader_ms_per_batch']:.3f} ms per batch of {cfg.batch_size} x {cfg.block_size}; "
        f"fingerprint: {report['fingerprint_ms_per_step']:.2f} ms per step of 40 micro-batches"
    )
    atomic_write_json(cfg.out, report)
    print(f"results: {cfg.out}")


def main(argv=None):
    cli_main(report_lines, argv)


if __name__ == "__main__":
    main()
