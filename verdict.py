"""Your text, your verdict: linear against nonlinear queries on a folder of your own documents, in one command.

    python verdict.py --data=my_docs/ --arms=linear,residual_gelu --out=verdict-mine
    python verdict.py --data=my_docs/ --arms=linear,residual_gelu --out=verdict-mine --tune   # tuned alike
    python verdict.py --tally=choices-XXXX.json --out=verdict-mine                          # unblind the review

The folder's .txt and .md files (any depth) become a dataset under OUT/data (data/openwebtext/prepare.py's
rules: one document per file, duplicates dropped, whole documents held out for validation and test). The
arms (query modes, or config files) train on identical batches at equal settings (config/verdict.py, and
every --key=value given), on --seeds; with --tune, the fair comparison instead: every arm tuned on one grid
(--grid, default the learning rate) on --tune_seeds, reported on fresh --seeds (sweep.py --grid's protocol).
Then OUT holds:
- report.md, report.json: validation loss and perplexity per arm, its difference from the first arm with a
  95 % interval paired by seed, the curves (curves.png); the inference latency of each arm measured side by
  side on this machine (prefill tokens/s and decode ms per token at batch 1, and their ratio to the first arm)
- review.html: a blind side-by-side review of each arm's continuation of --review_items held-out test
  documents (nlq/eval/review.py), and review_key.json, which unblinds it: --tally=CHOICES.json
Runs resume and finished ones are skipped, as sweep.py runs them: the same command continues a stopped verdict.
"""

from nlq.common.errors import cli_main
from nlq.comparison.verdict import parser, verdict


def run(argv):
    verdict(*parser(__doc__).parse_known_args(argv))


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
