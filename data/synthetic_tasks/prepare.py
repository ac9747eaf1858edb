"""A synthetic task as a dataset of whole examples (nlq/data/tasks.py), offline and deterministic from --seed:

python data/synthetic_tasks/prepare.py --task=mqar --out_dir=data/mqar --num_kv_pairs=6 --seq_len=24
python data/synthetic_tasks/prepare.py --task=in-context-recall --out_dir=data/icr --vocab_size=16 --seq_len=32
python train.py --dataset=data/mqar --block_size=24 ...      # evaluated for accuracy on the test split

Tasks: MAD's in-context-recall, fuzzy-in-context-recall, noisy-in-context-recall, selective-copying and
memorization (arXiv 2403.17844), and Zoology's mqar (arXiv 2312.04927). A setting left out takes the task's
default (MAD's baseline; Zoology's for mqar), and MAD's 12,800 training and 1,280 test examples. Written in
MAD-Lab's layout, OUT_DIR/{train,test}/{inputs,targets}.npy (targets -100 where not scored), and meta.json
last: the task, every setting, the roles of the ids, the test split's key-blind floor (the accuracy of
guessing without using which key is asked) and how many test inputs also occur in training.
--train_targets=probed trains only on the positions the test scores (Zoology's way); 'all' (MAD's way for
the recall tasks) on the whole next-token sequence.
"""

import argparse
import inspect
from pathlib import Path

from nlq.common.errors import UserError, cli_main
from nlq.data.examples import write_task
from nlq.data.tasks import TARGETS, TASKS, TaskError

HERE = Path(__file__).resolve().parent


SETTINGS = {  # every task setting's type on the command line
    "vocab_size": int,
    "seq_len": int,
    "frac_noise": float,
    "noise_vocab_size": int,
    "num_tokens_to_copy": int,
    "k_motif_size": int,
    "v_motif_size": int,
    "num_kv_pairs": int,
    "power_a": float,
    "multi_query": lambda v: {"true": True, "false": False}[v.lower()],
    "random_non_queries": lambda v: {"true": True, "false": False}[v.lower()],
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=list(TASKS))
    p.add_argument("--out_dir", required=True, help="the dataset directory (train.py --dataset=OUT_DIR)")
    for name in SETTINGS:
        p.add_argument(f"--{name}", help="a task setting (default: the task's own)")
    p.add_argument("--num_train_examples", type=int, default=12_800)
    p.add_argument("--num_test_examples", type=int, default=1_280)
    p.add_argument("--train_targets", choices=TARGETS, help="default: all for MAD's recall tasks, else probed")
    p.add_argument("--seed", type=int, default=12345, help="every example and the memorization map (MAD's default)")
    p.add_argument("--force", action="store_true", help="overwrite a dataset in OUT_DIR")
    return p


def settings_of(task: str, args) -> dict:
    """The task's settings: its function's defaults, replaced by those given; a setting the task does not
    take is refused."""
    fn, own = TASKS[task]
    takes = ("vocab_size", "seq_len", *own)
    given = {k: getattr(args, k) for k in SETTINGS if getattr(args, k) is not None}
    other = [k for k in given if k not in takes]
    if other:
        raise UserError(f"--{other[0]} is not a setting of {task}: it takes {', '.join('--' + k for k in takes)}")
    settings = {k: p.default for k, p in inspect.signature(fn).parameters.items() if k in takes}
    if task == "memorization":  # generate() builds its vocabulary from the noise ids
        settings.setdefault("noise_vocab_size", 0)
    for k, text in given.items():
        try:
            settings[k] = SETTINGS[k](text)
        except (ValueError, KeyError):
            kind = "true or false" if k.endswith(("query", "queries")) else "number"
            raise UserError(f"--{k}={text}: give a {kind}") from None
    return settings


def run(argv):
    args = parser().parse_args(argv)
    settings = settings_of(args.task, args)
    try:
        meta, scored = write_task(
            args.out_dir, args.task, settings, args.num_train_examples, args.num_test_examples, args.seed,
            args.train_targets, args.force,
        )  # fmt: skip
    except TaskError as e:
        raise UserError(f"{args.task}: {e}") from None
    print(
        f"{args.task}: {meta['examples']['train']:,} training and {meta['examples']['test']:,} test examples of "
        f"{settings['seq_len']} tokens in {args.out_dir} ({scored['train']:,} and {scored['test']:,} scored "
        f"positions); key-blind floor {meta['floor']['token']:.3f} per token, {meta['floor']['example']:.3f} per "
        f"example; {meta['test_inputs_in_train']} test inputs also in training"
    )


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
