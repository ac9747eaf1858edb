"""bench.py's measurements and report (nlq/bench/cost.py) on hand-made figures and stub clocks: which round each
figure comes from, the defaults a device fills, the order modes are warmed up and timed in, and the report's
table and lines as a reader sees them, written out here by hand. The whole run on a real model is
tests/test_tools.py's test_bench_*."""

from types import SimpleNamespace

import pytest
import torch

from nlq.bench import cost
from nlq.bench.cost import BenchConfig, generation, markdown, rounds, settle, spread, summary, training_config
from nlq.common.errors import ConfigError
from nlq.run.parallel import Dist


def s(median, lo, hi):
    return {"median": median, "min": lo, "max": hi}


def hand_report():
    """Two modes over 3 rounds, prompt 8 + 4 decoded tokens: linear's prefills 2, 1 and 4 ms and decodes 500,
    400 and 600 tokens/s make whole generations of 4 / (0.002 + 4/500) = 400, 4 / 0.011 = 363.6 and
    4 / (0.004 + 4/600) = 375 tokens/s."""
    linear = {
        "non_embedding_params": 1_234_567,
        "train_step_s": s(0.010, 0.009, 0.012),
        "train_ratio": s(1.0, 1.0, 1.0),
        "train_tokens_per_s": 12_800.0,
        "mfu": s(0.0312, 0.03, 0.033),
        "peak_mem_bytes": 3 * 2**30,
        "prefill_s": {**s(0.002, 0.001, 0.004), "samples": [0.002, 0.001, 0.004]},
        "prefill_ratio": s(1.0, 1.0, 1.0),
        "decode_tokens_per_s": {**s(500.0, 400.0, 600.0), "samples": [500.0, 400.0, 600.0]},
        "decode_ratio": s(1.0, 1.0, 1.0),
    }
    nlq = {
        "non_embedding_params": 1_125_001,
        "train_step_s": s(0.1, 0.0905, 0.125),
        "train_ratio": s(1.1104, 1.05, 1.2),
        "train_tokens_per_s": 11_531.5,
        "mfu": None,
        "peak_mem_bytes": None,
        "prefill_s": s(0.3, 0.2, 0.5),
        "prefill_ratio": s(1.5, 1.25, 2.0),
        "decode_tokens_per_s": s(450.0, 380.0, 520.5),
        "decode_ratio": s(0.9, 0.8665, 0.95),
    }
    return {
        "config": {"preset": "tiny", "compile": False, "parallelism": "none", "batch_size": 2, "prompt_len": 8,
                   "decode_tokens": 4, "repeats": 3},
        "processes": 1,
        "device": "cpu",
        "dtype": "torch.float32",
        "results": {"linear": linear, "residual_gelu": nlq},
        "decode_dtype": "torch.bfloat16",
        "decode_dtype_why": None,
        "decode_path": {"linear": "KV cache, eager", "residual_gelu": "static KV cache, eager"},
        "anchor": {"transformers": "4.99", "path": "dynamic cache, eager", "tokens_per_s": s(300.0, 290.0, 310.0)},
        "generation": {
            "cached_tokens_per_s": s(375.0, 363.64, 400.0),
            "no_cache_as_nanogpt_tokens_per_s": s(50.0, 40.0, 60.0),
            "speedup_over_no_cache_as_nanogpt": s(7.5, 6.0, 9.0),
            "no_cache_decode_dtype_tokens_per_s": s(80.0, 70.0, 90.0),
            "speedup_over_no_cache_decode_dtype": s(4.7, 4.0, 5.0),
        },
    }  # fmt: skip


def test_the_bench_report_reads_line_for_line_on_a_hand_made_report():
    """Milliseconds for times, three decimals for ratios, a percentage for MFU, GiB for memory, n/a where a
    figure was not measured; the anchor's end to end beside linear's, each generation figure in its place."""
    expected = [
        "tiny on 1 x cpu (torch.float32, compile=False, parallelism none), train batch 2 per process, prompt 8, "
        "4 decoded tokens; tokens/s over all processes; median [min-max] over 3 interleaved rounds; ratios are to "
        "linear within each round.",
        "",
        "| mode | params | train ms/step | ratio | tokens/s | MFU | peak mem | prefill ms | ratio | decode tok/s "
        "| ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| linear | 1.23M | 10.0 [9.0-12.0] | 1.000 [1.000-1.000] | 12,800 | 3.1% | 3.0 GiB | 2.0 [1.0-4.0] "
        "| 1.000 [1.000-1.000] | 500.0 [400.0-600.0] | 1.000 [1.000-1.000] |",
        "| residual_gelu | 1.13M | 100.0 [90.5-125.0] | 1.110 [1.050-1.200] | 11,532 | n/a | n/a "
        "| 300.0 [200.0-500.0] "
        "| 1.500 [1.250-2.000] | 450.0 [380.0-520.5] | 0.900 [0.867-0.950] |",
        "",
        "Decoding path (nlq/eval/decoding.py): KV cache, eager; static KV cache, eager.",
        "Anchor: transformers 4.99 GPT2LMHeadModel.generate (dynamic cache, eager), prompt 8 + 4 greedy tokens "
        "end to end: 300.0 [290.0-310.0] tokens/s; linear here, the same end to end: 375.0 [363.6-400.0] tokens/s.",
        "",
        "Decoding dtype: bfloat16.",
        "linear, prompt 8 + 4 new tokens end to end: 375.0 [363.6-400.0] tokens/s through KV cache, eager "
        "(bfloat16); recomputing the context for each token instead: 50.00 [40.00-60.00] tokens/s as nanoGPT's "
        "generate (float32), the cache 7.5 [6.0-9.0]x faster; 80.00 [70.00-90.00] tokens/s in bfloat16, the "
        "cache 4.7 [4.0-5.0]x faster.",
    ]
    report = hand_report()
    assert markdown(report).splitlines() == expected
    report["decode_dtype_why"] = "bfloat16: faster than float32 on linear"
    report["anchor"] = {"path": "not run: transformers is not installed"}
    lines = markdown(report).splitlines()
    assert lines[8] == "Anchor: transformers' GPT-2 generate not run: transformers is not installed."
    assert lines[10] == "Decoding dtype: bfloat16: faster than float32 on linear."
    for key in ("anchor", "generation", "decode_path"):
        del report[key]
    assert markdown(report).splitlines() == expected[:6]


def test_spread_and_summary_by_hand():
    assert summary([]) is None
    assert summary([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "samples": [3.0, 1.0, 2.0, 10.0]}
    assert spread(None) == "n/a"
    assert spread(s(0.0125, 0.01, 0.02), 1e3) == "12.5 [10.0-20.0]"
    assert spread(s(1.23456, 1.2, 1.3), digits=3) == "1.235 [1.200-1.300]"


def test_generation_pairs_each_rounds_cached_and_recomputed_rates():
    """Prompt then 4 tokens: prefill 0.1 s and decode 20 tokens/s is 4 / (0.1 + 0.2) = 13.33 tokens/s end to end;
    recomputing at 2 and 4 tokens/s makes the cache 6.67x and 3.33x faster in that round."""
    linear = {
        "prefill_s": [0.1, 0.2],
        "decode_tok_s": [20.0, 10.0],
        "recompute": [{"as_nanogpt": 2.0, "decode_dtype": 4.0}, {"as_nanogpt": 1.0, "decode_dtype": 5.0}],
    }
    g = generation(SimpleNamespace(decode_tokens=4), linear)
    cached = [4 / 0.3, 4 / 0.6]
    assert g["cached_tokens_per_s"]["samples"] == pytest.approx(cached)
    assert g["no_cache_as_nanogpt_tokens_per_s"]["samples"] == [2.0, 1.0]
    assert g["no_cache_decode_dtype_tokens_per_s"]["samples"] == [4.0, 5.0]
    assert g["speedup_over_no_cache_as_nanogpt"]["samples"] == pytest.approx([cached[0] / 2, cached[1] / 1])
    assert g["speedup_over_no_cache_decode_dtype"]["samples"] == pytest.approx([cached[0] / 4, cached[1] / 5])


@pytest.mark.parametrize(
    "preset, device, given, expected",
    [
        ("gpt2", "cpu", {}, dict(compile=False, batch_size=1, prompt_len=256, decode_tokens=64)),
        ("gpt2", "cuda", {}, dict(compile=True, batch_size=12, prompt_len=256, decode_tokens=64)),
        ("tiny", "cpu", {}, dict(compile=False, batch_size=12, prompt_len=32, decode_tokens=32)),
        ("tiny", "cpu", dict(prompt_len=50), dict(prompt_len=50, decode_tokens=14)),
        ("gpt2", "cuda", dict(compile=False, batch_size=3, prompt_len=1000, decode_tokens=24),
         dict(compile=False, batch_size=3, prompt_len=1000, decode_tokens=24)),
        ("tiny", "cpu", dict(prompt_len=63, decode_tokens=1), dict(prompt_len=63, decode_tokens=1)),
    ],
)  # fmt: skip
def test_settle_fills_what_the_device_decides_and_keeps_what_was_given(preset, device, given, expected):
    """GPT-2 small on a CPU trains one row (12 on a GPU, and the tiny preset everywhere); compile only on CUDA;
    the prompt is 256 tokens or half the context (tiny: 64), then 64 new tokens or what is left of it."""
    cfg = BenchConfig(preset=preset, **given)
    settle(cfg, device)
    assert {k: getattr(cfg, k) for k in expected} == expected


def test_settle_refuses_a_prompt_that_leaves_no_room():
    with pytest.raises(ConfigError, match="prompt_len=64: the tiny preset's context is 64 tokens"):
        settle(BenchConfig(preset="tiny", prompt_len=64), "cpu")
    with pytest.raises(ConfigError, match="prompt_len \\+ decode_tokens = 65 exceeds"):
        settle(BenchConfig(preset="tiny", prompt_len=63, decode_tokens=2), "cpu")


def test_the_training_settings_bench_times_are_train_pys_with_one_micro_step_per_process():
    cfg = BenchConfig(batch_size=5, compile=False, activation_checkpointing=True)
    t = training_config(cfg, 4)
    assert (t.batch_size, t.gradient_accumulation_steps, t.compile) == (5, 4, False)
    assert (t.parallelism, t.activation_checkpointing) == ("ddp", True)
    assert (t.learning_rate, t.weight_decay, t.grad_clip) == (6e-4, 0.1, 1.0)  # train.py's defaults
    assert training_config(BenchConfig(batch_size=5, compile=True, parallelism="fsdp"), 2).parallelism == "fsdp"


class StubSubject:
    """A mode whose training step costs step_s on the test's clock and whose inference returns the next pair
    of its list; every call logged in order."""

    def __init__(self, name, clock, log, step_s, inferences):
        self.name, self.clock, self.log, self.step_s = name, clock, log, step_s
        self.inferences = iter(inferences)

    def train_step(self):
        self.log.append((self.name, "train"))
        self.clock[0] += self.step_s

    def inference(self):
        self.log.append((self.name, "inference"))
        return next(self.inferences)

    def recompute_rates(self):
        self.log.append((self.name, "recompute"))
        return {"as_nanogpt": 1.0, "decode_dtype": 2.0}


def stub_clock(monkeypatch, peaks, clock=None, dtypes=None):
    """timed() reads the test's clock around the call; peak_flops() gives the next of peaks and notes the
    dtype it was asked about."""
    clock, peak_calls = clock or [0.0], iter(peaks)

    def timed(fn, device):
        start = clock[0]
        fn()
        return clock[0] - start

    def peak_flops(device, dtype, cpu_peak):
        (dtypes if dtypes is not None else []).append(dtype)
        return next(peak_calls), "stub"

    monkeypatch.setattr(cost, "timed", timed)
    monkeypatch.setattr(cost, "peak_flops", peak_flops)
    return clock


def test_rounds_time_every_mode_in_every_round_interleaved_per_step_on_a_stub_clock(monkeypatch, capsys):
    """2 rounds of 3 steps: linear's step costs 0.5 s and the other's 0.75 s, so each round records 0.5 and
    0.75 s a step; the peak is measured once per round (1e9 then 2e9); linear alone recomputes; in each round
    every mode trains then infers before the next mode starts."""
    dtypes, log = [], []
    clock = stub_clock(monkeypatch, [1e9, 2e9], dtypes=dtypes)
    subjects = {
        "linear": StubSubject("linear", clock, log, 0.5, [(0.1, 100.0), (0.2, 90.0)]),
        "nlq": StubSubject("nlq", clock, log, 0.75, [(0.3, 80.0), (0.4, 70.0)]),
    }
    cfg = SimpleNamespace(repeats=2, steps=3, train=True, recompute=True, cpu_peak_flops=None)
    raw, peaks, source = rounds(cfg, subjects, "cpu", torch.bfloat16, infer=True)
    assert peaks == [1e9, 2e9] and source == "stub" and dtypes == [torch.bfloat16] * 2  # the peak of the dtype timed
    assert capsys.readouterr().err.splitlines() == ["round 1/2 done", "round 2/2 done"]
    assert raw["linear"]["train_s"] == [0.5, 0.5] and raw["nlq"]["train_s"] == [0.75, 0.75]
    assert raw["linear"]["prefill_s"] == [0.1, 0.2] and raw["nlq"]["decode_tok_s"] == [80.0, 70.0]
    assert raw["linear"]["recompute"] == [{"as_nanogpt": 1.0, "decode_dtype": 2.0}] * 2
    assert raw["nlq"]["recompute"] == []
    assert raw["linear"]["peak_mem"] is None  # measured on a GPU only
    one_round = [("linear", "train")] * 3 + [("linear", "inference"), ("linear", "recompute")]
    one_round += [("nlq", "train")] * 3 + [("nlq", "inference")]
    assert log == one_round * 2


def test_rounds_without_training_or_inference_record_none_of_it(monkeypatch):
    clock, log = stub_clock(monkeypatch, [5e9]), []
    subjects = {"linear": StubSubject("linear", clock, log, 0.5, [(0.1, 100.0)])}
    cfg = SimpleNamespace(repeats=1, steps=2, train=False, recompute=True, cpu_peak_flops=None)
    raw, _, _ = rounds(cfg, subjects, "cpu", torch.float32, infer=True)
    assert raw["linear"]["train_s"] == [] and raw["linear"]["prefill_s"] == [0.1]
    clock, log = stub_clock(monkeypatch, [5e9]), []
    subjects = {"linear": StubSubject("linear", clock, log, 0.5, [])}
    cfg = SimpleNamespace(repeats=1, steps=2, train=True, recompute=True, cpu_peak_flops=None)
    raw, _, _ = rounds(cfg, subjects, "cpu", torch.float32, infer=False)
    assert raw["linear"]["train_s"] == [0.5] and raw["linear"]["prefill_s"] == [] and raw["linear"]["recompute"] == []
    assert log == [("linear", "train")] * 2


def test_results_leave_out_an_mfu_above_one_and_figures_not_measured():
    """A peak of 1e3 FLOP/s makes MFU far above 1 (the peak was wrong): not reported; no peak, no MFU; no
    training step, no tokens/s."""
    cfg = SimpleNamespace(batch_size=1, preset="tiny")
    subjects = {"linear": SimpleNamespace(flops=100.0, params=10)}
    raw = {"linear": {"train_s": [1.0], "prefill_s": [0.1], "decode_tok_s": [10.0], "peak_mem": None}}
    assert cost.results(cfg, subjects, raw, [1e3], world=1)["linear"]["mfu"] is None
    assert cost.results(cfg, subjects, raw, [None], world=1)["linear"]["mfu"] is None
    exact = cost.results(cfg, subjects, raw, [6400.0], world=1)["linear"]["mfu"]  # 100 x 64 tokens in 1 s: 1.0
    assert exact["samples"] == [1.0]
    assert cost.results(cfg, subjects, raw, [6400.0 / 1.5], world=1)["linear"]["mfu"] is None  # 1.5: not reported
    raw["linear"]["train_s"] = []
    out = cost.results(cfg, subjects, raw, [1e12], world=1)["linear"]
    assert out["train_step_s"] is None and out["train_tokens_per_s"] is None and out["mfu"] is None


def test_warm_up_builds_linear_first_and_every_mode_decodes_in_linears_dtype(monkeypatch, capsys):
    """linear goes first whatever the order given; what its decoding chose (bfloat16 here) is what every
    other mode is built with; each mode takes one training step and two inferences (the second captures a
    GPU's graph), or none of either when not timed."""
    built, calls = [], []

    class Built:
        def __init__(self, mode, cfg, d, dtype, decode_dtype):
            built.append((mode, decode_dtype))
            # "auto" measures and chooses (bfloat16 here); a named dtype is kept
            self.mode = mode
            self.decode_dtype = torch.bfloat16 if decode_dtype == "auto" else getattr(torch, str(decode_dtype), None)

        def train_step(self):
            calls.append((self.mode, "train"))

        def inference(self):
            calls.append((self.mode, "inference"))

    monkeypatch.setattr(cost, "Subject", Built)
    cfg = SimpleNamespace(modes=("residual_gelu", "identity", "linear"), decode_dtype="auto", train=True)
    subjects = cost.warm_up(cfg, None, torch.float32, infer=True)
    assert list(subjects) == ["linear", "residual_gelu", "identity"]
    assert built == [("linear", "auto"), ("residual_gelu", "bfloat16"), ("identity", "bfloat16")]
    assert calls == [(m, what) for m in subjects for what in ("train", "inference", "inference")]
    assert capsys.readouterr().err.splitlines() == [f"warming up {m} ..." for m in subjects]
    built.clear()
    calls.clear()
    cost.warm_up(SimpleNamespace(**cfg.__dict__ | {"train": False}), None, torch.float32, infer=False)
    assert built == [("linear", None), ("residual_gelu", None), ("identity", None)] and calls == []


def test_a_subject_times_the_same_inputs_and_weights_for_every_mode_and_decodes_a_copy():
    """Every mode starts from seed 0: the same batch and prompt (so the rounds compare like with like); the
    decoding copy is the model as built, apart from the one that trains; generating without the cache gives
    decode_tokens over the clocked seconds, and leaves the model training."""
    cfg = BenchConfig(preset="tiny", batch_size=2, prompt_len=5, decode_tokens=3, decode_dtype="float32")
    settle(cfg, "cpu")
    d = Dist(False, 0, 1, "cpu")
    a = cost.Subject("linear", cfg, d, torch.float32, "float32")
    b = cost.Subject("residual_gelu", cfg, d, torch.float32, "float32")
    assert torch.equal(a.x, b.x) and torch.equal(a.prompt, b.prompt)
    assert a.x.shape == (2, 64) and a.prompt.shape == (1, 5) and int(a.x.max()) < 65
    assert b.params == b.model.num_params() > a.params
    assert a.flops == a.model.flops_per_token(64)
    again = cost.Subject("linear", cfg, d, torch.float32, "float32")
    assert torch.equal(again.model.lm_head.weight, a.model.lm_head.weight)
    before = a.decode_model.lm_head.weight.clone()
    a.train_step()
    a.train_step()
    assert a.it == 2 and not torch.equal(a.model.lm_head.weight, before)  # the step number advances
    assert torch.equal(a.decode_model.lm_head.weight, before)  # the decoding copy is its own
    assert a.decode_dtype == torch.float32 and a.decoder.label == "KV cache"
    in_bf16 = cost.Subject("linear", cfg, d, torch.bfloat16, None)
    assert not hasattr(in_bf16, "decoder")  # decoding not timed
    for subject, dtype in ((in_bf16, torch.bfloat16), (a, torch.float32)):  # the step is timed in the run's dtype
        with subject.ctx:
            logits, _ = subject.model(subject.x[:, :8])
        assert logits.dtype == dtype


def test_recompute_rates_are_decode_tokens_over_the_clocked_seconds(monkeypatch):
    cfg = BenchConfig(preset="tiny", batch_size=1, prompt_len=5, decode_tokens=3, decode_dtype="float32")
    settle(cfg, "cpu")
    subject = cost.Subject("linear", cfg, Dist(False, 0, 1, "cpu"), torch.float32, "float32")
    generated = []
    original = subject.model.generate

    def generate(*args, **kwargs):
        generated.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(subject.model, "generate", generate)
    seconds = iter([0.5, 0.25])
    monkeypatch.setattr(cost, "timed", lambda fn, device: (fn(), next(seconds))[1])
    assert subject.recompute_rates() == {"as_nanogpt": 3 / 0.5, "decode_dtype": 3 / 0.25}
    assert generated == [{"temperature": 0, "use_cache": False}] and subject.model.training


def stub_subjects(monkeypatch, clock, log, built):
    class Built(StubSubject):
        def __init__(self, mode, cfg, d, dtype, decode_dtype):
            super().__init__(mode, clock, log, 0.5, [(0.1, 100.0)] * 5)
            built.append((mode, dtype))
            self.params, self.flops, self.decode_dtype, self.decode_why = 10, 100.0, torch.bfloat16, "why"
            self.decoder = SimpleNamespace(label="KV cache, eager", why="no graphs" if mode != "linear" else None)

    monkeypatch.setattr(cost, "Subject", Built)


def test_measure_reports_the_device_the_peaks_the_paths_and_the_anchor(monkeypatch):
    """measure on stub subjects: the peak summarised over the rounds, each mode's decoding path with its
    reason where it has one, the anchor asked in linear's decoding dtype, and no peak when none is known;
    every mode built and every peak asked in the run's dtype."""
    clock, log, built, dtypes, anchors = [0.0], [], [], [], []
    stub_clock(monkeypatch, [1e9, 3e9, 2e9], clock, dtypes)
    stub_subjects(monkeypatch, clock, log, built)

    def transformers_generate(shape, cfg, device, dtype):
        anchors.append((shape, cfg.preset, device, dtype))
        return {"path": "stub"}

    monkeypatch.setattr(cost.anchor, "transformers_generate", transformers_generate)
    cfg = BenchConfig(preset="tiny", modes=("linear", "identity"), repeats=2, steps=1, device="cpu", anchor=True)
    report = cost.measure(cfg)
    assert (report["device"], report["processes"], report["dtype"]) == ("cpu", 1, "torch.float32")
    assert (report["torch"], report["peak_source"]) == (torch.__version__, "stub")
    assert report["peak_flops"] == {"median": 2e9, "min": 1e9, "max": 3e9, "samples": [1e9, 3e9]}
    assert built == [("linear", torch.float32), ("identity", torch.float32)] and dtypes == [torch.float32] * 2
    assert report["decode_path"] == {"linear": "KV cache, eager", "identity": "KV cache, eager (no graphs)"}
    assert report["decode_dtype"] == "torch.bfloat16" and report["decode_dtype_why"] == "why"
    assert anchors == [(cost.PRESETS["tiny"], "tiny", "cpu", torch.bfloat16)] and report["anchor"] == {"path": "stub"}
    assert "generation" in report
    stub_clock(monkeypatch, [None, None], clock)
    report = cost.measure(BenchConfig(preset="tiny", modes=("linear",), repeats=2, device="cpu", recompute=False))
    assert report["peak_flops"] is None and "generation" not in report and "anchor" not in report


def test_a_gpu_bench_on_stubs_names_the_gpu_takes_its_defaults_and_each_modes_peak_memory(monkeypatch):
    """CI has no GPU: torch.cuda's calls are stubs here. On cuda:1 the report names that device's GPU, the
    dtype is bf16 where the GPU has it, compile is on and the batch 12 rows; before each mode's steps in each
    round its peak memory is reset on that device, and after them read (here 100, 200, then 300, 400 bytes:
    each mode keeps its last round's)."""
    clock, log, built, calls = [0.0], [], [], []
    stub_clock(monkeypatch, [1e12, 1e12], clock)
    stub_subjects(monkeypatch, clock, log, built)
    memory = iter([100, 200, 300, 400])
    monkeypatch.setattr(cost, "setup", lambda cfg: Dist(False, 0, 1, "cuda:1"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: calls.append(device) or "Stub H200")
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(("reset", device)))
    monkeypatch.setattr(
        torch.cuda, "max_memory_allocated", lambda device: calls.append(("read", device)) or next(memory)
    )
    cfg = BenchConfig(preset="gpt2", modes=("linear", "identity"), repeats=2, steps=1, recompute=False)
    report = cost.measure(cfg)
    assert (report["device"], report["dtype"]) == ("Stub H200", "torch.bfloat16")
    assert (report["config"]["compile"], report["config"]["batch_size"]) == (True, 12)
    assert built == [("linear", torch.bfloat16), ("identity", torch.bfloat16)]
    assert [report["results"][m]["peak_mem_bytes"] for m in ("linear", "identity")] == [300, 400]
    assert calls == [("reset", "cuda:1"), ("read", "cuda:1")] * 4 + ["cuda:1"]


def test_say_speaks_for_the_first_process_only(monkeypatch, capsys):
    cost.say("one line")
    assert capsys.readouterr() == ("", "one line\n")
    monkeypatch.setattr(cost.dist, "is_initialized", lambda: True)
    for rank, shown in ((1, ""), (0, "rank 0\n")):
        monkeypatch.setattr(cost.dist, "get_rank", lambda rank=rank: rank)
        cost.say(f"rank {rank}")
        assert capsys.readouterr().err == shown


def test_a_mode_list_without_linear_is_refused_in_one_line():
    with pytest.raises(ValueError) as e:
        BenchConfig(modes=("residual_gelu",))
    assert str(e.value) == "modes=('residual_gelu',) is invalid: it must include 'linear', the reference"


def test_a_parallel_bench_needs_processes_and_a_step_to_time(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert cost.setup(BenchConfig(device="cpu")) == Dist(False, 0, 1, "cpu")
    with pytest.raises(ConfigError, match="parallelism=fsdp needs processes: torchrun"):
        cost.setup(BenchConfig(device="cpu", parallelism="fsdp"))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(cost.parallel, "init", lambda device: ("joined", device))
    assert cost.setup(BenchConfig(device="cpu", parallelism="fsdp")) == ("joined", "cpu")
    monkeypatch.setattr(cost, "setup", lambda cfg: Dist(True, 0, 2, "cpu"))
    with pytest.raises(ConfigError) as e:
        cost.measure(BenchConfig(preset="tiny", device="cpu", parallelism="ddp", train=False))
    assert str(e.value) == "train=False under a parallelism times nothing: a sharded model's decoding is not measured"
