"""Zero-shot evaluation as arXiv 2604.10791 computes it: LAMBADA, HellaSwag, ARC-Easy and WikiText-103
perplexity, for a checkpoint of this project (any variant) or imported GPT-2 / Pythia weights.

    python zeroshot.py --out_dir=out-probe-pythia160m                   # the run's checkpoint, 500 items per task
    python zeroshot.py --init_from=EleutherAI/pythia-160m --tasks=lambada,wikitext
    python zeroshot.py --out_dir=out-probe-gpt2 --lambada_file=lambada.jsonl --limit=None   # local data
    python zeroshot.py --out_dir=out-probe-pythia160m --harness=lambada_openai,hellaswag   # lm-evaluation-harness

The paper protocol (protocol=paper, the default) follows its official code (07_benchmarks.py and
09_skip_benchmark.py):
  LAMBADA    greedy decoding must reproduce every token of the last word
  HellaSwag  validation, ctx + " " + ending; the ending of highest mean log-prob per token
  ARC-Easy   validation split, question + " " + choice; highest mean log-prob per token
             (both: the text cut to its first 512 tokens, the mean over what is left of the choice, >= 1)
  WikiText   the first 300 rows of validation (blank rows included) with >= 50 characters stripped, raw
             text, >= 10 tokens, cut to 512; ppl = exp(mean per-row loss) (also ppl_tokens, per token)
with the weights in bfloat16 (its code loads them so; --dtype=float32 keeps float32 and says so in the
results' "precision"), log-probabilities of the choices and LAMBADA's argmax in bfloat16 as its code has
them (WikiText's loss in float32, as transformers computes it); and the rows it skips are skipped and counted
(a LAMBADA passage without a space or over 512 tokens, an ARC row whose answerKey is none of its labels;
"skipped" in the results).
The standard protocol (protocol=standard): HellaSwag and ARC-Easy acc (sum of log-probs) and acc_norm
(per character), ARC-Easy's test split with a "Question: ...\nAnswer:" prompt, and WikiText's first 300
stripped lines that qualify; a row the paper protocol skips is refused in one line.
"""

from configurator import parse
from nlq.common.errors import cli_main
from nlq.inference.zeroshot import EvalConfig, evaluate


def run(argv):
    (cfg,) = parse(argv, EvalConfig, doc=__doc__, prog="zeroshot.py")
    evaluate(cfg)


def main(argv=None):
    cli_main(run, argv)


if __name__ == "__main__":
    main()
