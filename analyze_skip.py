"""Per-layer Frobenius norm of the content skip W_skip (arXiv 2604.10791) in a checkpoint: a table and a PNG.

    python analyze_skip.py --out_dir=out-probe-pythia160m --png=skip_norms.png

The paper reports ||W_skip||_F rising from about 0.13 (layers 0-7) to about 0.30 (layer 11) on Pythia-160M.
"""

import argparse

from nlq.common.errors import UserError, cli_main
from nlq.common.figures import check_figure_path, save_figure
from nlq.run import checkpoint


def skip_norms(state: dict) -> list[float]:
    """||W_skip||_F of each layer, in layer order."""
    norms = {}
    for name, w in state.items():
        parts = name.split(".")
        if parts[-2:] == ["skip", "weight"]:
            norms[int(parts[parts.index("h") + 1])] = w.float().norm().item()
    return [norms[i] for i in sorted(norms)]


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True, help="a run whose model has content_skip=True")
    p.add_argument("--png", default="skip_norms.png", help="where to write the plot ('' to skip)")
    args = p.parse_args(argv)
    if args.png:
        check_figure_path("--png", args.png)
    path = checkpoint.latest(args.out_dir)
    if path is None:
        raise UserError(f"{args.out_dir} holds no checkpoint: check --out_dir")
    model, ckpt = checkpoint.load_model(path)
    norms = skip_norms(model.state_dict())
    if not norms:
        raise UserError(f"{path} has no content skip: train with content_skip=True")
    print("| layer | ‖W_skip‖_F |\n|---|---|")
    for i, n in enumerate(norms):
        print(f"| {i} | {n:.4f} |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar(range(len(norms)), norms)
        ax.set_xlabel("layer")
        ax.set_ylabel("‖W_skip‖_F")
        ax.set_title(f"content skip norms, step {ckpt.get('iter_num')}")
        fig.tight_layout()
        save_figure(fig, args.png)
        print(f"\nplot: {args.png}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
