"""Accuracy on the synthetic tasks, the floor a model reaches without recall, and how soon a run leaves it.

- accuracy: the argmax prediction at each scored position against its target, counted per token and per
  example (an example is right when all its scored positions are).
- key_blind_floor: the best accuracy of a guesser that does not use which key is asked: at each scored
  position it guesses the answer id (an id that is some scored position's target in this split) seen most
  often so far in the example, ties split evenly; where no answer id has been seen, the answer most often
  scored in the split. For recall this is the plateau of guessing from which values occur in the context.
- tokens_to_reach: the training tokens at which a learning curve first reaches a level (linear between
  evaluations): the midpoint between the floor and 100 % measures how soon a run learns to recall.
"""

import numpy as np
import torch

IGNORE = (-100, -1)  # the on-disk and the loss's mark of a position that is not scored


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int, int, int]:
    """(right tokens, scored tokens, right examples, examples with a scored token) of logits (B, T, V)
    against targets (B, T)."""
    scored = (targets != IGNORE[0]) & (targets != IGNORE[1])
    right = (logits.argmax(-1) == targets) & scored
    has = scored.any(dim=1)
    whole = (right.sum(dim=1) == scored.sum(dim=1)) & has
    return int(right.sum()), int(scored.sum()), int(whole.sum()), int(has.sum())


def key_blind_floor(inputs: np.ndarray, targets: np.ndarray) -> dict:
    """{'token': the guesser's expected accuracy per scored token, 'example': per example (all its scored
    positions right, the guesses' chances multiplied)} on one split (n x seq_len arrays, IGNORE unscored)."""
    scored = ~np.isin(targets, IGNORE)
    answers, counts = np.unique(targets[scored], return_counts=True)
    fallback = answers[np.argmax(counts)]
    chances, per_example = [], []
    for x, y, s in zip(np.asarray(inputs), np.asarray(targets), scored):
        if not s.any():
            continue
        seen = np.cumsum(x[:, None] == answers[None, :], axis=0)  # T x answers: each answer id seen so far
        p = []
        for t in np.flatnonzero(s):
            top = seen[t].max()
            if top == 0:
                p.append(float(y[t] == fallback))
            else:
                best = answers[seen[t] == top]
                p.append(float(y[t] in best) / len(best))
        chances += p
        per_example.append(float(np.prod(p)))
    return {"token": float(np.mean(chances)), "example": float(np.mean(per_example))}


def midpoint(floor: float) -> float:
    """The accuracy halfway from the floor to 100 %."""
    return (floor + 1.0) / 2


def tokens_to_reach(curve, level: float) -> float | None:
    """The training tokens at which curve ([(tokens, accuracy)] in order) first reaches level, linear between
    the two evaluations around the crossing; None if it never does."""
    previous = None
    for tokens, acc in curve:
        if acc >= level:
            if previous is None:  # reached at the first evaluation
                return float(tokens)
            t0, a0 = previous
            return float(t0 + (tokens - t0) * (level - a0) / (acc - a0))
        previous = (tokens, acc)
    return None
