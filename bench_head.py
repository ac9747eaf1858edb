"""The head and its loss: peak memory and time of GPT.head_loss (chunks of model.LOSS_CHUNK tokens, the
gradients computed in the forward) against cross-entropy over the whole logits, as nanoGPT computes it.

    python bench_head.py                                   # GPT-2 small's head, 4 x 1024 tokens
    python bench_head.py --tokens=12288 --dtype=bfloat16   # a GPU micro-batch, under bf16 autocast

Each variant runs a forward and backward of the head and loss alone (input N x d, weight vocab x d), in
interleaved rounds; memory is the peak allocated above what existed before (on a CPU from the profiler's
allocator events, on a GPU from torch.cuda's peak statistics).
"""

import statistics

from configurator import parse
from nlq.bench.head import HeadBenchConfig, measure
from nlq.common.atomic import atomic_write_json
from nlq.common.errors import cli_main


def run(argv):
    (cfg,) = parse(argv, HeadBenchConfig, doc=__doc__, prog="bench_head.py")
    report = measure(cfg)
    print(f"{cfg.tokens} tokens x {cfg.n_embd} -> {cfg.vocab_size}, {cfg.dtype}, {report['device']}:")
    for name, seconds in report["seconds"].items():
        print(
            f"  {name}: peak {report['peak_bytes'][name] / 2**30:.2f} GiB, forward + backward median "
            f"{statistics.median(seconds) * 1e3:.0f} ms [{min(seconds) * 1e3:.0f}-{max(seconds) * 1e3:.0f}] "
            f"over {cfg.rounds} interleaved rounds"
        )
    atomic_write_json(cfg.out, report)
    print(f"results: {cfg.out}")


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
