"""Would a classifier over the embedded model's own representation of a reply hear the
blind rounds better than the rules do at first sight? (A probe: nothing in the app uses it.)

Each reply of `assets/judge_phrasings.jsonl` (and of `--extra` files) is read by the
embedded model (SmolLM2-135M-Instruct, f32, CPU) after a short frame; the mean of its hidden
states over the reply's tokens at three depths is the reply's vector. A softmax regression
on those vectors (standardised, L2, L-BFGS) is fitted on the rounds before R and scored on
round R: agreement and corrections read as approval, per round, beside nothing else.
`--ensemble R` also prints the heuristic judge's verdicts on round R with the classifier
overruling it where it disagrees with at least the given confidence.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/judge_embedding_probe.py
      --rounds 12 13 14 15 [--ensemble 15]` (about 3 minutes on 2 cores to embed 2000 replies)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clawrl_app.engine.judging.heuristic_judge import classify_next_state  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

FRAME = "User reply to the assistant's answer: {}"
LAYERS = (-1, -8, -16)
BATCH = 64


def embed(texts: list[str]) -> torch.Tensor:
    """Each text's mean hidden state at `LAYERS`, concatenated."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = str(resolve_model(None, app_paths(), progress=False).path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    for i in range(0, len(texts), BATCH):
        enc = tok(
            [FRAME.format(t) for t in texts[i : i + BATCH]], return_tensors="pt", padding=True
        )
        with torch.no_grad():
            states = model(**enc, output_hidden_states=True).hidden_states
        mask = enc["attention_mask"].unsqueeze(-1).float()
        out.append(torch.cat([(states[k] * mask).sum(1) / mask.sum(1) for k in LAYERS], -1))
        print(f"embedded {min(i + BATCH, len(texts))}/{len(texts)}", file=sys.stderr, flush=True)
    return torch.cat(out)


def fit(x: torch.Tensor, y: torch.Tensor, l2: float) -> Any:
    """A softmax regression on standardised `x`; returns the probability function."""
    mu, sd = x.mean(0), x.std(0) + 1e-6
    w = torch.zeros(x.shape[1], 3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=300)
    z = (x - mu) / sd

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ w + b, y) + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return lambda xt: torch.softmax(((xt - mu) / sd) @ w + b, -1).detach()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, nargs="+", default=[12, 13, 14, 15])
    ap.add_argument("--extra", type=Path, nargs="*", default=[], help="more JSONL rows")
    ap.add_argument("--l2", type=float, nargs="+", default=[1e-3, 1e-2, 3e-2])
    ap.add_argument("--ensemble", type=int, help="round to score rules + classifier on")
    args = ap.parse_args()
    files = [ROOT / "assets" / "judge_phrasings.jsonl", *args.extra]
    rows = [json.loads(line) for f in files for line in f.open() if line.strip()]
    x = embed([r["reply"] for r in rows])
    y = torch.tensor([r["label"] + 1 for r in rows])
    rnd = torch.tensor([r["round"] for r in rows])
    print("| L2 | " + " | ".join(f"round {r}: agreement (corr. -> +1)" for r in args.rounds) + " |")
    print("|---|" + "---|" * len(args.rounds))
    for l2 in args.l2:
        cells = []
        for r in args.rounds:
            pred = fit(x[rnd < r], y[rnd < r], l2)(x[rnd == r]).argmax(-1)
            truth = y[rnd == r]
            wrong_sign = int(((truth == 0) & (pred == 2)).sum())
            cells.append(f"{(pred == truth).float().mean():.3f} ({wrong_sign})")
        print(f"| {l2:g} | " + " | ".join(cells) + " |")
    if args.ensemble is None:
        return
    r = args.ensemble
    probs = fit(x[rnd < r], y[rnd < r], args.l2[-1])(x[rnd == r])
    test = [row for row in rows if row["round"] == r]
    rules = [
        classify_next_state(
            "user", row["reply"], answer=row.get("answer", ""), question=row.get("question", "")
        ).score
        for row in test
    ]
    truth_l = [row["label"] for row in test]
    print(
        f"\nround {r}: rules alone {sum(a == b for a, b in zip(rules, truth_l, strict=True)) / len(test):.3f}"
    )
    print("| overrule at confidence | agreement | corr. -> +1 |\n|---|---|---|")
    for t in (0.6, 0.7, 0.8, 0.9):
        pred = [
            int(p.argmax()) - 1 if int(p.argmax()) - 1 != s and float(p.max()) >= t else s
            for p, s in zip(probs, rules, strict=True)
        ]
        agree = sum(a == b for a, b in zip(pred, truth_l, strict=True)) / len(test)
        flips = sum(a == 1 and b == -1 for a, b in zip(pred, truth_l, strict=True))
        print(f"| {t} | {agree:.3f} | {flips} |")


if __name__ == "__main__":
    main()
