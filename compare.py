"""The paper-style table and validation curves of training runs, from their out_dirs (offline) or wandb.

    python compare.py out-owt-*                                   # every arm at the last common eval step
    python compare.py out-owt-* --baseline=baseline --step=30000 --png=curves.png
    python compare.py --wandb=me/nonlinear-queries --group=owt-gpt2-small
    python compare.py out-owt-* --reference=out_config_tiedw_residual_gelu:official-nlq   # the paper's own run

A run's arm is its wandb_run_name (else its query_mode); runs of one arm with different seeds are
aggregated as mean +- std. Against the baseline arm, the table gives the relative improvement with its 95 %
interval and a t-test p-value: paired seed by seed when the arm and the baseline ran the same seeds (the
data order is the same for all, so seed s of two arms differ only in the arm), else Welch's. The figure's
first panel is what a 1 % effect needs: each arm's val loss minus the baseline's mean, mean +- std over
seeds. The table is given again at equal training FLOPs and at equal training time (each run's logged step
times, or --prices=bench.json: a report's step ratios to linear, e.g. a GPU's), each run read where it had
spent what the cheapest had by the step compared. The footer says whether all runs trained on identical
batches, from the batch fingerprints.
"""

import argparse

from nlq.common.errors import cli_main
from nlq.comparison.compare import at_end, check_outputs, compare, read_runs
from nlq.comparison.cost import read_prices
from nlq.comparison.stats import METRICS


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="out_dirs or glob patterns")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from wandb instead (with --group)")
    p.add_argument("--group", help="the wandb group of the runs to compare")
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="PATH[:label]",
        help="an official run directory of arXiv 2603.13381 (tensor.pt, eval_*_tensor.pt) shown as an arm",
    )
    p.add_argument("--baseline", help="the arm to compare against (default: 'baseline', else 'linear')")
    p.add_argument("--step", type=int, help="evaluation step to compare (default: the last common one)")
    p.add_argument("--at_end", action="store_true", help="each run at its own last evaluation (runs of other lengths)")
    p.add_argument("--png", default="compare.png", help="where to write the curves ('' to skip)")
    p.add_argument("--md", help="also write the table to this markdown file")
    p.add_argument("--tune", metavar="KEY[,KEY]", help="the runs are a two-stage comparison over these grid keys")
    p.add_argument(
        "--metric", default="val_loss", choices=list(METRICS),
        help="what is compared and tuned by: the validation loss, or (datasets of examples) the test accuracy per "
        "scored token (val_acc) or per example (val_example_acc)",
    )  # fmt: skip
    p.add_argument("--json", help="with --tune: also write the result as JSON here")
    p.add_argument(
        "--prices", metavar="JSON", help="time each arm's step at a bench.py or gpu_check.py report's ratios"
    )
    args = p.parse_args(argv)
    check_outputs(args.png, args.md, args.json, args.tune)
    prices = read_prices(args.prices) if args.prices else None
    runs = read_runs(args.runs, args.wandb, args.group, args.reference)
    if args.at_end:
        runs = at_end(runs, args.step)
    compare(runs, args.baseline, args.step, args.metric, args.tune, args.png, args.md, args.json, prices)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
