"""Where compare.py and analyze_skip.py write their figures: the path checked before any work, the file
written atomically (nlq/common/atomic.py) in the format its extension names."""

from pathlib import Path

from nlq.common.atomic import WriteError, atomic_write, check_writable


def check_figure_path(option: str, path) -> None:
    """A figure path is writable and names a format matplotlib writes (.png, .pdf, .svg, ...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_writable(option, path)
    formats = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if Path(path).suffix.lstrip(".").lower() not in formats:
        raise WriteError(f"{option} {path}: not a figure format matplotlib writes; end it in .png, .pdf or .svg")


def save_figure(fig, path) -> None:
    atomic_write(path, lambda f: fig.savefig(f, format=Path(path).suffix.lstrip(".").lower(), dpi=120))
