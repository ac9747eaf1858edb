"""Paths no test reached before (each planted bug of the fourth reliability pass passed every test): the
tuning budget under gradient accumulation and stage 2, the report's step, --tune_iters's warmup, a failed run
told from a diverged one, jobs that ended before they were waited for, CRC32 across chunks, optimizer state
by shape, pickled .npy files, a re-measured CPU peak, the vocabulary's bound, estimate_mfu's dtype, and
gradient accumulation over one rank's micro-steps. Each test's expected value is worked out here."""

import pickle
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import ARM, sweep_main

from model import GPT, GPTConfig
from nlq.common.safe_load import numpy_array
from nlq.comparison import cluster, tuning
from nlq.comparison.compare import Run
from nlq.comparison.sweep import last_error, shortened
from nlq.data.dataset import DataError
from nlq.data.loader import check_ids
from nlq.run import checkpoint, hardware, parallel
from nlq.run.config import TrainConfig
from nlq.run.step import DeviceBatches, OptimizerStep

SHAPE = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=65)


def run_of(arm, stage, seed, lr, final, steps, accum=4, batch=2):
    config = {**SHAPE, "batch_size": batch, "gradient_accumulation_steps": accum, "wandb_run_name": arm, "seed": seed}
    config |= {"wandb_group": f"R/{stage}", "learning_rate": lr, "max_iters": steps, "query_mode": "linear"}
    return Run(f"{stage}-{arm}-{lr}-s{seed}", config, [{"step": steps, "val_loss": final}])


def test_the_tuning_budget_counts_accumulated_micro_batches_of_stage_1_alone_and_the_report_is_at_stage_2s_step():
    """Stage 1: 2 points x 1 seed of 4 steps; a step is 8 tokens x 2 rows x 4 micro-batches = 64 tokens: 512
    tokens per arm. Stage 2's runs (8 steps) are what is reported, not what tuning spent."""
    runs = [run_of(a, "tune", 1, lr, 3.0 + lr, 4) for a in ("base", "nlq") for lr in (1e-3, 3e-3)]
    runs += [run_of(a, "report", s, 1e-3, 3.0 + 0.01 * s, 8) for a in ("base", "nlq") for s in (2, 3)]
    result = tuning.report(runs, ["learning_rate"], "base")
    per_token = GPT(GPTConfig(**SHAPE)).flops_per_token(8)  # the model's own count of a training token
    for arm in ("base", "nlq"):
        budget = result["arms"][arm]["budget"]
        assert budget == {"runs": 2, "tokens": 512, "flops": pytest.approx(per_token * 512)}
    assert result["step"] == 8


def test_tune_iters_scales_the_warmup_with_the_decay(tmp_path):
    (tmp_path / "arm.py").write_text("max_iters = 100\nwarmup_iters = 10\nlr_decay_iters = 80\n")
    assert shortened(str(tmp_path / "arm.py"), [], 50) == [
        "--max_iters=50",
        "--lr_decay_iters=40",
        "--warmup_iters=5",
    ]


def test_a_stage_1_run_that_failed_otherwise_than_by_diverging_stops_the_sweep(char_data, tmp_path):
    """A grid point whose runs fail at their start (a vocabulary smaller than the data's: exit 1) is a failure
    to fix, not a divergence to count as the worst loss: stage 2 does not start."""
    (tmp_path / "mini_base.py").write_text(ARM.format(data=str(char_data)))
    root = tmp_path / "R"
    with pytest.raises(SystemExit) as e:
        sweep_main([str(tmp_path / "mini_base.py"), "--grid=vocab_size=65,10", "--tune_seeds=1", "--seeds=2",
                    f"--out_root={root}"])  # fmt: skip
    assert "stage 1 is not complete" in str(e.value.code) and not list(root.glob("base-*"))


class FakeJob:
    def __init__(self, job_id, state):
        self.job_id, self.state = job_id, state


def test_jobs_that_ended_before_they_were_waited_for_give_their_exit_status(tmp_path):
    """One job diverged (status 3 written by its script), one ended without writing a status (killed by the
    scheduler): both are over when the wait begins."""
    folder = tmp_path / "R" / "submitit"
    folder.mkdir(parents=True)
    runs = [SimpleNamespace(out_dir=tmp_path / "R" / name) for name in ("a", "b")]
    for r in runs:
        r.out_dir.mkdir()
        (r.out_dir / "train.log").write_text("step 3: loss nan\nerror: non-finite loss at step 3\n")
    (folder / "a.status").write_text("3\n")
    jobs = {runs[0].out_dir: (runs[0], FakeJob("1", "COMPLETED")), runs[1].out_dir: (runs[1], FakeJob("2", "FAILED"))}
    failures = cluster.wait(jobs, folder, 60, None, last_error)
    assert failures == {
        str(runs[0].out_dir): (3, "error: non-finite loss at step 3"),
        str(runs[1].out_dir): (1, "job 2 ended FAILED without an exit status"),
    }


def test_a_files_crc32_runs_across_its_chunks(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, (1 << 24) + 1000, dtype=np.uint8).tobytes()  # 2 chunks
    (tmp_path / "f").write_bytes(data)
    assert checkpoint.checksum(tmp_path / "f") == zlib.crc32(data)


def test_optimizer_state_of_another_shape_with_as_many_elements_is_refused(tmp_path):
    """A moment transposed keeps its element count: checked by shape, it is refused before fused AdamW
    reads it out of bounds."""
    model = GPT(GPTConfig(**SHAPE))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))[1].backward()
    opt.step()
    state = opt.state_dict()
    names = [n for n, _ in model.named_parameters()]
    first = names.index("transformer.wte.weight")  # (65, 16): its transpose has as many elements
    state["state"][first]["exp_avg"] = state["state"][first]["exp_avg"].t().contiguous()
    fresh = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    with pytest.raises(checkpoint.CheckpointError, match=r"exp_avg for transformer.wte.weight is \(16, 65\)"):
        checkpoint.restore_optimizer(model, fresh, {"optimizer": state, "path": "ck.pt"})


class Planted:
    """An object whose unpickling would write a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickled_npy_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    np.save(tmp_path / "t.npy", np.array([Planted(str(marker))], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        numpy_array(tmp_path / "t.npy")
    assert not marker.exists()


def test_a_bare_pickle_named_npy_is_refused_and_runs_nothing(tmp_path):
    """Not an .npy at all: numpy would unpickle it (running its code) were pickles allowed; a memory map does
    not stand in the way here, as it does for an object array."""
    marker = tmp_path / "ran"
    (tmp_path / "t.npy").write_bytes(pickle.dumps(Planted(str(marker))))
    with pytest.raises(ValueError, match="pickled"):
        numpy_array(tmp_path / "t.npy")
    assert not marker.exists()


def test_a_re_measured_cpu_peak_keeps_the_best_of_the_two_readings(tmp_path, monkeypatch):
    """A run computed at 150 GFLOP/s against a cached peak of 100: the peak is measured again; a busy
    machine reads 120 this time, and 150 would be wrong too: the best reading of the two, 120, is kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    readings = iter([100e9, 120e9, 90e9])
    monkeypatch.setattr(hardware, "measure_cpu_flops", lambda dtype: next(readings))
    assert hardware.cached_cpu_flops(torch.float32) == 100e9  # measured once, cached
    assert hardware.cached_cpu_flops(torch.float32) == 100e9  # read from the cache
    assert hardware.cached_cpu_flops(torch.float32, at_least=150e9) == 120e9  # re-measured: 120 > 100
    assert hardware.cached_cpu_flops(torch.float32, at_least=150e9) == 120e9  # again: 90 < 120, 120 kept


def test_an_id_at_exactly_the_vocabulary_size_is_refused_one_below_it_is_not():
    check_ids(np.array([[0, 64]]), 65)
    with pytest.raises(DataError, match="token id 65, past the dataset's vocab_size=65"):
        check_ids(np.array([[0, 65]]), 65)


def test_estimate_mfu_without_a_peak_assumes_nanogpts_a100():
    """nanoGPT's estimate_mfu divides by an A100's bf16 peak, 312 TFLOP/s, unless given another; model.py asks
    no hardware module for one (it imports torch alone)."""
    model = GPT(GPTConfig(**SHAPE))
    achieved = model.flops_per_token(8) * 8 * 10 / 2.0  # 10 sequences of 8 tokens in 2 s
    assert model.estimate_mfu(10, 2.0) == pytest.approx(achieved / 312e12)


def test_gradient_accumulation_averages_over_one_ranks_micro_steps():
    """Rank 0 of 2 takes 2 of the step's 4 micro-batches; DDP averages the ranks' gradients, so each rank's
    gradient must be the mean over its own 2 micro-batches (divided by 2, not 4). Run here in one process
    as rank 0 of 2 with no communication: its gradient norm equals that of the mean loss of its two."""
    cfg = TrainConfig(batch_size=2, gradient_accumulation_steps=4, grad_clip=0.0, learning_rate=1e-3)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SHAPE))
    reference = GPT(GPTConfig(**SHAPE))
    reference.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(1)
    micro = [torch.randint(0, 65, (2, 9), generator=gen) for _ in range(2)]
    batches = DeviceBatches(lambda m: (micro[m][:, :-1], micro[m][:, 1:]), "cpu")
    d = parallel.Dist(False, 0, 2, "cpu")
    stats = OptimizerStep(cfg, d, model, model, torch.float32)(0, batches)
    loss = sum(reference(x[:, :-1], x[:, 1:])[1] for x in micro) / 2
    loss.backward()
    norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in reference.parameters()))
    assert float(stats[1]) == pytest.approx(float(norm), rel=1e-5)
    assert float(stats[0]) == pytest.approx(float(loss.detach()), rel=1e-5)
