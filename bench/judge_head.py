"""Would a learned reply classifier hear new wordings better than the rules? (issue #29)

An experiment, not a shipped judge: each user reply is embedded with the embedded model
(SmolLM2-135M, mean of one layer's hidden states over the reply's tokens) and a softmax
regression over {-1, 0, +1} is fitted on labelled replies. It is measured the way the rules'
first scores are, on wordings it never saw:

- phrasings: fitted on the rounds before round R of `assets/judge_phrasings.jsonl`, scored on
  round R (rounds are written one after another, each in new template families);
- calibration (`assets/judge_calibration.jsonl`, the user replies): 5 folds, each scored by
  a head fitted on rounds 1-3 plus the other four folds.

Each configuration is printed alone ("head") and as a fallback behind the rules: where the
rules hear nothing (0), the head's -1 counts when its probability is >= `--t-neg` (and its +1
when >= `--t-pos`); the rules' own +1 / -1 are kept. Columns: agreement, corrections scored
+1, approvals scored -1.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 PYTHONPATH=$PWD .venv/bin/python
bench/judge_head.py [--layer 18] [--l2 0.01]` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from judge_phrasings import ANSWER, PHRASINGS, QUESTION, load_rows  # noqa: E402

from clawrl_app.engine.judging.heuristic_judge import classify_next_state, classify_turn  # noqa: E402
from clawrl_app.judge_eval import item_input, load_items  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

PROMPT = "Reply to the assistant's answer: {}"


def embed(texts: list[str], layer: int) -> np.ndarray:
    """Mean of layer `layer`'s hidden states over each text's tokens (float32, CPU)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(None, app_paths()).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            enc = tok(
                [PROMPT.format(t) for t in texts[i : i + 32]], return_tensors="pt", padding=True
            )
            hidden = model(**enc, output_hidden_states=True).hidden_states[layer]
            mask = enc["attention_mask"].unsqueeze(-1).float()
            out.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
    return np.concatenate(out)


def fit(x: np.ndarray, y: np.ndarray, l2: float, iters: int = 800, lr: float = 0.5):
    """Class-balanced softmax regression on standardised features: (mu, sd, W, b)."""
    mu, sd = x.mean(0), x.std(0) + 1e-6
    z = (x - mu) / sd
    w = 1.0 / np.bincount(y, minlength=3)[y]
    w /= w.sum()
    onehot = np.eye(3)[y]
    weights, bias = np.zeros((x.shape[1], 3)), np.zeros(3)
    for _ in range(iters):
        p = softmax(z @ weights + bias)
        g = (p - onehot) * w[:, None]
        weights -= lr * (z.T @ g + l2 * weights)
        bias -= lr * g.sum(0)
    return mu, sd, weights, bias


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def predict(head, x: np.ndarray) -> np.ndarray:
    mu, sd, weights, bias = head
    return softmax(((x - mu) / sd) @ weights + bias)


def behind_rules(rules: np.ndarray, p: np.ndarray, t_neg: float, t_pos: float) -> np.ndarray:
    """The rules' verdicts, and where they are 0 the head's confident -1 (or +1)."""
    out = rules.copy()
    out[(rules == 0) & (p[:, 0] >= t_neg)] = -1
    out[(rules == 0) & (p[:, 2] >= t_pos)] = 1
    return out


def row(name: str, pred: np.ndarray, label: np.ndarray) -> str:
    agree = (pred == label).mean()
    c_pos = int(((label == -1) & (pred == 1)).sum())
    a_neg = int(((label == 1) & (pred == -1)).sum())
    return f"| {name} | {len(label)} | {agree:.3f} | {c_pos} | {a_neg} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=18)
    ap.add_argument("--l2", type=float, default=0.01)
    ap.add_argument("--t-neg", type=float, default=0.9)
    ap.add_argument("--t-pos", type=float, default=0.9)
    ap.add_argument("--phrasings", type=Path, default=PHRASINGS)
    args = ap.parse_args()

    rows = load_rows(args.phrasings)
    items = [it for it in load_items() if it["next_state_role"] == "user"]
    x = embed([r["reply"] for r in rows], args.layer)
    cx = embed([it["next_state"] for it in items], args.layer)
    y = np.array([r["label"] for r in rows])
    rnd = np.array([r.get("round", 1) for r in rows])
    cy = np.array([it["label"] for it in items])
    rules = np.array(
        [
            classify_next_state("user", r["reply"], answer=ANSWER, question=QUESTION).score
            for r in rows
        ]
    )
    crules = np.array([classify_turn(item_input(it)).score for it in items])

    print(
        f"layer {args.layer}, l2 {args.l2}, fallback at p(-1) >= {args.t_neg}, p(+1) >= {args.t_pos}\n"
    )
    print("| scored on | n | agreement | corr. -> +1 | appr. -> -1 |")
    print("|---|---|---|---|---|")
    for r in sorted(set(rnd) - {1}):
        head = fit(x[rnd < r], y[rnd < r] + 1, args.l2)
        p = predict(head, x[rnd == r])
        lab = y[rnd == r]
        print(
            row(
                f"round {r}: rules (in-sample where they were extended on it)", rules[rnd == r], lab
            )
        )
        print(row(f"round {r}: head fitted on rounds < {r}", p.argmax(1) - 1, lab))
        print(
            row(
                f"round {r}: rules, then the head",
                behind_rules(rules[rnd == r], p, args.t_neg, args.t_pos),
                lab,
            )
        )
    fold = np.arange(len(items)) % 5
    heads, alone, behind = [], np.zeros_like(cy), np.zeros_like(cy)
    for k in range(5):
        tx = np.concatenate([x[rnd <= 3], cx[fold != k]])
        ty = np.concatenate([y[rnd <= 3], cy[fold != k]]) + 1
        heads.append(fit(tx, ty, args.l2))
        p = predict(heads[-1], cx[fold == k])
        alone[fold == k] = p.argmax(1) - 1
        behind[fold == k] = behind_rules(crules[fold == k], p, args.t_neg, args.t_pos)
    print(row("calibration (user replies): rules", crules, cy))
    print(row("calibration: head, 5 folds", alone, cy))
    print(row("calibration: rules, then the head", behind, cy))


if __name__ == "__main__":
    main()
