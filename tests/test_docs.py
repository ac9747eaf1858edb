"""The commands in README.md and docs/ parse as written: every script exists, every config file exists and
loads, every --key is one the script takes with a value in its domain. A renamed key, a removed config or a
moved script makes the command that names it fail here, by file and line. The commands are not run (most
need a GPU, the network or hours); each script's own argument parsing is, stopped right after it."""

import argparse
import glob
import importlib
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import configurator

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"...", "config/x.py", "--key=value"}  # prose examples, not commands


class Parsed(BaseException):
    """Raised right after a script's argument parsing succeeds (BaseException: no handler of a script
    catches it)."""


def _blank(block: re.Match) -> str:
    """A fenced block as blank lines: inline spans are looked for outside blocks, at their own line numbers."""
    return "\n" * block.group(0).count("\n")


def _shell_lines(page: Path):
    """(line number, command) of each shell line: in ```bash blocks (continuations joined, `for X in ...; do`
    loops unrolled, `R=...` assignments substituted) and in inline code spans outside them."""
    text = page.read_text()
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", re.sub(r"(?ms)^```.*?^```", _blank, text)):
        yield text.count("\n", 0, span.start()) + 1, span.group(1).replace("\n", " ")
    in_block, pending, loop, env = False, "", None, {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block and line.strip("`").strip() in ("bash", "sh")
            continue
        if not in_block:
            continue
        line = re.sub(r"\s+#.*$", "", pending + line.strip())
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if m := re.fullmatch(r"(\w+)=(\S+)", line):
            env[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r"for (\w+) in (.*); do", line):
            loop = (m.group(1), m.group(2).split(), [])
        elif line == "done" and loop:
            name, values, body = loop
            loop = None
            for value in values:
                for n, command in body:
                    yield n, command.replace(f"${name}", value)
        elif loop:
            loop[2].append((number, line))
        else:
            for name, value in env.items():
                line = line.replace(f"${name}", value)
            yield number, line


def commands():
    """(where, argv) of every `python SCRIPT.py ...` or `torchrun ... SCRIPT.py ...` in the pages, where argv
    starts at the script."""
    out = []
    for page in PAGES:
        for number, line in _shell_lines(page):
            for part in line.split("&&"):
                if part.split()[:1] not in (["python"], ["torchrun"]):
                    continue
                words = shlex.split(part)
                if PLACEHOLDERS & set(words) or words[1:2] == ["-m"]:  # python -m pytest: not a script
                    continue
                script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
                if script is not None and not words[script].startswith("-"):
                    out.append((f"{page.relative_to(ROOT)}:{number}", words[script:]))
    return out


COMMANDS = commands()


def _module(script: str):
    if "/" not in script:
        return importlib.import_module(script.removesuffix(".py"))
    spec = importlib.util.spec_from_file_location(f"doc_{script.replace('/', '_')}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stop_after_parsing(monkeypatch, module):
    """Let the script parse its arguments as it would (configurator.parse or argparse), then stop it."""
    if getattr(module, "parse", None) is configurator.parse:

        def parse(*a, **k):
            configurator.parse(*a, **k)
            raise Parsed

        monkeypatch.setattr(module, "parse", parse)
    depth = [0]  # parse_args calls parse_known_args, then refuses what is left: stop after the outer call
    for method in ("parse_args", "parse_known_args"):
        original = getattr(argparse.ArgumentParser, method)

        def parsed(self, *a, _original=original, **k):
            depth[0] += 1
            try:
                result = _original(self, *a, **k)
            finally:
                depth[0] -= 1
            if depth[0]:
                return result
            raise Parsed

        monkeypatch.setattr(argparse.ArgumentParser, method, parsed)


def test_the_pages_hold_the_commands_this_test_checks():
    scripts = {argv[0] for _, argv in COMMANDS}
    assert {"train.py", "sample.py", "sweep.py", "compare.py", "export.py", "zeroshot.py"} <= scripts
    assert len(COMMANDS) > 40


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_a_documented_command_parses(where, argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    script, *args = argv
    assert (ROOT / script).is_file(), f"{where}: {script} is not in the repository"
    expanded = [match for a in args for match in sorted(glob.glob(a)) or [a]]  # as bash expands a glob
    module = _module(script)
    if script == "sweep.py":  # sweep parses every arm's config with its options: its dry run does only that
        module.run([*expanded, "--dry_run"])
        return
    _stop_after_parsing(monkeypatch, module)
    try:
        module.main(expanded)
    except Parsed:
        return
    except SystemExit as e:
        if e.code == 0 and "--help" in args:
            return
        pytest.fail(f"{where}: {shlex.join(argv)} -> exit {e.code}: {capsys.readouterr().err.strip()}")
    pytest.fail(f"{where}: {script} never parsed its arguments")


def test_every_relative_link_in_the_pages_resolves():
    links = [(page, target) for page in PAGES for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text())]
    assert len(links) > 20  # README's table of pages alone has 11
    assert [f"{page.relative_to(ROOT)}: {t}" for page, t in links if not (page.parent / t).exists()] == []


def test_what_the_documented_commands_write_in_the_clone_is_ignored_by_git():
    """Every --out_dir, --out, --dest, --out_root and --png=PATH a command in the docs or a script's docstring
    names inside the clone (not under /tmp, data/ or a placeholder such as OUT_ROOT) matches .gitignore: a
    run's outputs, exports, reports and figures never show up as files to commit. Read by git itself."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git clone: nothing to ignore")
    texts = [p.read_text() for p in PAGES] + [p.read_text() for p in ROOT.glob("*.py")]
    named = {
        m.group(1)
        for text in texts
        for m in re.finditer(r"--(?:out_dir|out|dest|out_root|png)=([\w./-]+)", text)
        if not m.group(1).startswith(("/", ".", "data/")) and not re.search(r"[A-Z]{2}", m.group(1))
    }  # data/: prepared datasets, whose files .gitignore names one by one
    paths = sorted(n.rstrip("/") + ("" if "." in Path(n).name else "/x") for n in named)  # a directory's file
    assert len(paths) >= 20 and "hf-owt-nlq/x" in paths and "xl.pt" in paths and "out-quickstart/x" in paths
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    ignored = set(done.stdout.split())
    assert [p for p in paths if p not in ignored] == []
