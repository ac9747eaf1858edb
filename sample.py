"""Sample from a trained model (out_dir/ckpt.pt) or from GPT-2 / Pythia weights, with the KV cache.

    python sample.py --out_dir=out-shakespeare-char --start="ROMEO:" --num_samples=3
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --temperature=0 --max_new_tokens=64

The tokenizer is the one the run was trained with (its dataset's meta.json, stored in the checkpoint);
GPT-2 weights use GPT-2 BPE. temperature=0 is greedy decoding (one sample: every greedy sample is the same).
"""

import sys

from configurator import parse
from nlq.common.errors import cli_main
from nlq.inference.sampling import SampleConfig, generate


def run(argv):
    (cfg,) = parse(argv, SampleConfig, doc=__doc__, prog="sample.py")
    samples, rate = generate(cfg)
    for s in samples:
        print(s)
        print("---------------")
    print(f"{rate:.1f} tokens/s", file=sys.stderr)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
