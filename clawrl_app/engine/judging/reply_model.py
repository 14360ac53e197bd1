"""A word model of user replies, behind the judge's rules: it hears a correction or an
approval worded in a way no rule names ("reading this on my smartwatch, needs to be a third
of the size").

A softmax regression over the reply's words, word pairs and letter 3-/4-grams (so
"shortr" and "shorter" share most of their features), trained at first use on the shipped
labelled set (`assets/judge_phrasings.jsonl`: user replies labelled -1 correction, 0
neutral, +1 approval; a few seconds, once per process). Pure Python, deterministic, no
model weights to ship. (Naive Bayes on the same features was tried first: its
probabilities are near 0 or 1 for nearly every reply, so no threshold can keep it quiet
on a neutral one: "You could have said hi." read as a correction at 1.000.)

It is consulted only where the rules hear nothing (and on the part after a "but" of a
polite reply), it only ever hears corrections, and only when it is sure (`CORRECTION_P`),
the reply has a few words and is not a question about something else: a follow-up question ("how do they stop it
from rusting?") or a new task is the commonest next message in a chat and reads, word for
word, much like a request to change the answer. Measured leave-one-round-out on the set's
rounds in docs/benchmarks/judge.md.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from clawrl_app.paths import asset_path

LABELS = (-1, 0, 1)
CORRECTION_P = 0.9
"""Least probability of "correction" for the model to score a reply -1."""
MIN_WORDS = 4
"""Fewest words (and signs) in a reply the model reads: "wild", "lemme read it"."""
EPOCHS = 10
"""Passes over the set when training."""
STEP = 0.3
"""AdaGrad's step size."""
L2 = 1e-3
"""The weights' L2 penalty."""
BIAS = "<bias>"

_TOKEN_RE = re.compile(r"[a-z0-9']+|[^\sa-z0-9'.,!?;:]")
_QUESTION_START_RE = re.compile(
    r"^\W*(?:(?:random|quick|side|unrelated)\s+q(?:uestion)?\W+|also\W+|and\W+|oh\W+|btw\W+)?"
    r"(?:how|what|what's|whats|who|who's|when|where|why|which|whose|is|are|was|were|does|do|"
    r"did|can|could|will|would|has|have|should|any idea)\b",
    re.IGNORECASE,
)
_FORM_RE = re.compile(
    r"\b(?:answer|reply|response|version|summary|text|wording|tone|format|formatting|"
    r"shorter|longer|short|long|brief|briefer|concise|condensed?|word|words|sentences?|"
    r"lines?|paragraphs?|bullets?|bullet points?|table|markdown|emoji|simpler|plainer|"
    r"shorten|cut|trim|rewrite|redo|rephrase|reformat|simplify|fix|tabulate)\b",
    re.IGNORECASE,
)
_DEICTIC_RE = re.compile(
    r"\b(?:it|this|that|these|those|one)\b(?!\s+(?:year|week|month|morning|afternoon|"
    r"evening|time|weekend|summer|winter|spring|autumn|day|night)\b)",
    re.IGNORECASE,
)
_OTHER_THING_RE = re.compile(
    r"^\W*(?:now\W+|also\W+|ok\W+|okay\W+)?(?:please\s+)?(?:make|write|give|list|summari[sz]e|"
    r"draft|compose|create|translate|plan|suggest|recommend|name|tell)\s+(?:me\s+)?"
    r"(?:a|an|some|three|two|five|ten|\d+|the plot|a few)\b",
    re.IGNORECASE,
)


def features(text: str) -> dict[str, float]:
    """The reply's features: its words, word pairs (with start and end marks) and the
    letter 3- and 4-grams of each word (weighted 0.5), and whether it ends in a question
    mark."""
    tokens = _TOKEN_RE.findall(text.lower())
    out: dict[str, float] = {}
    for word in tokens:
        out["w:" + word] = 1.0
        marked = f"<{word}>"
        for n in (3, 4):
            for i in range(len(marked) - n + 1):
                out["c:" + marked[i : i + n]] = 0.5
    for a, b in zip(["<s>", *tokens], [*tokens, "</s>"], strict=True):
        out[f"b:{a}_{b}"] = 1.0
    if text.rstrip().endswith("?"):
        out["?"] = 1.0
    return out


@dataclass(frozen=True)
class ReplyModel:
    """A softmax regression over `features`: one weight per (feature, label)."""

    weights: dict[tuple[str, int], float]

    def probabilities(self, text: str) -> tuple[float, float, float]:
        """P(correction), P(neutral), P(approval) of `text`."""
        return _softmax(_scores(self.weights, features(text)))


def _scores(weights: dict[tuple[str, int], float], feats: dict[str, float]) -> list[float]:
    return [
        weights.get((BIAS, k), 0.0) + sum(weights.get((f, k), 0.0) * v for f, v in feats.items())
        for k in range(len(LABELS))
    ]


def _softmax(scores: list[float]) -> tuple[float, float, float]:
    top = max(scores)
    exps = [math.exp(x - top) for x in scores]
    z = sum(exps)
    neg, neu, pos = (x / z for x in exps)
    return neg, neu, pos


def train(rows: Iterable[tuple[str, int]], epochs: int = EPOCHS, seed: int = 0) -> ReplyModel:
    """Fit the weights to (reply, label) pairs, label in -1/0/+1: AdaGrad on the
    cross-entropy with an L2 penalty, each label weighted by the inverse of its share (the
    set holds more corrections than neutral replies; unweighted, the model would call most
    things a correction). Deterministic for a given `seed`."""
    data = [(features(text), LABELS.index(label)) for text, label in rows]
    shares = [sum(1 for _, k in data if k == c) for c in range(len(LABELS))]
    weight_of = [len(data) / (len(LABELS) * n) if n else 0.0 for n in shares]
    weights: dict[tuple[str, int], float] = {}
    squares: dict[tuple[str, int], float] = {}
    order = random.Random(seed)
    for _ in range(epochs):
        order.shuffle(data)
        for feats, label in data:
            probs = _softmax(_scores(weights, feats))
            items = [*feats.items(), (BIAS, 1.0)]
            for k in range(len(LABELS)):
                err = (probs[k] - (k == label)) * weight_of[label]
                for name, value in items:
                    key = (name, k)
                    w = weights.get(key, 0.0)
                    grad = err * value + L2 * w
                    squares[key] = squares.get(key, 0.0) + grad * grad
                    weights[key] = w - STEP * grad / math.sqrt(squares[key] + 1e-8)
    return ReplyModel(weights)


def labelled_rows(name: str = "judge_phrasings.jsonl") -> list[tuple[str, int]]:
    """The shipped labelled replies as (reply, label) pairs."""
    with asset_path(name).open(encoding="utf-8") as f:
        return [
            (row["reply"], int(row["label"]))
            for row in (json.loads(line) for line in f if line.strip())
        ]


@lru_cache(maxsize=1)
def shipped_model() -> ReplyModel:
    """The model of the shipped set (trained once per process)."""
    return train(labelled_rows())


def trained() -> bool:
    """Whether this process has trained the shipped model yet."""
    return shipped_model.cache_info().currsize > 0


def about_something_else(text: str) -> bool:
    """Whether the reply is about something other than the answer, so the model stays
    silent: a question that names no form of the answer ("could this be the tallest
    tower?", "who paints it?"), a new thing to make ("give me a slogan for my bakery"), or a
    statement that points neither at the answer nor at its form ("I don't have time for
    Paris this year.")."""
    t = text.strip()
    if t.endswith("?") or _QUESTION_START_RE.match(t) is not None:
        return _FORM_RE.search(t) is None
    if _OTHER_THING_RE.match(t) is not None and not re.search(
        r"\b(?:it|this|that|these|those|the answer)\b", t, re.IGNORECASE
    ):
        return True
    return _FORM_RE.search(t) is None and _DEICTIC_RE.search(t) is None


def read(text: str, answer: str = "", model: ReplyModel | None = None) -> int:
    """-1 when the model is sure `text` asks to change the answer, else 0 (not sure, too
    short to tell, about something else, or the answer asked the user a question, which
    the reply is then likely to answer). It never approves: an approval it misses costs a
    reward of 0 instead of +1; a correction it took for approval would teach the opposite
    of what the user asked ("wow so fast now", said of a slow answer)."""
    if len(_TOKEN_RE.findall(text.lower())) < MIN_WORDS or about_something_else(text):
        return 0
    if answer.rstrip().endswith("?"):
        return 0
    neg, _, _ = (model or shipped_model()).probabilities(text)
    return -1 if neg >= CORRECTION_P else 0
