"""lm-evaluation-harness on this project's checkpoints and pretrained imports.

    python zeroshot.py --out_dir=out-probe-pythia160m --harness=lambada_openai,hellaswag
    python zeroshot.py --init_from=gpt2 --harness=my_task --harness_include=tasks/   # local task YAMLs

or from Python:

    import harness, lm_eval
    lm = harness.ProjectLM.load("resume", "out-probe-pythia160m")
    lm_eval.simple_evaluate(model=lm, tasks=["lambada_openai"])

ProjectLM answers the harness's three request types with this project's model and tokenizer: loglikelihood
(batched, through scoring.loglikelihoods, as zeroshot.py scores a continuation), loglikelihood_rolling
(disjoint windows of the model's context, as the harness's own models do) and generate_until (greedy, with
the KV cache). Contexts are split from continuations as the harness's HF models split them: trailing
whitespace of the context moves to the continuation, and the continuation's ids are those of the whole
text after the context's.
"""

import torch
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from nlq.data.tokenizer import codec, prefix_token, tokenizer_vocab
from nlq.eval.scoring import checked_encoder, loglikelihoods
from nlq.run.checkpoint import load_for_inference


class ProjectLM(LM):
    def __init__(self, model, meta: dict, batch_size: int = 16, device: str = "cpu"):
        super().__init__()
        self.model, self.meta, self.batch_size = model.eval().to(device), meta, batch_size
        self.vocab = tokenizer_vocab(meta)
        # Text the model cannot see (a character outside a character vocabulary) is a one-line error.
        self.encode = checked_encoder(meta, getattr(model.config, "vocab_size", self.vocab))
        self.decode = codec(meta)[1]
        self.prefix = prefix_token(meta)  # before a text with no context, as lm-eval's HFLM

    @classmethod
    def load(cls, init_from: str, out_dir: str, **kw) -> "ProjectLM":
        model, meta = load_for_inference(init_from, out_dir)
        return cls(model, meta, **kw)

    def encode_pair(self, context: str, continuation: str):
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole, head = self.encode(context + continuation), self.encode(context)
        return (head or [self.prefix]), whole[len(head) :]

    def loglikelihood(self, requests):
        pairs = [self.encode_pair(*r.args) for r in requests]
        return loglikelihoods(self.model, pairs, self.batch_size)

    def loglikelihood_rolling(self, requests):
        """The log-likelihood of each whole text, over disjoint windows of the model's context."""
        block = self.model.config.block_size
        out = []
        for r in requests:
            windows = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(self.encode(r.args[0]), self.prefix, block, context_len=1)
            ]
            out.append(sum(lp for lp, _ in loglikelihoods(self.model, windows, self.batch_size)))
        return out

    @torch.no_grad()
    def generate_until(self, requests):
        """Greedy continuations (the KV cache), cut at the first of the request's stop strings."""
        device = next(self.model.parameters()).device
        block = self.model.config.block_size
        out = []
        for r in requests:
            context, kwargs = r.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else until
            ids = (self.encode(context) or [self.prefix])[-block:]
            idx = torch.tensor([ids], device=device)
            new = self.model.generate(idx, kwargs.get("max_gen_toks", 256), temperature=0, vocab_limit=self.vocab)
            text = self.decode(new[0, len(ids) :].tolist())
            cuts = [text.index(s) for s in until if s in text]
            out.append(text[: min(cuts)] if cuts else text)
        return out
