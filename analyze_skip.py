"""Per-layer Frobenius norm of the content skip W_skip (arXiv 2604.10791) in a checkpoint: a table and a PNG.

    python analyze_skip.py --out_dir=out-probe-pythia160m --png=skip_norms.png

The paper reports ||W_skip||_F rising from about 0.13 (layers 0-7) to about 0.30 (layer 11) on Pythia-160M.
"""

import argparse

from nlq.common.errors import cli_main
from nlq.common.figures import check_figure_path
from nlq.inference.skip_norms import report


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True, help="a run whose model has content_skip=True")
    p.add_argument("--png", default="skip_norms.png", help="where to write the plot ('' to skip)")
    args = p.parse_args(argv)
    if args.png:
        check_figure_path("--png", args.png)
    report(args.out_dir, args.png)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
