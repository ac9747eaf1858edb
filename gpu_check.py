"""The first GPU session in one command: what a short slot must learn, planned to end in 6 minutes on one H200.

    python gpu_check.py --out=$OUT/gpu_check.json   # on a CUDA machine: GPT-2 small, bf16, compiled
    python gpu_check.py --preset=tiny               # anywhere (the test suite runs it on a CPU): the same steps
    python gpu_check.py --only=gpu_tests            # a rerun of some steps; --step=NAME runs one in this process

It prints its plan first (each step, what it compiles, the seconds expected), then runs the steps in this
order, the most informative first, each in a process of its own with a wall-clock limit, so a failure, a
hang or a CUDA fault in one leaves the next ones to run:
1. probe: versions, the GPU and its clocks; bf16 matmuls; one tiny compiled function (torch.compile needs
   a C compiler and Python's headers there: if it fails, every later step runs eagerly and says so); the
   flash-attention kernel alone at this project's softmax scales, in SDPA and in every query mode's model;
2. train_step: bench.py's compiled training step of linear and residual_gelu (tokens/s, MFU, peak memory);
3. train_loop: train.py's own loop for the same two modes (ms/step, MFU, torch.compile's counters);
4. other_arms: bench.py's step for the other arms beside linear, compiled if the budget allows, else eager;
5. gpu_tests: tests/test_gpu.py, with each failing test's name and traceback (pytest's junit XML).
A step whose estimate would end past --budget_s is skipped with its reason; one still running at --limit_s
is stopped. The report (--out) is rewritten after every step with its result, wall time, any traceback and
the end of its output, and its path is printed last. Exit status 1 if a step failed.
"""

from nlq.bench.gpu_check import gpu_check, parser
from nlq.common.errors import cli_main


def run(argv):
    gpu_check(parser(__doc__).parse_args(argv), argv)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
