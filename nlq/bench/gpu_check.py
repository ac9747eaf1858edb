"""The first GPU session in one command (gpu_check.py): the steps, each run in a process of its own under a
wall-clock limit, and the plan that fits them in a budget."""

import argparse
import importlib.metadata
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from configurator import parse
from model import GPT, QUERY_MODES, GPTConfig
from nlq.bench import cost, step_cost
from nlq.common.atomic import atomic_write_json
from nlq.common.domains import At, Number
from nlq.common.errors import UserError
from nlq.common.repo import ROOT
from nlq.data.dataset import write_dataset
from nlq.run.config import TrainConfig
from nlq.run.hardware import resolve_device
from nlq.run.rundir import read_metrics
from nlq.run.trainer import train

LOOP_MODES = ("linear", "residual_gelu")


OTHER_ARMS = tuple(arm for arm in cost.ARMS if arm not in LOOP_MODES)


# Seconds each step takes, as one H200 measured them (docs/benchmarks.md, 2026-12-04: probe 32, gpu_tests 78,
# decode 22, micro_batch 104, train_loop 123, other_arms 39 eager; step_costs 111 s with a fourth compile it no
# longer has, so 85). Not yet measured: decode_compiled (about 25 s to compile each of the 4 modes' decode step,
# and transformers' generate compiling its own, as the 2026-12-04 anchor step's 113 s took with a failed compile)
# and the tests' compiled decoding (about 25 s more). Plan with an earlier report's seconds: --plan_from=REPORT.
# Compiling GPT-2 small's training step cold takes about 30-50 s there, 20 s for a graph found in inductor's
# on-disk cache, 8 s to start each step's process (imports, CUDA). tiny: measured on a 2-core CPU, eager.
# "other_arms_compiled" is other_arms when the budget lets it compile.
ESTIMATES = {
    "gpt2": dict(probe=32, gpu_tests=103, decode_compiled=190, decode=22, step_costs=85, micro_batch=104,
                 train_loop=123, other_arms=39, other_arms_compiled=240),
    "tiny": dict(probe=6, gpu_tests=9, decode_compiled=12, decode=8, step_costs=12, micro_batch=8, train_loop=5,
                 other_arms=7, other_arms_compiled=40),
}  # fmt: skip


# A step is stopped at three times its estimate plus this many seconds. On the GPU a hung step must not eat
# the session's few minutes; tiny runs on a CPU (the test suite's), where nothing is budgeted and the machine
# may be busy with other work that makes a 6 s step take a minute.
SLACK_S = {"gpt2": 30, "tiny": 300}


COMPILES = dict(probe=1, gpu_tests=4, decode_compiled=5, decode=0, step_costs=3, micro_batch=2, train_loop=4,
                other_arms=0, other_arms_compiled=4)  # fmt: skip


# In the order they run: the probe, the tests (the step that finds bugs: early, so no budget skips them), then
# what no report has measured yet, then what the 2026-12-04 report did (to rerun after a change: --only=...).
WHAT = dict(
    probe="versions, clocks, bf16, one tiny compiled function, flash attention at this project's scales",
    gpu_tests="tests/test_gpu.py: each failing test's name and traceback",
    decode_compiled="each query mode's decoding with its step compiled inside the CUDA graph, ratios to linear, "
    "transformers' GPT-2 generate (static cache, compiled) beside it, and linear's and residual_gelu's "
    "uncompiled graphs before",
    decode="every arm's prefill and decode through the Decoder (CUDA graphs), ratios to linear",
    step_costs="linear's against residual_gelu's step with their heaviest kernels and their difference kernel by "
    "kernel, and train.py's step against it with each addition off (guard, staging, fingerprint, chunked loss)",
    micro_batch="linear's step at micro-batches 12 to 32: tokens/s, MFU, peak memory",
    train_loop="train.py's loop for linear and residual_gelu: ms/step, MFU, torch.compile's counters",
    other_arms=f"bench.py's training step of {', '.join(OTHER_ARMS)} beside linear",
)


# The default, one H200 slot of 6 minutes (325 s by the estimates): the probe, the tests, and what no report has
# measured. The rest was measured on 2026-12-04: rerun it after a change that moves it.
NEW = ("probe", "gpu_tests", "decode_compiled")
MEASURED = ("decode", "step_costs", "micro_batch", "train_loop", "other_arms")
STATUS_FAILED = ("failed", "crashed", "timeout", "interrupted")


def probe(args, device) -> tuple[dict, list]:
    """Versions and the device; bf16 matmuls; one tiny compiled function; the flash kernel alone."""
    cuda = device.startswith("cuda")
    out = {"versions": versions(), "compile": tiny_compile(device) if args.compile else "not tried (compile off)"}
    if cuda:
        props = torch.cuda.get_device_properties(device)
        out["gpu"] = dict(name=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count)
        out["gpu"].update(memory_gib=round(props.total_memory / 2**30, 1), count=torch.cuda.device_count())
        out["bf16_supported"] = torch.cuda.is_bf16_supported()
    out["bf16_matmul_rel_error"] = bf16_matmul_error(device)
    out["sdpa_flash"] = sdpa_flash(device)
    out["flash_attention"] = flash_attention(args.preset, device)
    problems = [f"flash attention {mode}: {r}" for mode, r in out["flash_attention"].items() if r != "ok"]
    problems += [f"torch.compile: {out['compile']}"] if out["compile"].startswith("failed") else []
    problems += [f"bf16 matmul relative error {out['bf16_matmul_rel_error']:.3g} > 0.02"] * (
        out["bf16_matmul_rel_error"] > 0.02
    )
    problems += [f"SDPA flash at scale {s}: {r}" for s, r in out["sdpa_flash"].items() if not r.startswith("ok")]
    return out, problems


def versions() -> dict:
    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out.update({p: version(p) for p in ("triton", "numpy", "transformers")})
    return out


def tiny_compile(device) -> str:
    """'ok' when torch.compile builds and runs a small function that matches eager, else the error."""
    x = torch.randn(64, 64, device=device)
    fn = lambda t: torch.nn.functional.gelu(t) * 2 + t.sum(0)  # noqa: E731
    try:
        compiled = torch.compile(fn)(x)
    except Exception as e:  # Triton, a C compiler or Python's headers missing: the message says which
        return f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return "ok" if torch.allclose(compiled, fn(x), atol=1e-5, rtol=1e-5) else "failed: differs from eager"


def bf16_matmul_error(device) -> float:
    """Relative error of a bf16 matmul against float64 (about 2^-8 when bf16 works)."""
    a, b = torch.randn(512, 512, device=device), torch.randn(512, 512, device=device)
    exact = a.double() @ b.double()
    return ((a.bfloat16() @ b.bfloat16()).double() - exact).norm().item() / exact.norm().item()


def sdpa_flash(device) -> dict:
    """{scale: 'ok (max error E)' or the error}: causal SDPA with only the flash kernel allowed, at the
    linear queries' scale 1/sqrt(d_h) and the others' 1/(2 sqrt(d_h)), against the math kernel in float32."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    head = 64
    q, k, v = (torch.randn(2, 4, 128, head, device=device) for _ in range(3))
    out = {}
    for name, scale in (("1/sqrt(d_h)", head**-0.5), ("1/(2 sqrt(d_h))", 0.5 * head**-0.5)):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                flash = sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True, scale=scale)
        except RuntimeError as e:
            out[name] = f"failed: {str(e).splitlines()[0]}"
            continue
        with sdpa_kernel([SDPBackend.MATH]):
            exact = sdpa(q, k, v, is_causal=True, scale=scale)
        error = (flash.float() - exact).abs().max().item()
        out[name] = f"ok (max error {error:.2g})" if error < 0.05 else f"failed: max error {error:.2g} > 0.05"
    return out


def flash_attention(preset: str, device: str) -> dict:
    """{mode: 'ok' or the error}: each mode's forward and backward with only the flash kernel allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = {**cost.PRESETS[preset], "block_size": min(cost.PRESETS[preset]["block_size"], 256)}
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


def bench_step(args, device, modes) -> tuple[dict, list]:
    """bench.py's training step (and its prefill and decode) of these modes, linear first."""
    options = [f"--preset={args.preset}", f"--device={device}", f"--modes={','.join(modes)}", "--repeats=3"]
    options += ["--steps=3", "--recompute=False", f"--compile={args.compile}"]
    return cost.measure(parse(options, cost.BenchConfig)[0]), []


def random_tokens(directory: Path, vocab: int, n: int = 2_000_000) -> Path:
    """A dataset of uniformly random token ids: timing does not depend on the data."""
    ids = np.random.default_rng(0).integers(0, vocab, size=n)
    write_dataset(directory, {"train": [ids[: n * 9 // 10]], "val": [ids[n * 9 // 10 :]]}, {"vocab_size": vocab})
    return directory


def training_loop(args, device) -> tuple[dict, list]:
    """{mode: ms per step (median over the last two thirds of the timed steps), MFU, and torch.compile's
    counters: frames compiled (one per compiled function, one more per recompilation, e.g. after the first
    evaluation's switch to eval mode, and per graph break), distinct graphs, graph breaks} from train.py."""
    from torch._dynamo.utils import counters

    shape, out = cost.PRESETS[args.preset], {}
    with tempfile.TemporaryDirectory() as scratch:
        data = random_tokens(Path(scratch) / "data", shape["vocab_size"])
        for mode in LOOP_MODES:
            counters.clear()
            torch._dynamo.reset()
            run = Path(scratch) / f"run-{mode}"
            options = {**shape, "query_mode": mode, "dataset": data, "out_dir": run, "max_iters": args.steps}
            options.update(eval_interval=args.steps, eval_iters=2, batch_size=12 if device == "cuda" else 2)
            options.update(gradient_accumulation_steps=2, compile=args.compile, device=device, warmup_iters=2)
            options.update(dtype="auto" if device == "cuda" else "float32", wandb_log=False)
            train(*parse([f"--{k}={v}" for k, v in options.items()], TrainConfig, GPTConfig))
            timed = [r for r in read_metrics(run / "metrics.jsonl") if r.get("ms")]
            records = timed[len(timed) // 3 :]  # the first third still settles (allocator, clocks)
            out[mode] = {
                "ms_per_step": statistics.median(r["ms"] for r in records) if records else None,
                "mfu": statistics.median(r["mfu"] for r in records) if records and records[0]["mfu"] else None,
                "frames_compiled": counters["frames"]["ok"],
                "graphs": counters["stats"]["unique_graphs"],
                "graph_breaks": sum(counters["graph_break"].values()),
            }
    return out, []


def gpu_tests(args, device) -> tuple[dict, list]:
    """tests/test_gpu.py under pytest: counts, and each failing or erroring test with its traceback."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        done = subprocess.run([*command, str(ROOT / "tests" / "test_gpu.py")], capture_output=True, text=True)
        if not junit.exists():
            raise RuntimeError(
                f"pytest wrote no report (exit {done.returncode}): {(done.stdout + done.stderr)[-3000:]}"
            )
        out = {"returncode": done.returncode, **junit_summary(junit)}
    return out, [f"{t['test']}: {t['message']}" for t in out["failed"]]


def junit_summary(path: Path) -> dict:
    """{'passed': [names], 'failed': [{test, message, traceback}], 'skipped': [{test, reason}]}."""
    out = {"passed": [], "failed": [], "skipped": []}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = next((e for e in case if e.tag in ("failure", "error")), None)
        skipped = case.find("skipped")
        if bad is not None:
            out["failed"].append({"test": name, "message": bad.get("message"), "traceback": bad.text})
        elif skipped is not None:
            out["skipped"].append({"test": name, "reason": skipped.get("message")})
        else:
            out["passed"].append(name)
    return out


def decode(args, device, path="graph", modes=cost.ARMS, anchor=False) -> tuple[dict, list]:
    """These arms' prefill and decode through the Decoder on this path (bench.py --train=False), ratios to linear;
    with anchor, transformers' GPT-2 generate beside linear's."""
    options = [f"--preset={args.preset}", f"--device={device}", f"--modes={','.join(modes)}", "--repeats=5"]
    options += ["--train=False", "--recompute=False", f"--anchor={anchor}", f"--decode={path}"]
    report = cost.measure(parse(options, cost.BenchConfig)[0])
    return report, [f"decode {m}: {p}" for m, p in report["decode_path"].items() if "failed" in p]


def decode_compiled(args, device) -> tuple[dict, list]:
    """Each query mode's decoding with its one-token step compiled inside the CUDA graph (issue 51's targets: every
    mode >= 0.9x linear, >= 2,000 tokens/s), with the anchor beside linear; first linear's and residual_gelu's
    graphs of the eager step, in the same process, for what compiling gains. Without compile: graphs only."""
    graph, problems = decode(args, device, "graph", ("linear", "residual_gelu"))
    path = "compiled" if args.compile else "graph"
    compiled, more = decode(args, device, path, QUERY_MODES, anchor=True)
    return {"graph": graph, "all_modes": compiled}, problems + more  # all_modes' config.decode: its path


def step_costs(args, device) -> tuple[dict, list]:
    """nlq/bench/step_cost.py: the query's cost and train.py's step against its additions switched off."""
    compiled, batch = args.compile, 12 if device.startswith("cuda") else 2
    query = step_cost.query_cost(args.preset, device, compiled, batch=batch)
    return {"query": query, "ablation": step_cost.step_ablation(args.preset, device, compiled, batch=batch)}, []


def micro_batch(args, device) -> tuple[dict, list]:
    sizes = (12, 16, 24, 32) if device.startswith("cuda") else (1, 2)  # 12 compiled in step_costs: in the cache
    return step_cost.micro_batch(args.preset, device, args.compile, sizes), []


STEP_FUNCTIONS = {
    "probe": probe,
    "gpu_tests": gpu_tests,
    "decode_compiled": decode_compiled,
    "decode": decode,
    "step_costs": step_costs,
    "micro_batch": micro_batch,
    "train_loop": training_loop,
    "other_arms": lambda args, device: bench_step(args, device, ("linear", *OTHER_ARMS)),
}


def run_one(args) -> None:
    """--step=NAME: run one step here; its result (or traceback) goes to --result as JSON, else is printed."""
    device = resolve_device(args.device)
    args.compile = device.startswith("cuda") if args.compile == "auto" else args.compile == "True"
    try:
        result, problems = STEP_FUNCTIONS[args.step](args, device)
        outcome = {"result": result, "problems": problems}
    except Exception:
        outcome = {"error": traceback.format_exc()}
    if args.result:
        atomic_write_json(args.result, outcome, default=str)
    else:
        print(json.dumps(outcome, indent=1, default=str))
    if "error" in outcome:
        sys.exit(1)


@dataclass
class Step:
    """One step: its command (a process of its own; --result=PATH is appended), expected seconds and compiles."""

    name: str
    what: str
    argv: list
    estimate_s: float
    compiles: int = 0
    limit_s: float | None = None  # None: three times the estimate plus 30 s; never past the run's limit


class Runner:
    """Runs steps in order, each in its own process session under a wall-clock limit, and rewrites the
    report after each with its status (ok, failed, crashed, timeout, skipped, interrupted)."""

    def __init__(self, report: dict, out: Path, budget_s: float, limit_s: float):
        self.report, self.out, self.budget_s, self.limit_s = report, out, budget_s, limit_s
        self.start = time.monotonic()
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_check-"))
        self.save()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def fits(self, estimate_s: float) -> bool:
        return self.elapsed() + estimate_s <= self.budget_s

    def save(self) -> None:
        atomic_write_json(self.out, self.report, default=str)

    def run(self, step: Step, unavailable: str | None = None) -> dict:
        """The step run, or skipped: for what it needs and lacks (unavailable says what), or for the budget."""
        began = self.elapsed()
        record = {"estimate_s": step.estimate_s, "compiles": step.compiles, "started_at_s": round(began, 1)}
        if unavailable:
            record["status"], record["reason"] = "skipped", unavailable
        elif not self.fits(step.estimate_s):
            record["status"] = "skipped"
            record["reason"] = (
                f"it would end near {began + step.estimate_s:.0f} s, past --budget_s={self.budget_s:g} "
                f"({began:.0f} s had passed)"
            )
        else:
            limit = min(step.limit_s or 3 * step.estimate_s + 30, max(self.limit_s - began, 1))
            print(f"{step.name}: started at {began:.0f} s (expected {step.estimate_s:g} s, stopped at {limit:.0f} s)")
            record.update(self.execute(step, limit), limit_s=round(limit, 1))
        record["seconds"] = round(self.elapsed() - began, 1)
        self.report["steps"][step.name] = record
        self.save()
        print(f"{step.name}: {record['status']} in {record['seconds']:g} s{detail(record)}", flush=True)
        return record

    def execute(self, step: Step, limit: float) -> dict:
        result, log = self.scratch / f"{step.name}.json", self.scratch / f"{step.name}.log"
        with open(log, "w") as sink:
            process = subprocess.Popen(
                [*step.argv, f"--result={result}"], stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                code = process.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                stop(process)
                return {"status": "timeout", "error": f"still running after {limit:.0f} s: stopped", **tail(log)}
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: this step's record is written, then the run ends
                stop(process)
                self.report["steps"][step.name] = {"status": "interrupted", **tail(log)}
                self.save()
                raise
        outcome = json.loads(result.read_text()) if result.exists() else {}
        if "result" in outcome:
            status = "failed" if outcome["problems"] else "ok"
            return {"status": status, **outcome, **(tail(log) if status != "ok" else {})}
        if "error" in outcome:
            return {"status": "failed", "error": outcome["error"], **tail(log)}
        return {"status": "crashed", "error": f"exit status {code} and no result", **tail(log)}


def stop(process: subprocess.Popen) -> None:
    """End a step's process and everything it started (compile workers, pytest, torchrun)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def tail(log: Path, lines: int = 80) -> dict:
    return {"output_tail": log.read_text(errors="replace").splitlines()[-lines:]}


def detail(record: dict) -> str:
    """The line's end: why a step was skipped, what failed, or its bench table."""
    if record["status"] == "skipped":
        return f": {record['reason']}"
    if record.get("problems"):
        return "\n  " + "\n  ".join(record["problems"])
    if record.get("error"):
        return "\n  " + "\n  ".join(record["error"].strip().splitlines()[-3:])
    result = record.get("result")
    if bench_report(result):
        return "\n" + cost.markdown(result)
    if isinstance(result, dict) and result and all(bench_report(r) for r in result.values()):
        return "".join(f"\n{name}:\n{cost.markdown(r)}" for name, r in result.items())
    if isinstance(result, dict) and ("sizes" in result or "query" in result):
        return "\n" + step_cost.markdown(result)
    return f": {json.dumps(result, default=str)[:2000]}"


def bench_report(result) -> bool:
    return isinstance(result, dict) and "results" in result and "config" in result


def nvidia_smi() -> dict:
    """The GPUs' names, driver, clocks, power and temperature, as nvidia-smi reports them now."""
    fields = "name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit"
    fields += ",temperature.gpu"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"nvidia-smi: {e}"}
    if done.returncode != 0:
        return {"error": f"nvidia-smi exit {done.returncode}: {done.stderr.strip()[:300]}"}
    keys = fields.split(",")
    return {"gpus": [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in done.stdout.splitlines()]}


def step(args, name: str, estimates: dict, compiled: bool) -> Step:
    key = f"{name}_compiled" if compiled and name == "other_arms" else name
    compiles = COMPILES[key] if compiled else 0
    argv = [sys.executable, str(ROOT / "gpu_check.py"), f"--step={name}", f"--preset={args.preset}"]
    argv += [f"--device={args.device}", f"--steps={args.steps}", f"--compile={compiled}"]
    slack = SLACK_S[args.preset] if args.step_slack_s is None else args.step_slack_s
    return Step(name, WHAT[name], argv, estimates[key], compiles, 3 * estimates[key] + slack)


def read_estimates(args) -> dict:
    """The preset's estimates, with the seconds measured by an earlier report (--plan_from) where it has them."""
    estimates = dict(ESTIMATES[args.preset])
    if args.plan_from:
        try:
            steps = json.loads(Path(args.plan_from).read_text())["steps"]
            measured = {n: float(s["seconds"]) for n, s in steps.items() if s.get("status") == "ok"}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"--plan_from={args.plan_from}: not a gpu_check report ({e}); leave it out") from None
        estimates.update({n: s for n, s in measured.items() if n in estimates})
    return estimates


def print_plan(steps: list[Step], args, device: str) -> None:
    print(f"plan: preset {args.preset} on {device}, --budget_s={args.budget_s:g}, --limit_s={args.limit_s:g}")
    for i, s in enumerate(steps, 1):
        print(f"  {i}. {s.name:<15} ~{s.estimate_s:>4g} s  {s.compiles} compiled graph(s)  {s.what}")
    arms = " (other_arms eager; compiled if time allows)" if any(s.name == "other_arms" for s in steps) else ""
    print(f"  expected in all: ~{sum(s.estimate_s for s in steps):g} s{arms}")


def parser(doc: str | None = None) -> argparse.ArgumentParser:
    """gpu_check.py's options (doc: its --help text)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gpt2", choices=sorted(cost.PRESETS), help="the model shape")
    p.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    p.add_argument("--steps", type=int, default=30, help="train.py steps per loop run")
    p.add_argument("--out", default="gpu_check.json", help="the report, rewritten after every step")
    p.add_argument(
        "--only", default=",".join(NEW),
        help=f"comma list of the steps to run, in their order (default: what no report has measured, in 6 minutes; "
        f"measured on 2026-12-04: {','.join(MEASURED)})",
    )  # fmt: skip
    p.add_argument("--compile", default="auto", choices=("auto", "True", "False"), help="auto: on CUDA if it works")
    p.add_argument(
        "--budget_s", type=Number(At(lo=0)), default=360, help="a step whose estimate ends past this is skipped"
    )
    p.add_argument(
        "--limit_s", type=Number(At(above=0)), default=540, help="a step still running at this many seconds is stopped"
    )
    p.add_argument(
        "--step_slack_s", type=Number(At(lo=0)),
        help="a step is stopped at three times its estimate plus this (default: 30 s for gpt2, 300 s for tiny)",
    )  # fmt: skip
    p.add_argument("--plan_from", default=None, help="an earlier report: plan with the seconds it measured")
    p.add_argument("--dry_run", action="store_true", help="print the plan (steps, compiles, seconds); run nothing")
    p.add_argument("--step", choices=sorted(STEP_FUNCTIONS), help="run this one step in this process")
    p.add_argument("--result", default=None, help="with --step: where its JSON goes (default: printed)")
    return p


def gpu_check(args, argv) -> None:
    """The check args (gpu_check.py's options, parser(); argv as given, for the report) ask for: one step here
    (--step), or the plan, each step in a process of its own, and the report."""
    if args.step:
        return run_one(args)
    check_options(args)
    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    estimates = read_estimates(args)
    compiled = args.compile == "True" or cuda and args.compile == "auto"
    # other_arms is planned eager; it compiles only if, when it starts, that still leaves time for the tests
    steps = [
        step(args, name, estimates, compiled and name != "other_arms") for name in STEP_FUNCTIONS if name in args.only
    ]
    print_plan(steps, args, device)
    if args.dry_run:
        return
    out = Path(args.out).resolve()
    report = {"command": ["gpu_check.py", *argv], "device": device, "nvidia_smi_before": nvidia_smi() if cuda else None}
    report.update(plan=[{k: v for k, v in asdict(s).items() if k != "argv"} for s in steps], steps={})
    signal.signal(signal.SIGTERM, interrupted)
    runner = Runner(report, out, args.budget_s, args.limit_s)
    for i, s in enumerate(steps):
        if s.name == "probe":
            compiled = fell_back(runner.run(s), compiled, report)
            continue
        later = sum(t.estimate_s for t in steps[i + 1 :])
        chosen = step(args, s.name, estimates, compiled)
        if s.name == "other_arms" and compiled and not runner.fits(chosen.estimate_s + later):
            chosen = step(args, s.name, estimates, False)  # eager fits where compiling would pass the budget
        runner.run(chosen, lacking(s.name))
    report["nvidia_smi_after"] = nvidia_smi() if cuda else None
    runner.save()
    conclude(report, out)


def lacking(name: str) -> str | None:
    """What a step needs that this machine lacks, in words (None: nothing): the GPU tests need pytest, which
    README's second command installs and its first does not."""
    if name != "gpu_tests":
        return None
    try:
        found = importlib.util.find_spec("pytest") is not None
    except ImportError:
        found = False
    return None if found else "pytest is not installed: `pip install -r requirements-dev.txt` (README's second command)"


def check_options(args) -> None:
    unknown = set(args.only.split(",")) - set(STEP_FUNCTIONS)
    if unknown:
        raise UserError(f"--only={args.only}: {', '.join(sorted(unknown))} is no step; use {','.join(STEP_FUNCTIONS)}")
    if args.steps < 1:
        raise UserError(f"--steps={args.steps}: give train.py's steps per loop run, 1 or more")
    args.only = args.only.split(",")


def fell_back(probe_record: dict, compiled: bool, report: dict) -> bool:
    """After the probe: whether later steps compile. A broken torch.compile turns them eager, noted."""
    works = (probe_record.get("result") or {}).get("compile") == "ok"
    if compiled and not works and probe_record["status"] != "skipped":
        report["note"] = "torch.compile failed in the probe (or the probe did not finish): later steps ran eagerly"
        print(report["note"])
        return False
    return compiled


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def conclude(report: dict, out: Path) -> None:
    steps = report["steps"]
    failed = [n for n, s in steps.items() if s["status"] in STATUS_FAILED]
    over = [n for n, s in steps.items() if s["status"] == "skipped" and "--budget_s" in s["reason"]]
    unable = [f"{n} ({s['reason']})" for n, s in steps.items() if s["status"] == "skipped" and n not in over]
    said = [f"over the time budget, not run: {', '.join(over)}"] * bool(over) + [f"not run: {u}" for u in unable]
    print(f"report: {out}" + (f" ({'; '.join(said)})" if said else ""))
    if failed:
        raise UserError(f"{len(failed)} of {len(steps)} steps failed ({', '.join(failed)}): the details are in {out}")
