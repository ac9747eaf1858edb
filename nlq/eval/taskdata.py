"""Evaluation data: LAMBADA, HellaSwag, ARC-Easy and WikiText-103, from the hub by default or from a
local JSONL file whose rows have the hub dataset's own fields (so a saved copy of the hub data works):

  lambada    {"text"}                                  the passage; its last word is predicted
  hellaswag  {"ctx", "endings", "label"}               4 endings, label the right one's index
  arc_easy   {"question", "choices", "answerKey"}      choices {"text": [...], "label": [...]}
  wikitext   {"text"}                                  one row of the article text

The loaders turn them into plain items: {"text"} or {"context", "endings", "label"}, or {"skip": why} for a
row that cannot be scored (an ARC answerKey among no labels), which the paper protocol skips and counts.
"""

import json
from pathlib import Path

from nlq.data.dataset import DataError

HUB = {  # task: (dataset, config, split)
    "lambada": ("EleutherAI/lambada_openai", "en", "test"),  # "en": the official probe code's configuration
    "hellaswag": ("Rowan/hellaswag", None, "validation"),
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy", "test"),
    "wikitext": ("Salesforce/wikitext", "wikitext-103-raw-v1", "validation"),
}
FIELDS = {
    "lambada": ("text",),
    "hellaswag": ("ctx", "endings", "label"),
    "arc_easy": ("question", "choices", "answerKey"),
    "wikitext": ("text",),
}


def read_jsonl(path) -> list[dict]:
    """The rows of a JSONL file; a malformed line is an error naming the file and line."""
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file")
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path} line {number} is not valid JSON ({e.msg}): fix or remove it") from None
    return rows


def rows(task: str, path: str | None = None, split: str | None = None, option: str | None = None):
    """The raw rows of a task, from a local JSONL file or the hub. option names the command-line option
    that gives a local copy (for the error when the hub cannot be reached)."""
    if path:
        data = read_jsonl(path)
    else:
        from nlq.common import hub

        hub.offline()
        import datasets

        name, config, default_split = HUB[task]
        try:
            data = datasets.load_dataset(name, config, split=split or default_split)
        except Exception as e:  # offline, or the hub refused: name the local-file option
            raise DataError(
                f"cannot load {name} from the hub ({type(e).__name__}): pass a local JSONL copy with "
                f"{option or f'--{task}_file'}"
            ) from None
    for i, row in enumerate(data):
        missing = [f for f in FIELDS[task] if f not in row]
        if not isinstance(row, dict) or missing:
            raise DataError(f"{task} row {i} of {path or HUB[task][0]} lacks {missing}: rows need {list(FIELDS[task])}")
        yield row


PROTOCOLS = ("paper", "standard")
# arXiv 2604.10791's official code scores ARC-Easy's validation split (the hub default here is its test split).
PAPER_SPLITS = {"arc_easy": "validation"}


def items(task: str, path: str | None = None, split: str | None = None, protocol: str = "paper"):
    """A task's items. ARC-Easy's context is the bare question under the paper's protocol (its official code
    scores question + " " + choice), "Question: ...\nAnswer:" under the standard one."""
    split = split or (PAPER_SPLITS.get(task) if protocol == "paper" else None)
    for row in rows(task, path, split):
        if task in ("lambada", "wikitext"):
            yield {"text": row["text"]}
        elif task == "hellaswag":
            yield {"context": row["ctx"], "endings": [" " + e for e in row["endings"]], "label": int(row["label"])}
        else:
            labels = list(row["choices"]["label"])
            if row["answerKey"] not in labels:  # a damaged row: the scorer skips or refuses it
                yield {"skip": f"answerKey {row['answerKey']!r} is not among the labels {labels}"}
                continue
            context = row["question"] if protocol == "paper" else f"Question: {row['question']}\nAnswer:"
            yield {
                "context": context,
                "endings": [" " + t for t in row["choices"]["text"]],
                "label": labels.index(row["answerKey"]),
            }


def wikitext_paper_rows(n_rows: int, min_chars: int, path: str | None = None) -> list[str]:
    """The official code's WikiText selection: among the first n_rows rows of the validation split (blank rows
    included), those of at least min_chars characters once stripped, as raw (unstripped) text."""
    out = []
    for i, row in enumerate(rows("wikitext", path, "validation")):
        if i == n_rows:
            break
        if len(row["text"].strip()) >= min_chars:
            out.append(row["text"])
    return out


def wikitext_lines(
    split: str, min_chars: int, limit: int | None = None, path: str | None = None, option=None, raw: bool = False
):
    """The first `limit` (None: all) lines of a WikiText split with at least min_chars characters once
    stripped; stripped, or raw as the rows hold them (arXiv 2604.10791's probe trains on raw rows)."""
    out = []
    for row in rows("wikitext", path, split, option):
        if len(row["text"].strip()) >= min_chars:
            out.append(row["text"] if raw else row["text"].strip())
            if len(out) == limit:
                break
    return out
