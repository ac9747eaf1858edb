"""A blind side-by-side review of two arms' continuations of held-out documents (verdict.py), and its tally.

The page is one self-contained HTML file (no server, no network: its Content-Security-Policy allows its own
inline script and style and nothing else). Per item it shows the document's opening, the two arms'
continuations as A and B in an order drawn per item, and the document's true continuation. The reviewer
answers with the keys a (A better), b (B better) and t (tie), moving on to the next item; the arrow keys
move between items; e exports the answers as a JSON file (a download). Answers are kept in the browser's
localStorage under the review's id, so the page opened again keeps them (a browser writes localStorage
lazily: an answer given a moment before a reload or a crash can be lost, so the page says to export before
either). Every text reaches the page as JSON inside a script element of type application/json, with <, >
and & escaped, and is put on screen with textContent:
a document holding <script> or onerror= shows as text and runs nothing.

Which arm is A for each item is kept beside the page (review_key.json), not in it: the tally unblinds the
exported answers with it.
"""

import hashlib
import json
import math
import random
from pathlib import Path

from nlq.common.atomic import atomic_write_json, atomic_write_text
from nlq.common.errors import UserError

CHOICES = ("A", "B", "tie")


class ReviewError(UserError):
    """A choices file that does not belong to the review, or is not in the page's shape."""


def blind(items: list, arms: tuple, seed: int) -> tuple[list, dict]:
    """(the page's items, the key): each item {"id", "prompt", "truth", arm: text...} shown with its two
    arms' texts as A and B in an order drawn per item from seed; the key maps each id to {"A": arm, "B": arm}."""
    rng, shown, key = random.Random(seed), [], {}
    for item in items:
        order = list(arms)
        rng.shuffle(order)
        key[item["id"]] = {"A": order[0], "B": order[1]}
        shown.append({"id": item["id"], "prompt": item["prompt"], "A": item[order[0]], "B": item[order[1]]})
        shown[-1]["truth"] = item["truth"]
    return shown, key


def review_id(shown: list) -> str:
    """The review's id: a digest of its items, so that answers are matched to the page that collected them."""
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:16]


def write(directory, items: list, arms: tuple, seed: int, title: str, options: dict | None = None) -> str:
    """review.html and review_key.json (with the options that made the page) in directory; returns the
    review's id."""
    shown, key = blind(items, arms, seed)
    rid = review_id(shown)
    data = json.dumps({"review": rid, "title": title, "items": shown}, ensure_ascii=True)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # no </script> inside
    atomic_write_text(directory / "review.html", PAGE.replace("__DATA__", data))
    key = {"review": rid, "arms": list(arms), "items": key, "options": options}
    atomic_write_json(directory / "review_key.json", key, indent=1)
    return rid


def read_choices(path, key: dict) -> dict:
    """{item id: 'A' | 'B' | 'tie'} of a choices file the page exported, checked against the review's key."""
    if not Path(path).is_file():
        raise ReviewError(f"{path} not found: give the answers file the review page exported (its key e)")
    try:
        choices = json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError) as e:
        raise ReviewError(f"{path} cannot be read as JSON ({e}): export the answers again with the key e") from None
    extra = sorted(set(choices) - {"review", "answers"}) if isinstance(choices, dict) else []
    if extra:
        raise ReviewError(
            f"{path} holds {', '.join(map(repr, extra))}, which the page never writes (it exports review and "
            "answers): export the answers again from the page"
        )
    answers = choices.get("answers") if isinstance(choices, dict) else None
    if not isinstance(answers, dict) or not all(isinstance(v, str) and v in CHOICES for v in answers.values()):
        raise ReviewError(
            f"{path} is not a review's answers ({{'review': id, 'answers': {{item: A, B or tie}}}}): export them "
            "again from the page with the key e"
        )
    if choices.get("review") != key["review"]:
        raise ReviewError(
            f"{path} holds answers to review {choices.get('review')!r}, not to this report's {key['review']!r}: "
            "tally it with the --out it came from"
        )
    unknown = sorted(set(answers) - set(key["items"]))
    if unknown:
        raise ReviewError(
            f"{path} answers items this review does not have ({', '.join(map(repr, unknown[:3]))}): it was edited "
            "after the export; export the answers again from the page"
        )
    if not answers:
        raise ReviewError(f"{path} holds no answers: answer some items on the page, then export them")
    return answers


def tally(answers: dict, key: dict) -> dict:
    """Wins per arm and ties, unblinded; a two-sided sign test of the wins (ties left out) and each arm's win
    rate among the decided items with its Wilson 95 % interval."""
    arms = key["arms"]
    wins, ties = dict.fromkeys(arms, 0), 0
    for item, choice in answers.items():
        if choice == "tie":
            ties += 1
        else:
            wins[key["items"][item][choice]] += 1
    decided = sum(wins.values())
    rate = {arm: {"rate": w / decided, "interval": wilson(w, decided)} if decided else None for arm, w in wins.items()}
    return {
        "review": key["review"],
        "answered": len(answers),
        "items": len(key["items"]),
        "wins": wins,
        "ties": ties,
        "sign_test_p": sign_test(wins[arms[0]], wins[arms[1]]),
        "win_rate": rate,
    }


def sign_test(a: int, b: int) -> float | None:
    """The two-sided exact binomial p of a wins against b (p = 1/2), None with no decided item."""
    n = a + b
    if not n:
        return None
    k = min(a, b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def wilson(k: int, n: int, z: float = 1.959963984540054) -> list:
    """Wilson's 95 % interval of a proportion k / n."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>Blind review</title>
<style>
body { font-family: sans-serif; margin: 1.5em; max-width: 90em; }
pre { white-space: pre-wrap; word-wrap: break-word; background: #f6f6f6; padding: .6em; min-height: 3em; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
#status { font-weight: bold; } .chosen { outline: 3px solid #2a7; }
</style></head>
<body>
<h1 id="title"></h1>
<p id="status"></p>
<p id="same" hidden>A and B are the same text here: answer t (tie).</p>
<p id="saved"></p>
<h2>The document's opening</h2><pre id="prompt"></pre>
<div class="pair"><div><h2>A</h2><pre id="A"></pre></div><div><h2>B</h2><pre id="B"></pre></div></div>
<details><summary>The document's true continuation</summary><pre id="truth"></pre></details>
<p>Keys: <b>a</b> A is better, <b>b</b> B is better, <b>t</b> tie (each moves to the next item);
<b>&larr;</b> <b>&rarr;</b> previous and next item; <b>e</b> export the answers as a JSON file.
Answers are kept in this browser as you give them; export before reloading or closing the page: a browser
writes them to its store lazily, and one given a moment before a reload can be lost.</p>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const store = "blind-review-" + data.review;
let answers = {};
try { answers = JSON.parse(localStorage.getItem(store) || "{}") || {}; } catch (e) { answers = {}; }
const items = data.items;
let at = items.findIndex(item => !(item.id in answers));
if (at < 0) { at = 0; }
function show() {
  const item = items[at];
  document.getElementById("title").textContent = data.title;
  for (const part of ["prompt", "A", "B", "truth"]) { document.getElementById(part).textContent = item[part]; }
  const done = items.filter(i => i.id in answers).length;
  const mine = answers[item.id];
  document.getElementById("status").textContent =
    "item " + (at + 1) + " of " + items.length + " (" + done + " answered)" + (mine ? "; your answer: " + mine : "");
  document.getElementById("A").classList.toggle("chosen", mine === "A");
  document.getElementById("B").classList.toggle("chosen", mine === "B");
  document.getElementById("same").hidden = item.A !== item.B;
}
function answer(choice) {
  answers[items[at].id] = choice;
  localStorage.setItem(store, JSON.stringify(answers));
  if (at < items.length - 1) { at += 1; }
  show();
}
function exportAnswers() {
  const text = JSON.stringify({review: data.review, answers: answers}, null, 1);
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
  link.download = "choices-" + data.review + ".json";
  document.body.appendChild(link);
  link.click();
  link.remove();
  const done = Object.keys(answers).length;
  document.getElementById("saved").textContent =
    "exported " + done + " answer(s) to " + link.download + " (your downloads folder)";
}
document.addEventListener("keydown", event => {
  const keys = {a: () => answer("A"), b: () => answer("B"), t: () => answer("tie"), e: exportAnswers,
    ArrowLeft: () => { at = Math.max(0, at - 1); show(); },
    ArrowRight: () => { at = Math.min(items.length - 1, at + 1); show(); }};
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;  // a capital A, B, T, E alike
  if (keys[key] && !event.ctrlKey && !event.metaKey && !event.altKey) { event.preventDefault(); keys[key](); }
});
show();
</script>
</body></html>
"""
