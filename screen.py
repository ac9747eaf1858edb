"""The synthetic screen: every arm on tasks where attention decides the outcome, tuned alike, reported on
fresh seeds (nlq/comparison/screening.py; the tasks: nlq/data/tasks.py).

    python screen.py config/synth_*.py                                    # the default screen, ~1 hour on 2 CPUs
    python screen.py config/synth_*.py --dry_run                          # its runs and estimated time
    python screen.py config/synth_*.py --screen=full --jobs=8             # more settings and seeds
    python screen.py config/synth_*.py --screen=mad --executor=slurm --slurm_gpus=1   # MAD's own grid
    python screen.py --statement=results/NAME/statement.json             # a confirmatory screen, as stated
    python screen.py --rebuild=results/NAME --out_root=out-rebuilt        # its report again, from its records

For each setting of the screen its dataset is made under OUT_ROOT/data/ (deterministic; kept when its
settings are unchanged), then stage 1 runs every arm x grid point on --tune_seeds for every setting
(OUT_ROOT/SETTING/tune-ARM-KEY=V-sS), each arm's point is chosen per setting by its final test accuracy,
and stage 2 runs the chosen points on --seeds (OUT_ROOT/SETTING/ARM-KEY=V-sS). Every run is train.py on the
arm's config with the setting's dataset, context and length; the data seed is the config's, so every arm
sees the same examples in the same order. Runs go side by side on this machine's CPUs (--jobs), on GPUs
(--gpus) or as SLURM jobs (--executor=slurm), as sweep.py runs them: a finished run is skipped, an
unfinished one resumes, so the same command continues a screen that was stopped. Each finished run leaves a
small record (OUT_ROOT/records/, or beside the statement); a recorded run is not run again, and the report is
read from the records alone (nlq/comparison/records.py). The end is the report: OUT_ROOT/screen.md (or beside
the statement) and screen.json, the accuracy per arm and setting (screen.png), the learning curves
(curves.png) and the accuracy along each difficulty axis that was run (axes.png).
"""

from nlq.common.errors import cli_main
from nlq.comparison.screen import parser, screen


def run(argv):
    screen(*parser(__doc__).parse_known_args(argv))


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
