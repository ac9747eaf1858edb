"""The first GPU hour in one command: what a short session must learn, in under 8 minutes on one H200.

    python gpu_check.py                    # on a CUDA machine: GPT-2 small, bf16, compiled; writes gpu_check.json
    python gpu_check.py --preset=tiny      # anywhere (the test suite runs it on a CPU): the same steps, tiny

In order, each step's result and wall time kept even if a later one fails (or the session's time runs out;
no step starts after --budget_s):
1. tests/test_gpu.py (pytest), the checks that need CUDA;
2. flash attention forced (SDPBackend.FLASH_ATTENTION only) for a forward and backward of every query mode
   in bf16: a mode that would fall back to another kernel fails here, by name;
3. bench.py's training step of every mode (tokens/s, MFU, ratio to linear, peak memory), compiled;
4. train.py's own loop on random tokens for linear and residual_gelu: ms per step, MFU, and what
   torch.compile did (graphs compiled, recompilations, graph breaks).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import bench
import train
from atomic import atomic_write_json
from configurator import parse
from dataset import write_dataset
from errors import UserError, cli_main
from hardware import resolve_device
from model import GPT, QUERY_MODES, GPTConfig
from rundir import read_metrics

ROOT = Path(__file__).resolve().parent
LOOP_MODES = ("linear", "residual_gelu")


def gpu_tests() -> dict:
    """tests/test_gpu.py in a subprocess: its exit status and last line."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "test_gpu.py")], capture_output=True, text=True
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {"returncode": done.returncode, "summary": lines[-1] if lines else ""}


def flash_attention(preset: str, device: str) -> dict:
    """{mode: 'ok' or the error}: each mode's forward and backward with only the flash kernel allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = {**bench.PRESETS[preset], "block_size": min(bench.PRESETS[preset]["block_size"], 256)}
    out = {}
    for mode in QUERY_MODES:
        model = GPT(GPTConfig(**shape, query_mode=mode)).to(device, torch.bfloat16)
        x = torch.randint(0, shape["vocab_size"], (2, shape["block_size"]), device=device)
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                model(x, x)[1].backward()
            out[mode] = "ok"
        except RuntimeError as e:
            out[mode] = f"failed: {str(e).splitlines()[0]}"
    return out


def random_tokens(directory: Path, vocab: int, n: int = 2_000_000) -> Path:
    """A dataset of uniformly random token ids: timing does not depend on the data."""
    ids = np.random.default_rng(0).integers(0, vocab, size=n)
    write_dataset(directory, {"train": [ids[: n * 9 // 10]], "val": [ids[n * 9 // 10 :]]}, {"vocab_size": vocab})
    return directory


def training_loop(preset: str, device: str, steps: int, compile: bool, scratch: Path) -> dict:
    """{mode: ms per step (median over the last two thirds of the timed steps), MFU, and torch.compile's
    counters: frames compiled (one per compiled function, one more per recompilation, e.g. after the first
    evaluation's switch to eval mode, and per graph break), distinct graphs, graph breaks} from train.py."""
    from torch._dynamo.utils import counters

    shape = bench.PRESETS[preset]
    data = random_tokens(scratch / "data", shape["vocab_size"])
    out = {}
    for mode in LOOP_MODES:
        counters.clear()
        torch._dynamo.reset()
        run = scratch / f"run-{mode}"
        args = {**shape, "query_mode": mode, "dataset": data, "out_dir": run, "max_iters": steps}
        args.update(eval_interval=steps, eval_iters=2, batch_size=12 if device == "cuda" else 2)
        args.update(gradient_accumulation_steps=2, compile=compile, device=device, warmup_iters=2)
        args.update(dtype="auto" if device == "cuda" else "float32", wandb_log=False)
        train.main([f"--{k}={v}" for k, v in args.items()])
        timed = [r for r in read_metrics(run / "metrics.jsonl") if r.get("ms")]
        records = timed[len(timed) // 3 :]  # the first third still settles (allocator, clocks)
        out[mode] = {
            "ms_per_step": statistics.median(r["ms"] for r in records) if records else None,
            "mfu": statistics.median(r["mfu"] for r in records) if records and records[0]["mfu"] else None,
            "frames_compiled": counters["frames"]["ok"],
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
        }
    return out


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gpt2", choices=sorted(bench.PRESETS), help="the model shape")
    p.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    p.add_argument("--steps", type=int, default=30, help="train.py steps per loop run")
    p.add_argument("--out", default="gpu_check.json", help="the results JSON, written after every step")
    p.add_argument("--skip_tests", action="store_true", help="leave out tests/test_gpu.py")
    p.add_argument(
        "--budget_s",
        type=float,
        default=420,
        help="no step starts after this many seconds (a lent machine's command limit is 600 s)",
    )
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    report = {"device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__}
    report["seconds"] = {}  # each step's wall time: what the next session can plan with
    start = time.monotonic()

    def step(name, fn, show=lambda value: json.dumps(value, default=str)):
        began = time.monotonic()
        if began - start >= args.budget_s:
            report[name] = f"skipped: {began - start:.0f} s had passed (--budget_s={args.budget_s:g})"
        else:
            print(f"{name} ...", file=sys.stderr, flush=True)
            report[name] = fn()
        report["seconds"][name] = round(time.monotonic() - began, 1)
        atomic_write_json(args.out, report, default=str)
        print(f"{name}: {report[name] if isinstance(report[name], str) else show(report[name])}")

    if not args.skip_tests:
        step("gpu_tests", gpu_tests)
    step("flash_attention", lambda: flash_attention(args.preset, device))
    modes = ",".join(QUERY_MODES)  # the query modes; the wide-MLP arm is linear with a wider MLP
    bench_args = [f"--preset={args.preset}", f"--device={device}", f"--modes={modes}", "--repeats=3", "--steps=3"]
    bench_args.append("--recompute=False")
    step("bench", lambda: bench.measure(parse(bench_args, bench.BenchConfig)[0]), show=bench.markdown)
    with tempfile.TemporaryDirectory() as scratch:
        step("train_loop", lambda: training_loop(args.preset, device, args.steps, cuda, Path(scratch)))
    flash, tests = report["flash_attention"], report.get("gpu_tests", {"returncode": 0})
    failed = [m for m, r in flash.items() if r != "ok"] if isinstance(flash, dict) else []
    if failed or isinstance(tests, dict) and tests["returncode"] not in (0, 5):
        raise UserError(f"flash attention failed for {failed}; tests/test_gpu.py: {tests}; details in {args.out}")
    skipped = [name for name, value in report.items() if isinstance(value, str) and value.startswith("skipped")]
    print(f"results: {args.out}" + (f" (over the time budget, not run: {', '.join(skipped)})" if skipped else ""))


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
