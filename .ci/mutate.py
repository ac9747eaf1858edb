"""Mutation testing of the modules whose numbers users trust (mutmut): how many one-token bugs planted in a
module the tests catch. Not part of .ci/run (minutes to hours); run it on a module you changed, before and
after writing its tests (docs/contributing.md).

    python .ci/mutate.py nlq/comparison/stats.py       # every mutant of one module
    python .ci/mutate.py model.py --sample=60          # 60 of them, drawn with a fixed seed
    python .ci/mutate.py nlq/comparison/compare.py --tests="tests/test_tools.py -k compare" --sample=40 --seed=2
    python .ci/mutate.py nlq/comparison/stats.py --sample=30 --tests_from=REV   # the same mutants, older tests
    python .ci/mutate.py nlq/data/loader.py --functions=ExampleBatches,example_rows --tests=tests/test_tasks.py

The working tree (tracked files and untracked ones git does not ignore, as they are now) is copied to a
scratch directory, mutmut's settings for the module are added to the copy's pyproject.toml, and each mutant
runs the tests of TESTS (the module's own by default) that execute the mutated function, the slow ones left
out (--slow keeps them: the end-to-end runs, the only tests that reach a report's writing); with
--tests_from, the tests of that git revision instead (the module as it is now against older tests: a before
score). The score is killed / (killed + survived); a mutant that times out counts as killed,
one that no test reaches as survived. The survivors are printed with their diffs: each is a bug the tests
would miss.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = {  # module -> the pytest arguments selecting the tests that check it, fast ones first
    "model.py": ["tests/test_model.py", "tests/test_nanogpt_api.py"],
    "nlq/data/loader.py": ["tests/test_data.py", "tests/test_official.py"],
    "nlq/paper/official.py": ["tests/test_official.py"],
    "nlq/eval/scoring.py": ["tests/test_probe.py", "tests/test_harness.py"],
    "nlq/comparison/compare.py": [
        "tests/test_tools.py",
        "tests/test_tuning.py",
        "tests/test_official.py",
        "-k",
        "compare or report or order or batches or official_log or train_eval_row",
    ],
    "nlq/comparison/stats.py": [
        "tests/test_stats.py",
        "tests/test_tools.py",
        "tests/test_tuning.py",
        "-k",
        "compare or report or order or holm or ratio or power or reach",
    ],
    "nlq/comparison/tuning.py": [
        "tests/test_tuning.py",
        "tests/test_paths.py",
        "tests/test_tasks.py",
        "-k",
        "not end_to_end and not submitit and not stage_1_run",  # the runs of training: sweep's selection
    ],
    "nlq/comparison/cluster.py": ["tests/test_paths.py", "tests/test_tuning.py", "-k", "jobs or submitit"],
    "nlq/comparison/sweep.py": [
        "tests/test_tuning.py",
        "tests/test_sweep.py",
        "tests/test_paths.py",
        "tests/test_screen.py",
    ],
    "nlq/common/safe_load.py": [
        "tests/test_untrusted.py",
        "tests/test_paths.py::test_a_pickled_npy_file_is_refused_and_runs_nothing",
        "tests/test_paths.py::test_a_bare_pickle_named_npy_is_refused_and_runs_nothing",
        "tests/test_official.py::test_its_own_index_files_beside_the_bins_are_used_and_checked",
    ],
    "nlq/run/checkpoint.py": [
        "tests/test_damaged_checkpoints.py",
        "tests/test_untrusted.py",
        "tests/test_safety.py",
        "tests/test_paths.py",
    ],
    "nlq/interop/importers.py": [
        "tests/test_model.py",
        "tests/test_untrusted.py",
        "tests/test_export.py::test_an_hf_export_gives_this_models_logits_tokens_and_round_trip",
    ],
    "nlq/interop/hf/modeling_nlq.py": [
        "tests/test_hf_model.py",
        "tests/test_export.py",
        "-k",
        "not lm_eval and not trainer",
    ],
    "nlq/interop/hf_export.py": ["tests/test_export.py", "tests/test_hf_model.py", "-k", "not lm_eval and not trainer"],
    # the screen's statistics and choices, and the synthetic data behind them (issue 54): the unit tests, not
    # the end-to-end screen (minutes a mutant)
    "nlq/comparison/screening.py": ["tests/test_screen.py", "-k", "not end_to_end and not side_by_side"],
    "nlq/data/floor.py": ["tests/test_tasks.py"],
    "nlq/data/tasks.py": ["tests/test_tasks.py"],
    "nlq/data/examples.py": [
        "tests/test_tasks.py",
        "tests/test_screen.py",
        "-k",
        "not end_to_end and not side_by_side",
    ],
    "nlq/eval/accuracy.py": [
        "tests/test_tasks.py",
        "tests/test_screen.py",
        "-k",
        "not end_to_end and not side_by_side",
    ],
    "nlq/comparison/cost.py": [
        "tests/test_cost.py",
        "tests/test_screen.py",
        "-k",
        "not end_to_end and not side_by_side",
    ],
    "nlq/eval/latency.py": ["tests/test_tools.py", "-k", "stub_clock or latency"],
    "nlq/bench/cost.py": [
        "tests/test_bench.py",
        "tests/test_tools.py",
        "tests/test_cost.py",
        "-k",
        "bench or prices or report",
    ],
    # the verdict and its blind review (issue 53): their own tests and the option fuzz
    "nlq/comparison/verdict.py": ["tests/test_verdict.py", "tests/test_fuzz_options.py"],
    "nlq/eval/review.py": ["tests/test_review.py", "tests/test_verdict.py"],
}
# Tests that read the modules' text rather than run them: under mutmut they read the mutated copy, every
# mutant at once, and fail whichever mutant is active.
SOURCE_SCANS = ["tests/test_untrusted.py::test_every_load_goes_through_safe_load"]
KILLED = {"killed", "timeout", "segfault"}  # mutmut's words: a test failed, or the mutant ran too long or crashed
SURVIVED = {"survived", "no tests"}  # the tests passed, or none of them executed the mutated function
# transformers imports an export's modeling file (a copy of nlq/interop/hf/) under a module name of its own, and mutmut
# switches mutants by module name: without this, a test that loads an export never runs a mutant of hf/.
# Appended to the scratch copy's tests/conftest.py only: the export's classes become hf's, the same source.
SAME_MODULE_AS_HF = """

import importlib as _importlib
from pathlib import Path as _Path

import transformers.dynamic_module_utils as _dynamic

_load_class = _dynamic.get_class_in_module


def _hf_class(class_name, module_path, **kwargs):
    stem = _Path(module_path).stem
    if stem in ("modeling_nlq", "configuration_nlq"):
        return getattr(_importlib.import_module(f"nlq.interop.hf.{stem}"), class_name)
    return _load_class(class_name, module_path, **kwargs)


_dynamic.get_class_in_module = _hf_class
"""


def copy_tree(dest: Path) -> None:
    """The working tree's files as they are now, without what git ignores."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def tests_present(dest: Path, tests: list[str], revision: str) -> list[str]:
    """The test files of the selection that the older revision has (a file added since is left out, said)."""
    missing = [t for t in tests if t.startswith("tests/") and not (dest / t.split("::")[0]).exists()]
    if missing:
        print(f"{revision} has no {', '.join(missing)}: left out of the selection", flush=True)
    kept = [t for t in tests if t not in missing]
    if not any(t.startswith("tests/") for t in kept):
        sys.exit(f"error: {revision} has none of the selected test files ({', '.join(missing)})")
    return kept


def configure(dest: Path, module: str, tests: list[str], slow: bool = False) -> None:
    scans = [arg for test in SOURCE_SCANS for arg in ("--deselect", test)]
    marks = [] if slow else ["-m", "not slow"]
    selection = json.dumps([*tests, *marks, "-p", "no:cacheprovider", *scans])
    with open(dest / "pyproject.toml", "a") as f:
        f.write(f'\n[tool.mutmut]\nsource_paths = ["{module}"]\nalso_copy = ["."]\n')
        f.write(f"pytest_add_cli_args_test_selection = {selection}\n")


def mutant_env(dest: Path, jobs: int) -> dict:
    """The environment for mutmut. A test that runs a script in a process of its own (train.py, a prepare
    script) imports the mutated copy too: mutmut puts mutants/ first on its own sys.path only; without this a
    child imports the installed package (pip install -e: the unmutated tree), so a mutant reached only
    through a child survived, or, with that install elsewhere, every child failed and killed every mutant.
    Each of the jobs gets its share of the cores: OpenMP threads that outnumber the cores spin against each
    other (tests measured at 1.8 s took 41 s with 2 jobs of 2 threads on 2 cores), and mutmut's CPU-time limit then
    stopped mutants that no test caught, counted as caught."""
    path = [str(dest / "mutants"), *filter(None, [os.environ.get("PYTHONPATH")])]
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


def mutants(dest: Path, module: str) -> list[str]:
    """Every mutant's name: mutmut generates them, then stops at a filter that matches none."""
    subprocess.run(["mutmut", "run", "no-mutant-has-this-name"], cwd=dest, capture_output=True)
    meta = dest / "mutants" / f"{module}.meta"
    if not meta.exists():
        sys.exit(f"error: mutmut generated no mutants of {module} (is it a Python module of this repo?)")
    return sorted(json.loads(meta.read_text())["exit_code_by_key"])


def results(dest: Path) -> dict:
    """{mutant: its status} as `mutmut results --all true` prints them ('name: killed')."""
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=dest, capture_output=True, text=True).stdout
    return dict(line.strip().split(": ", 1) for line in out.splitlines() if ": " in line)


def run(args) -> float:
    module = args.module
    if shutil.which("mutmut") is None:
        sys.exit("error: mutmut is not installed: pip install mutmut==3.8.1 (the version this script was written for)")
    if not (ROOT / module).is_file():
        sys.exit(f"error: {module} is not a file of this repo; give a path such as model.py or nlq/run/checkpoint.py")
    tests = args.tests.split() if args.tests else TESTS.get(module)
    if not tests:
        sys.exit(f"error: no default tests for {module}: pass --tests='tests/test_x.py -k ...'")
    with tempfile.TemporaryDirectory(prefix="mutate-") as scratch:
        dest = Path(scratch)
        copy_tree(dest)
        if args.tests_from:  # the tests as they were then, against the module as it is now
            shutil.rmtree(dest / "tests")
            archive = subprocess.run(
                ["git", "archive", args.tests_from, "tests"], cwd=ROOT, check=True, capture_output=True
            )
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
            tests = tests_present(dest, tests, args.tests_from)
        if module.startswith("nlq/interop/hf/"):
            with open(dest / "tests" / "conftest.py", "a") as f:
                f.write(SAME_MODULE_AS_HF)
        configure(dest, module, tests, args.slow)
        names = [n for n in mutants(dest, module) if not args.functions or any(f in n for f in args.functions)]
        chosen = sorted(random.Random(args.seed).sample(names, min(args.sample, len(names)))) if args.sample else names
        print(f"{module}: {len(names)} mutants, running {len(chosen)} against {', '.join(tests)}", flush=True)
        ran = subprocess.run(
            ["mutmut", "run", "--max-children", str(args.jobs), *chosen],
            cwd=dest, capture_output=True, text=True, env=mutant_env(dest, args.jobs),
        )  # fmt: skip
        status = results(dest)
        killed = [n for n in chosen if status.get(n) in KILLED]
        timed_out = [n for n in killed if status[n] == "timeout"]  # caught only if the mutant hangs: read them
        survived = [n for n in chosen if status.get(n) in SURVIVED]
        if not killed and not survived:
            tail = (ran.stdout + ran.stderr).strip().splitlines()[-15:]
            sys.exit("error: no mutant ran, mutmut said:\n" + "\n".join(tail))
        for name in survived:
            diff = subprocess.run(["mutmut", "show", name], cwd=dest, capture_output=True, text=True).stdout
            print(f"\nsurvived: {diff.strip()}")
    other = len(chosen) - len(killed) - len(survived)
    score = len(killed) / max(len(killed) + len(survived), 1)
    print(
        f"\n{module}: {len(killed)} killed ({len(timed_out)} of them by the time limit: {', '.join(timed_out)}), "
        f"{len(survived)} survived, {other} not run; score {score:.0%}"
    )
    return score


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="a module of the repo, e.g. model.py or nlq/interop/hf/modeling_nlq.py")
    p.add_argument("--tests", help="pytest arguments, e.g. 'tests/test_x.py -k y' (default: the module's, TESTS)")
    p.add_argument("--tests_from", help="a git revision: its tests/ instead of the working tree's (a before score)")
    p.add_argument("--sample", type=int, default=0, help="run this many mutants, drawn with --seed (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--functions", type=lambda t: t.split(","), default=[],
        help="only the mutants of these functions or classes (names, comma-separated: ExampleBatches,example_rows)",
    )  # fmt: skip
    p.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    p.add_argument(
        "--slow", action="store_true", help="the tests marked slow too (the end-to-end runs: minutes a mutant)"
    )
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
