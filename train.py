"""Train a GPT with a chosen query function, on one process or many (DDP or FSDP).

    python train.py config/shakespeare_char.py                            # CPU quick start
    python train.py config/owt_nlq.py                                     # one GPU
    torchrun --standalone --nproc_per_node=8 train.py config/owt_nlq.py   # one node (DDP)
    torchrun ... train.py config/owt_xl_nlq.py --parallelism=fsdp         # sharded (FSDP2)
    python train.py config/owt_xl_nlq.py --dry_run=8                      # memory per GPU on 8 GPUs
    torchrun --max-restarts=3 ... --init_from=auto                        # restarts resume by themselves

Settings are the fields of TrainConfig (nlq/run/config.py) and of model.GPTConfig, set by config files and
--key=value overrides (configurator.py; --help lists them). The batches of step s are a pure function of
(data_seed, s) (nlq/data/loader.py), so every arm of a comparison, every world size and every resumed run sees
the same data; each logged step records a fingerprint of its global batch to prove it.

The run itself reads top to bottom in nlq/run/trainer.py: distributed setup, data, the out_dir and how the
run starts, the model, the optimizer step (nlq/run/step.py), then the Trainer's loop of steps, evaluations
and saves. How the model is spread over processes (DDP, FSDP, activation checkpointing) is
nlq/run/parallel.py's.
"""

from configurator import parse
from model import GPTConfig
from nlq.run import parallel
from nlq.run.config import TrainConfig
from nlq.run.trainer import train


def run(argv):
    train(*parse(argv, TrainConfig, GPTConfig, doc=__doc__, prog="train.py"))


def main(argv=None):
    parallel.cli_main(run, argv)


if __name__ == "__main__":
    main()
