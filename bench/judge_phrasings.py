"""Does the heuristic judge hear a correction however it is worded? (issue #29)

Scores `assets/judge_phrasings.jsonl` (user replies labelled -1/0/+1, grouped into template
families; each family is wholly `train` or `heldout`) and the calibration set
(`assets/judge_calibration.jsonl`) with the heuristic judge, and prints per split and per
kind: agreement, corrections scored +1 (must be 0), approvals scored -1, and the share of
corrections that get a hint. Pure CPU, no model.

Each reply is read after a fixed question and answer (`QUESTION`, `ANSWER`) unless its row
gives `question` / `answer`.

Run:
  PYTHONPATH=$PWD .venv/bin/python bench/judge_phrasings.py                 # this tree
  PYTHONPATH=$PWD .venv/bin/python bench/judge_phrasings.py --before 19133c7
  PYTHONPATH=$PWD .venv/bin/python bench/judge_phrasings.py --by-round
`--by-round` scores each round's held-out rows with the word model (`reply_model`) trained
on the other rows only, beside the rules alone. `--before REV` also scores the judge of commit REV (its `clawrl_app/` extracted with
`git archive` into a temporary folder and run in a subprocess), on the same sets, and prints
both side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Collection
from io import BytesIO
from pathlib import Path
from typing import Any
from unittest.mock import patch

ROOT = Path(__file__).resolve().parents[1]
PHRASINGS = ROOT / "assets" / "judge_phrasings.jsonl"
CALIBRATION = ROOT / "assets" / "judge_calibration.jsonl"
KINDS = ("length", "format", "tone", "content", "approval", "neutral")
QUESTION = "Tell me about the Eiffel Tower."
ANSWER = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It was designed by Gustave Eiffel's company and completed in 1889 for the World's Fair. "
    "It is 330 metres tall and was the tallest man-made structure in the world for 41 years. "
    "Today it is one of the most visited paid monuments in the world!"
)


def load_rows(path: Path = PHRASINGS) -> list[dict[str, Any]]:
    """The labelled phrasings, one JSON object per line."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _share(hits: int, total: int) -> float | None:
    return hits / total if total else None


def summarise(rows: list[dict[str, Any]], scores: list[int], hints: list[bool]) -> dict[str, Any]:
    """Agreement, sign errors and hint share of `rows` scored `scores` (hint given or not)."""
    corrections = [i for i, r in enumerate(rows) if r["label"] == -1]
    return {
        "n": len(rows),
        "agreement": _share(
            sum(r["label"] == s for r, s in zip(rows, scores, strict=True)), len(rows)
        ),
        "corrections_as_approval": sum(scores[i] == 1 for i in corrections),
        "approvals_as_correction": sum(
            r["label"] == 1 and s == -1 for r, s in zip(rows, scores, strict=True)
        ),
        "hint_share": _share(
            sum(scores[i] == -1 and hints[i] for i in corrections), len(corrections)
        ),
    }


def score_here(phrasings: Path, calibration: Path) -> dict[str, Any]:
    """Score both sets with the `clawrl_app` this interpreter imports."""
    from clawrl_app.engine.judging.heuristic_judge import classify_next_state, classify_turn
    from clawrl_app.judge_eval import item_input, load_items

    rows = load_rows(phrasings)
    start = time.perf_counter()
    verdicts = [
        classify_next_state(
            "user", r["reply"], answer=r.get("answer", ANSWER), question=r.get("question", QUESTION)
        )
        for r in rows
    ]
    per_reply_us = (time.perf_counter() - start) / len(rows) * 1e6
    scores = [v.score for v in verdicts]
    hints = [bool(v.hint) for v in verdicts]
    report: dict[str, Any] = {"per_reply_us": per_reply_us, "groups": {}}

    def add(name: str, keep: list[int]) -> None:
        report["groups"][name] = summarise(
            [rows[i] for i in keep], [scores[i] for i in keep], [hints[i] for i in keep]
        )

    add("all", list(range(len(rows))))
    for split in ("train", "heldout"):
        add(split, [i for i, r in enumerate(rows) if r["split"] == split])
        for kind in KINDS:
            add(
                f"{split}/{kind}",
                [i for i, r in enumerate(rows) if r["split"] == split and r["kind"] == kind],
            )
    for rnd in sorted({r.get("round", 1) for r in rows}):
        add(
            f"heldout, round {rnd}",
            [i for i, r in enumerate(rows) if r["split"] == "heldout" and r.get("round", 1) == rnd],
        )
    report["misses"] = [
        {
            "split": r["split"] + ("" if r.get("round", 1) == 1 else f"/r{r['round']}"),
            "family": r["family"],
            "reply": r["reply"],
            "label": r["label"],
            "score": v.score,
            "reason": v.reason,
            "hint": v.hint,
        }
        for r, v in zip(rows, verdicts, strict=True)
        if v.score != r["label"]
    ]
    items = load_items(calibration)
    confusion = Counter((it["label"], classify_turn(item_input(it)).score) for it in items)
    report["calibration"] = {
        "n": len(items),
        "agreement": sum(n for (lab, s), n in confusion.items() if lab == s) / len(items),
        "sign_errors": confusion[(1, -1)] + confusion[(-1, 1)],
    }
    return report


def score_revision(rev: str, phrasings: Path, calibration: Path) -> dict[str, Any]:
    """Score both sets with the judge of commit `rev`, in a subprocess over its sources."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "clawrl_app", "assets"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="judge-phrasings-") as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--json",
                "--phrasings",
                str(phrasings),
                "--calibration",
                str(calibration),
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
        ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def by_round(phrasings: Path, rounds: Collection[int] | None = None) -> list[dict[str, Any]]:
    """The word model out of sample: for each round's held-out rows (every round, or those
    in `rounds`), the judge with a word model trained on every other row of the set (round
    1: its held-out families left out), beside the rules alone (the model silenced). The
    rules are in sample on every round they were tuned on; the first-score tables in
    docs/benchmarks/judge.md are the honest figures for them."""
    from clawrl_app.engine.judging import heuristic_judge, reply_model

    def judged(test: list[dict[str, Any]]) -> dict[str, Any]:
        scores = [
            heuristic_judge.classify_next_state(
                "user",
                r["reply"],
                answer=r.get("answer", ANSWER),
                question=r.get("question", QUESTION),
            ).score
            for r in test
        ]
        return summarise(test, scores, [False] * len(test))

    rows = load_rows(phrasings)
    out = []
    for rnd in sorted({r.get("round", 1) for r in rows}):
        if rounds is not None and rnd not in rounds:
            continue
        test = [r for r in rows if r["split"] == "heldout" and r.get("round", 1) == rnd]
        train = [(r["reply"], r["label"]) for r in rows if r not in test]
        model = reply_model.train(train)
        with patch.object(reply_model, "read", lambda *a, **k: 0):
            rules = judged(test)
        with patch.object(reply_model, "shipped_model", lambda m=model: m):
            both = judged(test)
        out.append({"round": rnd, "n": len(test), "train": len(train), "rules": rules,
                    "rules + model": both})  # fmt: skip
    return out


def print_by_round(results: list[dict[str, Any]]) -> None:
    print("| round | n | trained on | rules | corr.→+1 | rules + model | corr.→+1 | approvals→-1 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        a, b = r["rules"], r["rules + model"]
        print(
            f"| {r['round']} | {r['n']} | {r['train']} | {_fmt(a['agreement'])} | "
            f"{a['corrections_as_approval']} | {_fmt(b['agreement'])} | "
            f"{b['corrections_as_approval']} | {b['approvals_as_correction']} |"
        )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_table(columns: list[tuple[str, dict[str, Any]]]) -> None:
    """One row per group and measure, one column per judge."""
    head = (
        "| group | n | "
        + " | ".join(
            f"{name}: agreement | {name}: corr.→+1 | {name}: hint share" for name, _ in columns
        )
        + " |"
    )
    print(head)
    print("|" + "---|" * (2 + 3 * len(columns)))
    for group, first in columns[0][1]["groups"].items():
        if not first["n"]:
            continue
        cells = []
        for _, report in columns:
            g = report["groups"][group]
            cells += [
                _fmt(g["agreement"]),
                str(g["corrections_as_approval"]),
                _fmt(g["hint_share"]),
            ]
        print(f"| {group} | {first['n']} | " + " | ".join(cells) + " |")
    for name, report in columns:
        cal = report["calibration"]
        print(
            f"\n{name}: calibration agreement {cal['agreement']:.3f} over {cal['n']} items, "
            f"{cal['sign_errors']} sign errors; approvals scored -1: "
            f"{report['groups']['all']['approvals_as_correction']}; "
            f"{report['per_reply_us']:.0f} µs per reply"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also score the judge of commit REV")
    parser.add_argument("--phrasings", type=Path, default=PHRASINGS)
    parser.add_argument("--calibration", type=Path, default=CALIBRATION)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--misses", action="store_true", help="list the disagreements")
    parser.add_argument("--split", choices=("train", "heldout"), help="misses of one split only")
    parser.add_argument(
        "--by-round",
        action="store_true",
        help="each round's held-out rows with a word model trained on the other rows",
    )
    args = parser.parse_args()
    if args.by_round:
        print_by_round(by_round(args.phrasings))
        return
    here = score_here(args.phrasings, args.calibration)
    if args.json:
        print(json.dumps(here))
        return
    columns = [("after", here)]
    if args.before:
        columns.insert(0, ("before", score_revision(args.before, args.phrasings, args.calibration)))
    print_table(columns)
    if args.misses:
        for m in here["misses"]:
            if args.split in (None, m["split"]):
                print(
                    f"{m['split']:8} {m['family']:26} {m['label']:+d} got {m['score']:+d} "
                    f"{m['reply']!r} ({m['reason']}; hint {m['hint']!r})"
                )


if __name__ == "__main__":
    main()
