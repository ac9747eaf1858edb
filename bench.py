"""What each query mode costs: training step, prefill and KV-cache decode, each as a ratio to linear.

    python bench.py                          # GPT-2 small (GPU: batch 12, compiled)
    python bench.py --preset=tiny            # the CPU quick-start shape
    python bench.py --modes=linear,residual_gelu --repeats=7 --out=bench.json
    torchrun --standalone --nproc_per_node=8 bench.py --parallelism=fsdp   # the training step, sharded

Modes are measured in interleaved rounds (every mode once per round, `repeats` rounds), so drifts in
clock speed or load hit all modes alike; the table shows the median and the min-max spread over rounds.
Synthetic token ids are used: timing does not depend on the data. Prefill and decode run as sample.py
runs them (on a CPU in the weights' own dtype, decode_dtype=auto measured on linear), and the whole
generation is also timed without the cache, as nanoGPT's generate runs (the training dtype). Under
torchrun with --parallelism=ddp or fsdp, each mode's model is spread as train.py spreads it (nlq/run/parallel.py)
and only the training step is timed (batch_size rows per process); rank 0 reports.
"""

import torch.distributed as dist

from configurator import parse
from nlq.bench.cost import BenchConfig, markdown, measure
from nlq.common.atomic import atomic_write_json, check_writable
from nlq.run import parallel


def run(argv):
    (cfg,) = parse(argv, BenchConfig, doc=__doc__, prog="bench.py")
    check_writable("--out", cfg.out)  # before the benchmark, not after it
    report = measure(cfg)
    if dist.is_initialized() and dist.get_rank() != 0:
        return
    print(markdown(report))
    atomic_write_json(cfg.out, report)
    print(f"results: {cfg.out}")


def main(argv=None):
    parallel.cli_main(run, argv)


if __name__ == "__main__":
    main()
