import dataclasses
import hashlib
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import HANG_S, error_of, killed_at_random, records, tiny_args, torchrun, train_main

from configurator import parse
from model import GPT, GPTConfig, clean_state_dict
from nlq.common.errors import ConfigError
from nlq.run import checkpoint, hardware, trainer
from nlq.run.config import TrainConfig, lr_at
from nlq.run.step import DeviceBatches, OptimizerStep, make_optimizer
from nlq.run.trainer import Diverged, Trainer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def data_dir(char_data):
    return char_data


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(data_dir, tmp_path):
    common = dict(query_mode="residual_gelu", dropout=0.1)
    train_main(tiny_args(data_dir, tmp_path / "full", **common))
    train_main(tiny_args(data_dir, tmp_path / "split", max_iters=4, **common))
    train_main(tiny_args(data_dir, tmp_path / "split", init_from="resume", **common))

    full, split = records(tmp_path / "full", "loss"), records(tmp_path / "split", "loss")
    assert sorted(full) == sorted(split) == list(range(8))
    assert [full[s]["loss"] for s in range(8)] == [split[s]["loss"] for s in range(8)]
    assert [full[s]["fingerprint"] for s in range(8)] == [split[s]["fingerprint"] for s in range(8)]
    assert records(tmp_path / "full", "val_loss") == records(tmp_path / "split", "val_loss")
    a, b = (checkpoint.load(tmp_path / d / "ckpt.pt")["model"] for d in ("full", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_another_micro_batch_split_continues_the_same_data(data_dir, tmp_path):
    train_main(tiny_args(data_dir, tmp_path / "full"))
    train_main(tiny_args(data_dir, tmp_path / "split", max_iters=4))
    # after an out-of-memory, say: half the rows per micro-step, twice the micro-steps and eval batches
    train_main(
        tiny_args(
            data_dir, tmp_path / "split", init_from="resume", batch_size=2, gradient_accumulation_steps=8, eval_iters=4
        )
    )
    full, split = records(tmp_path / "full", "loss"), records(tmp_path / "split", "loss")
    assert [full[s]["fingerprint"] for s in range(8)] == [split[s]["fingerprint"] for s in range(8)]
    assert [split[s]["loss"] for s in range(4, 8)] == pytest.approx([full[s]["loss"] for s in range(4, 8)], abs=1e-5)
    assert records(tmp_path / "split", "val_loss")[8]["val_loss"] == pytest.approx(
        records(tmp_path / "full", "val_loss")[8]["val_loss"], abs=1e-5
    )


def test_every_query_mode_sees_the_same_batches(data_dir, tmp_path):
    prints = []
    for mode, seed in (("linear", 1), ("identity", 2), ("wide_mlp", 3)):
        train_main(tiny_args(data_dir, tmp_path / mode, query_mode=mode, seed=seed, max_iters=3))
        prints.append([r["fingerprint"] for r in records(tmp_path / mode, "loss").values()])
    assert prints[0] == prints[1] == prints[2] and len(set(prints[0])) == 3


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["linear", "residual_gelu"])
def test_an_accumulated_step_takes_the_gradient_of_the_whole_batch(mode):
    """One SGD step of lr 1 through train.py's optimizer step, its 8 rows as 1, 2 or 4 micro-batches: the same
    weight change, -(the mean loss's gradient over all 8 rows) computed here in one pass. AdamW would hide a
    gradient scaled by the number of micro-batches; SGD moves by the gradient itself."""
    from model import GPT
    from nlq.run import parallel

    torch.manual_seed(0)
    rows = torch.randint(0, 65, (8, 17))
    reference = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, query_mode=mode))
    start = {n: p.detach().clone() for n, p in reference.named_parameters()}
    reference(rows[:, :-1], rows[:, 1:])[1].backward()
    expected = {n: -p.grad for n, p in reference.named_parameters()}
    for accum in (1, 2, 4):
        model = GPT(reference.config)
        model.load_state_dict(start, strict=False)
        cfg = TrainConfig(batch_size=8 // accum, gradient_accumulation_steps=accum, grad_clip=0.0, compile=False)
        step = OptimizerStep(cfg, parallel.Dist(False, 0, 1, "cpu"), model, model, torch.float32)
        step.optimizer = step.guard.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        step.guard.on_device = False
        step.cfg = dataclasses.replace(cfg, learning_rate=1.0, warmup_iters=0, min_lr=1.0)
        micro = rows.view(accum, 8 // accum, 17)
        step(0, DeviceBatches(lambda m, micro=micro: (micro[m, :, :-1], micro[m, :, 1:]), "cpu"))
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.detach() - start[n], expected[n], rtol=1e-4, atol=1e-6, msg=f"{accum}: {n}")


def test_two_process_ddp_matches_one_process(data_dir, tmp_path):
    torchrun(ROOT / "train.py", tiny_args(data_dir, tmp_path / "ddp", max_iters=4), 240)
    train_main(tiny_args(data_dir, tmp_path / "one", max_iters=4))
    ddp, one = records(tmp_path / "ddp", "loss"), records(tmp_path / "one", "loss")
    assert [r["fingerprint"] for r in ddp.values()] == [r["fingerprint"] for r in one.values()]
    for s in one:
        assert ddp[s]["loss"] == pytest.approx(one[s]["loss"], abs=1e-5)
        assert ddp[s]["grad_norm"] == pytest.approx(one[s]["grad_norm"], rel=1e-4)  # not divided by the ranks
    assert records(tmp_path / "ddp", "val_loss")[4]["val_loss"] == pytest.approx(
        records(tmp_path / "one", "val_loss")[4]["val_loss"], abs=1e-5
    )


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_leaves_an_unloadable_checkpoint(tmp_path):
    writer = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(ROOT)!r})
        from nlq.run import checkpoint
        path = {str(tmp_path / "ckpt.pt")!r}
        big = torch.zeros(4_000_000)
        checkpoint.save({{"model": {{"w": big}}, "model_args": {{}}, "version": 0}}, path)
        print("ready", flush=True)
        v = 0
        while True:
            v += 1
            checkpoint.save({{"model": {{"w": big + v}}, "model_args": {{}}, "version": v}}, path)
    """)
    for _ in killed_at_random(writer, rounds=4, seconds=(0.05, 0.6)):
        ckpt = checkpoint.load(tmp_path / "ckpt.pt")
        assert torch.all(ckpt["model"]["w"] == ckpt["version"])


@pytest.mark.slow
def test_quick_start_config_runs_and_learns(tmp_path):
    """The README's quick start, offline: the generated play, then config/quickstart.py (shortened)."""
    data = tmp_path / "data"
    prep = subprocess.run(
        [sys.executable, ROOT / "data/synthetic_char/prepare.py", "--out_dir", data], capture_output=True
    )
    assert prep.returncode == 0, prep.stderr
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "config/quickstart.py",
        f"--dataset={data}",
        f"--out_dir={tmp_path}",
        "--max_iters=60",
        "--eval_interval=60",
        "--eval_iters=4",
        "--log_interval=20",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    val = records(tmp_path, "val_loss")
    assert val[60]["val_loss"] < val[0]["val_loss"] - 0.5  # from ~ln(65) = 4.17 toward character statistics
    assert "mfu" in r.stdout and "eta" in r.stdout
    assert json.loads((tmp_path / "config.json").read_text())["n_layer"] == 4
    # the run says what prepare said: the play's characters, fewer than the config's vocab_size
    chars = len(json.loads((data / "meta.json").read_text())["chars"])
    assert f"vocab_size {chars}," in prep.stdout.decode()
    assert (
        f"the data uses {chars} of the model's 65 token ids (vocab_size); the other {65 - chars} are padding"
        in r.stdout
    )
    # where the MFU's peak comes from, and where it is kept; the closing hint compares with other runs
    peak = "the float32 matmul peak measured on this machine, kept in "
    assert any(line.startswith("mfu: the model's FLOPs per second over the device's peak, ") and peak in line
               and line.endswith("nonlinear-queries/cpu_peak.json") for line in r.stdout.splitlines())  # fmt: skip
    assert f"  compare: python compare.py {tmp_path} OTHER_OUT_DIR ...  (runs of other arms or seeds)" in r.stdout


def test_non_finite_loss_stops_before_the_step_and_keeps_the_checkpoint(data_dir, tmp_path):
    train_main(tiny_args(data_dir, tmp_path, max_iters=4))
    before = sha(tmp_path / "ckpt.pt")
    message = error_of(
        tiny_args(
            data_dir,
            tmp_path,
            init_from="resume",
            learning_rate=1e30,
            warmup_iters=0,
            allow_schedule_change=True,
            grad_clip=0.0,
            max_iters=100,
            eval_interval=1000,
        ),
        status=Diverged.exit_code,
    )
    assert "non-finite" in message and "at step" in message
    step = int(message.split("at step ")[1].split(":")[0])
    assert step > 4
    assert sha(tmp_path / "ckpt.pt") == before
    assert max(records(tmp_path, "loss")) == step - 1  # the bad step was never taken nor logged


@pytest.mark.slow
def test_compile_smoke_run(data_dir, tmp_path):
    train_main(tiny_args(data_dir, tmp_path, compile=True, max_iters=2, eval_interval=2, query_mode="residual_gelu"))
    ckpt = checkpoint.load(tmp_path / "ckpt.pt")
    assert not any(k.startswith(("_orig_mod.", "module.")) for k in ckpt["model"])
    assert ckpt["iter_num"] == 2


def test_named_checkpoints_and_checkpoint_contents(data_dir, tmp_path):
    train_main(tiny_args(data_dir, tmp_path, keep_checkpoints=(3, 4), max_iters=5))
    assert sorted(p.name for p in tmp_path.glob("ckpt*.pt")) == ["ckpt.pt", "ckpt_000003.pt", "ckpt_000004.pt"]
    ckpt = checkpoint.load(tmp_path / "ckpt_000003.pt")
    assert ckpt["iter_num"] == 3 and {"optimizer", "scaler", "config", "model_args"} <= set(ckpt)


def test_lr_schedule():
    cfg = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110, max_iters=200)
    lrs = [lr_at(i, cfg) for i in range(200)]
    assert lrs[0] == pytest.approx(1 / 11) and lrs[9] == pytest.approx(10 / 11)
    assert lrs[10] == pytest.approx(1.0) and lrs[60] == pytest.approx(0.55) and lrs[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[199] == 0.1


def test_weight_decay_only_on_matrices():
    model = GPT(
        GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=8, query_mode="residual_gelu", bias=True)
    )
    opt = make_optimizer(model, TrainConfig(weight_decay=0.5), "cpu")
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.5 and all(p.dim() >= 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and all(p.dim() < 2 for p in plain["params"])
    w1 = model.transformer.h[0].attn.query.w1.weight
    assert any(p is w1 for p in decayed["params"])


def test_config_parsing(tmp_path):
    conf = tmp_path / "c.py"
    conf.write_text("import math\nquery_mode = 'identity'\nweight_decay = 2**-5\nkeep_checkpoints = [5, 10]\n")
    cfg, model_cfg = parse([str(conf), "--batch_size=3", "--out_dir=123", "--learning_rate=1"], TrainConfig, GPTConfig)
    assert (model_cfg.query_mode, cfg.weight_decay, cfg.keep_checkpoints) == ("identity", 2**-5, (5, 10))
    assert (cfg.batch_size, cfg.out_dir, cfg.learning_rate) == (3, "123", 1.0)
    with pytest.raises(ConfigError, match="did you mean learning_rate"):
        parse(["--lerning_rate=1"], TrainConfig, GPTConfig)
    with pytest.raises(ConfigError, match="batch_size='big'.*not of type int"):
        parse(["--batch_size=big"], TrainConfig, GPTConfig)
    with pytest.raises(ConfigError, match="compile=1 .*bool"):
        parse(["--compile=1"], TrainConfig, GPTConfig)
    with pytest.raises(ConfigError, match="query_mode='cubic'"):
        parse(["--query_mode=cubic"], TrainConfig, GPTConfig)
    with pytest.raises(ConfigError, match="the keys are the fields of TrainConfig and GPTConfig"):
        parse(["--zzz=1"], TrainConfig, GPTConfig)
    conf.write_text("batch_size = (\n")
    with pytest.raises(ConfigError, match=f"config file {conf} failed: SyntaxError"):
        parse([str(conf)], TrainConfig, GPTConfig)
    with pytest.raises(ConfigError, match="config file nowhere.py not found"):
        parse(["nowhere.py"], TrainConfig, GPTConfig)


def test_bad_input_is_a_one_line_error_and_overwrites_nothing(data_dir, tmp_path):
    assert "data/nope/meta.json not found: run" in error_of(["--dataset=nope", f"--out_dir={tmp_path}"])
    assert "did you mean" in error_of(tiny_args(data_dir, tmp_path, n_layers=2))
    assert "init_from='gtp2'" in error_of(tiny_args(data_dir, tmp_path, init_from="gtp2"))
    assert "has no readable config.json" in error_of(tiny_args(data_dir, tmp_path, init_from=str(tmp_path)))
    vocab = json.loads((Path(data_dir) / "meta.json").read_text())["vocab_size"]
    assert f"vocab_size={vocab}" in error_of(tiny_args(data_dir, tmp_path, vocab_size=vocab - 1))
    assert "fewer than block_size" in error_of(tiny_args(data_dir, tmp_path, block_size=200_000))

    train_main(tiny_args(data_dir, tmp_path, max_iters=4))
    saved = {p.name: sha(p) for p in tmp_path.iterdir()}
    assert "--init_from=resume" in error_of(tiny_args(data_dir, tmp_path))  # a new run would overwrite it
    mismatch = error_of(tiny_args(data_dir, tmp_path, init_from="resume", n_embd=64, query_mode="identity"))
    assert "n_embd (checkpoint 32, config 64)" in mismatch and "query_mode" in mismatch
    assert "data_seed" in error_of(tiny_args(data_dir, tmp_path, init_from="resume", data_seed=5))
    assert "batch_size x gradient_accumulation_steps (checkpoint 16, config 8)" in error_of(
        tiny_args(data_dir, tmp_path, init_from="resume", batch_size=2)
    )
    assert {p.name: sha(p) for p in tmp_path.iterdir()} == saved

    data = (tmp_path / "ckpt.pt").read_bytes()
    (tmp_path / "ckpt.pt").write_bytes(data[: len(data) // 2])
    assert "cannot be read" in error_of(tiny_args(data_dir, tmp_path, init_from="resume"))
    assert len((tmp_path / "ckpt.pt").read_bytes()) == len(data) // 2
    assert "holds no checkpoint" in error_of(tiny_args(data_dir, tmp_path / "empty", init_from="resume"))


def test_wandb_offline_logging(data_dir, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    # Pass-through spies: the real library runs (offline), and the test reads what train.py handed it
    # rather than wandb's asynchronously written run file.
    calls = {"init": [], "log": [], "finish": 0}
    real_init = wandb.init

    def init(**kw):
        calls["init"].append(kw)
        run = real_init(**kw)
        real_log, real_finish = wandb.log, wandb.finish  # init rebinds these to the new run

        def log(data, step):
            calls["log"].append((step, data))
            real_log(data, step=step)

        def finish():
            calls["finish"] += 1
            real_finish()

        monkeypatch.setattr(wandb, "log", log)
        monkeypatch.setattr(wandb, "finish", finish)
        return run

    monkeypatch.setattr(wandb, "init", init)
    train_main(
        tiny_args(
            data_dir,
            tmp_path / "run",
            max_iters=2,
            eval_interval=2,
            wandb_log=True,
            wandb_project="proj",
            wandb_group="sweep1",
            wandb_run_name="nlq",
        )
    )
    (kw,) = calls["init"]
    assert (kw["project"], kw["group"], kw["name"]) == ("proj", "sweep1", "nlq")
    assert kw["config"]["query_mode"] == "linear"
    assert kw["id"] == checkpoint.load(tmp_path / "run" / "ckpt.pt")["wandb_id"]  # a resume continues the run
    assert [step for step, _ in calls["log"]] == [0, 0, 1, 2]  # eval at 0, steps 0 and 1, eval at 2
    assert {"loss", "fingerprint", "mfu"} <= set(calls["log"][1][1]) and "val_loss" in calls["log"][-1][1]
    assert calls["finish"] == 1
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1


def test_clean_state_dict_strips_nested_wrapper_prefixes():
    state = {"module._orig_mod.lm_head.weight": 1, "_orig_mod.module.transformer.wte.weight": 2, "ln_f.weight": 3}
    assert clean_state_dict(state) == {"lm_head.weight": 1, "transformer.wte.weight": 2, "ln_f.weight": 3}


def test_the_official_identity_arm_plans_a_600k_cosine():
    cfg, model_cfg = parse([str(ROOT / "config/owt_identity_official.py")], TrainConfig, GPTConfig)
    assert not model_cfg.tie_embeddings and model_cfg.query_mode == "identity" and cfg.max_iters == 60_000
    ratio = (60_000 - 2_000) / (600_000 - 2_000)  # warmup 2000, peak 6e-4, floor 6e-5
    expected = 6e-5 + 0.5 * (1 + math.cos(math.pi * ratio)) * (6e-4 - 6e-5)
    assert lr_at(60_000, cfg) == pytest.approx(expected) and round(expected, 5) == 5.9e-4


def test_dtype_auto_on_a_cpu_picks_bf16_only_where_native_and_measured_faster(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    assert hardware.choose_cpu_dtype(lambda dtype: 1 / 0)[0] == torch.float32  # not even measured

    clock = [0.0]  # the test's clock, which each step advances: no machine is too busy for it
    monkeypatch.setattr(hardware.time, "perf_counter", lambda: clock[0])

    def slow_in(slow_dtype):
        def step(dtype):
            clock[0] += 0.05 if dtype == slow_dtype else 0.001

        return step

    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: True)
    assert hardware.choose_cpu_dtype(slow_in(torch.float32))[0] == torch.bfloat16
    assert hardware.choose_cpu_dtype(slow_in(torch.bfloat16))[0] == torch.float32


def test_dtype_auto_keeps_float32_unless_bf16_is_faster_in_every_trial(monkeypatch):
    """A busy machine: bf16 looks faster in one trial of three (a lucky pair), so float32 is kept; the line
    says what was measured and the rule."""
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: True)
    pairs = iter([(0.02, 0.02), (0.02, 0.002), (0.02, 0.03), (0.02, 0.025)])  # warm-up, then 3 trials
    current = []  # (float32 seconds, bf16 seconds) of the pair under way
    clock = [0.0]  # the test's clock, which each step advances
    monkeypatch.setattr(hardware.time, "perf_counter", lambda: clock[0])

    def step(dtype):
        if dtype == torch.float32:
            current[:] = next(pairs)
        clock[0] += current[0] if dtype == torch.float32 else current[1]

    dtype, why = hardware.choose_cpu_dtype(step)
    assert dtype == torch.float32 and "took 0.10, 1.50, 1.25 x float32's time in bf16 over 3 interleaved" in why


def test_dtype_auto_is_measured_once_and_kept_by_a_resume(data_dir, tmp_path, monkeypatch, capsys):
    calls = []

    def measured(step):
        step(torch.float32)  # the measurement runs a real micro-step of the run's model
        calls.append(1)
        return torch.bfloat16, "bfloat16 (measured faster)"

    monkeypatch.setattr(trainer, "choose_cpu_dtype", measured)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no earlier test's choice for this shape
    train_main(tiny_args(data_dir, tmp_path, dtype="auto", max_iters=4))
    assert "dtype=auto: bfloat16" in capsys.readouterr().out
    assert checkpoint.load(tmp_path / "ckpt.pt")["dtype"] == "bfloat16" and calls == [1]
    # another run of this shape on this machine (another arm, say) takes the same precision, unmeasured
    train_main(tiny_args(data_dir, tmp_path / "arm", dtype="auto", max_iters=2, query_mode="residual_gelu"))
    assert calls == [1] and checkpoint.load(tmp_path / "arm" / "ckpt.pt")["dtype"] == "bfloat16"
    train_main(tiny_args(data_dir, tmp_path, dtype="auto", init_from="resume"))  # the run's choice, not measured
    assert calls == [1] and checkpoint.load(tmp_path / "ckpt.pt")["dtype"] == "bfloat16"
    train_main(tiny_args(data_dir, tmp_path / "fixed", dtype="float32", max_iters=2))
    assert calls == [1] and checkpoint.load(tmp_path / "fixed" / "ckpt.pt")["dtype"] == "float32"


def test_device_batches_read_each_micro_batch_once_and_in_order():
    """The prefetch reads micro-batch m + 1 while m computes; each is read once and handed out as read."""
    reads = []

    def read(micro):
        reads.append(micro)
        return torch.full((2, 3), micro), torch.full((2, 3), -micro)

    batches = DeviceBatches(read, "cpu")
    got = []
    for micro in range(4):
        x, y = batches(micro)
        got.append((int(x[0, 0]), int(y[0, 0])))
        if micro < 3:
            batches.prefetch(micro + 1)
            batches.prefetch(micro + 1)  # twice: still read once
    assert got == [(m, -m) for m in range(4)] and reads == [0, 1, 2, 3] and not batches.staged


def test_an_unlogged_step_reads_nothing_back_from_the_device(data_dir, tmp_path, monkeypatch):
    """On a GPU, any read of a device tensor by the host (item, tolist, bool, float, int, numpy, cpu) makes
    the host wait for the device. Counted here on a CPU by instrumenting those methods during the steps the
    loop does not log: none. A logged step reads its record (stats.tolist()) and the
    divergence guard's first bad step (int), once the device has finished the step anyway."""
    reads, counting = [], [False]
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"):
        original = getattr(torch.Tensor, name)

        def instrumented(self, *a, _original=original, _name=name, **k):
            if counting[0]:
                reads.append((step[0], _name))
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, instrumented)
    step, train_step = [None], Trainer.train_step

    def counted(self, it):
        step[0], counting[0] = it, True
        try:
            return train_step(self, it)
        finally:
            counting[0] = False

    monkeypatch.setattr(Trainer, "train_step", counted)
    log_step = Trainer.log_step

    def counted_log(self, it, stats, *a):
        step[0], counting[0] = it, True
        try:
            return log_step(self, it, stats, *a)
        finally:
            counting[0] = False

    monkeypatch.setattr(Trainer, "log_step", counted_log)
    for mode in ("linear", "residual_gelu"):
        reads.clear()
        train_main(tiny_args(data_dir, tmp_path / mode, query_mode=mode, log_interval=3, dropout=0.1))
        logged = [(it, name) for it in (0, 3, 6) for name in ("__int__", "tolist")]
        assert sorted(reads) == logged, mode
