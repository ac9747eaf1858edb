"""Where the repository's own commands and files are: the library launches train.py for a sweep's runs,
prepare.py for a corpus, and reads config/ and tests/ from the checkout it is installed from (pip install -e .)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def check_not_a_project_page(option: str, path) -> None:
    """A command's output never replaces one of the project's own pages (docs/): a user's run writes elsewhere."""
    from nlq.common.errors import UserError

    target = Path(path).resolve()
    if target.exists() and (ROOT / "docs") in target.parents:
        raise UserError(
            f"{option}={path} is one of the project's own pages: write it elsewhere (e.g. into the run's out_root) and "
            "copy it there if the page should change"
        )
