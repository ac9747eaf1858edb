"""Every arm x seed of a comparison, resumably, then the comparison itself.

    python sweep.py config/owt_baseline.py config/owt_nlq.py --seeds=1,2,3 \\
        --launcher="torchrun --standalone --nproc_per_node=8"
    python sweep.py config/mini_*.py --seeds=1,2,3 --out_root=out-mini     # the CPU miniature
    python sweep.py config/owt_*.py --gpus=0,1,2,3                         # one single-GPU run per GPU
    python sweep.py config/owt_*.py --dry_run                              # list what would run
    python sweep.py config/owt_*.py --executor=slurm --slurm_partition=gpu \
        --launcher="torchrun --standalone --nproc_per_node=8"            # SLURM job arrays (submitit)
    python sweep.py config/mini_*.py --grid=learning_rate=1e-3,4e-3 --tune_seeds=1 --seeds=2,3,4   # fair

With --grid (nlq/comparison/tuning.py): stage 1 runs every arm x grid point on --tune_seeds (OUT_ROOT/tune-ARM-KEY=V-sS,
shortened by --tune_iters), each arm's point of lowest mean final loss is chosen, stage 2 runs the chosen
points on --seeds (disjoint from the tune seeds), and the comparison is of stage 2 alone.

Run (arm, seed) is `LAUNCHER train.py ARM.py --seed=SEED --out_dir=OUT_ROOT/ARM-sSEED --wandb_run_name=ARM
--init_from=auto [extra --key=value options]`, where ARM is the config file's name without `.py` and the
prefix every arm's name shares (owt_nlq -> nlq). The data seed stays the config's, so every run sees the
same batches. A finished run (its metrics hold the evaluation at max_iters) is skipped, an unfinished one
resumes from its checkpoint, a missing one starts: running the same command again after a crash or a
preemption is always safe.
Each run's console goes to OUT_ROOT/ARM-sSEED/train.log. One failing run does not stop the others;
the summary names it with its last error line. The end is compare.py's table and figure over all
finished runs, against the first arm given.
"""

from nlq.common.errors import cli_main
from nlq.comparison.sweep import parser, sweep


def run(argv):
    sweep(*parser(__doc__).parse_known_args(argv))


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
