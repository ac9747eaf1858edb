"""The key-blind floor of a dataset of examples: the best accuracy of the simple guessers that do not use which
key is asked. data/synthetic_tasks/prepare.py writes it to meta.json; the screen's midpoints and "informative"
stand on it. Three rules, each scored on the test split; the floor is the best of them:

- most_frequent: the answer id (an id some scored position of the split has as its target) shown most often
  so far in the example, ties split evenly;
- uniform: uniform over the distinct answer ids shown so far;
- most_keys and uniform_keys: the same two counted over distinct keys (an answer's key is the id shown just
  before it): the answer shown with the most distinct keys, or the answer of a distinct key drawn uniformly.
  Where each key is drawn afresh (MAD's recall), the key asked is uniform over the keys shown, so counting a
  key once however often it recurred is what predicts it;
- earliest_unasked (where the task lays out its pairs first, as MQAR does): drop the keys already asked and
  answer with the value of the earliest pair left, in the pairs' order (Zoology's power-law gaps ask the first
  pairs first, so this beats guessing).

"Shown" is where the task puts answers in the context (nlq/data/tasks.py's `shown`): a filler that happens to
carry an answer's id is not an answer. Where no answer has been shown, each rule guesses the answer most often
scored in the split.
"""

import numpy as np

IGNORE = (-100, -1)  # the on-disk and the loss's mark of a position that is not scored


def key_blind_floor(inputs: np.ndarray, targets: np.ndarray, shown=None, pairs=None) -> dict:
    """{'token', 'example': the best rule's expected accuracy per scored token and per example (every scored
    position right, the guesses' chances multiplied), 'rule': {'token', 'example'}: which rule gave each,
    'rules': {name: {'token', 'example'}}} on one split (n x seq_len arrays, IGNORE unscored). shown: an n x
    seq_len mask of the positions whose input is an answer shown in the context (default: every input that is
    an answer id); pairs: n x P x 2 (key, value) ids in their order, for earliest_unasked."""
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    scored = ~np.isin(targets, IGNORE)
    answers, counts = np.unique(targets[scored], return_counts=True)
    fallback = answers[np.argmax(counts)]
    if shown is None:
        shown = np.isin(inputs, answers)
    rules = {"most_frequent": most_frequent, "uniform": uniform, "most_keys": most_keys, "uniform_keys": uniform_keys}
    if pairs is not None:
        rules["earliest_unasked"] = earliest_unasked
    scores = {}
    for name, rule in rules.items():
        chances, per_example = [], []
        for i in np.flatnonzero(scored.any(axis=1)):
            row = Example(inputs[i], targets[i], scored[i], shown[i], None if pairs is None else pairs[i], answers)
            p = [rule(row, t, answers, fallback) for t in np.flatnonzero(scored[i])]
            chances += p
            per_example.append(float(np.prod(p)))
        scores[name] = {"token": float(np.mean(chances)), "example": float(np.mean(per_example))}
    best = {k: max(scores, key=lambda name: scores[name][k]) for k in ("token", "example")}
    return {k: scores[best[k]][k] for k in best} | {"rule": best, "rules": scores}


class Example:
    """One example's arrays, as a rule reads them."""

    def __init__(self, inputs, targets, scored, shown, pairs, answers):
        self.inputs, self.targets, self.scored, self.pairs = inputs, targets, scored, pairs
        # seen[t, a]: how often answers[a] was shown at positions up to t (what predicting targets[t] sees);
        # keyed[t, a]: how many distinct keys (the id before it) it was shown with up to t
        self.seen = np.cumsum((inputs[:, None] == answers[None, :]) & shown[:, None], axis=0)
        index = {int(a): n for n, a in enumerate(answers)}
        self.keyed = np.zeros_like(self.seen)
        pairs, counts = set(), np.zeros(len(answers), dtype=self.seen.dtype)
        for t in range(len(inputs)):
            pair = (int(inputs[t - 1]), int(inputs[t])) if t else None
            if pair and shown[t] and pair[1] in index and pair not in pairs:
                pairs.add(pair)
                counts[index[pair[1]]] += 1
            self.keyed[t] = counts


def most_frequent(row: Example, t: int, answers, fallback) -> float:
    return most_of(row.seen[t], row.targets[t], answers, fallback)


def uniform(row: Example, t: int, answers, fallback) -> float:
    return drawn_from(row.seen[t] > 0, row.targets[t], answers, fallback)


def most_keys(row: Example, t: int, answers, fallback) -> float:
    return most_of(row.keyed[t], row.targets[t], answers, fallback)


def uniform_keys(row: Example, t: int, answers, fallback) -> float:
    return drawn_from(row.keyed[t], row.targets[t], answers, fallback)


def most_of(counts, target, answers, fallback) -> float:
    """The chance that guessing the answer of the highest count (ties split evenly) is right."""
    if counts.max() == 0:
        return float(target == fallback)
    best = answers[counts == counts.max()]
    return float(target in best) / len(best)


def drawn_from(weights, target, answers, fallback) -> float:
    """The chance that an answer drawn in proportion to weights is right."""
    weights = np.asarray(weights, dtype=float)
    if weights.sum() == 0:
        return float(target == fallback)
    return float(weights[answers == target].sum() / weights.sum())


def earliest_unasked(row: Example, t: int, answers, fallback) -> float:
    """The value of the first pair whose key no earlier scored position asked (the key asked at a scored
    position is its input)."""
    asked = set(row.inputs[:t][row.scored[:t]].tolist())
    left = [value for key, value in row.pairs if key not in asked]
    return float(row.targets[t] == (left[0] if left else fallback))
