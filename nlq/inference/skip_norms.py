"""The content skip's weight norm per layer (analyze_skip.py): how much each block's output still takes from the
pre-projection x~, bypassing attention (arXiv 2604.10791)."""

from nlq.common.errors import UserError
from nlq.common.figures import save_figure
from nlq.run import checkpoint


def skip_norms(state: dict) -> list[float]:
    """||W_skip||_F of each layer, in layer order."""
    norms = {}
    for name, w in state.items():
        parts = name.split(".")
        if parts[-2:] == ["skip", "weight"]:
            norms[int(parts[parts.index("h") + 1])] = w.float().norm().item()
    return [norms[i] for i in sorted(norms)]


def report(out_dir: str, png: str | None) -> None:
    """The table of norms printed, and the plot written to png (if given), for out_dir's newest checkpoint."""
    path = checkpoint.latest(out_dir)
    if path is None:
        raise UserError(f"{out_dir} holds no checkpoint: check --out_dir")
    model, ckpt = checkpoint.load_model(path)
    norms = skip_norms(model.state_dict())
    if not norms:
        raise UserError(f"{path} has no content skip: train with content_skip=True")
    print("| layer | ‖W_skip‖_F |\n|---|---|")
    for i, n in enumerate(norms):
        print(f"| {i} | {n:.4f} |")
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(range(len(norms)), norms)
        ax.set_xlabel("layer")
        ax.set_ylabel("‖W_skip‖_F")
        ax.set_title(f"content skip norms, step {ckpt.get('iter_num')}")
        fig.tight_layout()
        save_figure(fig, png)
        print(f"\nplot: {png}")
