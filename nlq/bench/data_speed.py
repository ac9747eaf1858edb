"""The data pipeline measured (bench_data.py): prepare's throughput and peak memory at two corpus sizes against a
plain tiktoken loop, and the loader's time per batch."""

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from nlq.common.domains import At, Text, check
from nlq.common.errors import ConfigError
from nlq.common.repo import ROOT
from nlq.data.dataset import open_split
from nlq.data.loader import TrainBatches
from nlq.data.textprep import synthetic_play

PLAIN_LOOP = textwrap.dedent("""
    import json, sys
    import numpy as np
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
            script = PLAIN_LOOP.format(src=str(corpus), dst=str(tmp / "plain.bin"))
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
