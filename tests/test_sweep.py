"""sweep.py: every arm x seed, resumable; finished runs are never trained again."""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import HANG_S, error_of, screen_main, sweep_main, train_main, verdict_main, wait_until

from nlq.comparison import placement
from nlq.comparison import sweep as sweep_lib
from nlq.comparison.sweep import Run, arm_names, format_eta, log_progress, progress
from nlq.run import checkpoint

ROOT = Path(__file__).resolve().parents[1]
ARM = """
dataset = {data!r}
n_layer, n_head, n_embd, block_size, vocab_size = 1, 2, 16, 16, 65
batch_size, gradient_accumulation_steps = 2, 1
max_iters, lr_decay_iters, eval_interval, eval_iters, warmup_iters = 8, 8, 4, 1, 1
device, compile, cpu_peak_flops = "cpu", False, 1e11
"""


def write_arms(tmp_path, data):
    (tmp_path / "tiny_base.py").write_text(ARM.format(data=str(data)))
    (tmp_path / "tiny_nlq.py").write_text(ARM.format(data=str(data)) + 'query_mode = "residual_gelu"\n')
    (tmp_path / "tiny_broken.py").write_text(ARM.format(data=str(tmp_path / "nowhere")))
    return [str(tmp_path / f"tiny_{a}.py") for a in ("base", "nlq", "broken")]


def steps(out_dir):
    lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.slow
def test_sweep_runs_what_is_missing_resumes_what_is_unfinished_and_skips_what_is_done(char_data, tmp_path, capsys):
    base, nlq, broken = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    sweep_main([base, nlq, "--seeds=1,2", f"--out_root={root}", "--dry_run"])
    out = capsys.readouterr().out
    assert out.count("start ") == 4 and "--wandb_run_name=nlq" in out and "--init_from=auto" in out
    assert not root.exists()  # a dry run writes nothing

    # nlq seed 1 was interrupted after its step-4 checkpoint
    train_main([base, f"--out_dir={root / 'nlq-s1'}", "--seed=1", "--max_iters=4", "--query_mode=residual_gelu"])
    assert checkpoint.load(root / "nlq-s1" / "ckpt.pt")["iter_num"] == 4

    with pytest.raises(SystemExit) as e:  # the broken arm fails; the others finish regardless
        sweep_main([base, nlq, broken, "--seeds=1,2", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert "resume nlq seed 1" in out and out.count("start  ") == 5  # base x 2, nlq seed 2, broken x 2
    assert "4 of 6 runs finished, 2 failed this time" in out
    assert f"broken seed 1: error: {tmp_path / 'nowhere'}/meta.json not found" in out
    assert "2 of 6 runs did not finish (2 failed, above)" in str(e.value.code)
    for run in ("base-s1", "base-s2", "nlq-s1", "nlq-s2"):
        assert checkpoint.load(root / run / "ckpt.pt")["iter_num"] == 8
        assert steps(root / run) == list(range(8))
    assert "| nlq | " in out and "| base | " in out and "| 2 |" in out  # seeds pooled by arm

    mtimes = {p: p.stat().st_mtime_ns for p in root.glob("*/ckpt.pt")}
    sweep_main([base, nlq, "--seeds=1,2", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert out.count("skip ") == 4 and "start " not in out
    assert {p: p.stat().st_mtime_ns for p in root.glob("*/ckpt.pt")} == mtimes  # nothing trained again


def test_arm_names_drop_the_shared_prefix():
    assert arm_names(["config/owt_baseline.py", "config/owt_nlq_tuned.py"]) == ["baseline", "nlq_tuned"]
    assert arm_names(["config/mini_baseline.py", "x/mini_wide_mlp.py"]) == ["baseline", "wide_mlp"]
    assert arm_names(["config/quickstart.py"]) == ["quickstart"]


def lock_is_free(out_dir) -> bool:
    """No training process holds the out_dir (the lock train.py takes; the OS frees it when it dies)."""
    with open(Path(out_dir) / "train.lock", "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def test_a_killed_sweep_stops_its_runs_and_the_rerun_resumes_them(char_data, tmp_path):
    base, _, _ = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    long = ["--max_iters=100000", "--lr_decay_iters=100000", "--eval_interval=50"]
    console = open(tmp_path / "sweep.log", "w")
    args = [base, "--seeds=1", f"--out_root={root}", "--progress_every=0.5", *long]
    p = subprocess.Popen([sys.executable, str(ROOT / "sweep.py"), *args], stdout=console, text=True)
    log = root / "tiny_base-s1" / "train.log"
    console_text = (tmp_path / "sweep.log").read_text
    progress = re.compile(r"running: tiny_base s1 step \d+/100000 loss [\d.]+ eta ")
    # training past its step-50 checkpoint, and the sweep has reported its progress
    wait_until(lambda: log.exists() and "step 60:" in log.read_text() and progress.search(console_text()),
               "step 60 and a progress line", p)  # fmt: skip
    p.kill()  # SIGKILL: the sweep cannot clean up after itself
    p.wait()
    console.close()
    wait_until(lambda: lock_is_free(root / "tiny_base-s1"), "end of the run after its sweep was killed")
    saved = checkpoint.load(root / "tiny_base-s1" / "ckpt.pt")["iter_num"]
    end = saved + 20
    short = [f"--max_iters={end}", "--lr_decay_iters=100000", "--eval_interval=50", "--allow_schedule_change=True"]
    sweep_main([base, "--seeds=1", f"--out_root={root}", "--png=", *short])  # not refused as "in use"
    assert saved >= 50 and checkpoint.load(root / "tiny_base-s1" / "ckpt.pt")["iter_num"] == end


@pytest.mark.slow
@pytest.mark.parametrize("whole_group", [True, False], ids=["terminal", "sweep_alone"])
def test_ctrl_c_stops_the_whole_sweep_and_says_how_to_continue(char_data, tmp_path, whole_group):
    """SIGINT to the sweep's process group (a terminal's Ctrl-C), or to the sweep alone: the running run stops,
    no other starts, the sweep exits 130 with one line saying what to do; the run resumes from its checkpoint."""
    base, nlq, _ = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    long = ["--max_iters=1000000", "--lr_decay_iters=1000000", "--eval_interval=20"]
    args = [base, nlq, "--seeds=1,2", f"--out_root={root}", *long]
    reset = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 (a background pytest ignores SIGINT)
    p = subprocess.Popen([sys.executable, str(ROOT / "sweep.py"), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=reset)  # fmt: skip
    log = root / "base-s1" / "train.log"
    try:
        wait_until(lambda: log.exists() and "step 30:" in log.read_text(), "step 30", p)
        (os.killpg if whole_group else os.kill)(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=HANG_S)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    last = err.strip().splitlines()[-1]
    assert p.returncode == 130 and last.startswith("error: interrupted: 0 run(s) finished"), err[-2000:]
    assert "3 not started; run the same command again to continue" in last
    assert sorted(d.name for d in root.iterdir() if (d / "train.log").exists()) == ["base-s1"]
    assert "interrupted during step" in log.read_text() and lock_is_free(root / "base-s1")
    assert checkpoint.load(root / "base-s1" / "ckpt.pt")["iter_num"] >= 20


def test_a_seed_given_twice_is_refused(char_data, tmp_path):
    base, nlq, _ = write_arms(tmp_path, char_data)
    for seeds in ("1,1", "2,1,2", ","):
        with pytest.raises(SystemExit) as e:
            sweep_main([base, nlq, f"--seeds={seeds}", f"--out_root={tmp_path / 'out'}", "--dry_run"])
        assert str(e.value.code).startswith("error: --seeds=") and "give each seed once" in str(e.value.code)


def test_an_out_root_that_cannot_be_made_is_refused_before_any_run(char_data, tmp_path, capsys):
    base, nlq, _ = write_arms(tmp_path, char_data)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as e:
        sweep_main([base, nlq, "--seeds=1", f"--out_root={tmp_path / 'a_file' / 'out'}", "--png="])
    assert "is not a writable directory; choose another --out_root" in str(e.value.code)
    assert "start " not in capsys.readouterr().out.replace("start  ", "")  # listed, none started


def test_a_run_that_cannot_start_fails_the_sweep(char_data, tmp_path, capsys):
    """Its out_dir is a file: the run fails in one line, and the sweep exits non-zero, not '0 failed'."""
    base, _, _ = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    root.mkdir()
    (root / "tiny_base-s1").write_text("not a directory")
    with pytest.raises(SystemExit) as e:
        sweep_main([base, "--seeds=1", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert "FAILED: tiny_base seed 1: could not start" in out and "0 of 1 runs finished, 1 failed this time" in out
    assert "1 of 1 runs did not finish" in str(e.value.code)


def test_a_finished_run_with_a_truncated_checkpoint_is_resumed_not_a_dead_end(char_data, tmp_path, capsys):
    """Planning reads the damaged ckpt.pt as unfinished; --init_from=auto (what the sweep runs) sets it
    aside and the run ends at max_iters again."""
    base, _, _ = write_arms(tmp_path, char_data)
    root = tmp_path / "out"
    sweep_main([base, "--seeds=1", f"--out_root={root}", "--png="])
    ckpt = root / "tiny_base-s1" / "ckpt.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    capsys.readouterr()
    sweep_main([base, "--seeds=1", f"--out_root={root}", "--png="])
    out = capsys.readouterr().out
    assert "resume tiny_base seed 1" in out and "1 of 1 runs finished, 0 failed this time" in out
    assert checkpoint.load(ckpt)["iter_num"] == 8


def test_progress_lines_from_the_runs_logs(tmp_path):
    logs = {
        "a": "step 0: val loss 4.1\n"
        "step 5: loss 2.5000, lr 1e-3, 10.0 ms, 100 tok/s, mfu n/a, eta 00:01:40\n"
        "step 6: val loss 2.4\n",
        "b": "step 7: loss 3.2500, lr 1e-3, 10.0 ms, 100 tok/s, mfu n/a, eta 1d 02:03\n",
    }
    runs = []
    for name, text in logs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.log").write_text(text)
        runs.append(Run(name, 1, "x.py", tmp_path / name, 100))
    assert log_progress(tmp_path / "a" / "train.log") == (5, 2.5, 100.0)
    assert log_progress(tmp_path / "b" / "train.log") == (7, 3.25, 86400 + 2 * 3600 + 3 * 60)
    line = progress([(runs[0], 0.0), (runs[1], 50.0)], waiting=3, slots=2, now=100.0)
    lengths = [100 + 100, 50 + 93780]  # elapsed + left, per running run
    eta = 93780 + 2 * sum(lengths) / 2  # the longest left, then ceil(3 / 2) rounds of the mean length
    assert line == (
        f"running: a s1 step 5/100 loss 2.5000 eta 00:01:40; b s1 step 7/100 loss 3.2500 eta 1d 02:03 | "
        f"3 waiting | sweep eta {format_eta(eta)}"
    )
    # once runs have finished, their measured lengths replace the running runs' projections
    line = progress([(runs[0], 0.0)], waiting=3, slots=2, now=100.0, finished=[120.0, 80.0])
    assert line.endswith(f"sweep eta {format_eta(100 + 2 * 100)}")


def test_a_metrics_file_that_is_a_directory_is_one_line(char_data, tmp_path):
    base, _, _ = write_arms(tmp_path, char_data)
    (tmp_path / "out" / "tiny_base-s1" / "metrics.jsonl").mkdir(parents=True)
    with pytest.raises(SystemExit) as e:
        sweep_main([base, "--seeds=1", f"--out_root={tmp_path / 'out'}", "--dry_run"])
    assert "metrics.jsonl cannot be read (Is a directory): move it aside" in str(e.value.code)


def test_runs_per_gpu_are_what_both_the_cores_and_the_memory_allow():
    """Two threads a run: 16 cores give 8 runs on one GPU, 4 on each of two; 20 GiB free at 4 GiB a run gives
    5 (the fewer); less than one run's memory free still runs one; unknown memory: the cores alone."""
    gib = placement.GiB
    assert placement.runs_per_gpu(1, 16, None, gib)[0] == 8 and placement.runs_per_gpu(2, 16, None, gib)[0] == 4
    assert placement.runs_per_gpu(1, 16, 20 * gib, 4 * gib)[0] == 5
    assert placement.runs_per_gpu(1, 16, gib, 4 * gib)[0] == 1 and placement.runs_per_gpu(1, 1, None, gib)[0] == 1
    assert "memory unknown here (pass --runs_per_gpu" in placement.runs_per_gpu(1, 16, None, gib)[1]


def test_each_gpu_takes_its_runs_and_the_cores_are_shared_among_them(monkeypatch):
    """--gpus=0,1 --runs_per_gpu=3 on 12 cores: six slots, three on each GPU, 2 threads a run; --threads wins."""
    monkeypatch.setattr(placement.os, "cpu_count", lambda: 12)
    args = SimpleNamespace(gpus="0,1", runs_per_gpu=3, threads=None, jobs=1)
    placed, threads, said = placement.slots(args, [])
    assert placed == ["0", "0", "0", "1", "1", "1"] and threads == 2 and said.startswith("6 at a time: 3 per GPU")
    assert placement.slots(SimpleNamespace(**{**vars(args), "threads": 1}), [])[1] == 1
    assert placement.slots(SimpleNamespace(gpus=None, runs_per_gpu=None, threads=None, jobs=3), [])[:2] == (
        [None] * 3,
        4,
    )


def test_the_gpu_plan_adds_the_runs_steps_and_starts_over_the_runs_at_once():
    """Four runs of 12,000 steps at 10 ms and 8 s a start, two at a time: (480 + 32) / 2 s = 4.3 minutes; with
    two runs more at most: (720 + 48) / 2 s = 6.4 minutes."""
    line = placement.gpu_plan([12_000] * 4, [12_000] * 2, ["0", "0"], 10.0)
    assert line.startswith("GPU plan: 4 runs, 2 at a time: about 4 min; at most 6 min with all 2 runs more, at 10 ms")


def test_runs_share_a_slot_s_gpu_at_once(monkeypatch):
    """run_all with two slots on GPU 0: both runs are inside execute at once (a barrier both must reach), each
    told its GPU and threads."""
    barrier, seen = threading.Barrier(2, timeout=HANG_S), []

    def execute(run, launcher, extra, gpu, threads, started=None):
        seen.append((run.seed, gpu, threads))
        barrier.wait()  # broken, and the test failed, unless the other run is in here too
        return 0, None

    monkeypatch.setattr(sweep_lib, "execute", execute)
    todo = [(SimpleNamespace(out_dir=Path(f"/nowhere/s{s}"), arm="a", seed=s, max_iters=1), "missing") for s in (1, 2)]
    monkeypatch.setattr(sweep_lib, "describe", lambda r: f"a s{r.seed}")
    assert sweep_lib.run_all(todo, "python", [], ["0", "0"], every=HANG_S, threads=3) == {}
    assert sorted(seen) == [(1, "0", 3), (2, "0", 3)]


def stub_runs(monkeypatch, execute):
    """run_all's runs named a, b, c ... with execute(name) standing in for each run: (exit status, error)."""
    monkeypatch.setattr(sweep_lib, "execute", lambda run, *a, **k: execute(run.arm))
    monkeypatch.setattr(sweep_lib, "describe", lambda r: r.arm)
    return lambda *names: [(SimpleNamespace(out_dir=Path(f"/nowhere/{n}"), arm=n), "missing") for n in names]


def test_a_runs_follow_up_starts_before_the_runs_waiting_while_another_slot_is_busy(monkeypatch):
    """Two slots, runs a, b, c, and a's follow-up a2 (after(a)). b holds its slot until a2 has started (an
    event it waits on), so a2 runs beside b, in the slot a left, and before c, which was waiting first."""
    a2_started, started = threading.Event(), []

    def execute(name):
        started.append(name)
        if name == "b":
            assert a2_started.wait(HANG_S), "a2 never started while b ran"
        if name == "a2":
            a2_started.set()
        return 0, None

    runs = stub_runs(monkeypatch, execute)
    after = {"a": runs("a2")}
    failures = sweep_lib.run_all(runs("a", "b", "c"), "python", [], [None, None], every=HANG_S,
                                 after=lambda r: after.get(r.arm, []))  # fmt: skip
    assert failures == {}
    assert started.index("a2") < started.index("c") and sorted(started) == ["a", "a2", "b", "c"]


def test_a_follow_up_that_cannot_be_made_fails_its_run_and_the_sweep_ends(monkeypatch):
    """after(a) raises: a counts as failed with the reason, c still runs, and run_all returns (a worker that
    died there would have left the other waiting on a run that never ends)."""
    started = []
    runs = stub_runs(monkeypatch, lambda name: started.append(name) or (0, None))

    def after(r):
        if r.arm == "a":
            raise OSError("no room to copy its checkpoint")
        return []

    result = {}
    t = threading.Thread(
        target=lambda: result.update(sweep_lib.run_all(runs("a", "c"), "python", [], [None], after=after))
    )
    t.start()
    t.join(HANG_S)
    assert not t.is_alive() and started == ["a", "c"]
    assert result == {"/nowhere/a": (1, "after it finished: no room to copy its checkpoint")}


@pytest.mark.slow
def test_a_runs_logs_are_the_same_whether_it_shares_its_gpu_or_not(char_data, tmp_path):
    """The same four runs (two arms, two seeds) one at a time and two at a time on 'GPU 0' (on a CPU the
    runs train on the CPU; the slots and threads are those a GPU gets), one thread each: every logged number
    but the clock's is identical."""
    base, nlq, _ = write_arms(tmp_path, char_data)
    logs = {}
    for per in (1, 2):
        root = tmp_path / f"per{per}"
        sweep_main([base, nlq, "--seeds=1,2", f"--out_root={root}", "--gpus=0", f"--runs_per_gpu={per}", "--device=cpu",
                    "--threads=1", "--png="])  # fmt: skip
        clock = ("ms", "tok_s", "mfu", "eta_s", "time", "elapsed_s")
        logs[per] = {
            d.name: [{k: v for k, v in r.items() if k not in clock} for r in map(json.loads, open(d / "metrics.jsonl"))]
            for d in sorted(root.glob("*-s*"))
        }
    assert len(logs[1]) == 4 and logs[1] == logs[2]


def placement_commands(tmp_path, char_data):
    """(main, argv) of each script that takes --gpus: sweep.py, screen.py, verdict.py, each otherwise valid."""
    from test_screen import tiny_screen
    from test_verdict import TINY, folder

    base, nlq, _ = write_arms(tmp_path, char_data)
    return {
        "sweep": (sweep_main, [base, nlq, "--seeds=1", f"--out_root={tmp_path / 'R'}"]),
        "screen": (screen_main, [*tiny_screen(tmp_path), f"--out_root={tmp_path / 'R'}"]),
        "verdict": (verdict_main, [f"--data={folder(tmp_path / 'docs', n=40)}", f"--out={tmp_path / 'R'}", *TINY]),
    }


@pytest.mark.parametrize("script", ["sweep", "screen", "verdict"])
@pytest.mark.parametrize(
    "gpus, words",
    [
        ("a,b", "--gpus=a,b: 'a' is not a GPU; give a comma list of indices or UUIDs"),
        ("0,x1", "'x1' is not a GPU"),
        ("0,", "'' is not a GPU"),
        ("", "'' is not a GPU"),
        ("-1", "'-1' is not a GPU"),
        ("0,1,0", "--gpus=0,1,0: GPU 0 is named twice; name each GPU once"),
    ],
)
def test_gpus_that_name_no_gpu_or_one_gpu_twice_are_refused_dry_run_too(tmp_path, char_data, script, gpus, words):
    main, argv = placement_commands(tmp_path, char_data)[script]
    for dry_run in ([], ["--dry_run"]):
        assert words in error_of([*argv, f"--gpus={gpus}", *dry_run], main=main)
        assert not (tmp_path / "R").exists()


@pytest.mark.parametrize("script", ["sweep", "screen", "verdict"])
def test_gpus_on_a_machine_without_them_are_refused_unless_the_runs_are_asked_for_the_cpu(
    tmp_path, char_data, script, monkeypatch
):
    """No CUDA GPU: a real run is refused in one line (it would train on the CPU under GPU 0's name); a dry run
    plans, and --device=cpu rehearses the placement on the CPU. With two GPUs, GPU 2 is not one of them."""
    import torch

    main, argv = placement_commands(tmp_path, char_data)[script]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert "--gpus=0: this machine has no CUDA GPU" in error_of([*argv, "--gpus=0"], main=main)
    assert not (tmp_path / "R").exists()
    placement.check(SimpleNamespace(gpus="0", runs_per_gpu=None, gpu_step_ms=10.0, dry_run=True))
    placement.check(SimpleNamespace(gpus="0", runs_per_gpu=None, gpu_step_ms=10.0, dry_run=False), ["--device=cpu"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert "--gpus=1,2: GPU 2 is not here; this machine's are 0 to 1" in error_of([*argv, "--gpus=1,2"], main=main)
    placement.check(SimpleNamespace(gpus="1,0", runs_per_gpu=None, gpu_step_ms=10.0, dry_run=False))
    placement.check(SimpleNamespace(gpus="GPU-8f2a-11", runs_per_gpu=None, gpu_step_ms=10.0, dry_run=False))


def test_a_gpu_named_twice_never_doubles_the_slots(monkeypatch):
    """The plan's slots come from the GPUs named, each once: --gpus=0,0 is refused before it can halve a plan."""
    monkeypatch.setattr(placement.os, "cpu_count", lambda: 8)
    with pytest.raises(placement.UserError, match="named twice"):
        placement.slots(SimpleNamespace(gpus="0,0", runs_per_gpu=2, threads=None, jobs=1), [])
