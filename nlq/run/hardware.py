"""The machine a script runs on: which device and dtype to use, the autocast context for that choice,
and the device's peak throughput for model FLOPs utilisation (MFU). Every entry point chooses here.

GPU peaks are dense (no sparsity) tensor-core figures from the vendors' data sheets, in bf16/fp16; in
float32 the tensor cores run TF32 at half that. Unknown GPUs report no MFU rather than a wrong one. A
CPU has no data-sheet figure here: its peak is configured, or measured as the best float32 matmul rate.
"""

import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from nlq.common.atomic import atomic_write_json
from nlq.common.errors import ConfigError, UserError

GPU_PEAK_BF16 = [  # (substring of torch.cuda.get_device_name, dense FLOP/s); more specific names first
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("GH200", 989e12),
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A10G", 70e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
    ("V100", 125e12),
    ("A6000", 155e12),
]


def resolve_device(name: str) -> str:
    """'auto' is the first GPU if there is one, else the CPU. A device that is not there is refused."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind = name.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device={name!r} but this torch ({torch.__version__}) sees no CUDA device: use --device=cpu or auto"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={name!r} but MPS is not available here: use --device=cpu or auto")
    if kind not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device={name!r} is invalid: use auto, cpu, cuda, cuda:N or mps")
    return name


def resolve_dtype(name: str, device_type: str) -> torch.dtype:
    """'auto' is bf16 on GPUs that have it, else fp16 (with a gradient scaler); float32 on CPUs, since those
    without native bf16 run bf16 autocast slower than float32 (train.py measures instead: choose_cpu_dtype)."""
    if name == "auto":
        if device_type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if name not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"dtype={name!r} is invalid: use auto, float32, bfloat16 or float16")
    return getattr(torch, name)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX-BF16 in the CPU's flags (Linux); elsewhere unknown, so no."""
    flags = _cpuinfo()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def choose_cpu_dtype(
    step, what: str = "a training micro-step", margin: float = 0.8, trials: int = 3
) -> tuple[torch.dtype, str]:
    """float32 or bfloat16 on this CPU, and how it was chosen: bf16 only where the CPU has native bf16 and
    step(bf16) (what: one training micro-step, or one decode step) took under margin x step(float32)'s time
    in every one of trials interleaved pairs, after one pair to warm up. A busy machine's timings scatter:
    asking every trial to agree keeps it on float32 rather than flipping to bf16 on one lucky pair. Which is
    faster depends on the model's size as much as on the CPU, so it is measured, not assumed."""
    if not cpu_has_native_bf16():
        return torch.float32, "float32 (this CPU's flags show no native bf16)"
    ratios = interleaved_ratios(step, torch.float32, torch.bfloat16, trials)
    chosen = torch.bfloat16 if max(ratios) < margin else torch.float32
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    how = (
        f"{what} took {shown} x float32's time in bf16 over {trials} interleaved trials; bf16 if under {margin} in each"
    )
    return chosen, f"{dtype_name(chosen)} ({how})"


def interleaved_ratios(step, default, other, trials: int) -> list[float]:
    """step(other)'s time over step(default)'s in each of trials interleaved pairs, after one pair to warm up."""
    ratios = []
    for trial in range(1 + trials):
        seconds = {}
        for choice in (default, other):
            t = time.perf_counter()
            step(choice)
            seconds[choice] = time.perf_counter() - t
        if trial:
            ratios.append(seconds[other] / seconds[default])
    return ratios


def choose_row_kernel(step, what: str = "a decode step", margin: float = 0.9, trials: int = 3) -> tuple[str, str]:
    """The kernel of a single row's products on this CPU (model.Linear's row_kernel), and how it was chosen:
    F.linear ("linear") only where step("linear") took under margin x step("addmv")'s time in every one of
    trials interleaved pairs, as choose_cpu_dtype decides (a busy machine keeps addmv). Which is faster
    depends on the CPU and the dtype (model.Linear's docstring), so it is measured, not assumed."""
    ratios = interleaved_ratios(step, "addmv", "linear", trials)
    chosen = "linear" if max(ratios) < margin else "addmv"
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    kernel = "F.linear (the matrix-matrix kernel)" if chosen == "linear" else "addmv (the matrix-vector kernel)"
    how = (
        f"in {what}, F.linear took {shown} x addmv's time in {trials} alternating trials, and is chosen only where it "
        f"takes under {margin} x in each"
    )
    return chosen, f"one token's weight products through {kernel}: {how}"


def autocast(device: str, dtype: torch.dtype):
    """The mixed-precision context of a forward pass: none in float32."""
    return nullcontext() if dtype == torch.float32 else torch.autocast(device.split(":")[0], dtype=dtype)


def measure_cpu_flops(dtype: torch.dtype = torch.float32, n: int = 1024, seconds: float = 0.5) -> float:
    """The best rate of an n x n matmul in dtype over a fraction of a second: the CPU's practical peak in the
    dtype a run computes in (bf16 matmuls run at twice float32's rate or more where bf16 is native)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def cache_path(name: str) -> Path:
    """Where machine_cached keeps name's values: the user's cache directory, one JSON file a name."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nonlinear-queries" / f"{name}.json"


def machine_cached(name: str, what: str, compute, valid):
    """compute(), once per machine (CPU model, threads, torch version) and what: kept in the user's cache
    directory (nonlinear-queries/<name>.json), so later runs on this machine reuse it. A cached value that
    valid(value) rejects, or an unreadable file, is computed again; an unwritable home, every time."""
    key = f"{cpu_model()} | {torch.get_num_threads()} threads | torch {torch.__version__} | {what}"
    path = cache_path(name)
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    if key in cached and valid(cached[key]):
        return cached[key]
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**cached, key: value})
    except (OSError, UserError):
        pass
    return value


def cached_cpu_flops(dtype: torch.dtype, at_least: float = 0.0) -> float:
    """measure_cpu_flops, once per machine: the MFU of two runs on one machine is against the same peak. A
    run that computed faster than the cached peak (at_least: the rate it achieved) shows that the peak was
    measured while the machine was busy: it is measured again, and the best of the two readings is kept."""
    cached = []

    def valid(value) -> bool:  # machine_cached asks this of the cached value first: remember it
        cached.extend([value] if isinstance(value, float) else [])
        return isinstance(value, float) and value >= at_least

    return machine_cached("cpu_peak", str(dtype), lambda: max([measure_cpu_flops(dtype), *cached]), valid)


def cpu_model() -> str:
    """The CPU's model name (Linux; '' elsewhere)."""
    names = [line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")]
    return names[0] if names else ""


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def set_tf32(enabled: bool) -> bool:
    """TF32 for CUDA's float32 matmuls and convolutions; returns the previous setting (to restore it). Newer
    torch (2.9+) has fp32_precision and refuses to read the legacy allow_tf32 flags once it was used, so the
    new API is used wherever it exists, the legacy flags only on the torch versions that have nothing else."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(matmul, "fp32_precision"):
        previous = matmul.fp32_precision == "tf32"
        matmul.fp32_precision = cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
    else:
        previous = matmul.allow_tf32
        matmul.allow_tf32 = cudnn.allow_tf32 = enabled
    return previous


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16' for torch.bfloat16: how configs, logs and checkpoints spell a dtype."""
    return str(dtype).removeprefix("torch.")


def peak_flops(device: str, dtype: torch.dtype, cpu_peak: float | None = None, cached: bool = False):
    """(FLOP/s or None, a description of where the figure comes from). On a CPU without a configured peak:
    measured now, or with cached=True once per machine (cached_cpu_flops)."""
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(device)
        for key, peak in GPU_PEAK_BF16:
            if key in name:
                scale = 0.5 if dtype == torch.float32 else 1.0
                return peak * scale, f"{name} data sheet"
        return None, f"{name} is not in hardware.GPU_PEAK_BF16: MFU not reported"
    if device == "cpu":
        if cpu_peak:
            return cpu_peak, "configured cpu_peak_flops"
        if cached:
            return cached_cpu_flops(dtype), (
                f"the {dtype_name(dtype)} matmul peak measured on this machine, kept in {cache_path('cpu_peak')}"
            )
        return measure_cpu_flops(dtype), f"measured {dtype_name(dtype)} matmul peak"
    return None, f"no peak known for {device}: MFU not reported"
