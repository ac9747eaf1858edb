"""Data pipeline benchmark: prepare throughput and peak memory at two corpus sizes, against a plain
single-process tiktoken loop, and the loader's time per batch.

    python bench_data.py                                  # the generated play
    python bench_data.py --input=data/shakespeare_char/input.txt --copies=32 --num_proc=2

The corpus is the input text cut into documents at blank lines, repeated `copies` (and 4 x `copies`)
times, as JSONL (data/shakespeare_char/prepare.py downloads tiny shakespeare to the input.txt above).
Peak memory not growing with the corpus is the property to look at.
"""

from configurator import parse
from nlq.bench.data_speed import DataBenchConfig, run
from nlq.common.atomic import atomic_write_json
from nlq.common.errors import cli_main


def report_lines(argv):
    (cfg,) = parse(argv, DataBenchConfig, doc=__doc__, prog="bench_data.py")
    report = run(cfg)
    print(
        "| corpus | tokens | prepare tok/s | plain loop tok/s | prepare / plain | prepare peak RSS | plain peak RSS |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in report["sizes"]:
        print(
            f"| {s['corpus_mb']:.1f} MiB | {s['tokens']:,} | {s['prepare_tokens_per_s']:,.0f} "
            f"| {s['plain_tokens_per_s']:,.0f} | {s['prepare_tokens_per_s'] / s['plain_tokens_per_s']:.2f}x "
            f"| {s['prepare_peak_rss_mib']:.0f} MiB | {s['plain_peak_rss_mib']:.0f} MiB |"
        )
    print(
        f"\nloader: {report['loader_ms_per_batch']:.3f} ms per batch of {cfg.batch_size} x {cfg.block_size}; "
        f"fingerprint: {report['fingerprint_ms_per_step']:.2f} ms per step of 40 micro-batches"
    )
    atomic_write_json(cfg.out, report)
    print(f"results: {cfg.out}")


def main(argv=None):
    cli_main(report_lines, argv)


if __name__ == "__main__":
    main()
