"""The key-blind floor of a dataset of examples: the best accuracy of a guesser that does not use which key
is asked. At each scored position it guesses the answer id (an id that is some scored position's target in
this split) seen most often so far in the example, ties split evenly; where no answer id has been seen, the
answer most often scored in the split. For recall this is the plateau of guessing from which values occur
in the context. data/synthetic_tasks/prepare.py writes it to meta.json."""

import numpy as np

IGNORE = (-100, -1)  # the on-disk and the loss's mark of a position that is not scored


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
