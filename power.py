"""The seeds a confirmatory screen needs, per comparison it states, from an earlier screen's report
(nlq/comparison/power.py): the fewest paired seeds for 80 % power at the comparison's Holm-adjusted level, at
the earlier estimate and at half of it (or effects given).

    python power.py out-screen/screen.json --compare=nlq:recall:tokens,nlq:fuzzy-recall:accuracy
    python power.py out-screen/screen.json --compare=residual:mqar:tokens --effects=estimate,0.8

A comparison is ARM:SETTING:MEASURE, its measure accuracy (at the budget, in points) or a cost to the midpoint
(tokens, flops, seconds, priced: paired log ratios). Each is planned at alpha over the number stated, the level
Holm tests the first at; a comparison out of reach (over --most seeds) is said so, and is not to be called.
"""

import argparse

from nlq.common.domains import At, Number
from nlq.common.errors import UserError, cli_main
from nlq.comparison.power import comparisons, plan, read_report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="an earlier screen's OUT_ROOT/screen.json")
    p.add_argument("--compare", required=True, help="the stated comparisons: a comma list of ARM:SETTING:MEASURE")
    p.add_argument("--effects", default="estimate,half", help="estimate, half, or numbers (a cost's ratio, points)")
    p.add_argument("--alpha", type=Number(At(above=0, below=1)), default=0.05, help="the family's level (Holm)")
    p.add_argument("--power", type=Number(At(above=0, below=1)), default=0.8, help="the chance to detect the effect")
    p.add_argument("--most", type=int, default=200, help="seeds beyond which a comparison is out of reach")
    return p


def run(argv):
    args = parser().parse_args(argv)
    if args.most < 2:
        raise UserError(f"--most={args.most}: give the most seeds affordable, 2 or more")
    report = read_report(args.report)
    compared = comparisons(args.compare, report)
    print("\n".join(plan(report, compared, args.effects.split(","), args.alpha, args.power, args.most)))


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
