"""The layout docs/contributing.md describes is the code's: every import, inside functions too, runs from a
higher floor to a lower one; model.py stands on torch, the standard library and nlq.common; no root script
imports another; the data scripts need no path tricks."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Bottom to top, as docs/contributing.md and nlq/__init__.py list them; a floor imports only floors below it.
FLOORS = ["nlq.common", "model", "configurator", "nlq.data", "nlq.eval", "nlq.interop", "nlq.paper", "nlq.run"]
FLOORS += ["nlq.inference", "nlq.bench", "nlq.comparison"]
SCRIPTS = sorted(p.stem for p in ROOT.glob("*.py") if p.stem not in ("model", "configurator"))


def imports(path: Path) -> set[str]:
    """Every module path.py imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def floor_of(module: str) -> int | None:
    matches = [i for i, f in enumerate(FLOORS) if module == f or module.startswith(f + ".")]
    return matches[-1] if matches else None


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


# The one edge up the floors: nanoGPT's GPT.from_pretrained, a classmethod of model.GPT that imports its loader
# when called (as nanoGPT imports transformers), so that importing model.py still needs torch alone.
LAZY = {"model": {("GPT.from_pretrained", "nlq.interop.importers.from_pretrained")}}


def lazy_imports(path: Path) -> set[tuple[str, str]]:
    """(Class.function, imported name) for every `from X import Y` inside a method of a class."""
    found = set()
    for cls in ast.parse(path.read_text()).body:
        if isinstance(cls, ast.ClassDef):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and node.level == 0:
                        found |= {(f"{cls.name}.{fn.name}", f"{node.module}.{a.name}") for a in node.names}
    return found


def test_every_import_runs_down_the_floors():
    files = [ROOT / "model.py", ROOT / "configurator.py"]
    files += [p for p in (ROOT / "nlq").glob("*/*.py")]  # hf/: the export's own code, which imports no project module
    upward = []
    for path in files:
        own = floor_of(module_name(path))
        assert own is not None, f"{path} is on no floor: add its sub-package to FLOORS and to docs/contributing.md"
        allowed = {name for _, name in LAZY.get(module_name(path), set()) & lazy_imports(path)}
        allowed |= {name.rsplit(".", 1)[0] for name in allowed}  # the module the name comes from
        for target in imports(path) - allowed:
            there = floor_of(target)
            if there is not None and there > own:
                upward.append(f"{module_name(path)} imports {target}")
            if target.split(".")[0] in SCRIPTS:
                upward.append(f"{module_name(path)} imports the script {target}")
    assert not upward, upward


def test_model_imports_torch_the_standard_library_and_common_alone():
    """At import time: the lazy edge above is the only other name it holds, and importing model.py in a fresh
    interpreter loads no nlq module but nlq.common's."""
    outside = sorted(
        m
        for m in imports(ROOT / "model.py")
        if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "torch"
        and not m.startswith("nlq.common")
    )  # fmt: skip
    assert outside == ["nlq.interop.importers", "nlq.interop.importers.from_pretrained"], outside
    assert lazy_imports(ROOT / "model.py") == LAZY["model"]
    code = "import sys, model; print(sorted(m for m in sys.modules if m.startswith('nlq.') and 'common' not in m))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_the_lazy_edge_is_allowed_in_its_place_only(tmp_path):
    """The allowance is for GPT.from_pretrained of model.py: the same import in another function, or at the
    top of the module, is still an import up the floors."""
    for code in (
        "class GPT:\n    def other(self):\n        from nlq.interop.importers import from_pretrained\n",
        "from nlq.interop.importers import from_pretrained\n",
    ):
        (tmp_path / "model.py").write_text(code)
        assert not LAZY["model"] & lazy_imports(tmp_path / "model.py")
    (tmp_path / "model.py").write_text(
        "class GPT:\n    def from_pretrained(cls):\n        from nlq.interop.importers import from_pretrained\n"
    )
    assert lazy_imports(tmp_path / "model.py") == LAZY["model"]


def test_no_script_imports_another_and_no_data_script_edits_the_path():
    crossed = [(s, m) for s in SCRIPTS for m in imports(ROOT / f"{s}.py") if m.split(".")[0] in SCRIPTS]
    assert not crossed, crossed
    tricks = [p for p in ROOT.glob("data/*/prepare.py") if "sys.path" in p.read_text()]
    assert not tricks, tricks


def test_the_floors_order_the_sub_packages():
    """The check itself: nlq.data importing nlq.run would be an import up the floors; a package outside the
    project is on none."""
    assert floor_of("nlq.run.checkpoint") > floor_of("nlq.data.loader") > floor_of("model")
    assert floor_of("numpy") is None
