"""The goals of the learning benchmark (bench/learn_report.goals), on made-up runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from learn_report import goals, version_lines  # noqa: E402


def _run(name: str, compliance: list[float], before: float, after: float) -> dict[str, Any]:
    return {
        "persona": name,
        "evals": [{"compliance": c, "after_turns": 8 * i} for i, c in enumerate(compliance)],
        "general_before": {"score": before},
        "general_after": {"score": after},
        "turns": [{}] * (8 * (len(compliance) - 1)),
    }


def test_goals_use_the_last_block_within_32_turns() -> None:
    runs = [
        _run("a", [0.1, 0.9, 0.5, 0.5, 0.8], 0.6, 0.6),  # 0.8 at 32 turns: met
        _run("b", [0.1, 0.9, 0.9, 0.9, 0.7, 1.0], 0.6, 0.7),  # 0.7 at 32; 1.0 at 40 too late
        _run("c", [0.0, 0.8, 0.8, 0.8, 0.9], 0.6, 0.65),
        _run("d", [0.0, 0.5, 0.8, 0.85, 0.85], 0.6, 0.6),
    ]
    g = goals(runs)
    assert g.compliance == {"a": 0.8, "b": 0.7, "c": 0.9, "d": 0.85}
    assert g.personas_met == 3 and g.compliance_met
    assert g.general_met


def test_goals_not_met() -> None:
    runs = [
        _run("a", [0.1, 0.9], 0.6, 0.55),
        _run("b", [0.1, 0.3], 0.6, 0.6),
        _run("c", [0.1, 0.79], 0.6, 0.6),
        _run("d", [0.1, 0.2], 0.6, 0.6),
    ]
    g = goals(runs)
    assert g.personas_met == 1 and not g.compliance_met
    assert g.general_ok["a"] is False and not g.general_met
    assert g.measured_to == 8


def test_guard_lines_list_every_verdict_and_the_general_score_per_version() -> None:
    from learn_report import guard_lines

    run = _run("brevity", [0.1, 0.9], 0.6, 0.6)
    assert "checked no checkpoint" in guard_lines([run])[0]
    run["guard"] = [
        {"version": "v1", "served": "base", "passed": True, "reasons": [], "personal": 0.5,
         "general": 0.6, "served_personal": 0.5, "served_general": 0.6,
         "degeneration": 0.13, "base_degeneration": 0.12},
        {"version": "v4", "served": "v1", "passed": False, "personal": 0.7, "general": 0.5,
         "reasons": ["general score 0.50 < 0.60 - 0.05 on 40 questions"],
         "served_personal": 0.55, "served_general": 0.6},
    ]  # fmt: skip
    run["version_general"] = {"base": 0.6, "v1": 0.6, "v4": 0.5}
    lines = guard_lines([run])
    assert (
        lines[2] == "| brevity | v1 | base | 0.50 -> 0.50 | 0.60 -> 0.60 | 0.13 (0.12) | passed |"
    )
    # a result written before the guard scored degeneration shows n/a
    assert lines[3].startswith(
        "| brevity | v4 | v1 | 0.55 -> 0.70 | 0.60 -> 0.50 | n/a (n/a) | REFUSED: "
    )
    assert lines[-1] == "- brevity: general score per version: base 0.60 -> v1 0.60 -> v4 0.50"


def test_the_learning_table_shows_the_teachers_compliance_and_na_for_older_results() -> None:
    from learn_report import learning_table

    runs = [
        _run("brevity", [0.0, 0.9], 0.6, 0.7),
        _run("bullets", [0.0, 0.3], 0.6, 0.7),
        _run("calm", [0.8, 0.9], 0.6, 0.6),  # a result written before the column existed
    ]
    runs[0]["teacher"] = {"compliance": 0.8}
    runs[1]["teacher"] = {"compliance": 0.5}
    for r in runs:
        r.update(steps=2, wall_s=60.0, turns=[{"ok": False}] * 8)
        r["general_before"].update(correct=24, total=40)
        r["general_after"].update(correct=28, total=40)
    lines = learning_table(runs, block=8)
    assert lines[0].startswith("| persona | teacher | before | after 8 |")
    assert lines[2].startswith("| brevity | 0.80 | 0.00 | 0.90 |")
    assert lines[3].startswith("| bullets | 0.50 | 0.00 | 0.30 |")
    assert lines[4].startswith("| calm | n/a | 0.80 | 0.90 |")
    assert lines[5].startswith("| **mean** | 0.65 | 0.27 | 0.70 |")
    assert all(ln.count("|") == lines[1].count("|") for ln in lines)


def test_version_lines_count_looping_versions_refused_and_harmless_ones_passed() -> None:
    run = {
        "persona": "calm/plain",
        "evals": [{"degenerate": 0.10}],
        "versions": [
            {"version": "v1", "status": "published", "compliance": 0.8, "degenerate": 0.10,
             "looping": 0.1},  # base + 0: harmless, passed
            {"version": "v2", "status": "refused", "compliance": 0.5, "degenerate": 0.30,
             "looping": 0.4},  # loops, refused
            {"version": "v3", "status": "published", "compliance": 0.7, "degenerate": 0.20,
             "looping": 0.2},  # loops (0.20 > 0.15), passed: a miss
            {"version": "v4", "status": "refused", "compliance": 0.8, "degenerate": 0.15,
             "looping": 0.1},  # base + 0.05 is no loop: a harmless one refused
            {"version": "v5", "status": "ready", "error": "HTTP 400"},
            {"version": "v6", "status": "ready", "compliance": 0.8, "degenerate": 0.40,
             "looping": 0.4},  # superseded before its check: listed, not counted
        ],
    }  # fmt: skip
    lines = version_lines([run])
    assert "| calm/plain | v2 | refused | 0.50 | 0.30 | 0.40 | n/a | yes |" in lines
    assert "| calm/plain | v4 | refused | 0.80 | 0.15 | 0.10 | n/a | no |" in lines
    assert any(line.startswith("| calm/plain | v5 | ready | not measured") for line in lines)
    assert lines[-1] == (
        "Guard against the bench: 1 of 2 looping versions refused; 1 of 2 others passed "
        "(1 neither served nor refused)."
    )
    assert "| calm/plain | v6 | ready | 0.80 | 0.40 | 0.40 | n/a | yes |" in lines
    assert version_lines([{"persona": "x", "evals": [{"degenerate": 0.0}]}]) == [
        "No version was measured on the held-out prompts."
    ]
    # With the form pool measured, a version loops by the pool (~50 prompts), not the ten
    pooled = {**run, "pool_before": {"degenerate": 0.04}, "versions": [
        {"version": "v1", "status": "published", "compliance": 0.8, "degenerate": 0.0,
         "looping": 0.0, "pool_degenerate": 0.16},  # clean on ten, loops on the pool
        {"version": "v2", "status": "refused", "compliance": 0.5, "degenerate": 0.30,
         "looping": 0.4, "pool_degenerate": 0.08},  # base + 0.04 on the pool: harmless
    ]}  # fmt: skip
    lines = version_lines([pooled])
    assert "| calm/plain | v1 | published | 0.80 | 0.00 | 0.00 | 0.16 | yes |" in lines
    assert lines[-1] == (
        "Guard against the bench: 0 of 1 looping versions refused; 0 of 1 others passed."
    )


def test_pool_table_counts_new_loops_and_reads_the_bar_against_the_base() -> None:
    from learn_report import pool_table

    def pool(flags: list[tuple[bool, bool]]) -> dict[str, Any]:
        n = len(flags)
        return {"n": n, "degenerate": sum(d for d, _ in flags) / n,
                "looping": sum(lp for _, lp in flags) / n, "flags": [list(f) for f in flags]}  # fmt: skip

    clean = [(False, False)] * 20
    # one looping answer of 20 that was clean before, one that looped already: bar met (0.05)
    ok = {"persona": "a", "pool_before": pool([(True, True), *clean[1:]]),
          "pool_after": pool([(True, True), (True, True), *clean[2:]])}  # fmt: skip
    # two more degenerate answers of 20 (0.10 above the base): not met
    bad = {"persona": "b", "pool_before": pool(clean),
           "pool_after": pool([(True, True), (True, False), *clean[2:]])}  # fmt: skip
    lines = pool_table([ok, bad, {"persona": "old run without a pool"}])
    assert len(lines) == 4
    assert lines[2] == "| a | 20 | 0.05 -> 0.10 | 0.05 -> 0.10 | 1 | met |"
    assert lines[3] == "| b | 20 | 0.00 -> 0.10 | 0.00 -> 0.05 | 1 | NOT met |"
    assert pool_table([{"persona": "old"}]) == []
