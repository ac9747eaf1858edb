"""Nothing a user types, and nothing the disk or the numbers do, destroys what a run already produced."""

import errno
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import HANG_S, compare_main, error_of, snapshot, tiny_args, torchrun, train_main, wait_until

from model import GPT
from nlq.data.dataset import DataError, open_split, write_dataset
from nlq.run import checkpoint, parallel, start
from nlq.run.trainer import Diverged, Trainer, format_eta

ROOT = Path(__file__).resolve().parents[1]


def logged(out_dir):
    return [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def test_divergence_right_before_an_eval_keeps_the_last_checkpoint(char_data, tmp_path, monkeypatch):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    saved = snapshot(tmp_path)
    real_forward, calls = GPT.forward, []

    def forward(self, idx, targets=None, **kw):  # the first micro-step of step 7, the step before the eval at 8
        logits, loss = real_forward(self, idx, targets, **kw)
        if self.training:
            calls.append(1)
            if len(calls) == 4 * (7 - 4) + 1:  # 4 micro-steps per step, from step 4
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)
    # log_interval=100: nothing reads the flag back before the evaluation at step 8, which must stop the run
    message = error_of(tiny_args(char_data, tmp_path, init_from="resume", log_interval=100), status=Diverged.exit_code)
    assert "non-finite loss or gradient norm at step 7" in message
    assert f"{tmp_path / 'ckpt.pt'} (step 4) is the last good checkpoint" in message
    after = snapshot(tmp_path)
    assert after["ckpt.pt"] == saved["ckpt.pt"]
    assert all(r["step"] <= 4 for r in logged(tmp_path) if "val_loss" in r)

    monkeypatch.setattr(GPT, "forward", real_forward)
    train_main(tiny_args(char_data, tmp_path, init_from="resume"))  # still resumable
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 8


def test_non_finite_validation_loss_is_never_saved(char_data, tmp_path, monkeypatch):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    saved = snapshot(tmp_path)["ckpt.pt"]
    real = Trainer.evaluate
    monkeypatch.setattr(Trainer, "evaluate", lambda self, *a: float("nan") if self.start == 4 else real(self, *a))
    message = error_of(tiny_args(char_data, tmp_path, init_from="resume"), status=Diverged.exit_code)
    assert "non-finite validation loss nan at step 8: not saved" in message
    assert snapshot(tmp_path)["ckpt.pt"] == saved


def test_a_divergence_before_any_checkpoint_names_none(char_data, tmp_path):
    message = error_of(
        tiny_args(char_data, tmp_path, learning_rate=1e30, warmup_iters=0, grad_clip=0.0, max_iters=50),
        status=Diverged.exit_code,
    )
    assert "no checkpoint was saved yet" in message and not (tmp_path / "ckpt.pt").exists()
    assert "then --init_from=auto" in message and "--init_from=resume" not in message  # resume would refuse


def test_one_training_process_per_out_dir(char_data, tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time; from nlq.run import rundir; r = rundir.RunDir({str(tmp_path)!r}); r.lock(); "
            "print('ok', flush=True); time.sleep(600)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        message = error_of(tiny_args(char_data, tmp_path))
        assert f"in use by another training process (pid {holder.pid})" in message
        assert not (tmp_path / "metrics.jsonl").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    train_main(tiny_args(char_data, tmp_path, max_iters=2))  # a killed holder leaves no stale lock
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 2


def test_no_start_erases_a_run(char_data, tmp_path, capsys):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    saved = snapshot(tmp_path)
    assert "needs weights" in error_of(tiny_args(char_data, tmp_path, eval_only=True))
    capsys.readouterr()
    train_main(tiny_args(char_data, tmp_path, eval_only=True, init_from="resume"))
    assert "val loss" in capsys.readouterr().out
    assert snapshot(tmp_path) == saved  # eval_only wrote nothing

    log_only = tmp_path / "log_only"
    log_only.mkdir()
    (log_only / "metrics.jsonl").write_text('{"step": 0, "val_loss": 4.0}\n')
    assert "holds a run (metrics.jsonl)" in error_of(tiny_args(char_data, log_only))
    assert "holds a run (ckpt.pt and metrics.jsonl)" in error_of(tiny_args(char_data, tmp_path, seed=2, max_iters=8))
    # the same command again, its run finished at step 4: the refusal says so and how to look at it
    message = error_of(tiny_args(char_data, tmp_path, max_iters=4))
    assert f"{tmp_path} holds a finished run (step 4, max_iters=4): look at it with `python sample.py" in message
    assert "continue it" not in message
    assert snapshot(tmp_path) == saved


def test_resume_at_max_iters_and_schedule_changes(char_data, tmp_path, capsys):
    train_main(tiny_args(char_data, tmp_path))
    saved = snapshot(tmp_path)
    capsys.readouterr()
    train_main(tiny_args(char_data, tmp_path, init_from="resume"))
    assert "is at step 8, max_iters=8: nothing to train" in capsys.readouterr().out
    message = error_of(tiny_args(char_data, tmp_path, init_from="resume", max_iters=12, lr_decay_iters=None))
    assert "end of the cosine (lr_decay_iters, else max_iters) (checkpoint 8, config 12)" in message
    assert "--allow_schedule_change=True" in message
    assert snapshot(tmp_path) == saved
    # An evaluation never reads the schedule: eval_only accepts another one, and writes nothing.
    train_main(tiny_args(char_data, tmp_path, init_from="resume", eval_only=True, max_iters=99, lr_decay_iters=None))
    assert "step 8: val loss" in capsys.readouterr().out and snapshot(tmp_path) == saved
    train_main(tiny_args(char_data, tmp_path, init_from="resume", max_iters=12, allow_schedule_change=True))
    assert "new schedule" in capsys.readouterr().out
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 12


def test_a_cut_metrics_line_is_dropped_and_a_damaged_one_named(char_data, tmp_path, capsys):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    metrics = tmp_path / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + '{"step": 5, "lo')  # a kill during an append
    cut = f"line {len(good.splitlines()) + 1} is cut"
    compare_main([str(tmp_path), "--png="])
    assert cut in capsys.readouterr().err
    train_main(tiny_args(char_data, tmp_path, init_from="resume"))
    assert cut in capsys.readouterr().err
    assert [r["step"] for r in logged(tmp_path) if "loss" in r] == list(range(8))

    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(lines[:3] + ["{oops"] + lines[3:]) + "\n")
    assert f"{metrics} line 4 is damaged" in error_of(tiny_args(char_data, tmp_path, init_from="resume", max_iters=9))
    assert f"{metrics} line 4 is damaged" in error_of([str(tmp_path), "--png="], main=compare_main)


def test_sizes_are_said_in_the_unit_that_shows_them():
    from nlq.common.atomic import size

    assert [size(n) for n in (0, 900, 5000, 3 * 2**20, 3 * 2**30)] == [
        "0 bytes", "900 bytes", "4.9 KiB", "3.0 MiB", "3.0 GiB"
    ]  # fmt: skip


def test_a_full_disk_keeps_the_old_checkpoint(char_data, tmp_path, monkeypatch):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    saved = snapshot(tmp_path)["ckpt.pt"]
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        f.write(b"x" * 1000)  # a partial write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    message = error_of(tiny_args(char_data, tmp_path, init_from="resume"))
    assert f"could not write {tmp_path / 'ckpt.pt'} (No space left on device" in message
    unit = r"[\d,]+(\.\d)? (GiB|MiB|KiB|bytes)"
    assert re.search(f"{unit} free in .*, about {unit} needed", message) and "previous version is kept" in message
    assert " 0 MiB" not in message and " 0.0 " not in message  # a small checkpoint's size in a unit that shows it
    assert snapshot(tmp_path)["ckpt.pt"] == saved
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no partial temp file left
    monkeypatch.setattr(torch, "save", real_save)
    train_main(tiny_args(char_data, tmp_path, init_from="resume"))  # space freed: the resume works
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 8


@pytest.mark.parametrize("async_save", [True, False])
@pytest.mark.parametrize("stage", ["shards", "naming"])
def test_a_failed_sharded_save_keeps_the_previous_step(char_data, tmp_path, monkeypatch, stage, async_save):
    """The disk fills while the shards are written, or while the written step is named (run.pt, its files'
    checksums, the rename): one line naming the step and what is kept, no partial directory left, latest.json
    still naming the previous step, and the resume works once there is space."""
    import torch.distributed.checkpoint as dcp

    out = tmp_path / "run"
    args = dict(parallelism="fsdp", async_save=async_save)
    train_main(tiny_args(char_data, out, max_iters=4, **args))
    root = out / checkpoint.SHARDED
    pointer = (root / checkpoint.LATEST).read_text()

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    def reading_back_fails(path, real=checkpoint.checksum):  # the new step's shards, read for their CRC32
        if path.parent.name.endswith(".partial"):
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    if stage == "shards":
        monkeypatch.setattr(dcp, "save", full_disk)
        monkeypatch.setattr(dcp, "async_save", full_disk)
    else:
        monkeypatch.setattr(checkpoint, "checksum", reading_back_fails)
    message = error_of(tiny_args(char_data, out, init_from="resume", **args))
    assert message.startswith(f"error: could not write the sharded checkpoint {root / 'step_000008'} (OSError: ")
    reason = "No space left on device" if stage == "shards" else "Input/output error"
    assert message.endswith(f"{reason}); {root / 'step_000004'} is kept")
    assert sorted(p.name for p in root.iterdir()) == [checkpoint.LATEST, "step_000004"]
    assert (root / checkpoint.LATEST).read_text() == pointer
    monkeypatch.undo()
    train_main(tiny_args(char_data, out, init_from="resume", **args))
    assert checkpoint.load(root / "step_000008")["iter_num"] == 8


def make_dataset(path, train_ids, val_ids, vocab, force=False):
    splits = {"train": [np.asarray(train_ids)], "val": [np.asarray(val_ids)]}
    write_dataset(path, splits, {"tokenizer": "x", "vocab_size": vocab}, force=force)
    return path


def test_a_bin_rewritten_behind_its_cache_is_caught_by_the_batch_that_reads_it(tmp_path):
    """A copy that keeps the size and mtime (cp -p, rsync -t) fools .max_ids.json: the start's check passes
    from the cache, so every batch's ids are checked on the host before the device sees them."""
    ids = np.arange(200) % 50
    d = make_dataset(tmp_path / "d", ids, ids, 50)
    stat = (d / "train.bin").stat()
    (d / "train.bin").write_bytes(np.full(200, 60, dtype=np.uint16).tobytes())
    os.utime(d / "train.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    message = error_of(tiny_args(d, tmp_path / "out"))
    assert "a batch holds token id 60, past the dataset's vocab_size=50" in message and "--force" in message


def test_data_is_checked_before_the_first_step(tmp_path):
    ids = np.arange(200) % 50
    base = make_dataset(tmp_path / "ok", ids, ids, 50)
    meta = json.loads((base / "meta.json").read_text())
    cached = json.loads((base / ".max_ids.json").read_text())  # counted by prepare, keyed by size and time
    assert sorted(cached.values()) == [49, 49] and all(k.split()[1] == "400" for k in cached)
    args = lambda d, **kw: tiny_args(d, tmp_path / "out", **kw)  # noqa: E731

    d = make_dataset(tmp_path / "odd", ids, ids, 50)
    with open(d / "train.bin", "ab") as f:
        f.write(b"\x00")
    assert "not a whole number (> 0) of uint16 tokens" in error_of(args(d))
    (d / "train.bin").write_bytes(b"")
    assert "has 0 bytes" in error_of(args(d))

    d = make_dataset(tmp_path / "json", ids, ids, 50)
    (d / "meta.json").write_text("{not json")
    assert "meta.json is not valid JSON" in error_of(args(d))
    (d / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "dtype"}))
    assert "lacks a valid dtype" in error_of(args(d))
    (d / "meta.json").write_text(json.dumps({**meta, "dtype": "int8"}))
    assert "dtype (one of uint16, uint32; it has 'int8')" in error_of(args(d))

    d = make_dataset(tmp_path / "big_ids", ids, ids, 50)
    (d / "meta.json").write_text(json.dumps({**meta, "vocab_size": 30}))
    assert "train.bin holds token id 49, but meta.json says vocab_size=30" in error_of(args(d))
    (d / "meta.json").write_text(json.dumps(meta))
    edited = ids.copy()
    edited[7] = 60  # another tool rewrites a bin in place: same size, an id beyond the vocabulary
    (d / "train.bin").write_bytes(edited.astype(np.uint16).tobytes())
    assert "train.bin holds token id 60, but meta.json says vocab_size=50" in error_of(args(d))
    (d / ".max_ids.json").unlink()  # no cache at all: counted from the data
    assert "train.bin holds token id 60" in error_of(args(d))
    (d / "train.bin").write_bytes(ids.astype(np.uint16).tobytes())
    (d / "meta.json").write_text(json.dumps({**meta, "vocab_size": 10**13}))  # no 128 TB model is suggested
    assert "lacks a valid vocab_size (an integer from 1 to 65536" in error_of(args(d))
    (d / "meta.json").write_text(json.dumps({**meta, "vocab_size": 50}))
    assert "meta.json has vocab_size=50 but the model has vocab_size=40" in error_of(args(d, vocab_size=40))
    assert not (tmp_path / "out").exists()  # no refusal wrote anything, not even an empty out_dir

    wide = tmp_path / "uint32"  # meta.json's dtype is honoured
    wide.mkdir()
    (wide / "train.bin").write_bytes(np.array([70000, 1, 2], dtype=np.uint32).tobytes())
    (wide / "val.bin").write_bytes(np.array([3, 4], dtype=np.uint32).tobytes())
    wide_meta = {"tokenizer": "x", "vocab_size": 70001, "dtype": "uint32", "tokens": {"train": 3, "val": 2}}
    (wide / "meta.json").write_text(json.dumps(wide_meta))
    assert open_split(wide, "train").tolist() == [70000, 1, 2]


def prepare(*args):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_prepare_refuses_empty_binary_and_non_utf8_input(tmp_path, corpus_file):
    good = tmp_path / "good"
    assert prepare(ROOT / "data/shakespeare_char/prepare.py", "--input", corpus_file, "--out_dir", good).returncode == 0
    saved = snapshot(good)
    for name, content, message in [
        ("empty.txt", b"  \n", "holds no text"),
        ("binary.txt", b"abc\x00\x01\x02", "looks binary"),
        ("latin1.txt", "café".encode("latin-1"), "is not UTF-8 text"),
    ]:
        (tmp_path / name).write_bytes(content)
        r = prepare(ROOT / "data/shakespeare_char/prepare.py", "--input", tmp_path / name, "--out_dir", good, "--force")
        assert r.returncode != 0 and r.stderr.strip().startswith(f"error: {tmp_path / name}") and message in r.stderr
        assert snapshot(good) == saved  # --force never replaces a good dataset with a bad one
    with pytest.raises(DataError, match="the val split is empty"):
        make_dataset(good, [1, 2], [], 50, force=True)
    assert snapshot(good) == saved


def test_training_arguments_are_validated(char_data, tmp_path):
    for key, value in [
        ("batch_size", 0),
        ("eval_interval", 0),
        ("log_interval", 0),
        ("eval_iters", 0),
        ("gradient_accumulation_steps", 0),
    ]:
        assert f"{key}={value} is invalid: it must be >= 1" in error_of(tiny_args(char_data, tmp_path, **{key: value}))
    assert "learning_rate=0.0 is invalid" in error_of(tiny_args(char_data, tmp_path, learning_rate=0.0))
    if not torch.cuda.is_available():
        assert "sees no CUDA device: use --device=cpu" in error_of(tiny_args(char_data, tmp_path, device="cuda"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "is not writable" in error_of(tiny_args(char_data, a_file / "run"))
    assert not any(tmp_path.glob("*/metrics.jsonl"))

    run = tmp_path / "run"
    train_main(tiny_args(char_data, run, max_iters=4))
    ckpt = checkpoint.load(run / "ckpt.pt")
    ckpt["model_args"]["future_field"] = 1
    checkpoint.save(ckpt, run / "ckpt.pt")
    message = error_of(tiny_args(char_data, run, init_from="resume"))
    assert "does not match this version's model" in message and "future_field" in message
    assert message.endswith("use the version of this project that wrote it")  # the fix, not only the problem


def test_eta_past_a_day_does_not_wrap():
    assert format_eta(59) == "00:00:59"
    assert format_eta(3 * 3600 + 12 * 60 + 5) == "03:12:05"
    assert format_eta(4 * 86400 + 3 * 3600 + 12 * 60) == "4d 03:12"


@pytest.mark.slow
def test_step_lines_reach_a_redirected_file_while_training(char_data, tmp_path):
    log = tmp_path / "train.log"
    with open(log, "w") as f:
        p = subprocess.Popen(
            [sys.executable, ROOT / "train.py", *tiny_args(char_data, tmp_path / "run", max_iters=100_000)],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "step 5: loss" in log.read_text(), "step 5 in the log", p)
        assert p.poll() is None  # read while the run is still going
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [8, 3])
def test_elastic_restart_resumes_and_matches_an_uninterrupted_run(char_data, tmp_path, kill_at):
    """torchrun --max-restarts=1 with init_from=auto: rank 1 is SIGKILLed at step kill_at of the first
    attempt, after the step-6 checkpoint or before any; the restarted job resumes (or, with no checkpoint,
    starts again, setting the first attempt's log aside) by itself and ends with the uninterrupted run's losses.
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: without it a restart round can read the previous round's keys from
    the launcher's shared store and hang in init_process_group (pytorch/pytorch#135712)."""
    wrapper = tmp_path / "killing_train.py"
    wrapper.write_text(
        textwrap.dedent(f"""
        import os, runpy, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from nlq.run.trainer import Trainer
        real = Trainer.train_step
        def train_step(self, it):
            first_try = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
            if it == {kill_at} and self.d.rank == 1 and first_try:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(self, it)
        Trainer.train_step = train_step
        runpy.run_path({str(ROOT / "train.py")!r}, run_name="__main__")  # sys.argv: torchrun's, this file's
        """)
    )
    common = dict(max_iters=12, lr_decay_iters=12, eval_interval=6, init_from="auto")
    out, _ = torchrun(wrapper, tiny_args(char_data, tmp_path / "elastic", **common), 300, "--max-restarts=1")
    assert out.count("val loss") >= 3  # evals at 0, (6,) and 12 (after the restart)
    train_main(tiny_args(char_data, tmp_path / "plain", **common))
    loss = lambda d: {r["step"]: r["loss"] for r in logged(d) if "loss" in r}  # noqa: E731
    elastic, plain = loss(tmp_path / "elastic"), loss(tmp_path / "plain")
    assert sorted(elastic) == sorted(plain) == list(range(12))
    assert [elastic[s] for s in range(12)] == pytest.approx([plain[s] for s in range(12)], abs=1e-5)


def test_a_real_write_failure_during_a_checkpoint_save_is_one_line(char_data, tmp_path):
    """The operating system refuses the checkpoint's bytes (a file-size limit: torch.save then fails
    with its own RuntimeError, as on a full disk): one line, the old checkpoint kept, and the resume
    works once writing is possible again. Wide layers: records larger than the write buffer, as in a real
    model, are where torch's writer sees the short write."""
    wide = dict(n_embd=256, max_iters=4)
    train_main(tiny_args(char_data, tmp_path, **wide))
    saved = snapshot(tmp_path)["ckpt.pt"]
    limited = textwrap.dedent(f"""
        import resource, runpy, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
        runpy.run_path({str(ROOT / "train.py")!r}, run_name="__main__")  # sys.argv[1:]: the run's options
        """)
    args = tiny_args(char_data, tmp_path, init_from="resume", n_embd=256)
    r = subprocess.run([sys.executable, "-c", limited, *args], capture_output=True, text=True, timeout=HANG_S)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and last.startswith(f"error: could not write {tmp_path / 'ckpt.pt'}"), r.stderr[-2000:]
    assert last.endswith("the previous version is kept") and "Traceback" not in r.stderr
    assert snapshot(tmp_path)["ckpt.pt"] == saved
    train_main(args)
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 8


def test_ctrl_c_during_a_checkpoint_write_says_it_was_interrupted_and_the_previous_checkpoint_stands(
    char_data, tmp_path, monkeypatch, capsys
):
    """SIGINT while torch.save writes step 8's ckpt.pt: torch turns the KeyboardInterrupt into its own
    RuntimeError ('[enforce fail ...]'), which was reported as 'could not write ckpt.pt', a disk fault. It is
    an interrupt (exit 130), step 4's checkpoint stands untouched, and no temporary file is left."""
    train_main(tiny_args(char_data, tmp_path, max_iters=4, n_embd=256))
    saved = snapshot(tmp_path)["ckpt.pt"]
    real_save, writes = torch.save, []

    class Interrupting:  # the checkpoint's file, sending SIGINT on torch's third write into it
        def __init__(self, f):
            self.f = f

        def write(self, b):
            writes.append(len(b))
            if len(writes) == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: real_save(obj, Interrupting(f), *a, **k))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a suite in the background ignores it
    try:
        message = error_of(tiny_args(char_data, tmp_path, max_iters=8, n_embd=256, init_from="resume"), status=130)
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(writes) >= 3 and "could not write" not in message
    assert (
        message.startswith("error: interrupted during step ")
        and "while writing ckpt.pt, which was left as it" in message
    )
    assert f"the last checkpoint is step 4 in {tmp_path}, intact: continue with --init_from=auto" in message
    assert snapshot(tmp_path)["ckpt.pt"] == saved and not list(tmp_path.glob(".ckpt.pt.*.tmp"))


def test_ctrl_c_during_training_is_one_line_and_auto_continues(char_data, tmp_path):
    """The run cannot end before the signal whatever the machine's speed: a million steps, its output
    unbuffered so that step 6 is seen when it is printed; the cosine ends at 400 so a resume may stop
    earlier. SIGINT is restored to its default in the run: a suite started in the background (`cmd &` in a
    script) ignores it, and a child inherits that."""
    args = tiny_args(char_data, tmp_path, max_iters=10**6, lr_decay_iters=400, eval_interval=4)
    p = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        for line in p.stdout:  # past the step-4 checkpoint
            if line.startswith("step 6:"):
                break
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=HANG_S)
    finally:
        p.kill()  # never left running a million steps
    assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
    (last,) = [line for line in err.splitlines() if line.startswith("error:")]
    step = int(re.search(rf"interrupted during step (\d+) of {10**6}", last).group(1))
    saved = checkpoint.load(tmp_path / "ckpt.pt")["iter_num"]
    assert 4 <= saved <= step and f"the last checkpoint is step {saved} in {tmp_path}" in last
    assert last.endswith("continue with --init_from=auto")
    end = 4 * (step // 4 + 2)  # a few steps past the interruption, at an evaluation
    train_main(tiny_args(char_data, tmp_path, max_iters=end, lr_decay_iters=400, eval_interval=4, init_from="auto"))
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == end


def test_a_finite_loss_with_a_non_finite_gradient_norm_stops_the_run(char_data, tmp_path, monkeypatch):
    """The guard's gradient-norm branch: at step 6 one gradient becomes inf while the loss stays finite."""
    real, calls = parallel.clip_grad_norm, []

    def clip(params, max_norm):
        params = list(params)
        calls.append(1)
        if len(calls) == 7:  # the 7th optimizer step is step 6
            params[0].grad[0, 0] = math.inf
        return real(params, max_norm)

    monkeypatch.setattr(parallel, "clip_grad_norm", clip)
    message = error_of(tiny_args(char_data, tmp_path), status=Diverged.exit_code)
    assert "non-finite loss or gradient norm at step 6" in message and "(step 4) is the last good checkpoint" in message
    assert checkpoint.load(tmp_path / "ckpt.pt")["iter_num"] == 4
    assert all(math.isfinite(r["loss"]) for r in logged(tmp_path) if "loss" in r)  # the loss never went bad


def test_dropout_masks_change_every_step_and_repeat_on_resume(char_data, tmp_path, monkeypatch):
    """The masks of the embedding dropout in each step's first micro-step: all different across steps,
    and the same after a resume from the step-4 checkpoint as in the uninterrupted run."""
    masks, step = {}, {}
    real_step = Trainer.train_step

    def train_step(self, it):
        step["now"] = it
        return real_step(self, it)

    def record(module, inputs, output):
        if module.training:  # not the evaluations
            masks.setdefault(step["now"], (output == 0).clone())

    monkeypatch.setattr(Trainer, "train_step", train_step)
    monkeypatch.setattr(start, "check_model", _hooking(start.check_model, record))
    train_main(tiny_args(char_data, tmp_path / "full", dropout=0.5))
    full = dict(masks)
    assert sorted(full) == list(range(8))
    assert len({m.numpy().tobytes() for m in full.values()}) == 8  # a new mask every step
    assert all(0.3 < m.float().mean() < 0.7 for m in full.values())  # dropout 0.5 is on
    train_main(tiny_args(char_data, tmp_path / "part", dropout=0.5, max_iters=4, lr_decay_iters=8))
    masks.clear()
    train_main(tiny_args(char_data, tmp_path / "part", dropout=0.5, init_from="resume"))
    assert sorted(masks) == [4, 5, 6, 7]
    assert all(torch.equal(masks[s], full[s]) for s in masks)


def _hooking(check_model, hook):
    """check_model, which also puts hook on the model's embedding dropout."""

    def wrapped(model, *args):
        model.transformer.drop.register_forward_hook(hook)
        return check_model(model, *args)

    return wrapped


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_run_and_a_live_ones_kept(char_data, tmp_path):
    train_main(tiny_args(char_data, tmp_path, max_iters=4))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has ended
    stale = [
        tmp_path / f".ckpt.pt.{dead}.0123abcd.tmp",
        tmp_path / "ckpt-sharded" / f".latest.json.{dead}.89abcdef.tmp",
    ]
    live = tmp_path / f".metrics.jsonl.{os.getpid()}.0123abcd.tmp"  # this process's: still writing
    for p in [*stale, live]:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x" * 1000)
    train_main(tiny_args(char_data, tmp_path, max_iters=6, init_from="resume"))
    assert not any(p.exists() for p in stale) and live.exists()
