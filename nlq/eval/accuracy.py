"""Accuracy on the synthetic tasks, and how soon a run leaves the floor it reaches without recall.

- accuracy: the argmax prediction at each scored position against its target, counted per token and per
  example (an example is right when all its scored positions are); and MAD's own measure, torchmetrics'
  multiclass accuracy with its default macro average: each class's recall (right / its targets), averaged
  over the classes that are a target or a prediction somewhere (a class only ever predicted counts 0).
- the floor a model reaches without recall is the dataset's own (nlq/data/floor.py, written to meta.json).
- tokens_to_reach: the training tokens at which a learning curve first reaches a level (linear between
  evaluations): the midpoint between the floor and 100 % measures how soon a run learns to recall.
"""

import torch

from nlq.data.floor import IGNORE


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int, int, int]:
    """(right tokens, scored tokens, right examples, examples with a scored token) of logits (B, T, V)
    against targets (B, T)."""
    scored = (targets != IGNORE[0]) & (targets != IGNORE[1])
    right = (logits.argmax(-1) == targets) & scored
    has = scored.any(dim=1)
    whole = (right.sum(dim=1) == scored.sum(dim=1)) & has
    return int(right.sum()), int(scored.sum()), int(whole.sum()), int(has.sum())


def class_counts(logits: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(3, vocab_size) float64: per class, its right predictions, its scored targets, its predictions, over
    the scored positions of logits (B, T, V) against targets (B, T). The classes are the data's ids: a model
    wider than the data (V > vocab_size) may predict an id no target can be, which is wrong for its target
    and counted for no class."""
    scored = (targets != IGNORE[0]) & (targets != IGNORE[1])
    y, pred = targets[scored], logits.argmax(-1)[scored]
    counts = torch.zeros(3, vocab_size, dtype=torch.float64, device=logits.device)
    for row, ids in enumerate((y[pred == y], y, pred[pred < vocab_size])):
        counts[row].index_add_(0, ids, torch.ones_like(ids, dtype=torch.float64))
    return counts


def macro_accuracy(counts: torch.Tensor) -> float:
    """The macro average of class_counts' per-class recall over the classes present (targeted or predicted)."""
    right, targets, predicted = counts
    present = (targets + predicted) > 0
    recall = torch.where(targets > 0, right / targets.clamp(min=1), torch.zeros_like(right))
    return float(recall[present].mean()) if present.any() else float("nan")


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
