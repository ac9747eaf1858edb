import contextlib
import json
import math
import re
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import (
    bench_head_main,
    bench_main,
    compare_main,
    error_of,
    export_main,
    sample_main,
    sweep_main,
    train_main,
    zeroshot_main,
)

from configurator import parse
from nlq.bench.cost import markdown
from nlq.common import fits
from nlq.comparison.compare import (
    CompareError,
    Run,
    figure,
    improvement_curves,
    read_runs,
    resolve_baseline,
    table,
    versus_baseline,
)
from nlq.inference import sampling
from nlq.inference.sampling import SampleConfig, decoding_precision, generate
from nlq.run.checkpoint import load_for_inference

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, char_data):
    """A tiny trained character-level run, made once for the sampling tests."""
    out = tmp_path_factory.mktemp("run")
    train_main(
        [
            f"--dataset={char_data}",
            f"--out_dir={out}",
            "--n_layer=2",
            "--n_head=2",
            "--n_embd=32",
            "--block_size=32",
            "--vocab_size=65",
            "--batch_size=4",
            "--gradient_accumulation_steps=1",
            "--max_iters=20",
            "--eval_interval=20",
            "--eval_iters=1",
            "--device=cpu",
            "--compile=False",
            "--query_mode=residual_gelu",
            "--cpu_peak_flops=1e11",
        ]
    )
    return out


def samples(run_dir, *args):
    """Decoded in float32 unless args say otherwise: dtype=auto's choice is timed, and these tests are not."""
    (cfg,) = parse(
        [f"--out_dir={run_dir}", "--num_samples=2", "--max_new_tokens=40", "--dtype=float32", *args],
        SampleConfig,
    )
    return generate(cfg)[0]


def test_sample_is_deterministic_for_a_seed(run_dir):
    a, b = samples(run_dir, "--seed=3"), samples(run_dir, "--seed=3")
    assert a == b and all(s.startswith("\n") and len(s) == 41 for s in a)
    assert samples(run_dir, "--seed=4") != a


def test_greedy_sampling_equal_with_and_without_cache(run_dir):
    args = ("--temperature=0", "--start=ROMEO:", "--max_new_tokens=60")  # 66 tokens: past block_size=32
    assert samples(run_dir, *args, "--use_cache=True") == samples(run_dir, *args, "--use_cache=False")


@pytest.mark.parametrize("faster", [torch.float32, torch.bfloat16])
def test_sample_on_a_cpu_decodes_with_the_weights_in_the_dtype_measured_faster(run_dir, monkeypatch, faster):
    timed = []

    def measured(step, what):  # both dtypes' decode steps run; the stub decides as if it had timed them
        for dtype in (torch.float32, torch.bfloat16):
            step(dtype)
            timed.append(dtype)
        return faster, f"{what}: stub"

    monkeypatch.setattr(sampling, "choose_cpu_dtype", measured)
    model, _ = load_for_inference("resume", str(run_dir))
    decoder, ctx, dtype, why = decoding_precision(model, "cpu", "auto", rows=3)
    assert timed == [torch.float32, torch.bfloat16] and why == "a decode step of 3 token(s): stub"
    assert dtype == faster and {p.dtype for p in decoder.parameters()} == {faster}
    greedy = ("--temperature=0", "--start=ROMEO:", "--max_new_tokens=20")
    decoded = samples(run_dir, *greedy, "--dtype=auto")
    if faster == torch.float32:  # the float32 choice decodes exactly as an explicit --dtype=float32
        assert decoded == samples(run_dir, *greedy)
    else:
        assert decoded == samples(run_dir, *greedy, "--dtype=bfloat16")


def test_one_row_products_go_through_the_kernel_the_model_is_set_to(monkeypatch):
    """On a CPU one row (a decode step) goes through addmv or F.linear as row_kernel says; more rows never
    through addmv; both kernels give the same logits."""
    from model import GPT, GPTConfig

    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32)).eval()
    x = torch.tensor([[3]])
    with torch.no_grad():
        by_addmv = model(x, last_only=True)[0]
        model.use_row_kernel("linear")
        for name in ("addmv", "mv"):  # (mv where there is no bias) F.linear's path must not reach them
            monkeypatch.setattr(torch, name, lambda *a: 1 / 0)
        by_linear = model(x, last_only=True)[0]
        model(torch.tensor([[3, 4]]))  # two rows: F.linear whatever the kernel
        model.use_row_kernel("addmv")
        with pytest.raises(ZeroDivisionError):
            model(x, last_only=True)
    assert torch.allclose(by_addmv, by_linear, atol=1e-6)
    with pytest.raises(ValueError, match="give one of addmv, linear"):
        model.use_row_kernel("gemv")


@pytest.mark.parametrize("ratios, chosen", [((0.7, 0.72, 0.69), "linear"), ((0.7, 0.95, 0.7), "addmv"),
                                            ((1.3, 1.2, 1.4), "addmv")])  # fmt: skip
def test_the_one_row_kernel_is_f_linear_only_where_faster_in_every_trial(monkeypatch, ratios, chosen):
    """A clock the steps advance: addmv takes 1 s a step, F.linear ratio x 1 s (warm-up pair first)."""
    from nlq.run import hardware

    clock = [0.0]
    monkeypatch.setattr(hardware.time, "perf_counter", lambda: clock[0])
    times = iter([1.0, 1.0, *[t for r in ratios for t in (1.0, r)]])

    def step(kernel):
        clock[0] += next(times)

    kernel, why = hardware.choose_row_kernel(step, "a step")
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    assert kernel == chosen and f"in a step, F.linear took {shown} x addmv's time in 3 alternating trials" in why
    named = "F.linear (the matrix-matrix kernel)" if chosen == "linear" else "addmv (the matrix-vector kernel)"
    assert why.startswith(f"one token's weight products through {named}: ")


def test_decoding_measures_the_row_kernel_once_per_width_and_dtype(monkeypatch, tmp_path):
    """The first model of a width measures (both kernels' steps run); the next arm of that width reuses the
    choice, so every arm decodes through one kernel; a batch of rows measures nothing."""
    from model import GPT, GPTConfig

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def measured(step, what):
        for kernel in ("addmv", "linear"):
            step(kernel)
        calls.append(what)
        return "linear", f"{what}: stub"

    monkeypatch.setattr(sampling, "choose_row_kernel", measured)
    shape = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32)
    for mode in ("linear", "residual_gelu"):
        model, _, _, why = decoding_precision(GPT(GPTConfig(**shape, query_mode=mode)), "cpu", "float32")
        assert {m.row_kernel for m in model.modules() if hasattr(m, "row_kernel")} == {"linear"}
        assert why == "a decode step of 1 token in float32 at n_embd=16: stub"
    assert calls == ["a decode step of 1 token in float32 at n_embd=16"]
    model, _, _, why = decoding_precision(GPT(GPTConfig(**shape)), "cpu", "float32", rows=3)
    assert why is None and {m.row_kernel for m in model.modules() if hasattr(m, "row_kernel")} == {"addmv"}


def test_sample_prompt_from_file_and_bad_input(run_dir, tmp_path, monkeypatch):
    (tmp_path / "p.txt").write_text("KING:")
    assert all(s.startswith("KING:") for s in samples(run_dir, f"--start=FILE:{tmp_path / 'p.txt'}"))

    def measured(*args):  # a bad prompt is refused before the decode precision is measured
        raise AssertionError("the decode precision was measured before the prompt was checked")

    monkeypatch.setattr(sampling, "decoding_precision", measured)
    for args, message in [
        ([f"--out_dir={tmp_path}"], "holds no checkpoint"),
        ([f"--out_dir={run_dir}", "--start=" + "a" * 33], "more than the model's context of 32"),
        ([f"--out_dir={run_dir}", "--start=KING Ω"], "the prompt cannot be encoded: characters ['Ω']"),
        ([f"--out_dir={run_dir}", f"--start=FILE:{tmp_path / 'none.txt'}"], "no such file"),
        ([f"--out_dir={run_dir}", f"--start=FILE:{tmp_path}"], f"start=FILE:{tmp_path} is a directory: name the file"),
        ([f"--out_dir={run_dir}", "--decode=cache", "--use_cache=False"], "recomputes without one: drop one of them"),
    ]:
        with pytest.raises(SystemExit) as e:
            sample_main(args)
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)


def test_export_of_a_run_whose_checkpoint_is_one_file_already_says_so(run_dir):
    """export.py's pt format gathers a sharded checkpoint into one file: on a run of one process, whose ckpt.pt is
    that file already, it said 'holds no sharded checkpoint: check --out_dir', as if the run were the wrong one."""
    before = {p.name: p.stat().st_mtime_ns for p in Path(run_dir).iterdir()}
    message = error_of([f"--out_dir={run_dir}"], main=export_main)
    assert f"holds its checkpoint as the one file {Path(run_dir) / 'ckpt.pt'} already" in message
    assert "--format=hf --dest=DIR" in message and "check --out_dir" not in message
    assert {p.name: p.stat().st_mtime_ns for p in Path(run_dir).iterdir()} == before


def test_sample_refuses_more_samples_than_memory_holds_before_decoding(run_dir, monkeypatch):
    """The run's model (2 layers, 2 heads of 16, context 32, 65 ids, residual_gelu's MLP of 4 x 32) decoding
    B streams of a 5-token prompt in float32 holds, by hand: the cache 2 * 2 * B * 2 * 32 * 16 * 4 = 16,384 B,
    the prefill B * 5 * (128 + 128) * 4 = 5,120 B, the scores B * 2 * 25 * 4 = 200 B and the logits
    3 * B * 65 * 4 = 780 B: 22,484 B a stream. With 10 streams' worth free, 11 are refused naming 10, before
    the decode precision is measured; 10 decode."""
    one = 16_384 + 5_120 + 200 + 780
    monkeypatch.setattr(fits, "free_bytes", lambda device: 10 * one)

    def measured(*args):
        raise AssertionError("the decode precision was measured before the memory was checked")

    with monkeypatch.context() as m:
        m.setattr(sampling, "decoding_precision", measured)
        message = error_of([f"--out_dir={run_dir}", "--start=KING:", "--num_samples=11"], main=sample_main)
    assert (
        message.startswith("error: num_samples=11: decoding them needs") and "give num_samples=10 or fewer" in message
    )
    assert len(samples(run_dir, "--start=KING:", "--num_samples=10", "--max_new_tokens=2")) == 10
    config = load_for_inference("resume", str(run_dir))[0].config
    monkeypatch.setattr(fits, "free_bytes", lambda device: one - 1)
    with pytest.raises(fits.ConfigError, match="num_samples=1: .* even one sample does not fit"):
        fits.check_decoding_fits(config, 1, 5, 4, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_decodings_bytes_hold_the_kv_cache_the_decoder_allocates_in_its_dtype(dtype):
    """The cache term is the bytes of the caches model.py allocates (KVCache and StaticKVCache, in the dtype
    decoding runs in; grouped heads), and the float32 parts (scores, logits) do not shrink with it: at bf16 or
    fp16 the whole is the float32 whole less half of the cache and the prefill. Byte counts were tested in
    float32 only, where itemsize 4 hides a term computed at the wrong width."""
    from model import GPTConfig, KVCache, StaticKVCache

    config = GPTConfig(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, block_size=24, vocab_size=70)
    batch, prompt, size = 3, 5, torch.empty((), dtype=dtype).element_size()
    for cache in (KVCache(config, batch, dtype=dtype), StaticKVCache(config, batch, dtype=dtype)):
        tensors = [*cache.k, *cache.v] if isinstance(cache.k, list) else [cache.k, cache.v]
        held = sum(t.numel() * t.element_size() for t in tensors)
        assert held == 2 * 3 * batch * 2 * 24 * 8 * size  # by hand: k and v, layers, streams, kv heads, slots, width
        no_prompt = fits.decoding_bytes(config, batch, 0, size)
        assert no_prompt == held + 3 * batch * 70 * 4  # a 0-token prompt: the cache and float32 logits alone
    whole32 = fits.decoding_bytes(config, batch, prompt, 4)
    halved = (2 * 3 * batch * 2 * 24 * 8 + batch * prompt * (config.mlp_hidden + 4 * 32)) * 2
    assert fits.decoding_bytes(config, batch, prompt, size) == whole32 - (halved if size == 2 else 0)


def test_the_compiled_steps_compile_time_is_left_out_of_the_rate(run_dir, monkeypatch, capsys):
    """A stub clock that jumps 1000 s while the step compiles: the rate counts the tokens over the decoding's
    own seconds, not the 1000, and the line names what was left out."""
    from nlq.eval import decoding

    now = [0.0]
    clock = SimpleNamespace(perf_counter=lambda: now[0])  # for sampling's and decoding's clock alone
    monkeypatch.setattr(sampling, "time", clock)
    monkeypatch.setattr(decoding, "time", clock)
    real_forward = decoding.Decoder.forward

    def forward(self, ids):  # each call of the model: 1 s on the stub clock
        now[0] += 1.0
        return real_forward(self, ids)

    def compile(self, ids):  # compiling: 1000 s on the stub clock, then the eager step
        t0 = clock.perf_counter()
        now[0] += 1000.0
        self.tried_compile = True
        self.setup_s += self.elapsed(t0)

    monkeypatch.setattr(decoding.Decoder, "forward", forward)
    monkeypatch.setattr(decoding.Decoder, "compile", compile)
    (cfg,) = parse([f"--out_dir={run_dir}", "--num_samples=1", "--max_new_tokens=4", "--dtype=float32",
                    "--decode=compiled", "--start=KING:"], SampleConfig)  # fmt: skip
    _, rate = generate(cfg)
    # 4 tokens: the prefill and 3 steps, one model call each: 4 s of decoding
    assert rate == pytest.approx(4 / 4.0)
    err = capsys.readouterr().err
    assert "compiling the step took 1000.0 s, left out of the tokens/s" in err
    # said before it starts, on a CPU, where the compile runs minutes with no word
    assert err.splitlines()[0].startswith("decode=compiled on a CPU: torch.compile first builds the decode step, a")


def test_zeroshot_names_the_task_of_an_item_the_model_cannot_score(run_dir, tmp_path):
    (tmp_path / "unknown.jsonl").write_text(json.dumps({"text": "a b Ωmega"}) + "\n")
    (tmp_path / "long.jsonl").write_text(
        json.dumps({"text": "a " + "abcdefghij" * 4}) + "\n"
    )  # ' ' + a 40-char word: 41 ids
    for name, message in [
        ("unknown", "lambada: an item cannot be encoded with the model's tokenizer: characters ['Ω']"),
        ("long", "lambada: an item's continuation has 41 tokens, more than the model's context of 32"),
    ]:
        args = [f"--out_dir={run_dir}", "--tasks=lambada", f"--lambada_file={tmp_path / name}.jsonl"]
        with pytest.raises(SystemExit) as e:
            zeroshot_main([*args, f"--out={tmp_path / 'e.json'}", "--device=cpu"])
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)
    assert not (tmp_path / "e.json").exists()


def test_bench_tiny_preset_writes_json(tmp_path):
    out = tmp_path / "b.json"
    bench_main(
        [
            "--preset=tiny",
            "--repeats=2",
            "--steps=1",
            "--modes=('linear', 'residual_gelu')",
            "--device=cpu",
            "--cpu_peak_flops=1e13",  # above any CPU's: an MFU above 1 would not be reported
            f"--out={out}",
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"linear", "residual_gelu"}
    lin, nlq = report["results"]["linear"], report["results"]["residual_gelu"]
    assert nlq["train_ratio"]["median"] > 0
    steps = zip(nlq["train_step_s"]["samples"], lin["train_step_s"]["samples"])
    assert nlq["train_ratio"]["samples"] == [a / b for a, b in steps]  # paired within each round
    assert len(nlq["train_step_s"]["samples"]) == 2 and nlq["decode_tokens_per_s"]["median"] > 0
    assert nlq["non_embedding_params"] > lin["non_embedding_params"]
    # MFU pairs each round's step time with that round's peak: with a configured peak, MFU x time is fixed
    work = [u * t for u, t in zip(lin["mfu"]["samples"], lin["train_step_s"]["samples"])]
    assert len(work) == 2 and work[0] == pytest.approx(work[1], rel=1e-12) and 0 < lin["mfu"]["median"]
    g = report["generation"]  # with and without the cache, per round, paired
    assert len(g["cached_tokens_per_s"]["samples"]) == 2
    for key in ("as_nanogpt", "decode_dtype"):
        pairs = zip(g["cached_tokens_per_s"]["samples"], g[f"no_cache_{key}_tokens_per_s"]["samples"])
        assert g[f"speedup_over_no_cache_{key}"]["samples"] == [c / r for c, r in pairs]
    assert report["decode_dtype"] in ("torch.float32", "torch.bfloat16")
    assert "decode_dtype='bf16' is invalid" in error_of(["--preset=tiny", "--decode_dtype=bf16"], main=bench_main)
    assert "repeats=0 is invalid: it must be >= 1" in error_of(["--preset=tiny", "--repeats=0"], main=bench_main)


def test_bench_refuses_a_prompt_beyond_the_context_and_an_unwritable_out_before_any_work(tmp_path, monkeypatch):
    """The tiny preset's context is 64: a 100-token prompt (no decode_tokens given) and a prompt of 60 with 10
    new tokens are refused in one line; so is --out naming a directory or a missing one. No model is built."""
    from nlq.bench import cost

    def built(*args, **kwargs):
        raise AssertionError("a model was built before the options were checked")

    monkeypatch.setattr(cost, "Subject", built)
    tiny = ["--preset=tiny", "--device=cpu", f"--out={tmp_path / 'b.json'}"]
    assert "prompt_len=100: the tiny preset's context is 64 tokens; give a prompt_len below 64" in error_of(
        [*tiny, "--prompt_len=100"], main=bench_main
    )
    assert "prompt_len + decode_tokens = 70 exceeds the tiny preset's context of 64 tokens" in error_of(
        [*tiny, "--prompt_len=60", "--decode_tokens=10"], main=bench_main
    )
    assert f"--out {tmp_path}: is a directory: name a file" in error_of(
        ["--preset=tiny", "--device=cpu", f"--out={tmp_path}"], main=bench_main
    )
    assert "its directory does not exist" in error_of(
        ["--preset=tiny", "--device=cpu", f"--out={tmp_path / 'no' / 'b.json'}"], main=bench_main
    )
    assert not (tmp_path / "b.json").exists()


def test_bench_without_training_reports_no_training_figures_and_names_the_decoding_path(tmp_path, capsys):
    """--train=False times no step: the table says n/a where a figure would be the step's, not 0, and the
    generation line names the path that decoded it, not always 'the KV cache'."""
    out = tmp_path / "b.json"
    args = ["--preset=tiny", "--repeats=1", "--modes=linear,residual_gelu", "--device=cpu", "--train=False"]
    bench_main([*args, "--decode=static", "--decode_dtype=float32", f"--out={out}"])
    table = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header = [cell.strip("| ") for cell in table[0]]
    rows = {row[0].strip("| "): dict(zip(header, (cell.strip("| ") for cell in row))) for row in table[1:]}
    assert set(rows) == {"linear", "residual_gelu"}
    for row in rows.values():
        assert [row[k] for k in ("train ms/step", "tokens/s", "MFU")] == ["n/a"] * 3
        assert float(row["decode tok/s"].split()[0]) > 0
    report = json.loads(out.read_text())
    assert report["decode_path"]["linear"] == "static KV cache, eager"
    assert "tokens/s through static KV cache, eager (float32); recomputing" in markdown(report)


def fake_run(root, name, arm, seed, vals, prints, query_mode="linear"):
    d = root / name
    d.mkdir()
    cfg = {
        "wandb_run_name": arm,
        "seed": seed,
        "query_mode": query_mode,
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 8,
        "block_size": 8,
        "vocab_size": 11,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    lines = [{"step": s, "loss": 3.0 - s / 100, "fingerprint": f} for s, f in enumerate(prints)]
    lines += [{"step": s, "val_loss": v, "train_eval_loss": v, "tokens": s * 100} for s, v in vals.items()]
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda d: (d / "metrics.jsonl").write_text('{"val_loss": 3.0}\n'), "record 1 is not a train.py record"),
        (lambda d: (d / "metrics.jsonl").write_text('{"step": 1, "val_loss": "3.0"}\n'), "val_loss is '3.0'"),
        (lambda d: (d / "metrics.jsonl").write_text('{"step": 1, "val_loss": null}\n'), "val_loss is None"),
        (lambda d: (d / "metrics.jsonl").write_text('{"step": true, "loss": 1}\n'), "an integer step"),
        (lambda d: (d / "config.json").write_text("[1, 2]"), "its config is not a train.py run's"),
        (lambda d: (d / "config.json").write_text('{"seed": 1}'), "its config is not a train.py run's"),
        (lambda d: (d / "config.json").write_text('{"query_mode": "linear", "n_layer": "2"}'), "does not describe"),
    ],
)
def test_compare_on_valid_json_of_the_wrong_shape_is_one_line(tmp_path, damage, words):
    run = fake_run(tmp_path, "r", "linear", 1, {0: 3.0, 10: 2.5}, [])
    damage(run)
    assert words in error_of([str(run), "--png="], main=compare_main)


def test_compare_counts_a_deep_models_parameters_without_building_it(tmp_path, monkeypatch):
    """A config of 2,000 blocks: the count is exact, from models of one and two blocks (blocks are alike),
    and no block beyond those three is ever built."""
    import model

    built = []
    init = model.Block.__init__
    monkeypatch.setattr(model.Block, "__init__", lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    run = fake_run(tmp_path, "r", "deep", 1, {0: 3.0, 10: 2.5}, [])
    (run / "config.json").write_text(json.dumps({"query_mode": "linear", "n_layer": 2000, "n_head": 2, "n_embd": 8}))
    per_block = 3 * 8 * 8 + 8 * 8 + 2 * 4 * 8 * 8 + 2 * 8  # Q, K, V and the projection; the MLP; 2 LayerNorm weights
    assert Run.from_dir(run).non_embedding_params() == 2000 * per_block + 8  # + ln_f
    assert len(built) <= 3


def test_compare_table_relative_improvement_and_fingerprints(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    fake_run(runs, "base", "baseline", 1, {0: 4.0, 10: 3.0}, ["a", "b", "c"])
    fake_run(runs, "nlq1", "nlq", 1, {0: 4.0, 10: 2.97}, ["a", "b", "c"], "residual_gelu")
    compare_main([str(runs / "*"), f"--png={tmp_path / 'c.png'}"])
    out = capsys.readouterr().out
    assert "validation loss at step 10" in out
    assert "| nlq | " in out and "| 2.9700 | 1 | +1.00% |" in out
    assert "identical batches" in out
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    fake_run(runs, "nlq2", "nlq", 2, {0: 4.0, 10: 2.95}, ["a", "X", "c"], "residual_gelu")
    fake_run(runs, "base2", "baseline", 2, {0: 4.0, 10: 3.02}, ["a", "b", "c"])
    compare_main([str(runs / "*"), "--png="])
    out = capsys.readouterr().out
    assert "| 2.9600 ± 0.0141 | 2 | +1.66% |" in out  # mean(2.97, 2.95) against mean(3.0, 3.02) = 3.01
    row = next(line for line in out.splitlines() if line.startswith("| nlq |")).split("|")
    assert row[7].strip().split()[0] == row[8].strip()  # one arm compared: Holm's p is its own p
    assert "WARNING: the runs trained on different batches (first at step 1" in out


def test_compare_delta_to_baseline_and_its_interval_from_a_hand_made_log(tmp_path, capsys):
    stats = pytest.importorskip("scipy.stats")
    fake_run(tmp_path, "base1", "baseline", 1, {0: 4.0, 10: 3.00}, ["a"])
    fake_run(tmp_path, "base2", "baseline", 2, {0: 4.0, 10: 3.02}, ["a"])
    fake_run(tmp_path, "nlq1", "nlq", 1, {0: 4.0, 10: 2.97}, ["a"], "residual_gelu")
    fake_run(tmp_path, "nlq2", "nlq", 2, {0: 4.0, 10: 2.95}, ["a"], "residual_gelu")
    runs = [Run.from_dir(tmp_path / n) for n in ("base1", "base2", "nlq1", "nlq2")]
    # Seeds match, so differences pair by seed: baseline - nlq = 0.03 (seed 1), 0.07 (seed 2).
    d_mean, d_sd, base_mean = 0.05, math.sqrt(((0.03 - 0.05) ** 2 + (0.07 - 0.05) ** 2) / 1), 3.01
    half = stats.t.ppf(0.975, 1) * d_sd / math.sqrt(2)
    gain, (low, high), p, kind = versus_baseline(runs[2:], runs[:2], 10)
    assert kind == "paired" and gain == pytest.approx(d_mean / base_mean)
    assert (low, high) == pytest.approx(((d_mean - half) / base_mean, (d_mean + half) / base_mean))
    assert p == pytest.approx(2 * stats.t.sf(d_mean / (d_sd / math.sqrt(2)), 1))
    curves = improvement_curves(runs, "baseline")  # the table's sign and scale: (base - arm) / base
    steps, mean, std = curves["nlq"]
    assert steps == [0, 10] and mean == pytest.approx([0.0, d_mean / base_mean])
    assert std == pytest.approx([0.0, d_sd / base_mean])
    assert curves["baseline"][1] == pytest.approx([0.0, 0.0]) and curves["baseline"][2][1] == pytest.approx(
        math.sqrt(2) * 0.01 / base_mean
    )
    compare_main([str(tmp_path / "*"), f"--png={tmp_path / 'c.png'}", f"--md={tmp_path / 't.md'}"])
    out = capsys.readouterr().out
    assert f"| +1.66% | [{low:+.2%}, {high:+.2%}] | {p:.3g} (paired) |" in out
    assert (tmp_path / "t.md").read_text().splitlines()[4] in out  # the table, as printed
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    fake_run(tmp_path, "nlq3", "nlq", 3, {0: 4.0, 10: 2.99}, ["a"], "residual_gelu")  # seed 3: no partner
    runs.append(Run.from_dir(tmp_path / "nlq3"))
    a, b = [2.97, 2.95, 2.99], [3.00, 3.02]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 2
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 1)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    diff = 3.01 - statistics.mean(a)
    gain, (low, high), p, kind = versus_baseline(runs[2:], runs[:2], 10)
    assert kind == "Welch" and (low, high) == pytest.approx(((diff - half) / 3.01, (diff + half) / 3.01))

    # the baseline with a seed more than the arm (stage 2's extra seeds): paired over the arm's seeds 1 and 2
    fake_run(tmp_path, "base3", "baseline", 3, {0: 4.0, 10: 2.90}, ["a"])
    base = [*runs[:2], Run.from_dir(tmp_path / "base3")]
    gain, (low, high), p, kind = versus_baseline(runs[2:4], base, 10)
    assert kind == "paired" and gain == pytest.approx(d_mean / base_mean)
    assert p == pytest.approx(stats.ttest_rel([3.00, 3.02], [2.97, 2.95]).pvalue)


def test_compare_welch_interval_p_and_one_run_from_the_formulas():
    """Arms on different seeds (nothing to pair): Welch's t on the difference of the means, its degrees of
    freedom by Welch-Satterthwaite, both written out here; one run an arm: no interval; a spread at float
    rounding: no test."""
    stats = pytest.importorskip("scipy.stats")

    def runs(seeds, losses):
        return [SimpleNamespace(seed=s, evals={10: {"val_loss": v}}) for s, v in zip(seeds, losses)]

    b, a = [3.00, 3.04, 3.01, 3.05], [2.96, 2.99, 2.95]  # baseline seeds 1-4, the arm's 5-7
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 4
    se, df = math.sqrt(va + vb), (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    diff, base = statistics.mean(b) - statistics.mean(a), statistics.mean(b)
    half = stats.t.ppf(0.975, df) * se
    gain, interval, p, kind = versus_baseline(runs((5, 6, 7), a), runs((1, 2, 3, 4), b), 10)
    assert kind == "Welch" and gain == pytest.approx(diff / base)
    assert interval == pytest.approx(((diff - half) / base, (diff + half) / base))
    assert p == pytest.approx(2 * stats.t.sf(diff / se, df))
    # one run of the arm against two of the baseline: a difference, nothing to estimate its spread from
    assert versus_baseline(runs((5,), [2.9]), runs((1, 2), [3.0, 3.1]), 10) == (
        pytest.approx(0.15 / 3.05),
        None,
        None,
        "one run",
    )
    assert versus_baseline(runs((5, 6), [2.9, 2.8]), runs((1,), [3.0]), 10)[1:] == (None, None, "one run")
    # two runs each on different seeds, every loss equal within an arm: no spread at all, no test
    gain, interval, p, kind = versus_baseline(runs((5, 6), [2.9, 2.9]), runs((1, 2), [3.0, 3.0]), 10)
    assert kind == "Welch" and p is None and interval == pytest.approx((0.1 / 3.0, 0.1 / 3.0))
    # two runs each, on different seeds, whose spread is 2e-12 (under 1e-12 x 3.0): no test, a zero-width interval
    gain, interval, p, kind = versus_baseline(runs((5, 6), [2.9, 2.9]), runs((1, 2), [3.0, 3.0 + 4e-12]), 10)
    assert kind == "Welch" and p is None and interval == pytest.approx((gain, gain), abs=1e-15)


def test_compare_takes_the_baseline_given_else_baseline_else_linear_else_the_first_runs_arm():
    def runs(*arms):
        return [SimpleNamespace(arm=a) for a in arms]

    assert resolve_baseline(runs("nlq", "baseline", "linear"), None) == "baseline"
    assert resolve_baseline(runs("nlq", "linear"), None) == "linear"
    assert resolve_baseline(runs("wide", "nlq", "wide"), None) == "wide"
    assert resolve_baseline(runs("nlq", "linear"), "nlq") == "nlq"
    with pytest.raises(CompareError, match="--baseline='x' is not an arm"):
        resolve_baseline(runs("nlq"), "x")


def test_compare_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    fake_run(tmp_path, "base", "baseline", 1, {0: 4.0}, ["a"])
    fake_run(tmp_path, "nlq1", "nlq", 1, {0: 3.9}, ["a"])
    fake_run(tmp_path, "nlq2", "nlq", 2, {0: float("nan")}, ["a"])  # a diverged seed in a pooled arm
    runs = [str(tmp_path / n) for n in ("base", "nlq1", "nlq2")]
    for args, message in [
        ([str(tmp_path / "empty"), "--png="], "not an out_dir of train.py"),
        ([str(tmp_path / "base"), "--step=7", "--png="], "step 7 is not evaluated"),
        ([str(tmp_path / "base"), "--baseline=x", "--png="], "--baseline='x' is not an arm"),
        ([*runs, "--png="], f"{tmp_path / 'nlq2'} has a non-finite val loss at step 0"),
        ([str(tmp_path / "base"), f"--png={tmp_path / 'no' / 'c.png'}"], "is not writable"),
        ([str(tmp_path / "base"), f"--png={tmp_path}"], "is a directory: name a file"),
        ([str(tmp_path / "base"), f"--png={tmp_path / 'c.pgn'}"], "not a figure format matplotlib writes"),
        ([str(tmp_path / "base"), "--png=", f"--md={tmp_path / 'empty'}"], "--md"),
        ([str(tmp_path / "base"), f"{tmp_path / 'base'}/", "--png="], f"{tmp_path / 'base'} is named twice"),
        ([str(tmp_path / "base"), str(tmp_path / "b*"), "--png="], f"{tmp_path / 'base'} is named twice"),
        ([str(ROOT / "README.md"), "--png="], "README.md is a file, not a run: name train.py out_dirs"),
    ]:
        with pytest.raises(SystemExit) as e:
            compare_main(args)
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)


def test_a_run_is_never_counted_twice_however_it_is_named_or_copied(tmp_path, monkeypatch):
    """One run named by a relative and an absolute path, through a symlink, or copied to another folder (the same
    config, seed and losses; config.json keeps the out_dir it was made in, or not) is one run: refused in one
    line, where it would otherwise make its arm '2 runs' of one seed. Another seed of the same arm is a run."""
    import shutil

    monkeypatch.chdir(tmp_path)
    fake_run(tmp_path, "base", "baseline", 1, {0: 4.0}, ["a"])
    fake_run(tmp_path, "base2", "baseline", 2, {0: 4.1}, ["b"])
    (tmp_path / "link").symlink_to(tmp_path / "base")
    shutil.copytree(tmp_path / "base", tmp_path / "copy")
    for names, twice in [
        (["base", str(tmp_path / "base")], f"{tmp_path / 'base'} is named twice"),
        (["base", "link"], "link is named twice"),
        (["./base", "../" + tmp_path.name + "/base"], "is named twice"),
    ]:
        with pytest.raises(CompareError, match=re.escape(twice)):
            read_runs(names)
    with pytest.raises(CompareError, match="base and copy are one run: the same config .arm baseline, seed 1. apart"):
        read_runs(["base", "copy"])
    config = json.loads((tmp_path / "copy" / "config.json").read_text())
    (tmp_path / "copy" / "config.json").write_text(json.dumps({**config, "out_dir": "copy"}))
    with pytest.raises(CompareError, match="are one run"):
        read_runs(["base", "copy"])
    assert [r.seed for r in read_runs(["base", "base2"])] == [1, 2]


def test_compare_reads_runs_from_wandb(monkeypatch, capsys):
    class FakeRun:  # the part of wandb's public API that compare.py reads
        def __init__(self, name, arm, rows):
            self.name, self.config, self.rows = name, {"wandb_run_name": arm, "query_mode": "linear", "seed": 1}, rows

        def scan_history(self):
            return iter(self.rows)

    def rows(final, second="f1"):  # step 0: a train record and an evaluation merged in one row, as wandb has them
        return [
            {"_step": 0, "loss": 4.1, "fingerprint": "f0", "val_loss": 4.0, "tokens": 0},
            {"_step": 1, "loss": 3.9, "fingerprint": second},
            {"_step": 10, "val_loss": final, "tokens": 1000},
        ]

    class FakeApi:
        def runs(self, path, filters):
            assert (path, filters) == ("me/proj", {"group": "g"})
            return [FakeRun("base", "baseline", rows(3.0)), FakeRun("nlq", "nlq", rows(2.97))]

    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(Api=FakeApi))
    compare_main(["--wandb=me/proj", "--group=g", "--png="])
    out = capsys.readouterr().out
    assert "validation loss at step 10" in out and "| 2.9700 | 1 | +1.00% |" in out and "| 1,000 |" in out
    assert "fingerprints equal at 2 common logged steps" in out
    other = [FakeRun("base", "baseline", rows(3.0)), FakeRun("nlq", "nlq", rows(2.97, second="other batch"))]
    monkeypatch.setattr(FakeApi, "runs", lambda self, path, filters: other)
    compare_main(["--wandb=me/proj", "--group=g", "--png="])  # the fingerprints are read from wandb's rows too
    assert "WARNING: the runs trained on different batches (first at step 1" in capsys.readouterr().out
    unprinted = [FakeRun(n, a, [{k: v for k, v in row.items() if k != "fingerprint"} for row in rows(3.0)])
                 for n, a in (("base", "baseline"), ("nlq", "nlq"))]  # fmt: skip
    monkeypatch.setattr(FakeApi, "runs", lambda self, path, filters: unprinted)
    compare_main(["--wandb=me/proj", "--group=g", "--png="])  # no fingerprints logged: no claim either way
    assert "identical batches cannot be checked" in capsys.readouterr().out


def test_sample_from_imported_gpt2_weights(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=64)
    ).save_pretrained(tmp_path)
    args = [
        f"--init_from={tmp_path}",
        "--start=Hello world",
        "--temperature=0",
        "--max_new_tokens=8",
        "--num_samples=2",
    ]
    (cfg,) = parse(args, SampleConfig)
    (a,) = generate(cfg)[0]  # greedy: one sample, however many are asked for
    assert a.startswith("Hello world") and len(a) > len("Hello world")


def test_compare_figure_smoothing_signs_labels_and_clipping(tmp_path, capsys):
    """From a hand-made log: the train panel is the bias-corrected moving average of the logged losses
    (computed here from its formula), the improvement panel is up-is-better with end labels equal to the
    table's numbers, and an early point far off the scale is clipped to the edge and marked."""
    losses = [4.0, 3.0, 2.5, 2.2, 2.1, 2.06]
    for name, arm, final in (("base", "baseline", 3.0), ("nlq", "nlq", 2.97), ("wide", "wide", 3.01)):
        d = fake_run(tmp_path, name, arm, 1, {0: 4.0, 10: 3.5, 20: 3.2, 30: final}, [])
        early = {"step": 10, "val_loss": 9.0 if arm == "wide" else 3.5, "train_eval_loss": 3.5, "tokens": 1000}
        lines = [{"step": 10 * i, "loss": x, "fingerprint": "f"} for i, x in enumerate(losses)]
        records = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        records = [early if r.get("step") == 10 else r for r in records]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines + records))
    runs = [Run.from_dir(tmp_path / n) for n in ("base", "nlq", "wide")]
    fig = figure(runs, "baseline", smooth=0.9)
    ax_gain, _, ax_train = fig.axes[:3]
    beta, expected, m = 0.9, [], 0.0
    for k, x in enumerate(losses, 1):
        m = beta * m + (1 - beta) * x
        expected.append(m / (1 - beta**k))
    assert list(ax_train.lines[0].get_ydata()) == pytest.approx(expected)
    assert expected[-1] < 2.6  # a moving average started at the first loss, 4.0, would read 3.31 here

    shown = "\n".join(table(runs, "baseline", None))
    labels = {t.get_text().split()[0]: t.get_text().split()[1] for t in ax_gain.texts}
    for arm in ("nlq", "wide"):
        assert f"| {arm} |" in shown and f"| {labels[arm]} |" in shown
    assert labels["nlq"] == "+1.00%" and labels["wide"] == "-0.33%"  # (3.0 - 2.97) / 3.0, (3.0 - 3.01) / 3.0
    low, high = ax_gain.get_ylim()
    wide = next(line for line in ax_gain.lines if line.get_label().startswith("wide"))
    assert all(low <= y <= high for y in wide.get_ydata()) and wide.get_ydata()[1] == pytest.approx(low)
    assert any(c.get_offsets().shape[0] == 1 for c in ax_gain.collections if hasattr(c, "get_offsets"))
    positions = sorted(t.xyann[1] if hasattr(t, "xyann") else t.xy[1] for t in ax_gain.texts)
    assert all(b - a >= 0.05 * (high - low) - 1e-9 for a, b in zip(positions, positions[1:]))  # kept apart
    fig.canvas.draw()  # the end labels lie inside their panel (they ran past its right edge)
    panel = ax_gain.get_window_extent()
    assert all(panel.x0 <= t.get_window_extent().x0 and t.get_window_extent().x1 <= panel.x1 for t in ax_gain.texts)
    # the value panels' axes are set by the last 40 % of training, so the arms' gap there is not a flat line
    for ax in fig.axes[1:3]:
        last = max(max(line.get_xdata()) for line in ax.lines)
        late = [y for line in ax.lines for x, y in zip(line.get_xdata(), line.get_ydata()) if x >= 0.6 * last]
        low, high = ax.get_ylim()
        assert low < min(late) and max(late) < high and high - low == pytest.approx(1.3 * (max(late) - min(late)))


def test_the_head_benchmark_measures_both_variants_and_the_chunks_hold_less(tmp_path, capsys):
    """bench_head.py at a small head-dominated shape (3 chunks of logits): both variants timed, and the
    chunked loss's peak allocation below the whole logits' (allocator counts, not timing)."""

    out = tmp_path / "h.json"
    bench_head_main(["--n_embd=32", "--vocab_size=4096", "--tokens=5000", "--rounds=2", "--device=cpu", f"--out={out}"])
    report = json.loads(out.read_text())
    assert all(len(s) == 2 and min(s) > 0 for s in report["seconds"].values())
    whole, chunked = report["peak_bytes"]["whole logits"], report["peak_bytes"]["GPT.head_loss"]
    assert whole >= 5000 * 4096 * 4 > chunked  # the whole float32 logits alone, against chunks of 2048
    assert "GPT.head_loss: peak" in capsys.readouterr().out


def test_compare_pairs_by_seed_whatever_the_order_or_names_of_the_runs(tmp_path):
    """Directories named s1, s10, s2 (a glob's order is not the seeds'), listed in any order: the table pairs
    seed with seed. Paired by position instead, the differences would be 0.01, 0.09, 0.05 for 0.05 each."""
    base = {1: 3.00, 2: 3.10, 10: 3.05}
    nlq = {1: 2.95, 2: 3.05, 10: 3.00}  # 0.05 below the baseline at every seed: a zero-width paired interval
    paths = [fake_run(tmp_path, f"base-s{s}", "baseline", s, {0: 4.0, 10: v}, ["a"]) for s, v in base.items()]
    paths += [
        fake_run(tmp_path, f"nlq-s{s}", "nlq", s, {0: 4.0, 10: v}, ["a"], "residual_gelu") for s, v in nlq.items()
    ]
    orders = [paths, paths[::-1], sorted(paths, key=lambda p: p.name), [paths[i] for i in (5, 0, 3, 1, 4, 2)]]
    tables = ["\n".join(table([Run.from_dir(p) for p in order], "baseline", None)) for order in orders]
    assert all(t == tables[0] for t in tables)
    gain = 0.05 / statistics.mean(base.values())
    # three equal differences: no spread, so no t-test (p '—', not a NaN from a zero standard error)
    assert f"| +{gain:.2%} | [+{gain:.2%}, +{gain:.2%}] | — |" in tables[0]


def test_a_comparison_never_replaces_one_of_the_projects_pages(tmp_path):
    page = ROOT / "docs" / "miniature.png"
    before = page.read_bytes()
    for option in (f"--png={page}", f"--md={ROOT / 'docs' / 'miniature_table.md'}"):
        message = error_of([str(tmp_path), option], main=compare_main)
        assert "is one of the project's own pages: write it elsewhere" in message
    message = error_of(["config/mini_baseline.py", f"--out_root={tmp_path / 'o'}", f"--png={page}"], main=sweep_main)
    assert "is one of the project's own pages" in message and page.read_bytes() == before


@pytest.mark.parametrize(
    "ckpt, words",
    [
        ({"iter_num": 1000, "config": {"max_iters": 1000, "always_save_checkpoint": False}}, "step 1000 of 1000"),
        ({"iter_num": 500, "config": {"max_iters": 1000, "always_save_checkpoint": True}}, "step 500 of 1000"),
        (
            {"iter_num": 992, "best_val_loss": 0.25, "config": {"max_iters": 1000, "always_save_checkpoint": False}},
            "step 992 of 1000: the step of the lowest validation loss (0.2500), kept by always_save_checkpoint=False",
        ),
    ],
)
def test_a_loaded_checkpoint_says_which_step_it_holds(ckpt, words):
    from nlq.run.checkpoint import which_step

    assert which_step(ckpt) == words


def test_the_transformers_anchor_decodes_exactly_the_new_tokens_it_is_timed_on(monkeypatch, capfd):
    """tokens/s is decode_tokens over each generate's time: every run must produce exactly that many tokens after
    the prompt, at a vocabulary without GPT-2's end-of-text id, with nothing for transformers to warn of."""
    transformers = pytest.importorskip("transformers")
    from nlq.bench.anchor import transformers_generate

    lengths, generate = [], transformers.GPT2LMHeadModel.generate
    monkeypatch.setattr(
        transformers.GPT2LMHeadModel,
        "generate",
        lambda self, *a, **k: lengths.append((out := generate(self, *a, **k)).shape) or out,
    )
    shape = dict(vocab_size=65, block_size=64, n_embd=32, n_layer=2, n_head=2)
    result = transformers_generate(
        shape, SimpleNamespace(prompt_len=8, decode_tokens=20, repeats=3), "cpu", torch.float32
    )
    assert result["path"] == "dynamic cache, eager" and len(result["tokens_per_s"]["samples"]) == 3
    assert lengths == [(1, 28)] * 5  # two warm-up runs, then the three timed
    assert "transformers" not in capfd.readouterr().err


def test_bench_figures_and_ratios_from_each_rounds_own_measurements():
    """Three rounds of hand-made measurements for linear and residual_gelu, batch 2 of the tiny preset's 64
    positions on 2 processes (256 tokens a step), peaks of 1e9, 2e9 and 4e9 FLOP/s: each ratio is the
    round's own pair (never a ratio of medians), tokens/s the tokens over the median step, MFU each round's
    FLOPs over its own peak and the processes'."""
    from nlq.bench.cost import results

    cfg = SimpleNamespace(batch_size=2, preset="tiny")
    subjects = {
        "linear": SimpleNamespace(flops=100.0, params=10),
        "residual_gelu": SimpleNamespace(flops=120.0, params=11),
    }
    raw = {
        "linear": {"train_s": [1.0, 2.0, 4.0], "prefill_s": [0.1, 0.3, 0.2], "decode_tok_s": [100.0, 50.0, 80.0],
                   "peak_mem": 7},
        "residual_gelu": {"train_s": [1.5, 2.0, 6.0], "prefill_s": [0.2, 0.3, 0.1], "decode_tok_s": [90.0, 40.0, 80.0],
                          "peak_mem": 9},
    }  # fmt: skip
    out = results(cfg, subjects, raw, [1e9, 2e9, 4e9], world=2)
    nlq = out["residual_gelu"]
    assert nlq["train_ratio"]["samples"] == [1.5, 1.0, 1.5] and nlq["train_ratio"]["median"] == 1.5
    assert nlq["prefill_ratio"]["samples"] == pytest.approx([2.0, 1.0, 0.5])
    assert nlq["decode_ratio"]["samples"] == pytest.approx([0.9, 0.8, 1.0]) and nlq["decode_ratio"]["median"] == 0.9
    assert out["linear"]["train_ratio"]["samples"] == [1.0, 1.0, 1.0]
    assert nlq["train_tokens_per_s"] == 256 / 2.0 and out["linear"]["train_tokens_per_s"] == 256 / 2.0
    mfu = [120 * 256 / t / (p * 2) for t, p in zip([1.5, 2.0, 6.0], [1e9, 2e9, 4e9])]
    assert nlq["mfu"]["samples"] == pytest.approx(mfu) and nlq["peak_mem_bytes"] == 9
    assert nlq["prefill_s"]["median"] == 0.2 and nlq["decode_tokens_per_s"]["median"] == 80.0


def test_latency_figures_are_tokens_per_second_and_milliseconds_per_token_on_a_stub_clock(monkeypatch):
    """Two models whose prefill of 10 tokens takes 0.5 s and 1.0 s and whose decode step takes 10 ms and
    20 ms, on a clock the stub decoders advance: prefill 20 and 10 tokens/s, decode 10 and 20 ms a token,
    ratios to the first 0.5 (prefill) and 2.0 (decode), in every round after the two of warm-up."""
    from nlq.eval import latency

    now = [0.0]
    monkeypatch.setattr(latency, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    costs = {"fast": (0.5, 0.01), "slow": (1.0, 0.02)}

    prompts = []

    class StubDecoder:
        label = "stub"

        def __init__(self, model):
            self.prefill_s, self.step_s = costs[model.name]
            self.why = "no graphs here" if model.name == "slow" else None

        def prefill(self, prompt):
            prompts.append(prompt)
            now[0] += self.prefill_s

        def step(self, tok):
            assert tok.shape == (1, 1) and tok.device == prompts[-1].device
            if tok.device.type != "meta":
                assert tok.item() == prompts[-1][0, -1].item()  # the prompt's last token
            now[0] += self.step_s

    monkeypatch.setattr(latency, "Decoder", StubDecoder)
    models = {n: SimpleNamespace(name=n, config=SimpleNamespace(vocab_size=50)) for n in costs}
    found = latency.compare_latency(models, "fast", 10, 4, 3, "cpu", contextlib.nullcontext())
    assert found["fast"]["prefill_tokens_per_s"]["samples"] == pytest.approx([20.0] * 3)
    assert found["slow"]["prefill_tokens_per_s"]["samples"] == pytest.approx([10.0] * 3)
    assert found["fast"]["decode_ms_per_token"]["samples"] == pytest.approx([10.0] * 3)
    assert found["slow"]["decode_ms_per_token"]["samples"] == pytest.approx([20.0] * 3)
    assert found["slow"]["prefill_ratio"]["median"] == pytest.approx(0.5)
    assert found["slow"]["decode_ratio"]["median"] == pytest.approx(2.0)
    assert found["fast"]["decode_ratio"]["samples"] == pytest.approx([1.0] * 3)
    assert found["fast"]["path"] == "stub" and found["slow"]["path"] == "stub (no graphs here)"
    spread = found["slow"]["decode_ms_per_token"]
    assert (spread["min"], spread["median"], spread["max"]) == pytest.approx((20.0, 20.0, 20.0))
    # every model, every round, and a second comparison: one prompt of 10 ids below the vocabulary
    assert len(prompts) == 2 * (3 + 2) and all(p.shape == (1, 10) and int(p.max()) < 50 for p in prompts)
    latency.compare_latency(models, "fast", 10, 4, 1, "cpu", contextlib.nullcontext())
    assert all(torch.equal(p, prompts[0]) for p in prompts)
    latency.compare_latency(models, "fast", 10, 4, 1, "meta", contextlib.nullcontext())  # the models' device
    assert prompts[-1].device.type == "meta"


def test_a_latency_on_a_gpu_waits_for_the_device_before_and_after(monkeypatch):
    """The device's queued work is waited for before the clock starts and before it stops, on CUDA only."""
    from nlq.eval import latency

    calls = []
    monkeypatch.setattr(latency.torch.cuda, "synchronize", lambda device: calls.append(device))
    latency.timed(lambda: calls.append("work"), "cuda:1")
    assert calls == ["cuda:1", "work", "cuda:1"]
    calls.clear()
    latency.timed(lambda: calls.append("work"), "cpu")
    assert calls == ["work"]
