"""The first GPU session in one command: what a short slot must learn, planned to end in 6 minutes on one H200.

    python gpu_check.py --out=$OUT/gpu_check.json   # on a CUDA machine: GPT-2 small, bf16, compiled
    python gpu_check.py --preset=tiny               # anywhere (the test suite runs it on a CPU): the same steps
    python gpu_check.py --only=gpu_tests            # a rerun of some steps; --step=NAME runs one in this process
    python gpu_check.py --dry_run                   # the plan alone: each step, its compiles and seconds

It prints its plan first (each step, what it compiles, the seconds expected), then runs the steps in this
order, each in a process of its own with a wall-clock limit, so a failure, a hang or a CUDA fault in one leaves
the next ones to run. By default it runs the first three: the probe, the tests and what no report has measured
(6 minutes on one H200, by the seconds measured on 2026-12-04 and estimates for the new step). The rest was
measured on 2026-12-04; --only=step_costs,micro_batch next (step_costs now also profiles the query's difference
kernel by kernel), and --only=decode,train_loop,other_arms reruns the others after a change:
1. probe: versions, the GPU and its clocks; bf16 matmuls; one tiny compiled function (torch.compile needs
   a C compiler and Python's headers there: if it fails, every later step runs eagerly and says so); the
   flash-attention kernel alone at this project's softmax scales, in SDPA and in every query mode's model;
2. gpu_tests: tests/test_gpu.py, with each failing test's name and traceback (pytest's junit XML): early,
   so that no budget skips the step that finds bugs;
3. decode_compiled: each query mode's decoding with its one-token step compiled inside the CUDA graph
   (sample.py --decode=compiled), ratios to linear, transformers' GPT-2 generate (static cache, compiled)
   beside linear; before it, linear's and residual_gelu's graphs of the uncompiled step, for what compiling gains;
4. decode: every arm's prefill and decode through the Decoder (CUDA graphs), ratios to linear;
5. step_costs: linear's step against residual_gelu's, with the heaviest kernels of each and their difference
   kernel by kernel, and train.py's step against it with each of its additions off (divergence guard, batch
   staging, fingerprint, chunked loss) (nlq/bench/step_cost.py);
6. micro_batch: linear's step at micro-batches 12 to 32: tokens/s, MFU and peak memory;
7. train_loop: train.py's own loop for linear and residual_gelu (ms/step, MFU, torch.compile's counters);
8. other_arms: bench.py's step for the other arms beside linear, compiled if the budget allows, else eager.
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
