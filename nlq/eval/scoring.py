"""How a model scores text, shared by zeroshot.py and the lm-evaluation-harness adapter
(nlq/inference/harness.py), so both score a continuation the same way: log-probabilities of continuations in
batches, and the encoder that refuses text the model cannot see."""

import sys
import time

import torch

from nlq.data.dataset import DataError
from nlq.data.tokenizer import codec


def loglikelihoods(model, requests, batch_size, native: bool = False):
    """For each (context ids, continuation ids): (sum of log p(continuation | context), whether greedy
    decoding reproduces the continuation); an empty continuation scores (0.0, True). Over-long sequences
    keep their last block_size + 1 tokens. Log-probabilities are float32, or with native in the logits' own
    dtype (a bfloat16 model: log_softmax and the sum rounded to bfloat16, as arXiv 2604.10791's code scores)."""
    bs = model.config.block_size
    device = next(model.parameters()).device
    out = [None] * len(requests)
    order = sorted(range(len(requests)), key=lambda i: -(len(requests[i][0]) + len(requests[i][1])))
    shown = time.monotonic()
    for start in range(0, len(order), batch_size):
        if time.monotonic() - shown > 5:  # a progress line every few seconds on long tasks
            print(f"  {start:,} / {len(order):,} sequences", file=sys.stderr)
            shown = time.monotonic()
        chunk = order[start : start + batch_size]
        seqs = [(requests[i][0] + requests[i][1])[-(bs + 1) :] for i in chunk]
        x = torch.zeros(len(seqs), max(len(s) for s in seqs) - 1, dtype=torch.long)
        for j, s in enumerate(seqs):  # right padding: causal attention never looks at it
            x[j, : len(s) - 1] = torch.tensor(s[:-1])
        with torch.no_grad():  # here, not as a decorator: mutmut leaves decorated functions unmutated
            logits = model(x.to(device))[0]
        logp = (logits if native else logits.float()).log_softmax(-1).cpu()
        for j, i in enumerate(chunk):
            s, n = seqs[j], len(requests[i][1])
            if n == 0:
                out[i] = (0.0, True)
                continue
            if n > len(s) - 1:
                raise DataError(
                    f"an item's continuation has {n} tokens, more than the model's context of {bs}: "
                    "evaluate a model with a longer block_size, or leave the item out of the file"
                )
            rows, target = logp[j, len(s) - 1 - n : len(s) - 1], torch.tensor(s[-n:])
            out[i] = (rows.gather(1, target[:, None]).sum().item(), bool((rows.argmax(-1) == target).all()))
    return out


def checked_encoder(meta: dict, vocab: int):
    """encode, refusing text the model cannot see: characters outside a character vocabulary, ids past vocab."""
    encode = codec(meta)[0]

    def checked(text):
        try:
            ids = encode(text)
        except ValueError as e:
            raise DataError(f"an item cannot be encoded with the model's tokenizer: {e}") from None
        if ids and max(ids) >= vocab:
            raise DataError(
                f"the tokenizer ({meta['tokenizer']}) gives id {max(ids)} but the model has vocab_size="
                f"{vocab}: evaluate with the tokenizer the model was trained with"
            )
        return ids

    return checked
