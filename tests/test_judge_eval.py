"""`clawrl-app judge-eval`: loading labelled files, agreement, sign errors, the confusion matrix."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.cli import main
from clawrl_app.config import UPSTREAM_ENV
from clawrl_app.engine.judging.judge import HeuristicJudge
from clawrl_app.judge_eval import (
    EvalReport,
    LabelledFileError,
    evaluate,
    format_report,
    load_items,
)


def item(next_state: str, label: int, role: str = "user", style: str = "casual") -> dict[str, Any]:
    calls = [{"function": {"name": "bash", "arguments": "{}"}}] if role == "tool" else []
    return {
        "context": [{"role": "user", "content": "What's 17 * 23?"}],
        "answer": "17 * 23 = 381.",
        "answer_tool_calls": calls,
        "next_state_role": role,
        "next_state": next_state,
        "label": label,
        "style": style,
    }


# Seven items whose heuristic scores are known from the rules (module docstring of
# engine/heuristic_judge.py): "thanks" +1, a traceback -1, "ok" 0, "nope" -1, "brb" 0,
# "perfect" +1.
SMALL = [
    item("thanks", 1),  # +1 -> +1 agree
    item("Traceback (most recent call last):\nValueError: x", 1, "tool"),  # +1 -> -1 sign error
    item("ok", 0, style="written"),  # 0 -> 0 agree
    item("thanks", 0, style="written"),  # 0 -> +1
    item("nope", -1),  # -1 -> -1 agree
    item("brb", -1),  # -1 -> 0
    item("perfect", -1),  # -1 -> +1 sign error
]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_confusion_matrix_agreement_and_sign_errors_on_a_small_file(tmp_path: Path) -> None:
    items = load_items(write_jsonl(tmp_path / "small.jsonl", SMALL))
    report = asyncio.run(evaluate(HeuristicJudge(), items))
    # Rows (label) by columns (score), counted by hand from the comments above.
    assert report.confusion == {
        1: {1: 1, 0: 0, -1: 1},
        0: {1: 1, 0: 1, -1: 0},
        -1: {1: 1, 0: 1, -1: 1},
    }
    assert (report.agree, report.total) == (3, 7)
    assert report.agreement == pytest.approx(3 / 7)
    assert report.sign_errors == 2  # the +1 judged -1 and the -1 judged +1
    # casual: items 1, 2, 5, 6, 7 (agree on 1 and 5); written: items 3, 4 (agree on 3).
    assert report.by_style == {"casual": [2, 5], "written": [1, 2]}


def test_format_report_prints_the_matrix() -> None:
    report = EvalReport("heuristic")
    for label, score in [(1, 1), (1, 1), (0, 0), (0, 1), (-1, -1), (-1, 1)]:
        report.add(label, score)
    assert format_report(report).splitlines() == [
        "heuristic: agreement 0.667 (4/6), sign errors 1",
        "  confusion (rows: label, columns: judge score)",
        "  label \\ judge    +1    0   -1",
        "  +1                2    0    0",
        "   0                1    1    0",
        "  -1                1    0    1",
    ]


def test_load_items_fills_in_a_missing_id_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(item("ok", 0)) + "\n\n" + json.dumps(item("thx", 1)) + "\n")
    assert [i["id"] for i in load_items(path)] == ["line 1", "line 3"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in item("ok", 0).items() if k != "label"}), "missing label"),
        (json.dumps({**item("ok", 0), "label": 2}), "label must be 1, 0 or -1"),
        (json.dumps({**item("ok", 0), "label": True}), "label must be 1, 0 or -1"),
        (json.dumps({**item("ok", 0), "next_state_role": "system"}), "next_state_role"),
        (json.dumps({**item("ok", 0), "context": "hi"}), "context must be a list"),
    ],
)
def test_malformed_line_names_file_line_and_problem(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(item("ok", 0)) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(LabelledFileError) as err:
        load_items(path)
    assert err.value.line == 2
    assert str(err.value).startswith(f"{path}, line 2: ")
    assert problem in str(err.value)


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("CLAWRL_") or name in UPSTREAM_ENV:
            monkeypatch.delenv(name)
    monkeypatch.setenv("CLAWRL_HOME", str(tmp_path / "home"))
    return tmp_path


def test_cli_file_with_a_malformed_line_exits_1(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = clean_env / "mine.jsonl"
    good = json.dumps(item("thanks", 1))
    path.write_text(f"{good}\n{good}\n{json.dumps({'answer': 'x'})}\n", encoding="utf-8")
    rc = main(["judge-eval", "--backend", "heuristic", "--file", str(path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{path}, line 3: missing context, next_state_role, next_state, label" in err


def test_cli_file_prints_agreement_sign_errors_and_matrix(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(clean_env / "small.jsonl", SMALL)
    rc = main(["judge-eval", "--backend", "heuristic", "--file", str(path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"7 labelled next states from {path} (2 positive, 2 neutral, 3 negative)" in out
    assert "heuristic: agreement 0.429 (3/7), sign errors 2" in out
    assert "  casual: agreement 0.400 (2/5)" in out
    assert "  +1                1    0    1" in out
    assert "   0                1    1    0" in out
    assert "  -1                1    1    1" in out
